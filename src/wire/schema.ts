/**
 * The frame schema: each frame type as the ordered list of its fields after
 * the 4-byte header. codec.ts compiles encodeFrame/decodeFrame from it,
 * the RGET fast path takes its field offsets from it (fieldOffset), and
 * docs/protocol.md's field tables are rendered from it (doc-tables.ts), so a
 * layout is written once, here. frames.ts keeps the TypeScript view; each
 * field's name is checked against it (FieldOf) and test/unit/wire/wire-schema.test.ts
 * checks that every field of the view is in the schema.
 */
import {
  FinStatus,
  FrameType,
  HandleKind,
  MAX_FD_CHUNKS,
  POOL_EXPORT_BYTES,
  IPC_HANDLE_BYTES,
  IPC_PROBE_BYTES,
  MAX_FINS,
  NONCE_BYTES,
  PROOF_BYTES,
  SegmentKind,
  PtRole,
  type Frame,
} from './frames.js';

/** Largest reason / message string, in UTF-8 bytes. */
export const MAX_STRING_BYTES = 4096;
/** Largest HELLO peer id, in UTF-8 bytes (it must not be empty). */
export const MAX_PEER_ID_BYTES = 256;
/** Largest staging segment name, in UTF-8 bytes (NAME_MAX); it must not be empty. */
export const MAX_SEGMENT_BYTES = 255;
/** Largest EAGER payload the u32 length prefix can carry. */
export const MAX_EAGER_BYTES = 0xffff_ffff;
export const HEADER_BYTES = 4;

/** What every field has: its name in the frame object, and what it means (for the docs). */
interface Base<N extends string> {
  name: N;
  doc: string;
  /** Extra validation text for the docs (a check the codec or the receiver makes beyond the type's). */
  rule?: string;
}

/**
 * One field. Integers are JS numbers: u8/u16/u32 with an optional range,
 * u64 a safe integer (≤ 2^53 − 1); big: a u64 bigint; uuid: 16 bytes as the
 * 'GPU-…' string; bytes: exactly `size` bytes, copied on decode; enum: a u8
 * that must be one of `values`; string: u16 length + UTF-8; data: u32 length
 * + bytes, a view on decode; frame: the same, holding a whole inner frame;
 * optional: a presence byte (`<name>.present`) then `size` bytes, absent as
 * `absent`; u64list: u32 count then that many u64; extents: u16 count then
 * that many {offset u64, size u64} (safe integers).
 */
export type Field<N extends string = string> =
  | (Base<N> & { kind: 'u8' | 'u16' | 'u32'; min?: number; max?: number; default?: number })
  | (Base<N> & { kind: 'u64' })
  | (Base<N> & { kind: 'big' | 'uuid' | 'bool' })
  | (Base<N> & { kind: 'enum'; values: Record<string, string | number>; label: string })
  | (Base<N> & { kind: 'bytes'; size: number; label?: string })
  | (Base<N> & { kind: 'string'; min: number; max: number; sizeVar: string })
  | (Base<N> & { kind: 'data' | 'frame'; sizeVar: string })
  | (Base<N> & { kind: 'optional'; size: number; absent: null | undefined; label: string })
  | (Base<N> & { kind: 'u64list'; min: number; max: number; sizeVar: string })
  | (Base<N> & { kind: 'extents'; min: number; max: number; sizeVar: string });

/**
 * A check across fields: returns the problem (the field it names, and the
 * text) or undefined. `encoding`: worded for a local bug, else for a peer's.
 */
export type Relation = (f: Readonly<Record<string, unknown>>, encoding: boolean) => { field: string; problem: string } | undefined;

export interface FrameSchema {
  type: FrameType;
  fields: readonly Field[];
  relation?: Relation;
}

type FieldOf<F extends Frame> = Field<Exclude<keyof F, 'type'> & string>;
function frame<T extends FrameType>(type: T, fields: readonly FieldOf<Extract<Frame, { type: T }>>[], relation?: Relation): FrameSchema {
  return { type, fields, ...(relation ? { relation } : {}) };
}

const U32 = 0xffff_ffff;
const tag = { kind: 'u32', name: 'tag', doc: 'message tag (matching)' } as const;
const seq = { kind: 'u64', name: 'seq', doc: 'per-endpoint, per-direction message number' } as const;
const attempt = (doc: string) => ({ kind: 'u32', name: 'attempt', min: 1, doc }) as const;
const deviceUuid = (doc: string) => ({ kind: 'uuid', name: 'deviceUuid', doc }) as const;
const reason = (doc: string) => ({ kind: 'string', name: 'reason', min: 0, max: MAX_STRING_BYTES, sizeVar: 'R', doc }) as const;
const probe = (doc: string) => ({ kind: 'optional', name: 'probe', size: IPC_PROBE_BYTES, absent: undefined, label: 'bytes', doc }) as const;

/** The kinds a descriptor frame can name: HandleKind without LEGACY (which is RGET's). */
const SEGMENT_KINDS: Record<string, string | number> = {
  CONTROL_RING: SegmentKind.CONTROL_RING,
  STAGING_RING: SegmentKind.STAGING_RING,
  CALL_TABLE: SegmentKind.CALL_TABLE,
  [SegmentKind.CONTROL_RING]: 'CONTROL_RING',
  [SegmentKind.STAGING_RING]: 'STAGING_RING',
  [SegmentKind.CALL_TABLE]: 'CALL_TABLE',
};
const FD_KINDS: Record<string, string | number> = { VMM: HandleKind.VMM, POOL: HandleKind.POOL, [HandleKind.VMM]: 'VMM', [HandleKind.POOL]: 'POOL' };

/** Offsets of RGET's fields are what restampRget and RgetDecoder use: see fieldOffset. */
export const FRAME_SCHEMAS: readonly FrameSchema[] = [
  frame(FrameType.HELLO, [
    { kind: 'u8', name: 'version', min: 1, max: 255, doc: 'highest wire version the sender speaks' },
    { kind: 'u32', name: 'pid', doc: "sender's process id; must be the pid the kernel reports for the connection where the channel knows it (SO_PEERCRED)" },
    deviceUuid("sender's current device, or '' (none yet)"),
    {
      kind: 'string',
      name: 'peerId',
      min: 1,
      max: MAX_PEER_ID_BYTES,
      sizeVar: 'P',
      doc: "sender's transport id, unique per job; also the tie-breaker of the negotiation",
    },
    {
      kind: 'bytes',
      name: 'nonce',
      size: NONCE_BYTES,
      doc: "fresh random bytes (`crypto.randomBytes`) for this connection: the challenge the peer's PROOF covers",
    },
    {
      kind: 'u32',
      name: 'features',
      default: 0,
      doc: 'bit 0 (`Feature.RING`): the sender speaks the control rings; bit 1 (`Feature.FINS`): it understands FINS; bit 2 (`Feature.FD_MEMORY`): it imports VMM and pool memory by file descriptor (RGETs of kind VMM and POOL, FD_* frames); bit 3 (`Feature.DESCRIPTORS`): it takes part in the descriptor channel, on which the sealed ring segments travel (SEGMENT); rings and staging need it on both sides; bit 4 (`Feature.REGISTER`): it registers buffers and runs persistent transfers (REG_*, PT_* frames)',
      rule: 'unknown bits ignored',
    },
  ]),
  frame(FrameType.PROOF, [
    {
      kind: 'bytes',
      name: 'proof',
      size: PROOF_BYTES,
      doc: 'HMAC-SHA256 keyed with the job token (UTF-8) over the bytes below',
      rule: 'compared in constant time (`crypto.timingSafeEqual`)',
    },
  ]),
  frame(FrameType.IPC_REQ, [attempt("this request's number, from 1"), deviceUuid("requester's device"), probe("the requester's [IPC probe](#the-ipc-probe)")]),
  frame(FrameType.IPC_ACK, [
    attempt('the attempt answered'),
    { kind: 'bool', name: 'ok', doc: "1: IPC possible both ways (the requester's probe was read back); 0: no" },
    deviceUuid("answerer's device"),
    probe("the answerer's [IPC probe](#the-ipc-probe), with ok = 1"),
  ]),
  frame(FrameType.IPC_NOTREADY, [attempt('the attempt answered')]),
  frame(FrameType.IPC_CONFIRM, [attempt('the attempt confirmed')]),
  frame(FrameType.IPC_ABORT, [reason('for logs and traces')]),
  frame(FrameType.EAGER, [
    tag,
    seq,
    { kind: 'bool', name: 'fromDevice', doc: "the sender's buffer was device memory" },
    { kind: 'data', name: 'data', sizeVar: 'D', doc: 'the message' },
  ]),
  frame(
    FrameType.RGET,
    [
      { ...tag, doc: 'message tag' },
      { ...seq, doc: 'message number' },
      {
        kind: 'enum',
        name: 'kind',
        values: HandleKind,
        label: 'HandleKind',
        doc: '`HandleKind`: 0 LEGACY (CUDA IPC), 1 VMM, 2 POOL (both by descriptor: only to a peer with `Feature.FD_MEMORY`, after the FD_OFFER that names the range)',
      },
      {
        kind: 'bytes',
        name: 'identity',
        size: IPC_HANDLE_BYTES,
        label: 'bytes',
        doc: 'LEGACY: `cuIpcGetMemHandle` of the allocation; POOL: `cuMemPoolExportPointer` data (as its FD_OFFER); VMM: zero',
      },
      {
        kind: 'big',
        name: 'base',
        doc: 'LEGACY: allocation base as the sender sees it; VMM, POOL: base of the offered range (the FD_OFFER with this bufferId and base)',
      },
      { kind: 'u64', name: 'allocSize', doc: 'size of the allocation (LEGACY) or the offered range' },
      { kind: 'u64', name: 'offset', doc: 'message start inside it' },
      { kind: 'u64', name: 'length', doc: 'message length', rule: '**offset + length ≤ allocSize**' },
      { kind: 'big', name: 'bufferId', doc: '`CU_POINTER_ATTRIBUTE_BUFFER_ID` of the allocation (detects free + realloc at the same address)' },
      deviceUuid('device of the allocation'),
      {
        kind: 'optional',
        name: 'event',
        size: IPC_HANDLE_BYTES,
        absent: null,
        label: 'handle',
        doc: "IPC event to wait on before reading (the send's stream)",
      },
    ],
    withinAllocation,
  ),
  frame(FrameType.FIN, [
    { kind: 'u64', name: 'seq', doc: 'the message' },
    {
      kind: 'enum',
      name: 'status',
      values: FinStatus,
      label: 'FinStatus',
      doc: "`FinStatus`: 0 OK, 1 REFUSED, 2 FAILED, 3 TRUNCATED, 4 CANCELLED, 5 RESTAGE (RGET could not be mapped: the sender resends the message by staging under the same seq), 6 SENDER_FAILED (sent the other way, by the message's sender: it could not supply the data — source freed, bogus stream, copy failed; the receiver rejects the matched receive, or drops the message if none matched, and answers nothing)",
    },
    { kind: 'string', name: 'message', min: 0, max: MAX_STRING_BYTES, sizeVar: 'M', doc: 'why, when not OK' },
  ]),
  frame(FrameType.CANCEL, [{ kind: 'u64', name: 'seq', doc: 'the message' }]),
  frame(FrameType.FINS, [{ kind: 'u64list', name: 'seqs', min: 1, max: MAX_FINS, sizeVar: 'N', doc: 'the messages completed OK' }]),
  frame(FrameType.CREDIT, [
    {
      kind: 'u64',
      name: 'consumed',
      doc: 'bytes matched so far',
      rule: 'the sender refuses a total that goes back or exceeds what it sent (`SMCUDA_BAD_CREDIT`, the endpoint closes)',
    },
  ]),
  frame(FrameType.STAGE_BEGIN, [
    { ...tag, doc: 'message tag' },
    { ...seq, doc: 'message number' },
    { kind: 'u64', name: 'length', doc: 'message length' },
    { kind: 'u32', name: 'chunkSize', min: 1, doc: 'bytes per slot' },
    {
      kind: 'u16',
      name: 'slots',
      min: 1,
      doc: 'slots in the ring',
      rule: "(receiver: chunkSize × slots is the size of the sender's SEGMENT{STAGING_RING}, ≤ staging.maxPeerBytes)",
    },
  ]),
  frame(
    FrameType.STAGE_CHUNK,
    [
      { ...seq, doc: 'message number' },
      { kind: 'u16', name: 'slot', doc: 'slot index', rule: '(receiver: < slots)' },
      { kind: 'u64', name: 'offset', doc: 'position in the message', rule: 'offset + length ≤ 2^53 − 1' },
      { kind: 'u32', name: 'length', min: 1, doc: 'chunk length', rule: '(receiver: ≤ chunkSize)' },
    ],
    withinSafe,
  ),
  frame(FrameType.STAGE_ACK, [
    { ...seq, doc: 'message number' },
    { kind: 'u16', name: 'slot', doc: 'slot index', rule: '(sender: < slots)' },
  ]),
  frame(FrameType.INVALIDATE, [
    deviceUuid('device of the allocation'),
    { kind: 'big', name: 'base', doc: 'allocation base' },
    { kind: 'big', name: 'bufferId', doc: "allocation's buffer id" },
  ]),
  frame(
    FrameType.FD_OFFER,
    [
      {
        kind: 'enum',
        name: 'kind',
        values: FD_KINDS,
        label: 'HandleKind other than LEGACY',
        doc: '`HandleKind`: 1 VMM (descriptors follow, one per chunk), 2 POOL (none follow)',
      },
      { kind: 'big', name: 'bufferId', doc: '`CU_POINTER_ATTRIBUTE_BUFFER_ID` of the allocation; with base, the key of the import' },
      deviceUuid('device of the allocation'),
      { kind: 'big', name: 'base', doc: "VMM: base of the first chunk exported; POOL: the allocation's base" },
      { kind: 'u64', name: 'size', doc: 'bytes from base: to the end of the last chunk (VMM), the allocation (POOL)', rule: '≥ 1' },
      { kind: 'u32', name: 'poolId', doc: 'POOL: the id its FD_POOL gave the pool; VMM: 0', rule: 'VMM: 0' },
      { kind: 'bytes', name: 'exportData', size: POOL_EXPORT_BYTES, doc: "POOL: `cuMemPoolExportPointer`'s data; VMM: zero" },
      {
        kind: 'extents',
        name: 'chunks',
        min: 0,
        max: MAX_FD_CHUNKS,
        sizeVar: 'C',
        doc: "VMM: each chunk's offset from base and size, in order; descriptor k is chunk k",
        rule: 'VMM: 1 or more, contiguous from 0 to size; POOL: none',
      },
    ],
    offerShape,
  ),
  frame(FrameType.FD_POOL, [
    { kind: 'u32', name: 'poolId', doc: "the sender's number for the pool, which its FD_OFFERs name" },
    deviceUuid('device of the pool'),
  ]),
  frame(FrameType.FD_RELEASE, [
    { kind: 'enum', name: 'kind', values: FD_KINDS, label: 'HandleKind other than LEGACY', doc: '`HandleKind` of the import dropped' },
    { kind: 'big', name: 'id', doc: 'an allocation: its bufferId; a pool (kind POOL, base 0): its poolId' },
    { kind: 'big', name: 'base', doc: "an allocation: the offer's base; a pool: 0" },
  ]),
  frame(FrameType.FD_DESCRIPTOR, [
    { kind: 'enum', name: 'kind', values: FD_KINDS, label: 'HandleKind other than LEGACY', doc: 'VMM: a chunk of an offer; POOL: a pool' },
    { kind: 'big', name: 'id', doc: "VMM: the offer's bufferId; POOL: the poolId" },
    { kind: 'big', name: 'base', doc: "VMM: the offer's base; POOL: 0" },
    { kind: 'u16', name: 'index', doc: "VMM: the chunk's index in the offer; POOL: 0", rule: "< the offer's chunk count" },
  ]),
  frame(FrameType.SEGMENT, [
    {
      kind: 'enum',
      name: 'kind',
      values: SEGMENT_KINDS,
      label: 'SegmentKind',
      doc: "`SegmentKind`: 1 CONTROL_RING (the ring the sender reads), 2 STAGING_RING (its staging ring for this direction), 3 CALL_TABLE (a communicator's call prints, from rank 0)",
    },
    {
      kind: 'u64',
      name: 'bytes',
      doc: 'the segment size',
      rule: 'the receiver maps the descriptor only if it is sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL) and exactly this size',
    },
  ]),
  frame(FrameType.CLOSE, [reason('for logs')]),
  frame(
    FrameType.REG_OFFER,
    [
      { kind: 'u32', name: 'regId', min: 1, doc: "the registration's number on this endpoint, from 1, in call order (both sides number alike)" },
      {
        kind: 'enum',
        name: 'kind',
        values: HandleKind,
        label: 'HandleKind',
        doc: '`HandleKind`: 0 LEGACY (`handle` names it), 1 VMM, 2 POOL (offered by FD_OFFER with this bufferId and base first)',
      },
      deviceUuid('device of the allocation'),
      { kind: 'big', name: 'base', doc: 'allocation base (LEGACY) or the offered base (VMM, POOL) as the sender sees it' },
      { kind: 'u64', name: 'allocSize', doc: 'bytes from base the peer maps' },
      { kind: 'u64', name: 'offset', doc: 'the registered buffer starts here, from base' },
      { kind: 'u64', name: 'length', doc: 'registered bytes', rule: '**offset + length ≤ allocSize**' },
      { kind: 'big', name: 'bufferId', doc: '`CU_POINTER_ATTRIBUTE_BUFFER_ID` of the allocation' },
      {
        kind: 'bytes',
        name: 'handle',
        size: IPC_HANDLE_BYTES,
        label: 'handle',
        doc: "the memory's identity, as RGET's `identity`: LEGACY `cuIpcGetMemHandle` of the allocation; POOL `cuMemPoolExportPointer` data (as its FD_OFFER); VMM zero",
      },
    ],
    withinAllocation,
  ),
  frame(FrameType.REG_RELEASE, [{ kind: 'u32', name: 'regId', min: 1, doc: 'the registration the sender deregistered' }]),
  frame(FrameType.PT_OFFER, [
    { kind: 'u32', name: 'ptId', min: 1, doc: "the persistent transfer's number on this endpoint, from 1, in call order (both sides number alike)" },
    { kind: 'enum', name: 'role', values: PtRole, label: 'PtRole', doc: '`PtRole`: 0 SEND (the sender copies), 1 RECV; the two halves must differ' },
    { kind: 'u32', name: 'regId', min: 1, doc: "the registration of this side's buffer" },
    { kind: 'u64', name: 'offset', doc: 'from the start of the registered buffer' },
    { kind: 'u64', name: 'length', doc: 'bytes per round; the two halves must agree' },
    { kind: 'u32', name: 'flagRegId', min: 1, doc: "the registration of the sender's flag block" },
    { kind: 'u32', name: 'slot', doc: 'the slot of this transfer in that flag block' },
  ]),
  frame(FrameType.PT_FAIL, [
    { kind: 'u32', name: 'ptId', min: 1, doc: 'the persistent transfer that failed on the sender' },
    reason('why (stuck flag, closed)'),
  ]),
  frame(FrameType.REG_FAIL, [
    { kind: 'u32', name: 'regId', min: 1, doc: "the number of the sender's register() call that failed (the number is spent on both sides)" },
    reason('why (bad argument, mapping failed, timeout)'),
  ]),
  frame(FrameType.RING_OFFER, [
    {
      kind: 'u32',
      name: 'capacity',
      doc: 'data bytes of the ring, a power of two',
      rule: '(receiver: 4096..16 MiB; its SEGMENT{CONTROL_RING} is 256 + capacity bytes)',
    },
  ]),
  frame(FrameType.RING_SWITCH, []),
  frame(FrameType.DOORBELL, []),
  frame(FrameType.SPILL, [
    { kind: 'u32', name: 'seq', doc: "the inner frame's number in the sender's ring order" },
    { kind: 'frame', name: 'frame', sizeVar: 'F', doc: 'the inner frame, whole' },
  ]),
];

function withinAllocation(frame: Readonly<Record<string, unknown>>, encoding: boolean): { field: string; problem: string } | undefined {
  // Both are ≤ 2^53-1, so the sum is exact enough to compare: a sum above
  // 2^53 is above any safe allocSize whatever its rounding.
  const { offset, length, allocSize } = frame as { offset: number; length: number; allocSize: number };
  if (offset + length <= allocSize) return undefined;
  return encoding
    ? { field: 'offset', problem: `+ 'length' (${offset} + ${length}) must not exceed 'allocSize' (${allocSize})` }
    : { field: 'offset', problem: `+ 'length' (${offset} + ${length}) exceeds 'allocSize' (${allocSize}): the peer points outside its allocation` };
}

function withinSafe(frame: Readonly<Record<string, unknown>>, encoding: boolean): { field: string; problem: string } | undefined {
  const f = frame as { offset: number; length: number };
  if (f.offset + f.length <= Number.MAX_SAFE_INTEGER) return undefined;
  return { field: 'offset', problem: encoding ? `+ 'length' must not exceed ${Number.MAX_SAFE_INTEGER}` : `+ 'length' exceeds Number.MAX_SAFE_INTEGER` };
}

/** FD_OFFER: VMM chunks tile [0, size) in order, from pool 0; POOL: no chunks. */
function offerShape(frame: Readonly<Record<string, unknown>>): { field: string; problem: string } | undefined {
  const f = frame as { kind: HandleKind; size: number; poolId: number; chunks: { offset: number; size: number }[] };
  if (f.size < 1) return { field: 'size', problem: 'must be at least 1, got 0' };
  if (f.kind === HandleKind.POOL)
    return f.chunks.length === 0 ? undefined : { field: 'chunks', problem: `must be empty for a POOL offer, got ${f.chunks.length}` };
  if (f.poolId !== 0) return { field: 'poolId', problem: `must be 0 for a VMM offer, got ${f.poolId}` };
  if (f.chunks.length === 0) return { field: 'chunks', problem: 'must list at least one chunk for a VMM offer' };
  let end = 0;
  for (let i = 0; i < f.chunks.length; i++) {
    const c = f.chunks[i]!;
    if (c.offset !== end || c.size < 1)
      return { field: 'chunks', problem: `[${i}] must start at ${end} and hold at least 1 byte, got offset ${c.offset}, size ${c.size}` };
    end += c.size;
  }
  return end === f.size ? undefined : { field: 'chunks', problem: `end at ${end}, not at 'size' (${f.size})` };
}

const BY_TYPE = new Map(FRAME_SCHEMAS.map((s) => [s.type, s]));

/** The schema of `type`; throws for a type without one (a codec bug). */
export function schemaOf(type: FrameType): FrameSchema {
  const s = BY_TYPE.get(type);
  if (!s) throw new Error(`no frame schema for ${FrameType[type] ?? type}`);
  return s;
}

/** Bytes of a field on the wire when it has a fixed size; undefined when it varies. */
export function fixedBytes(f: Field): number | undefined {
  switch (f.kind) {
    case 'u8':
    case 'bool':
    case 'enum':
      return 1;
    case 'u16':
      return 2;
    case 'u32':
      return 4;
    case 'u64':
    case 'big':
      return 8;
    case 'uuid':
      return 16;
    case 'bytes':
      return f.size;
    default:
      return undefined;
  }
}

/** The size-prefix or presence bytes of a variable field (its smallest encoding). */
export function minBytes(f: Field): number {
  switch (f.kind) {
    case 'string':
      return 2;
    case 'data':
    case 'frame':
    case 'u64list':
      return 4;
    case 'extents':
      return 2;
    case 'optional':
      return 1;
    default:
      return fixedBytes(f)!;
  }
}

/** The smallest frame of `type` (header included): every variable part empty or absent. */
export function minFrameBytes(type: FrameType): number {
  return schemaOf(type).fields.reduce((n, f) => n + minBytes(f), HEADER_BYTES);
}

/**
 * Where field `name` of `type` starts, from the start of the frame; only for
 * fields before the first variable part (their offset is the same in every
 * frame of the type). Throws otherwise.
 */
export function fieldOffset(type: FrameType, name: string): number {
  let at = HEADER_BYTES;
  for (const f of schemaOf(type).fields) {
    if (f.name === name) return at;
    const n = fixedBytes(f);
    if (n === undefined) break;
    at += n;
  }
  throw new Error(`${FrameType[type]} has no field '${name}' at a fixed offset`);
}

export { U32 as MAX_U32 };
