/**
 * A data path: one way a message's bytes cross an endpoint (EAGER inline,
 * RGET out of the peer's mapped memory, staging through a pinned shared ring). Each path is one
 * object holding both its sides — the sender's `send` and the receiver's
 * `receive` — and the endpoint dispatches to it; the endpoint itself only
 * matches, routes frames and keeps the lifecycle.
 *
 * How a new path plugs in (a new way to move bytes; a new kind of remote
 * memory — a fabric handle, say — is not a path but a RemoteKey kind and a
 * case of open-remote.ts's switch, carried by RGET):
 *   1. its frames in src/wire/frames.ts (the codec is the wire's business);
 *   2. one file, src/paths/<name>.ts, with a class implementing DataPath:
 *      `arrivals` names the frame that announces a message (it is matched
 *      against receives, then handed to `receive`), `controls` the frames of
 *      its own protocol (handed to `onFrame`), `canSend` says which sends it
 *      takes;
 *   3. one line in src/paths/index.ts's `createPaths`, in the order paths are
 *      asked (the first whose `canSend` is true carries the message), and its
 *      name in endpoint-stats.ts's DataPath (the counters); it gets the
 *      PathContext below, and what it alone uses (its parts, in `PathParts`,
 *      made by the endpoint's link) in its constructor;
 *   4. its arrival frame in `Arrival` below, and a test file
 *      test/unit/paths/paths-<name>.test.ts driving it through test/helpers/path-harness.ts.
 * Nothing in the endpoint changes: it routes frames by `arrivals` and
 * `controls`, settles FINs through PendingSends, and asks `onFin` and
 * `senderFailed` for the rest.
 *
 * Hot-path rule (docs/benchmarks.md, 'Results': an 8 B ping-pong and 1 MiB
 * streaming leave no room):
 * `canSend`, `send` and `receive` run per message, so they allocate no
 * closure, promise or object beyond what the message needs (EAGER: the
 * frame; RGET: the FIN's promise, one job object, one completion) and queue
 * no microtask; the endpoint's dispatch to them is one array index and a
 * virtual call.
 */
import type { MessageBuffer, DeviceBuffer } from '../buffers.js';
import type { FdChannel } from '../channel/fd-channel.js';
import type { CudaDriver, StreamHandle } from '../cuda/driver.js';
import type { DataPath as PathKind, DirectionCounters } from '../endpoint-stats.js';
import type { FlowControl } from '../flow-control.js';
import type { GpuWork } from '../gpu/gpu-work.js';
import type { EagerFrame, FinStatus, Frame, FrameType, RgetFrame, StageBeginFrame } from '../wire/frames.js';
import type { FdChannelHandlers } from '../channel/fd-channel.js';
import type { PendingSends } from './pending-sends.js';

export type { PathKind };

/** A frame that announces a message (it carries tag and seq, and is matched against receives). */
export type Arrival = EagerFrame | RgetFrame | StageBeginFrame;

export interface SendOptions {
  /** Message tag (u32). Messages with one tag on one endpoint are never overtaken. Default 0. */
  tag?: number;
  /**
   * The data is valid once the work queued on this stream so far is done.
   * Without it (and without `ready`), a device send delivers what the work
   * queued before it on the legacy default stream — and so on every blocking
   * stream — produced: a pageable cuMemcpyHtoD or a cuMemsetD8 that returned
   * before the device had the bytes, a kernel on stream 0. Work queued on a
   * non-blocking stream of your own is ordered only by passing that stream.
   */
  stream?: StreamHandle;
  /**
   * The caller guarantees the bytes are on the device already (it
   * synchronized, or the buffer was written by a previous receive): the
   * send skips ordering itself after the legacy default stream, one event
   * record and query (host time per send: docs/benchmarks.md, '8 B half round trip'). Ignored with `stream`.
   */
  ready?: boolean;
  /** Cancels the send if the peer has not matched it yet. */
  signal?: AbortSignal;
}

export interface RecvOptions {
  tag?: number;
  /** Where to put the message (host or device); must be at least as long. Default: a new buffer. */
  into?: MessageBuffer;
  /** The data is valid once this stream reaches the copy (the recv may resolve before). */
  stream?: StreamHandle;
  /** Cancels the receive if no message has matched it yet. */
  signal?: AbortSignal;
}

/** What one received message resolves to (public: Received in endpoint.ts). */
export interface Received {
  tag: number;
  length: number;
  path: PathKind;
  /** Whether the sender's buffer was device memory. */
  fromDevice: boolean;
  /**
   * `into` when given (a view of exactly `length` bytes for host buffers);
   * otherwise host bytes, or — for device messages where this process has a
   * device — a new device allocation owned by the caller (free it with
   * `driver.memFree(data.ptr)`).
   */
  data: Uint8Array | DeviceBuffer;
}

/** A posted receive. */
export interface PendingRecv {
  tag: number;
  into: MessageBuffer | undefined;
  /** The device of a device `into`, where the check against its allocation learned it (checkIntoRoom). */
  intoDevice?: number;
  stream: StreamHandle | undefined;
  resolve: (r: Received) => void;
  reject: (err: Error) => void;
  cleanup: () => void;
}

/**
 * What every path shares with the endpoint: the link to the peer (frames
 * out, FINs, seqs, failing one arrival), its lifecycle, and the objects more
 * than one path uses (the GPU work, the sends waiting for FIN, flow control,
 * the receive counters). What one path alone uses is handed to its
 * constructor by createPaths (src/paths/index.ts): EagerParts, StagingParts,
 * and RGET's RgetLink and RgetParts (rget-link.ts).
 */
export interface PathContext {
  readonly driver: CudaDriver;
  readonly peerId: string;
  /** Hot-path copy of "the negotiation is OK". */
  readonly ipcOk: boolean;
  /** The negotiation may still end OK (not settled, IPC not off). */
  readonly ipcPending: boolean;
  /** The endpoint closed (or is closing). */
  readonly closed: boolean;
  /** What a pending operation rejects with once the endpoint is closed. */
  closedError(): Error;
  nextSeq(): number;
  /** The endpoint's stream, events, copy batcher and holds (made on first use). */
  gpu(): GpuWork;
  /**
   * Encodes (and traces) a frame and sends it; throws if the channel is
   * closed. Returns the bytes sent (not to be modified: RGET keeps a copy to restamp).
   */
  sendFrame(frame: Frame): Uint8Array;
  /** A FIN with a status (dropped once the endpoint is closed; long messages are cut). */
  sendFin(seq: number, status: FinStatus, message: string): void;
  /**
   * Receiver: a matched message could not be received (no memory, a bad
   * `into`, a bad request): the receive rejects and, for a rendezvous
   * message, the sender gets FIN REFUSED/FAILED. The endpoint stays open.
   */
  failArrival(recv: PendingRecv, frame: Arrival, err: Error): void;
  /** Sender: sends waiting for their FIN (RGET and staging). */
  readonly sends: PendingSends;
  /** Backpressure: every send is charged (flow-control.ts). */
  readonly flow: FlowControl;
  /** Received messages by path (stats().received); sends are counted by PendingSends and EAGER. */
  readonly received: DirectionCounters;
}

export interface DataPath {
  readonly kind: PathKind;
  /** The names its messages are counted under (stats, PendingSend.path), when more than `kind`. */
  readonly counts?: readonly PathKind[];
  /** Frame types that announce this path's messages (matched, then `receive`d). */
  readonly arrivals: readonly FrameType[];
  /** Frame types of this path's own protocol, handed to `onFrame`. */
  readonly controls: readonly FrameType[];
  /** Sender: whether this path carries `buf` now. */
  canSend(buf: MessageBuffer, options: SendOptions): boolean;
  /** Bytes `buf` would carry inline in the control channel (what it weighs in the peer's window). */
  inlineBytes(buf: MessageBuffer): number;
  /** Sender: sends it; resolves when the buffer may be reused. May throw (the send rejects). */
  send(buf: MessageBuffer, tag: number, options: SendOptions): Promise<void>;
  /** Receiver: a posted receive met one of this path's arrivals (throwing fails that arrival alone). */
  receive(recv: PendingRecv, frame: Arrival): void;
  /** One of `controls` arrived. Throwing is a protocol failure: the endpoint closes. */
  onFrame(frame: Frame): void;
  /**
   * Sender: a FIN other than OK for one of this path's sends: true if the
   * path handled it (RGET takes RESTAGE); otherwise the endpoint settles
   * the send (PendingSends.settle).
   */
  onFin(seq: number, status: FinStatus, message: string): boolean;
  /** Receiver: the sender of `seq` failed it (FIN SENDER_FAILED): true if this path was receiving it. */
  senderFailed(seq: number, err: Error): boolean;
  /**
   * The transport made the descriptor channel to this peer: the path that
   * carries descriptors takes it (RGET) and returns who takes its
   * FD_DESCRIPTOR messages (the link starts the channel and routes SEGMENT
   * messages to `segments`); undefined: it does not take this channel.
   */
  attachFd?(channel: FdChannel): FdChannelHandlers | undefined;
  /** The endpoint closes: reject what is in progress with `reason`, release resources. */
  close(reason: Error): void;
}
