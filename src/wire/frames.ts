/**
 * Control frames exchanged on an endpoint's ControlChannel. The binary layout
 * of each frame is in codec.ts and docs/protocol.md; this file is the typed
 * view that the rest of the library uses.
 *
 * A channel carries whole frames (the channel does the framing); every frame
 * starts with a 4-byte header: magic 'S' (0x53), wire version, frame type,
 * flags (0).
 */

/**
 * 2: HELLO carries a nonce instead of the job token, and PROOF follows it
 * (src/auth/handshake.ts); IPC_REQ and IPC_ACK(ok) carry an IPC probe (src/ipc-probe.ts).
 * 3: the rings are sealed memfds passed on the descriptor channel (SEGMENT):
 * STAGE_BEGIN and RING_OFFER lose their segment names.
 * 4: one RGET for every kind of remote memory: RGET gains `kind` and names
 * its memory by `identity` (the IPC handle for LEGACY); RGET_FD (16) is gone.
 * A version, not a feature bit: RGET 11 changed layout, and a peer of
 * version 3 must be refused at its HELLO, not misread an RGET later.
 * 5: REG_FAIL (paired registrations and persistent transfers fail on both
 * sides) and the SEGMENT kind CALL_TABLE (a communicator's shared call
 * prints): a peer of version 4 would refuse either as a protocol error
 * mid-job, so it is refused at its HELLO instead.
 */
export const WIRE_VERSION = 5;
export const IPC_HANDLE_BYTES = 64;
/**
 * An IPC probe (src/ipc-probe.ts): the IPC handle of a small allocation of the
 * sender's (64 bytes), its base, size and buffer id (u64 each), and the random
 * 8-byte value written at its start. Opaque to the codec.
 */
export const IPC_PROBE_BYTES = IPC_HANDLE_BYTES + 4 * 8;
/** Device UUIDs travel as their 16 raw bytes; in JS they are the 'GPU-…' string. */
export const UUID_BYTES = 16;
/** HELLO's fresh random challenge. */
export const NONCE_BYTES = 32;
/** PROOF's HMAC-SHA256. */
export const PROOF_BYTES = 32;

export enum FrameType {
  HELLO = 1,
  IPC_REQ = 2,
  IPC_ACK = 3,
  IPC_NOTREADY = 4,
  IPC_CONFIRM = 5,
  IPC_ABORT = 6,
  /** The handshake's second frame, after HELLO: HMAC proof of the job token (src/auth/handshake.ts). */
  PROOF = 7,
  EAGER = 10,
  RGET = 11,
  FIN = 12,
  CANCEL = 13,
  FINS = 14,
  CREDIT = 15,
  // 16 was RGET_FD (wires 2 and 3): RGET carries every kind since wire 4.
  STAGE_BEGIN = 20,
  STAGE_CHUNK = 21,
  STAGE_ACK = 22,
  INVALIDATE = 30,
  // File-descriptor memory (issue 18): only to a peer whose HELLO announced Feature.FD_MEMORY.
  FD_OFFER = 31,
  FD_POOL = 32,
  FD_RELEASE = 33,
  /** Never on the control channel: the metadata of each message on the descriptor channel (src/channel/fd-channel.ts). */
  FD_DESCRIPTOR = 34,
  /** Never on the control channel: the metadata of a sealed ring segment's descriptor on the descriptor channel (src/channel/sealed-segment.ts). */
  SEGMENT = 35,
  CLOSE = 40,
  // GPU-driven transfers (issue 25): only to a peer whose HELLO announced Feature.REGISTER.
  /** A buffer this side registers with the peer (both sides register together, in the same order). */
  REG_OFFER = 41,
  /** This side deregistered a registration: the peer unmaps it once it deregistered too. */
  REG_RELEASE = 42,
  /** This side's half of a persistent transfer (both sides create them together, in the same order). */
  PT_OFFER = 43,
  /** A persistent transfer failed here (stuck, closed): the peer fails it too. */
  PT_FAIL = 44,
  /** This side's register() call of that number failed (bad argument, mapping, timeout): the peer's fails too. */
  REG_FAIL = 45,
  // Channel-layer frames (src/channel/shm-channel.ts): they upgrade a
  // channel to shared-memory rings and never reach the endpoint.
  RING_OFFER = 50,
  RING_SWITCH = 51,
  DOORBELL = 52,
  SPILL = 53,
}

/** HELLO feature bits. */
export const Feature = {
  /** The sender understands RING_OFFER / RING_SWITCH / DOORBELL / SPILL (shared-memory control rings). */
  RING: 1,
  /** The sender understands FINS (several FIN OK in one frame). */
  FINS: 2,
  /**
   * The sender can import VMM and pool memory by file descriptor: it
   * understands FD_OFFER / FD_POOL / FD_RELEASE and RGETs of kind VMM / POOL, and takes part in
   * the descriptor channel. Only when both HELLOs set it are those frames sent.
   */
  FD_MEMORY: 4,
  /**
   * The sender takes part in the endpoint's descriptor channel (a Unix
   * socket beside the control socket, or one given to attach()): the control
   * and staging rings are sealed anonymous segments passed on it (SEGMENT).
   * Where either HELLO lacks it there is no shared memory between the two:
   * no control rings, and device messages that would be staged travel
   * inline (EAGER) on the control channel.
   */
  DESCRIPTORS: 8,
  /**
   * The sender registers device buffers with peers and runs persistent,
   * GPU-driven transfers between them: it understands REG_OFFER / REG_RELEASE /
   * REG_FAIL / PT_OFFER / PT_FAIL. Only when both HELLOs set it are those frames sent.
   */
  REGISTER: 16,
} as const;

/** Which ring a SEGMENT descriptor is. */
export enum SegmentKind {
  /** The control ring the sender reads (its RING_OFFER gives the capacity). */
  CONTROL_RING = 1,
  /** The sender's staging ring for this direction (its STAGE_BEGINs give the shape). */
  STAGING_RING = 2,
  /** A communicator's table of call prints (src/collectives/print-table.ts), from rank 0 to every rank. */
  CALL_TABLE = 3,
}

/**
 * How the memory an RGET names is shared: the wire's form of a RemoteKey's
 * kind (src/paths/remote-key.ts). A fabric handle (CUmemFabricHandle, 64
 * bytes like the others' identity) would be one more value here.
 */
export enum HandleKind {
  /** cuIpcGetMemHandle (cuMemAlloc memory): RGET's `identity` is the handle. */
  LEGACY = 0,
  /** cuMemCreate chunks mapped into one range, one POSIX descriptor per chunk (cuMemExportToShareableHandle). */
  VMM = 1,
  /** An allocation of a pool made with POSIX-descriptor handles: the pool's descriptor once, then 64 bytes per allocation. */
  POOL = 2,
}

/** Size of CUmemPoolPtrExportData. */
export const POOL_EXPORT_BYTES = 64;
/** Most chunks (descriptors) one FD_OFFER announces. */
export const MAX_FD_CHUNKS = 1024;

/** First frame in each direction: who I am, what I run on. */
export interface HelloFrame {
  type: FrameType.HELLO;
  /** Highest wire version the sender speaks. */
  version: number;
  pid: number;
  /** The sender's transport id (unique per job); also breaks ties in the negotiation. */
  peerId: string;
  /** UUID of the sender's current device, or '' when it uses no GPU (yet). */
  deviceUuid: string;
  /** NONCE_BYTES fresh random bytes: the challenge the peer's PROOF must cover. The job token itself never travels. */
  nonce: Uint8Array;
  /** Feature bits (Feature.*); absent: 0. */
  features?: number;
}

/**
 * Second frame in each direction: HMAC-SHA256, keyed with the job token,
 * over the wire version, both ids, both pids and both nonces, the sender's
 * first (src/auth/handshake.ts says exactly what).
 */
export interface ProofFrame {
  type: FrameType.PROOF;
  proof: Uint8Array;
}

/** "Can you open my IPC handles?" `attempt` counts from 1. */
export interface IpcReqFrame {
  type: FrameType.IPC_REQ;
  attempt: number;
  deviceUuid: string;
  /** IPC_PROBE_BYTES: an allocation of mine the peer must open and read before it answers yes. Absent: none. */
  probe?: Uint8Array;
}

/** The answer to IPC_REQ from a peer that is ready. */
export interface IpcAckFrame {
  type: FrameType.IPC_ACK;
  attempt: number;
  ok: boolean;
  deviceUuid: string;
  /** With ok: my probe, which the requester opens and reads before IPC_CONFIRM. Absent: none. */
  probe?: Uint8Array;
}

/** The answer to IPC_REQ from a peer that has not initialised CUDA yet. */
export interface IpcNotReadyFrame {
  type: FrameType.IPC_NOTREADY;
  attempt: number;
}

/** The requester received ACK(ok): both sides now use IPC. */
export interface IpcConfirmFrame {
  type: FrameType.IPC_CONFIRM;
  attempt: number;
}

/** The sender gave up on IPC (timeout, tries exhausted): the receiver goes BAD too. */
export interface IpcAbortFrame {
  type: FrameType.IPC_ABORT;
  reason: string;
}

/** A whole message inline: host data, or small device data copied through the host. */
export interface EagerFrame {
  type: FrameType.EAGER;
  tag: number;
  /** Per-endpoint, per-direction message sequence number (match order). */
  seq: number;
  /** Whether the sender's buffer lived on a device (the receiver may want it on its own). */
  fromDevice: boolean;
  data: Uint8Array;
}

/**
 * "Read my device memory": the RGET rendezvous, for every kind of memory.
 * `kind`, `identity`, `base`, `allocSize`, `bufferId` and `deviceUuid` are
 * the RemoteKey of the memory (src/paths/remote-key.ts).
 */
export interface RgetFrame {
  type: FrameType.RGET;
  tag: number;
  seq: number;
  kind: HandleKind;
  /**
   * 64 bytes naming the memory beside its address: LEGACY the
   * cuIpcGetMemHandle; POOL the cuMemPoolExportPointer data (as its
   * FD_OFFER); VMM zero (the FD_OFFER with this bufferId and base names the chunks).
   */
  identity: Uint8Array;
  /** Allocation (LEGACY) or offered range (VMM, POOL: the FD_OFFER's) base and size as the sender sees them. */
  base: bigint;
  allocSize: number;
  /** Where the message starts inside the allocation, and its length. */
  offset: number;
  length: number;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation. */
  bufferId: bigint;
  deviceUuid: string;
  /** An IPC event handle to wait on before reading (the send's stream), or null. */
  event: Uint8Array | null;
}

export enum FinStatus {
  OK = 0,
  /** The receiver refused the request (bounds, handle); nothing was copied. */
  REFUSED = 1,
  /** The receiver failed to copy (driver error). */
  FAILED = 2,
  /** The receiver's buffer was too small. */
  TRUNCATED = 3,
  /** The sender's CANCEL reached the receiver before the message was matched; nothing was copied. */
  CANCELLED = 4,
  /**
   * RGET only: the receiver could not map the sender's memory (the open
   * failed even after evicting). The receive stays matched; the sender sends
   * the same message again by staging, under the same seq.
   */
  RESTAGE = 5,
  /**
   * Sent by the SENDER of message `seq` (the other FINs come from its
   * receiver): it could not supply the data (the source was freed or is
   * invalid, its stream is bogus, a copy into the staging ring failed). The
   * receiver rejects the receive matched to `seq` (or drops the message if
   * none matched yet) and answers nothing; the endpoint stays open.
   */
  SENDER_FAILED = 6,
}

/** The receiver is done with message `seq`: the sender may reuse its buffer. */
export interface FinFrame {
  type: FrameType.FIN;
  seq: number;
  status: FinStatus;
  message: string;
}

/**
 * FIN OK for each of `seqs`, in order: what the receiver sends when one
 * event completed several copies (a burst of RGETs), instead of one FIN per
 * message. Only to a peer whose HELLO announced Feature.FINS.
 */
export interface FinsFrame {
  type: FrameType.FINS;
  /** 1..MAX_FINS message sequence numbers. */
  seqs: number[];
}

/** Most sequence numbers in one FINS frame. */
export const MAX_FINS = 1024;

/**
 * Flow control: the receiver has matched messages worth `consumed` bytes in
 * all, since the endpoint opened (a running total, so a lost or repeated
 * report does no harm). A message is worth its inline data (EAGER) plus
 * MESSAGE_COST bytes. The receiver reports each time the total grew by
 * CREDIT_STEP since its last report; the sender keeps what it sent minus
 * this total under its `maxUnreadBytes` (options.ts), sends beyond that wait.
 */
export interface CreditFrame {
  type: FrameType.CREDIT;
  consumed: number;
}

/** What one message costs in flow control, on top of its inline data: its frame and bookkeeping. */
export const MESSAGE_COST = 64;
/** The receiver reports consumption (CREDIT) once this many bytes were matched since its last report. */
export const CREDIT_STEP = 64 << 10;

/**
 * The sender asks to withdraw message `seq` (its AbortSignal fired). The
 * receiver answers FIN: CANCELLED if the message was not matched yet (it is
 * dropped), otherwise the FIN the transfer would have had anyway.
 */
export interface CancelFrame {
  type: FrameType.CANCEL;
  seq: number;
}

/**
 * Staging (device data while the endpoint is not OK): a rendezvous with
 * credits, so that an unmatched staged message never holds the ring.
 *  1. The sender announces the message: STAGE_BEGIN (no data). Its staging
 *     ring for this direction is `slots` slots of `chunkSize` bytes, shared
 *     and pinned: a sealed segment passed once on the descriptor channel
 *     (SEGMENT{STAGING_RING}); the receiver grants nothing until it has it.
 *  2. When a receive matches it, and no other staged message of this
 *     direction is being received, the receiver grants every slot to it: one
 *     STAGE_ACK{seq, slot} per slot.
 *  3. For each granted slot the sender copies the next chunk device→host into
 *     it and sends STAGE_CHUNK; the receiver copies it host→device and, if more
 *     chunks remain, grants the slot again (STAGE_ACK).
 *  4. When the last byte has been copied out the receiver sends FIN.
 */
export interface StageBeginFrame {
  type: FrameType.STAGE_BEGIN;
  tag: number;
  seq: number;
  length: number;
  chunkSize: number;
  slots: number;
}

/** Chunk `offset..offset+length` of message `seq` is in slot `slot`. */
export interface StageChunkFrame {
  type: FrameType.STAGE_CHUNK;
  seq: number;
  slot: number;
  offset: number;
  length: number;
}

/** Slot `slot` is granted to message `seq`: the sender may fill it with the next chunk. */
export interface StageAckFrame {
  type: FrameType.STAGE_ACK;
  seq: number;
  slot: number;
}

/** One chunk of an offered VMM range: where it is mapped from the range's base, and its size. */
export interface FdExtent {
  offset: number;
  size: number;
}

/**
 * Sender → receiver: "here is a range of my memory to import". VMM: one
 * descriptor per chunk follows on the descriptor channel (FD_DESCRIPTOR
 * {VMM, bufferId, base, index}); POOL: none (the pool's came with FD_POOL),
 * the 64 bytes of `exportData` name the allocation.
 */
export interface FdOfferFrame {
  type: FrameType.FD_OFFER;
  kind: HandleKind;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation: with `base`, the key of the import. */
  bufferId: bigint;
  deviceUuid: string;
  /** VMM: the base of the first chunk exported (vmmExport's base); POOL: the allocation's base. */
  base: bigint;
  /** Bytes from `base`: VMM, to the end of the last chunk; POOL, the allocation's size. */
  size: number;
  /** POOL: the id FD_POOL gave the pool; VMM: 0. */
  poolId: number;
  /** POOL: cuMemPoolExportPointer's data; VMM: all zero. */
  exportData: Uint8Array;
  /** VMM: 1..MAX_FD_CHUNKS chunks, contiguous from offset 0 to `size`; POOL: none. */
  chunks: FdExtent[];
}

/** Sender → receiver: pool `poolId` (the sender's numbering), whose descriptor follows (FD_DESCRIPTOR{POOL, poolId, 0, 0}). Once per pool per peer. */
export interface FdPoolFrame {
  type: FrameType.FD_POOL;
  poolId: number;
  deviceUuid: string;
}

/**
 * Receiver → sender: "I no longer hold this import" (evicted, or it failed):
 * offer it again before naming it. VMM/POOL allocation: `id` is its bufferId
 * and `base` the offered base; a pool (kind POOL, base 0): `id` is the poolId.
 */
export interface FdReleaseFrame {
  type: FrameType.FD_RELEASE;
  kind: HandleKind;
  id: bigint;
  base: bigint;
}

/** The metadata of one descriptor-channel message: which descriptor this is. Never sent on the control channel. */
export interface FdDescriptorFrame {
  type: FrameType.FD_DESCRIPTOR;
  /** VMM: a chunk of offer (bufferId = id, base); POOL: the pool `id` (base 0, index 0). */
  kind: HandleKind;
  id: bigint;
  base: bigint;
  /** VMM: the chunk's index in the offer's `chunks`. */
  index: number;
}

/**
 * The metadata of a descriptor-channel message carrying a sealed ring
 * segment (memfd, sealed against shrinking and growing). Never sent on the
 * control channel. One per kind per endpoint and direction.
 */
export interface SegmentFrame {
  type: FrameType.SEGMENT;
  kind: SegmentKind;
  /** The segment's size; the receiver maps it only if the descriptor's size and seals agree. */
  bytes: number;
}

/** The sender freed or released an allocation: drop any mapping of it. */
export interface InvalidateFrame {
  type: FrameType.INVALIDATE;
  deviceUuid: string;
  base: bigint;
  bufferId: bigint;
}

/**
 * A registration: the sender's buffer [base + offset, + length) of an
 * allocation the peer opens once and keeps mapped until both sides
 * deregistered. kind, handle, base, allocSize, bufferId and deviceUuid are
 * its RemoteKey (src/paths/remote-key.ts), as in an RGET: `handle` is the
 * key's identity (LEGACY cuIpcGetMemHandle, POOL the export data, VMM
 * zero); VMM / POOL: the range was offered by FD_OFFER (bufferId, base) first.
 */
export interface RegOfferFrame {
  type: FrameType.REG_OFFER;
  /** The registration's number on this endpoint, from 1, in call order (both sides count alike). */
  regId: number;
  kind: HandleKind;
  deviceUuid: string;
  base: bigint;
  allocSize: number;
  offset: number;
  length: number;
  bufferId: bigint;
  handle: Uint8Array;
}

export interface RegReleaseFrame {
  type: FrameType.REG_RELEASE;
  regId: number;
}

/** Roles of the two halves of a persistent transfer. */
export enum PtRole {
  SEND = 0,
  RECV = 1,
}

/** One side's half of persistent transfer `ptId` (matched by number: both sides create transfers in the same order). */
export interface PtOfferFrame {
  type: FrameType.PT_OFFER;
  ptId: number;
  role: PtRole;
  /** The registration holding this side's buffer (source for SEND, destination for RECV). */
  regId: number;
  offset: number;
  length: number;
  /** The registration of this side's flag block, and the slot of this transfer in it. */
  flagRegId: number;
  slot: number;
}

export interface PtFailFrame {
  type: FrameType.PT_FAIL;
  ptId: number;
  reason: string;
}

/** Registration `regId` failed on the sender (its call gave the number up): the peer's matching call fails too. */
export interface RegFailFrame {
  type: FrameType.REG_FAIL;
  regId: number;
  reason: string;
}

/** Orderly close of the endpoint. */
export interface CloseFrame {
  type: FrameType.CLOSE;
  reason: string;
}

/**
 * "Send me your frames through this ring": a sealed segment the offering
 * side created and reads (shm-ring.ts), whose descriptor it passes on the
 * descriptor channel (SEGMENT{CONTROL_RING}). Sent once, when that channel is up.
 */
export interface RingOfferFrame {
  type: FrameType.RING_OFFER;
  /** Data bytes of the ring (a power of two). */
  capacity: number;
}

/**
 * The last frame the sender writes to the channel directly: from here on its
 * frames carry a sequence number, starting at 0, and come through the
 * receiver's ring or, when they do not fit, as SPILL frames on the channel.
 */
export interface RingSwitchFrame {
  type: FrameType.RING_SWITCH;
}

/** "Look at your ring": sent on the channel when the receiver is not watching it. */
export interface DoorbellFrame {
  type: FrameType.DOORBELL;
}

/** Frame number `seq` of a ring-mode sender, carried on the channel (too large for the ring, or the ring was full). */
export interface SpillFrame {
  type: FrameType.SPILL;
  seq: number;
  /** The whole inner frame (a view into the received bytes). */
  frame: Uint8Array;
}

/** Channel-layer frames: handled by ShmChannel, never by the endpoint. */
export type ChannelFrame = RingOfferFrame | RingSwitchFrame | DoorbellFrame | SpillFrame;

export type Frame =
  | HelloFrame
  | ProofFrame
  | IpcReqFrame
  | IpcAckFrame
  | IpcNotReadyFrame
  | IpcConfirmFrame
  | IpcAbortFrame
  | EagerFrame
  | RgetFrame
  | FinFrame
  | FinsFrame
  | CreditFrame
  | CancelFrame
  | StageBeginFrame
  | StageChunkFrame
  | StageAckFrame
  | InvalidateFrame
  | FdOfferFrame
  | FdPoolFrame
  | FdReleaseFrame
  | FdDescriptorFrame
  | SegmentFrame
  | CloseFrame
  | RegOfferFrame
  | RegReleaseFrame
  | PtOfferFrame
  | PtFailFrame
  | RegFailFrame
  | ChannelFrame;

/** The negotiation frames, the only ones the IPC machine sends or consumes. */
export type NegotiationFrame = IpcReqFrame | IpcAckFrame | IpcNotReadyFrame | IpcConfirmFrame | IpcAbortFrame;
