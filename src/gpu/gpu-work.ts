/**
 * The GPU work of one endpoint: its stream (created on first use), its
 * completion tracking (a GpuEventQueue, which the transport's progress
 * engine polls: src/progress/), the copy batcher, and the owner of what the
 * GPU uses while it works. `copy(stream, dst, src, bytes, cb, uses)` queues
 * a device copy and calls back once it completed; `whenDone(stream, bytes,
 * cb, uses)` does the same for work the caller queued itself; `whenEvent(ev,
 * cb)` for a peer's event. Callbacks only: see gpu-event-queue.ts for why.
 *
 * Everything an operation holds while the GPU works for it is a GpuHold of
 * this object (`hold`): the staging rings, and what one receive holds (its
 * lease on the peer's mapping, the peer's event, a device buffer it
 * allocated). A copy or wait given `uses` is a use of those holds until its
 * completion ran; a hold is released once its holder let go of it and no use
 * is in flight, and `close` lets go of every hold, so nothing is released
 * under the GPU on any path, close and peer loss included. The peer's events
 * this endpoint waits on are its GpuEventQueue's (`whenEvent`, `retireEvent`).
 *
 * Small copies of one synchronous run (the RGETs one look at the control ring
 * found) are launched together, by one cuMemcpyBatchAsync, when the run ends;
 * they share one completion event. See `copy`. Where the peer runs on the
 * same GPU, such a run is one launch of smcuda's copy kernel instead
 * (copy-list.ts).
 */
import { type CopyKernelStats, CopyList } from './copy-list.js';
import { type CudaDriver, type EventHandle, LEGACY_STREAM, queuedBeforeFailure, type StreamHandle } from '../cuda/driver.js';
import { ProgressEngine } from '../progress/engine.js';
import { callReporting, type Completion, GpuEventQueue } from './gpu-event-queue.js';

import { GpuHold } from './gpu-hold.js';
import { microtask } from '../progress/microtask.js';
export type { Completion } from './gpu-event-queue.js';

/** Copies up to this much (together) share one completion event; larger ones get their own. */
const BATCH_MAX_BYTES = 4 << 20;

/**
 * A batch of same-GPU copies for the copy kernel holds up to this much: one
 * GPU copies several times faster than NVLink carries, so the first copy's FIN waits for the last one's no
 * longer. Two processes on one H200 (MPS) streaming 4 MiB messages, window
 * 8, alternating with 4 MiB batches: about half as fast again with them
 * (each message was a batch of one; with 16 MiB, messages that
 * arrive together take one launch).
 */
const LOCAL_BATCH_MAX_BYTES = 16 << 20;

/** Most copies launched by one batch call. */
const BATCH_MAX_COPIES = 64;

/** The calls of one synchronous run on one stream, closed (launched and recorded) in a microtask. */
interface Batch {
  stream: StreamHandle;
  bytes: number;
  cbs: Completion[];
  /** Copies waiting for launch: entries 0..copies-1 of GpuWork's copy arrays. */
  copies: number;
  /** Every copy reads and writes memory of the same-GPU peer's device: the copy kernel may make them (copy-list.ts). */
  local: boolean;
}

const NOOP: Completion = () => {};

export class GpuWork {
  private stream_: StreamHandle | undefined;
  /** Completion tracking: the events this endpoint waits for, polled by the progress engine. */
  readonly events: GpuEventQueue;
  private closed = false;
  /** Resources copies may still use (GpuHold): let go of on close, released by their last copy's completion. */
  private readonly holds = new Set<GpuHold>();
  /** copy and whenDone calls of the current synchronous run, waiting for their launch and shared event. */
  private batch: Batch | undefined;
  /** A closed batch of one, ready to be opened again (open). */
  private spare: Batch | undefined;
  /** The open batch's copies, as memcpyBatchAsync takes them; copyCb[k] indexes copy k's completion in batch.cbs. */
  private readonly dsts = new BigUint64Array(BATCH_MAX_COPIES);
  private readonly dstEnds = new BigUint64Array(BATCH_MAX_COPIES);
  private readonly srcs = new BigUint64Array(BATCH_MAX_COPIES);
  private readonly sizes = new Float64Array(BATCH_MAX_COPIES);
  private readonly copyCb = new Array<number>(BATCH_MAX_COPIES).fill(0);
  /** Same-GPU copies by smcuda's kernel, when the peer shares this endpoint's GPU; its hold keeps it while launches are in flight. */
  private readonly copyList: { list: CopyList; hold: GpuHold } | undefined;
  private readonly kernelCounts = { launches: 0, copies: 0 };

  constructor(
    private readonly driver: CudaDriver,
    /** How long a lone small copy's completion is polled inline (µs; 0: never). */
    spinUs = 0,
    /**
     * The transport's progress engine, which polls this endpoint's completions
     * between event-loop turns. Without one (tests, tools), an engine that
     * never polls: inline spins, then the native completion thread.
     */
    engine: ProgressEngine = new ProgressEngine(0),
    /**
     * The device this endpoint and its peer share (ordinal and UUID), when they share one: a `copy`
     * from memory of that device (isSameGpu) with `dstDevice` equal to it is a same-GPU copy.
     */
    private readonly sameGpu?: { device: number; uuid: string },
    /** Told once this closed (the GPU runtime that made it forgets it). */
    private readonly onClose?: () => void,
  ) {
    this.events = new GpuEventQueue(driver, engine, spinUs);
    if (sameGpu !== undefined) {
      const list = new CopyList(driver, sameGpu.device);
      this.copyList = { list, hold: this.hold(() => list.close()) };
    }
  }

  /** What the copy kernel did (stats().copyKernel). */
  copyKernelStats(): CopyKernelStats {
    const unavailable = this.copyList?.list.unavailable;
    return { ...this.kernelCounts, ...(unavailable !== undefined ? { unavailable } : {}) };
  }

  /** Whether memory of the device `uuid` names is on the GPU this endpoint shares with its peer. */
  isSameGpu(uuid: string): boolean {
    return this.sameGpu !== undefined && this.sameGpu.uuid === uuid;
  }

  /** This endpoint's own non-blocking stream. */
  get stream(): StreamHandle {
    if (this.stream_ === undefined) this.stream_ = this.driver.streamCreate();
    return this.stream_;
  }

  /**
   * Queues the device copy `dst <- src` (`bytes`) on `stream` and calls `cb`
   * once it completed. This is the per-message path: no promise between the
   * GPU and the FIN that answers it.
   *
   * A copy of at most BATCH_MAX_BYTES joins the open batch: the copies of
   * one synchronous run on one stream are launched by one
   * cuMemcpyBatchAsync when the run ends (a microtask), followed by one
   * event. On 2xH200 four 1 MiB peer copies cost about half as much to launch
   * that way as one by one, and run faster: the GPU runs a batch's copies
   * concurrently (bench/diary.md, 'Driver-level figures'). A copy whose destination overlaps
   * one already in the batch starts a new one (overlapsBatch), so receives
   * into overlapping memory still land in message order. A batch holds at
   * most BATCH_MAX_BYTES (a same-GPU batch LOCAL_BATCH_MAX_BYTES): the first
   * copy's FIN waits for the last one's, which only pays while copies take
   * about as long as the per-message work (on 2xH200, sharing the events of
   * 256 MiB messages cost 8 points of bandwidth, and of staging chunks half
   * of it). A copy over BATCH_MAX_BYTES is launched at once with an event of
   * its own.
   *
   * `uses`: holds the copy uses (its source or destination), each a use
   * from now until `cb` ran. `dstDevice`: the device of `dst`, given only
   * where `src` is memory of the GPU this endpoint shares with its peer
   * (isSameGpu); a batch of two or more copies that all write that device
   * is made by the copy kernel.
   *
   * Throws only when a large copy's launch fails (then no use is taken); a
   * batched copy's failure reaches `cb`.
   */
  copy(stream: StreamHandle, dst: bigint, src: bigint, bytes: number, cb: Completion, uses?: Uses, dstDevice?: number): void {
    if (bytes > BATCH_MAX_BYTES) {
      this.flushNow(false);
      this.driver.memcpyAsync(dst, src, bytes, stream);
      this.events.record(stream, bytes, uses === undefined ? cb : using(uses, cb), false);
      return;
    }
    if (uses !== undefined) cb = using(uses, cb);
    let b = this.batch;
    const end = dst + BigInt(bytes);
    const local = dstDevice !== undefined && dstDevice === this.sameGpu?.device;
    if (
      b === undefined ||
      b.stream !== stream ||
      b.bytes + bytes > (local && b.local ? LOCAL_BATCH_MAX_BYTES : BATCH_MAX_BYTES) ||
      b.copies === BATCH_MAX_COPIES ||
      this.overlapsBatch(b, dst, end)
    ) {
      b = this.open(stream);
    }
    if (!local) b.local = false;
    const k = b.copies++;
    this.dstEnds[k] = end;
    this.dsts[k] = dst;
    this.srcs[k] = src;
    this.sizes[k] = bytes;
    this.copyCb[k] = b.cbs.length;
    b.bytes += bytes;
    b.cbs.push(cb);
  }

  /**
   * Calls `cb` once everything queued so far on `stream` has completed, for
   * work the caller queued itself. Joins the open batch as `copy` does (its
   * event comes after the batch's copies); a call with `bytes` above
   * BATCH_MAX_BYTES gets an event of its own at once. `uses`: as for `copy`.
   */
  whenDone(stream: StreamHandle, bytes: number, cb: Completion, uses?: Uses): void {
    if (uses !== undefined) cb = using(uses, cb);
    if (bytes > BATCH_MAX_BYTES) {
      // A large copy (a staging chunk, a big message) gets its own event: its
      // FIN must not wait for the copies queued after it.
      this.flushNow(false);
      this.events.record(stream, bytes, cb, false);
      return;
    }
    let b = this.batch;
    if (b === undefined || b.stream !== stream || b.bytes + bytes > BATCH_MAX_BYTES) b = this.open(stream);
    b.bytes += bytes;
    b.cbs.push(cb);
  }

  /**
   * Whether [dst, end) overlaps a destination of the open batch. Its copies
   * run in any order, so a copy into memory another one writes (receives
   * posted into overlapping buffers) starts a new batch: stream order, as
   * with single copies, keeps the later message's bytes.
   */
  private overlapsBatch(b: Batch, dst: bigint, end: bigint): boolean {
    for (let k = 0; k < b.copies; k++) if (dst < this.dstEnds[k]! && this.dsts[k]! < end) return true;
    return false;
  }

  /** Closes the open batch (another stream, full, or overlapping) and opens an empty one on `stream`. */
  private open(stream: StreamHandle): Batch {
    if (this.batch !== undefined) this.flushNow(false);
    const b: Batch = this.spare ?? { stream, bytes: 0, cbs: [], copies: 0, local: true };
    this.spare = undefined;
    b.stream = stream;
    b.local = this.copyList !== undefined;
    this.batch = b;
    microtask(this.flush);
    return b;
  }

  /** The microtask after a run of copy and whenDone calls. */
  private readonly flush = (): void => this.flushNow(true);

  /**
   * Launches the open batch's copies, records its event and starts waiting
   * for it. `inline`: from the microtask, where callbacks may run at once;
   * otherwise (inside copy, whenDone or close) no callback runs before the
   * caller returns.
   */
  private flushNow(inline: boolean): void {
    const b = this.batch;
    if (b === undefined) return;
    this.batch = undefined;
    const cbs = b.cbs;
    if (b.copies > 0) {
      // A lone copy stays with cuMemcpyAsync: as cheap for the host as the kernel's graph, and quicker on the GPU (copy-list.ts).
      if (b.local && b.copies > 1 && this.launchKernel(b, inline)) return;
      const failed = this.launch(b);
      if (failed !== undefined) {
        for (const [k, err] of failed) {
          const cb = cbs[this.copyCb[k]!]!;
          cbs[this.copyCb[k]!] = NOOP;
          if (inline) callReporting(cb, err);
          else queueMicrotask(() => callReporting(cb, err));
        }
        if (failed.length === b.copies && cbs.every((cb) => cb === NOOP)) return;
      }
    }
    if (cbs.length !== 1) return this.events.record(b.stream, b.bytes, (err) => settleAll(cbs, err), inline);
    // A batch of one (every message of a ping-pong): its object and array
    // are used again by the next. With progress/microtask.ts and the export
    // table's newest-entry check: less garbage and a shorter half round trip
    // of an in-process 8 B ping-pong on the simulated driver (3 runs each).
    const cb = cbs[0]!;
    const stream = b.stream;
    const bytes = b.bytes;
    cbs.length = 0;
    b.bytes = 0;
    b.copies = 0;
    this.spare = b;
    this.events.record(stream, bytes, cb, inline);
  }

  /**
   * The batch's copies as one launch of the copy kernel, its completions
   * settled by one event; false when the kernel cannot take them now (every
   * list in flight, or unavailable here) or its launch failed: the driver
   * copies them instead (nothing was queued).
   */
  private launchKernel(b: Batch, inline: boolean): boolean {
    const { list, hold } = this.copyList!;
    let slot: number;
    try {
      slot = list.launch(this.dsts, this.srcs, this.sizes, b.copies, b.stream);
    } catch {
      return false;
    }
    if (slot < 0) return false;
    this.kernelCounts.launches++;
    this.kernelCounts.copies += b.copies;
    const cbs = b.cbs;
    hold.use();
    this.events.record(
      b.stream,
      b.bytes,
      (err) => {
        list.release(slot);
        hold.done();
        settleAll(cbs, err);
      },
      inline,
    );
    return true;
  }

  /** The batch's copies in one call; the ones that could not be queued, with why. */
  private launch(b: Batch): Array<[number, Error]> | undefined {
    const n = b.copies;
    const d = this.driver;
    let from: number;
    try {
      if (n === 1) d.memcpyAsync(this.dsts[0]!, this.srcs[0]!, this.sizes[0]!, b.stream);
      else d.memcpyBatchAsync(this.dsts, this.srcs, this.sizes, n, b.stream);
      return undefined;
    } catch (err) {
      if (n === 1) return [[0, err as Error]];
      // The batch call queues all or none; a driver without one queues copy
      // by copy and stops at the first failure, with copies 0..queued-1
      // already queued (they run, and complete with the batch's event).
      from = queuedBeforeFailure(err, n);
    }
    // The rest one by one, so only the bad copies fail.
    const failed: Array<[number, Error]> = [];
    for (let k = from; k < n; k++) {
      try {
        d.memcpyAsync(this.dsts[k]!, this.srcs[k]!, this.sizes[k]!, b.stream);
      } catch (err) {
        failed.push([k, err as Error]);
      }
    }
    return failed;
  }

  /**
   * Whether the work queued so far on the legacy default stream (and so on
   * every blocking stream) is done: one event recorded there and queried.
   * A device send without a stream asks this first (Endpoint.send): when
   * work is still in flight, the send is ordered after that stream. False
   * when the driver refuses either call (the ordered send then reports why).
   */
  legacyStreamIdle(): boolean {
    const d = this.driver;
    try {
      const ev = (this.legacyEvent ??= d.eventCreate({ disableTiming: true }));
      d.eventRecord(ev, LEGACY_STREAM);
      return d.eventQuery(ev);
    } catch {
      return false;
    }
  }

  /** legacyStreamIdle's event, re-recorded on each call (a later record only waits longer). */
  private legacyEvent: EventHandle | undefined;

  /**
   * An interprocess event recorded on `stream` now, and its IPC handle: a
   * send with a stream gives it to the peer, whose copy waits for it. The
   * caller gives it back with releaseIpcEvent once the send settled. Throws
   * (leaking nothing) when the driver refuses either call.
   */
  ipcEvent(stream: StreamHandle): { event: EventHandle; handle: Uint8Array } {
    const d = this.driver;
    const event = d.eventCreate({ interprocess: true, disableTiming: true });
    try {
      d.eventRecord(event, stream);
      return { event, handle: d.ipcGetEventHandle(event) };
    } catch (err) {
      this.releaseIpcEvent(event); // a bogus stream must not leak the event
      throw err;
    }
  }

  /**
   * Destroys an ipcEvent. No wait of ours queries it (the peer opens its own
   * handle to it), and a record still pending is fine: the driver frees the
   * event once the record completed.
   */
  releaseIpcEvent(event: EventHandle): void {
    try {
      this.driver.eventDestroy(event);
    } catch {
      // the driver was closed meanwhile: the event went with it
    }
  }

  /**
   * Blocks until the work queued on `stream` completed, throwing its error:
   * only where the host reads what that work left at once (EAGER reads a
   * device buffer the caller's stream wrote).
   */
  synchronize(stream: StreamHandle): void {
    this.driver.streamSynchronize(stream);
  }

  /**
   * Makes what a first message would otherwise make on its way: the stream
   * (a first cuStreamCreate is slow) and the legacy-stream
   * check's event, recorded and queried once. The negotiation calls it once
   * the device is ready (endpoint-negotiation.ts), before the endpoint can be
   * OK. Best effort: a driver that refuses now reports it on the message's
   * own path, where it has a message to fail.
   */
  prepare(): void {
    if (this.closed) return;
    try {
      void this.stream;
    } catch {
      // refused again, and reported, by the first copy that needs it
    }
    this.legacyStreamIdle();
  }

  /**
   * Holds a resource that copies queued here read or write (a pinned ring,
   * what a receive holds): `release` runs once the holder closes the hold (or
   * this closes) and the last copy that used it completed.
   */
  hold(release: () => void): GpuHold {
    return new GpuHold(release, this.holds);
  }

  /**
   * The peer's interprocess event, opened from the IPC handle it sent (for
   * whenEvent, then retireEvent). Throws the driver's error when the handle
   * cannot be opened (the peer is gone, or the handle is not one).
   */
  openPeerEvent(handle: Uint8Array): EventHandle {
    return this.driver.ipcOpenEventHandle(handle);
  }

  /** Calls `cb` once `ev` (a peer's event, opened by IPC handle) completed, or with the close reason when this closes first. */
  whenEvent(ev: EventHandle, cb: Completion): void {
    this.events.whenEvent(ev, cb);
  }

  /** Destroys the peer event `ev` once no wait on it is in flight (GpuEventQueue.retire). */
  retireEvent(ev: EventHandle): void {
    this.events.retire(ev);
  }

  /**
   * Before a close: launches the open batch (its event goes behind work the
   * caller may have synchronized already) and settles every completion
   * that is done within `ms` (GpuEventQueue.settleCompleted), so what
   * finished reports it while the channel is still open.
   */
  settleCompleted(ms: number): void {
    if (this.closed) return;
    this.flushNow(false);
    this.events.settleCompleted(ms);
  }

  /** Completions not yet settled (the transport keeps the process alive while there are some). */
  get outstanding(): number {
    return this.events.outstanding + (this.batch?.cbs.length ?? 0);
  }

  /** Destroys the stream and idle events; events still awaited are destroyed when they settle; waits on peer events fail with `reason`. */
  close(reason?: Error): void {
    if (this.closed) return;
    this.flushNow(false);
    this.closed = true;
    this.onClose?.();
    this.events.close(reason);
    for (const h of [...this.holds]) h.close();
    if (this.legacyEvent !== undefined) {
      try {
        this.driver.eventDestroy(this.legacyEvent);
      } catch {
        // the driver is closed: the event went with it
      }
      this.legacyEvent = undefined;
    }
    if (this.stream_ !== undefined) {
      try {
        this.driver.streamDestroy(this.stream_);
      } catch {
        // the context may already be gone at process exit; nothing else holds it
      }
      this.stream_ = undefined;
    }
  }
}

/** The holds a copy or wait uses (GpuHold): one, or several (a staged chunk uses the ring and the target). */
export type Uses = GpuHold | readonly GpuHold[];

/** `cb`, with a use of each hold taken now and given back once it ran (even if it throws). */
function using(uses: Uses, cb: Completion): Completion {
  if (uses instanceof GpuHold) {
    uses.use();
    return (err) => {
      try {
        cb(err);
      } finally {
        uses.done();
      }
    };
  }
  for (const h of uses) h.use();
  return (err) => {
    try {
      cb(err);
    } finally {
      for (const h of uses) h.done();
    }
  };
}

/** One event settled a batch: every completion learns the outcome, even if one of them throws. */
function settleAll(cbs: readonly Completion[], err: Error | undefined): void {
  for (const cb of cbs) callReporting(cb, err);
}
