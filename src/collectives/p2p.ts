/**
 * Point to point on a Communicator: comm.send and comm.recv of device
 * buffers, in stream order with the collectives, and comm.batch, which
 * issues several of them together (ncclGroupStart/End, torch's
 * batch_isend_irecv).
 *
 * Matching is NCCL's: the n-th send from rank A to rank B is B's n-th
 * receive from A (p2p-match.ts), a sequence per ordered pair that leaves the
 * collectives' sequence and call check alone. Each call tells its peer its
 * count and dtype when it is made; a send and its receive that disagree
 * abort the communicator on every rank (SMCUDA_P2P_MISMATCH), and no call
 * completes before its peer's print arrived and agrees: never a wrong
 * answer.
 *
 * Two paths, as the collectives have:
 *   device  (mapped scratch, stream memory operations) the batch is queued
 *           whole on its stream before the call returns (p2p-channel.ts:
 *           chunks through the receiver's scratch region E, flags saying
 *           slot full or free), so it runs with no host between its steps
 *           and can be captured in a CUDA graph; it completes once its
 *           stream reached it and the prints agreed;
 *   staged  (no mapping, or no stream memory operations) once the calls
 *           before it are queued and its stream reached it, and once both
 *           sides of every message agreed, the data goes as endpoint
 *           messages on a tag of its own (never taken by a staged
 *           collective's receive). It needs the host: capture is refused
 *           (SMCUDA_CAPTURE_UNSUPPORTED), as for staged collectives.
 *
 * Why batch() takes a synchronous function (not an async group). The calls
 * made inside it are collected and queued together when it returns, all at
 * once, so a batch made while its stream is capturing is captured whole,
 * and nothing another part of the program does can fall between its calls
 * (an `await` inside a group would let a collective of this rank run in the
 * middle of it, where the peers' would not). A batch is queued in lanes and
 * rounds (p2p-channel.ts), so a ring of sends and receives larger than a
 * slot, every rank's sends before its receives, cannot deadlock.
 *
 * Failure is the communicator's: a bad argument, a mismatch, a peer that is
 * lost or closed, or a call past its timeout aborts every rank, and every
 * send and receive in flight fails with the abort once the device has left
 * it (the poisoned flags release its waits).
 */
import type { DeviceBuffer } from '../buffers.js';
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import { ArgumentRangeError, CommunicatorAbortedError, CommunicatorTimeoutError, ProtocolError, SmcudaError } from '../errors.js';
import type { DType } from '../kernels/dtypes.js';
import { RankLostError } from './algorithms.js';
import { CONTROL_TAG } from './control.js';
import { P2PChannel, type P2PTransfer } from './p2p-channel.js';
import { P2PMatch, type P2PKind, type P2PPrint } from './p2p-match.js';
import type { Scratch } from './scratch.js';
import type { MarkWaiter } from '../gpu/stream-marks.js';
import { describeP2P, type P2PFlightRecorder } from './p2p-flight.js';

export type { P2PKind, P2PPrint };

/** What comm.send and comm.recv take. */
export interface P2PArgs {
  /** The data to send, or where the received data goes: `count` elements (a device pointer or a buffer object, as the collectives take). */
  buf: DevicePtr | DeviceBuffer;
  count: number;
  dtype: DType;
  /** The rank sent to or received from (not this rank). */
  peer: number;
  /** The stream the call is ordered on (default 0n, the legacy default stream). */
  stream?: StreamHandle;
  /** This call's time limit, ms (default: the communicator's); in a batch, the batch's is the least of its calls'. */
  timeoutMs?: number;
}

/** `peer` must be another rank of the communicator. */
export function checkPeer(rank: number, size: number, peer: unknown): void {
  if (typeof peer !== 'number' || !Number.isInteger(peer) || peer < 0 || peer >= size)
    throw new ArgumentRangeError(`peer must be a rank from 0 to ${size - 1}, got ${String(peer)}`);
  if (peer === rank) throw new ArgumentRangeError(`peer must be another rank than this one (${rank}): to move data within a rank, copy on the stream`);
}

/** A completed send or receive. */
export interface P2PResult {
  op: P2PKind;
  peer: number;
  /** Its place in the pair's sequence: the n-th send from a rank to `peer` is `peer`'s n-th receive from it. */
  n: number;
  bytes: number;
  /** 'device': queued whole on the stream (chunks through the receiver's scratch); 'staged': endpoint messages through the host. */
  path: 'device' | 'staged';
  /** Host wall time from the call to its completion, µs. */
  us: number;
}

/** What stats().p2p says: the sends and receives completed, by kind and by path, and their bytes. */
export interface P2PStats {
  sends: number;
  recvs: number;
  bytesSent: number;
  bytesReceived: number;
  byPath: { device: number; staged: number };
}

/** The lowest tag communicators reserve (group-tags.ts reserves every tag from it up to DATA_TAG). */
const TAG_FLOOR = 0xf0000000;
/**
 * The tag of staged point-to-point messages of communicator group `group`
 * (0: a world): the bottom of the reserved range, counting up, while the
 * groups' control and data tags count down from the top. They could only
 * meet once a transport made about (CONTROL_TAG - TAG_FLOOR) / 3 groups;
 * past that, staged point to point is refused.
 */
export function p2pTagOf(group: number): number {
  if (group > Math.floor((CONTROL_TAG - TAG_FLOOR) / 3))
    throw new SmcudaError(
      'SMCUDA_NO_GROUP_TAGS',
      `group ${group} has no tag left for staged sends and receives: make fewer groups on this transport (reuse them), or start a new transport`,
    );
  return TAG_FLOOR + group;
}

/** Where the calls are on their streams (src/gpu/stream-marks.ts). */
export interface P2PMarks {
  orderAfterLast(stream: StreamHandle): void;
  markWith(stream: StreamHandle, waiter: MarkWaiter): void;
  mark(stream: StreamHandle): Promise<void>;
}

/** What point to point needs of its communicator. */
export interface P2PHost {
  /** Where each send and receive is recorded (the communicator's flight recorder's point-to-point half). */
  readonly flight?: P2PFlightRecorder;
  readonly rank: number;
  readonly size: number;
  readonly driver: CudaDriver;
  scratch(): Scratch;
  /** Ranks step on the device (mapped scratch, stream memory operations): the device path. */
  deviceSteps(): boolean;
  marks(): P2PMarks;
  /** Tells `peer` this rank's print of a call (control message 'pp'). */
  sendPrint(peer: number, print: P2PPrint): void;
  endpoint(peer: number): Endpoint;
  /** The tag of staged messages (p2pTagOf). */
  dataTag(): number;
  capturing(stream: StreamHandle): boolean;
  abortError(): CommunicatorAbortedError | undefined;
  closed(): boolean;
  /** Aborts the communicator on every rank with `err` as the cause (an abort error passes as it is). */
  abort(err: Error): void;
  /** No host-path call is waiting to be queued: a device-path batch may queue now. */
  queueFree(): boolean;
  /** Runs `work` once the calls made before it are queued, in call order with the collectives. */
  inCallOrder(work: () => void | Promise<void>): Promise<void>;
}

class P2PCall {
  n = 0;
  agreed = false;
  /** Its id in the flight recorder (0: not recorded). */
  flightId = 0;
  batch: P2PBatch | undefined;
  resolve!: (r: P2PResult) => void;
  reject!: (err: Error) => void;
  readonly promise = new Promise<P2PResult>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });
  constructor(
    readonly kind: P2PKind,
    readonly peer: number,
    readonly buf: DevicePtr,
    readonly count: number,
    readonly dtype: DType,
    readonly bytes: number,
    readonly stream: StreamHandle,
    readonly timeoutMs: number,
  ) {}

  describe(): string {
    return describeP2P(this);
  }
}

/** The calls queued together (one call, or a batch): they complete together. */
class P2PBatch implements MarkWaiter {
  settled = false;
  marked = false;
  timer: NodeJS.Timeout | undefined;
  readonly started = performance.now();
  /** Told once every call's peer print agreed (the staged path waits for it before moving data). */
  agreedWaiter: { resolve(): void; reject(err: Error): void } | undefined;
  constructor(
    private readonly owner: PointToPoint,
    readonly calls: readonly P2PCall[],
    readonly stream: StreamHandle,
    readonly timeoutMs: number,
    readonly path: 'device' | 'staged',
  ) {}

  get agreed(): boolean {
    return this.calls.every((c) => c.agreed);
  }

  reached(err?: Error): void {
    this.owner.reached(this, err);
  }
}

const noop = (): void => undefined;
/** The longest delay setTimeout takes. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export class PointToPoint {
  private readonly match: P2PMatch;
  /** Calls waiting for their peer's print, by `${kind}:${peer}:${n}`. */
  private readonly waiting = new Map<string, P2PCall>();
  private readonly pending = new Set<P2PBatch>();
  private readonly departed = new Set<number>();
  /** The calls of the batch() being collected. */
  private collecting: P2PCall[] | undefined;
  private channel: P2PChannel | undefined;
  private settledWaiters: Array<() => void> = [];
  /** Withdraws the staged path's endpoint receives and sends still waiting when the calls fail (the endpoints may be the application's and stay open). */
  private readonly staging = new AbortController();
  private readonly counters: P2PStats = { sends: 0, recvs: 0, bytesSent: 0, bytesReceived: 0, byPath: { device: 0, staged: 0 } };

  constructor(private readonly host: P2PHost) {
    this.match = new P2PMatch(host.rank, host.size);
  }

  /** Whether a batch() is collecting calls (a collective made inside it is refused). */
  get batching(): boolean {
    return this.collecting !== undefined;
  }

  /** Sends and receives not settled yet. */
  get inFlight(): number {
    let n = 0;
    for (const b of this.pending) n += b.calls.length;
    return n;
  }

  /** One send or receive (arguments checked by the communicator): queued now, or with its batch. */
  call(kind: P2PKind, peer: number, buf: DevicePtr, count: number, dtype: DType, bytes: number, stream: StreamHandle, timeoutMs: number): Promise<P2PResult> {
    const c = new P2PCall(kind, peer, buf, count, dtype, bytes, stream, timeoutMs);
    if (this.collecting) {
      // batch()'s promise carries the failure: a call's own promise may go unawaited.
      c.promise.catch(noop);
      this.collecting.push(c);
      return c.promise;
    }
    this.submit([c]);
    return c.promise;
  }

  /** Runs `fn`, collecting the sends and receives it makes, then queues them together; resolves with their results in call order. */
  batch(fn: () => unknown): Promise<P2PResult[]> {
    if (this.collecting) {
      throw new SmcudaError('SMCUDA_P2P_BATCH', 'batch() was called inside another batch(): make every send and receive of a batch in one batch() call');
    }
    const calls: P2PCall[] = [];
    this.collecting = calls;
    let out: unknown;
    try {
      out = fn();
    } catch (err) {
      this.collecting = undefined;
      throw this.refuse(err as Error, calls);
    }
    this.collecting = undefined;
    if (typeof (out as { then?: unknown } | undefined)?.then === 'function') {
      (out as Promise<unknown>).then(noop, noop);
      throw this.refuse(
        new SmcudaError(
          'SMCUDA_P2P_BATCH',
          "batch()'s function returned a promise: make the batch's sends and receives synchronously inside it (not after an await), and await batch()'s result instead",
        ),
        calls,
      );
    }
    if (calls.length === 0) {
      const aborted = this.host.abortError();
      return aborted ? Promise.reject(aborted) : Promise.resolve([]);
    }
    const stream = calls[0]!.stream;
    if (calls.some((c) => c.stream !== stream))
      throw this.refuse(new SmcudaError('SMCUDA_P2P_BATCH', "a batch's sends and receives must be on one stream: pass the same `stream` to each"), calls);
    this.submit(calls);
    return Promise.all(calls.map((c) => c.promise));
  }

  /** A call refused on this rank fails every rank (its peer's matching call would wait for it); returns `err` to throw. */
  private refuse(err: Error, calls: readonly P2PCall[]): Error {
    if (!this.host.closed() && !this.host.abortError()) this.host.abort(err);
    const reason = this.host.abortError() ?? err;
    for (const c of calls) c.reject(reason);
    return err;
  }

  private submit(calls: P2PCall[]): void {
    const h = this.host;
    const stream = calls[0]!.stream;
    if (h.closed()) {
      const err = new CommunicatorAbortedError('the communicator is closed', h.rank, 'SMCUDA_CLOSED');
      for (const c of calls) c.reject(err);
      return;
    }
    const aborted = h.abortError();
    if (aborted) {
      for (const c of calls) c.reject(aborted);
      return;
    }
    for (const c of calls) {
      if (!this.departed.has(c.peer)) continue;
      this.refuse(
        this.peerClosed(c.peer, `its ${c.kind === 'send' ? 'receive' : 'send'} matching this rank's ${c.kind} ${c.kind === 'send' ? 'to' : 'from'} it`),
        calls,
      );
      return;
    }
    const device = h.deviceSteps();
    const capturing = h.capturing(stream);
    if (capturing && (!device || !h.queueFree())) {
      const why = !device
        ? 'it goes through the host (staged: the scratch is not mapped, or the driver has no stream memory operations)'
        : 'a call made before it still waits for the host (staged, or barrier)';
      this.refuse(new SmcudaError('SMCUDA_CAPTURE_UNSUPPORTED', `a send or receive cannot be captured in a graph here: ${why}`), calls);
      return;
    }
    const b = new P2PBatch(this, calls, stream, Math.min(...calls.map((c) => c.timeoutMs)), device ? 'device' : 'staged');
    let mismatch: Error | undefined;
    // Told before anything is queued: the later of the two ranks finds a mismatch before its work exists.
    for (const c of calls) {
      c.batch = b;
      const m = this.match.made(c.kind, c.peer, c.count, c.dtype);
      c.n = m.n;
      if (h.flight) c.flightId = h.flight.queued(c.kind, c.peer, c.n, c.dtype, c.count, b.path, stream);
      h.sendPrint(c.peer, m.print);
      if (m.agreed === true) {
        c.agreed = true;
        h.flight?.agreed(c.flightId);
      } else if (m.agreed === false) this.waiting.set(`${c.kind}:${c.peer}:${c.n}`, c);
      else mismatch ??= m.agreed;
    }
    this.pending.add(b);
    this.arm(b);
    if (mismatch) {
      h.abort(mismatch);
      return;
    }
    if (device && h.queueFree()) {
      try {
        this.queueDevice(b, capturing);
      } catch (err) {
        this.fail(b, err as Error);
      }
      return;
    }
    h.inCallOrder(() => (device ? this.queueDevice(b, false) : this.staged(b))).catch((err: Error) => this.fail(b, err));
  }

  /** Queues a batch on its stream, all of it now (the device path). */
  private queueDevice(b: P2PBatch, capturing: boolean): void {
    const h = this.host;
    const aborted = h.abortError();
    if (aborted) throw aborted;
    const marks = h.marks();
    if (!capturing) marks.orderAfterLast(b.stream);
    const transfers: P2PTransfer[] = b.calls.map((c) => ({ kind: c.kind, peer: c.peer, buf: c.buf, bytes: c.bytes }));
    (this.channel ??= new P2PChannel(h.driver, h.scratch())).queue(b.stream, transfers);
    // Captured: the batch is in the graph, and each launch runs it; nothing to wait for here.
    if (capturing) {
      b.marked = true;
      this.tryComplete(b);
    } else marks.markWith(b.stream, b);
  }

  /** The staged path: once the stream reached the batch and both sides of every message agreed, the data goes as endpoint messages. */
  private async staged(b: P2PBatch): Promise<void> {
    const h = this.host;
    const aborted = h.abortError();
    if (aborted) throw aborted;
    const marks = h.marks();
    marks.orderAfterLast(b.stream);
    await marks.mark(b.stream);
    if (!b.agreed) await new Promise<void>((resolve, reject) => (b.agreedWaiter = { resolve, reject }));
    const tag = h.dataTag();
    const signal = this.staging.signal;
    await Promise.all(
      b.calls
        .filter((c) => c.bytes > 0)
        .map((c) => {
          const ep = h.endpoint(c.peer);
          const blame = (err: Error): never => {
            throw ep.closed ? new RankLostError(c.peer, err) : err;
          };
          return c.kind === 'send'
            ? ep.send({ ptr: c.buf, length: c.bytes }, { tag, signal }).catch(blame)
            : ep.recv({ tag, into: { ptr: c.buf, length: c.bytes }, signal }).then(noop, blame);
        }),
    );
    marks.markWith(b.stream, b);
  }

  /** A peer's print arrived (control message 'pp'). */
  onPrint(peer: number, print: P2PPrint): void {
    let r: ReturnType<P2PMatch['arrive']>;
    try {
      r = this.match.arrive(peer, print);
    } catch (err) {
      const pid = this.host.endpoint(peer)?.peerPid;
      const cause = err instanceof ProtocolError ? err : new ProtocolError((err as Error).message);
      this.host.abort(new CommunicatorAbortedError(`rank ${peer} (pid ${pid}) failed: ${cause.message}`, peer, cause.code, { cause, failedPid: pid }));
      return;
    }
    if (r === undefined) return;
    const key = `${r.kind}:${peer}:${r.n}`;
    const c = this.waiting.get(key);
    this.waiting.delete(key);
    if (r.agreed !== true) {
      this.host.abort(r.agreed);
      return;
    }
    if (!c) return;
    c.agreed = true;
    this.host.flight?.agreed(c.flightId);
    const b = c.batch!;
    if (b.agreed && b.agreedWaiter) {
      b.agreedWaiter.resolve();
      b.agreedWaiter = undefined;
    }
    this.tryComplete(b);
  }

  /** A peer closed its communicator: a call still waiting for its print can never complete. */
  peerDeparted(peer: number): void {
    this.departed.add(peer);
    for (const c of this.waiting.values()) {
      if (c.peer !== peer) continue;
      this.host.abort(this.peerClosed(peer, `the ${c.kind === 'send' ? 'receive' : 'send'} matching this rank's ${c.describe()}`));
      return;
    }
  }

  private peerClosed(peer: number, what: string): CommunicatorAbortedError {
    const pid = this.host.endpoint(peer)?.peerPid;
    return new CommunicatorAbortedError(
      `rank ${peer}${pid !== undefined ? ` (pid ${pid})` : ''} closed its communicator without making ${what}: every send needs its receive before either rank closes`,
      peer,
      'SMCUDA_PEER_CLOSED',
      { failedPid: pid },
    );
  }

  /** The batch's stream reached its mark (or failed). */
  reached(b: P2PBatch, err?: Error): void {
    if (err) return this.fail(b, err);
    b.marked = true;
    this.tryComplete(b);
  }

  private tryComplete(b: P2PBatch): void {
    if (b.settled || !b.marked || !b.agreed) return;
    // After an abort the flags were poisoned: what the batch moved is not to be trusted.
    const aborted = this.host.abortError();
    if (aborted) return this.settle(b, aborted);
    const us = Math.round((performance.now() - b.started) * 1000);
    this.settle(b);
    const k = this.counters;
    for (const c of b.calls) {
      if (c.kind === 'send') {
        k.sends++;
        k.bytesSent += c.bytes;
      } else {
        k.recvs++;
        k.bytesReceived += c.bytes;
      }
      k.byPath[b.path]++;
      this.host.flight?.finished(c.flightId);
      c.resolve({ op: c.kind, peer: c.peer, n: c.n, bytes: c.bytes, path: b.path, us });
    }
  }

  /** Arms the batch's timeout (setTimeout takes at most 2^31-1 ms: a longer one is armed again then). */
  private arm(b: P2PBatch): void {
    const left = b.started + b.timeoutMs - performance.now();
    b.timer = setTimeout(() => this.timedOut(b), Math.max(0, Math.min(MAX_TIMER_MS, Math.ceil(left))));
  }

  private timedOut(b: P2PBatch): void {
    b.timer = undefined;
    if (b.settled || this.host.abortError()) return;
    if (performance.now() < b.started + b.timeoutMs) return this.arm(b);
    const missing = b.calls.filter((c) => !c.agreed);
    const who =
      missing.length > 0
        ? missing.map((c) => `rank ${c.peer} never made the ${c.kind === 'send' ? 'receive' : 'send'} matching this rank's ${c.kind} #${c.n}`).join('; ')
        : 'every peer made its matching call: a rank is stuck on its GPU or host';
    this.host.abort(
      new CommunicatorTimeoutError(`rank ${this.host.rank}: ${b.calls.map((c) => c.describe()).join(', ')} did not complete within ${b.timeoutMs} ms (${who})`),
    );
  }

  /** Fails a batch: its own error aborts every rank, and the batch fails with the abort once the device has left it (failAll). */
  private fail(b: P2PBatch, err: Error): void {
    if (b.settled) return;
    if (!(err instanceof CommunicatorAbortedError)) {
      this.host.abort(err);
      if (this.host.abortError()) return;
    }
    this.settle(b, err);
  }

  private settle(b: P2PBatch, err?: Error): void {
    if (b.settled) return;
    b.settled = true;
    clearTimeout(b.timer);
    this.pending.delete(b);
    for (const c of b.calls) {
      this.waiting.delete(`${c.kind}:${c.peer}:${c.n}`);
      if (err) {
        this.host.flight?.failed(c.flightId);
        c.reject(err);
      }
    }
    if (err && b.agreedWaiter) b.agreedWaiter.reject(err);
    if (this.pending.size === 0) for (const w of this.settledWaiters.splice(0)) w();
  }

  /**
   * The communicator aborted: nothing waits for a peer's print any longer,
   * and the calls in flight fail once the device has left them (`drained`,
   * the poison having released their waits).
   */
  aborted(err: CommunicatorAbortedError, drained: Promise<unknown>): void {
    this.staging.abort(err);
    for (const b of this.pending) {
      clearTimeout(b.timer);
      b.timer = undefined;
      if (b.agreedWaiter) {
        b.agreedWaiter.reject(err);
        b.agreedWaiter = undefined;
      }
    }
    void drained.then(
      () => this.failAll(err),
      () => this.failAll(err),
    );
  }

  /** Fails every call in flight with `err` now. */
  failAll(err: Error): void {
    this.staging.abort(err);
    for (const b of [...this.pending]) this.settle(b, err);
  }

  /** Resolves true once no call is in flight, false after `ms`. */
  allSettled(ms: number): Promise<boolean> {
    if (this.pending.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.settledWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  stats(): P2PStats {
    return { ...this.counters, byPath: { ...this.counters.byPath } };
  }

  /** The first call in flight, in words (for close's error). */
  firstInFlight(): string | undefined {
    for (const b of this.pending) return b.calls[0]!.describe();
    return undefined;
  }
}
