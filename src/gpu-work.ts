/**
 * The GPU resources one endpoint uses for its own copies: a stream (created on
 * first use) and a pool of completion events, so the per-message path creates
 * nothing. `copy(stream, dst, src, bytes, cb)` queues a device copy and calls
 * back once it completed; `whenDone(stream, bytes, cb)` does the same for work
 * the caller queued itself (`done` is that as a promise).
 *
 * Small copies of one synchronous run (the RGETs one look at the control ring
 * found) are launched together, by one cuMemcpyBatchAsync, when the run ends;
 * they share one completion event. See `copy`.
 *
 * Who notices the completion, cheapest first:
 *   1. a small copy that is the only one in flight (a ping-pong, not a
 *      stream of messages) is polled right away on the JS thread for up to
 *      `spinUs`, blocking;
 *   2. otherwise the transport's spinner polls it between control frames;
 *   3. when the spinner stops (nothing for `controlSpinUs`), the native
 *      poller (driver.whenComplete) takes it.
 * For 1: a small copy finishes in a few µs, while the native
 * poller's hand-off to the JS thread costs ~8 µs more (measured on H200).
 */
import type { GpuPollable, Spinner } from './channel/spinner.js';
import type { CudaDriver, EventHandle, StreamHandle } from './cuda/driver.js';

/** Only copies this small are worth a spin: they finish within it, and a stream of them is latency-bound anyway. */
const SPIN_MAX_BYTES = 64 << 10;

/** Copies up to this much (together) share one completion event; larger ones get their own. */
const BATCH_MAX_BYTES = 4 << 20;

/** Most copies launched by one batch call. */
const BATCH_MAX_COPIES = 64;

/** Called once a copy's completion is known: no argument when it completed, the error when it failed. */
export type Completion = (err?: Error) => void;

/** The calls of one synchronous run on one stream, closed (launched and recorded) in a microtask. */
interface Batch {
  stream: StreamHandle;
  bytes: number;
  cbs: Completion[];
  /** Copies waiting for launch: entries 0..copies-1 of GpuWork's copy arrays. */
  copies: number;
}

const NOOP: Completion = () => {};

interface PolledWait {
  ev: EventHandle;
  cb: Completion;
}

export class GpuWork implements GpuPollable {
  private stream_: StreamHandle | undefined;
  /** Completions the spinner polls (in record order). */
  private readonly polled: PolledWait[] = [];
  private readonly freeEvents: EventHandle[] = [];
  private closed = false;
  /** Events recorded and not yet settled. */
  private inFlight = 0;
  /** copy and whenDone calls of the current synchronous run, waiting for their launch and shared event. */
  private batch: Batch | undefined;
  /** The open batch's copies, as memcpyBatchAsync takes them; copyCb[k] indexes copy k's completion in batch.cbs. */
  private readonly dsts = new BigUint64Array(BATCH_MAX_COPIES);
  private readonly dstEnds = new BigUint64Array(BATCH_MAX_COPIES);
  private readonly srcs = new BigUint64Array(BATCH_MAX_COPIES);
  private readonly sizes = new Float64Array(BATCH_MAX_COPIES);
  private readonly copyCb = new Array<number>(BATCH_MAX_COPIES).fill(0);

  constructor(
    private readonly driver: CudaDriver,
    private readonly spinUs = 0,
    /**
     * Polls completions on the JS thread while it spins, and is told of those
     * awaited through the event loop, so it does not hold the loop meanwhile.
     */
    private readonly spinner?: Spinner,
  ) {}

  /** This endpoint's own non-blocking stream. */
  get stream(): StreamHandle {
    if (this.stream_ === undefined) this.stream_ = this.driver.streamCreate();
    return this.stream_;
  }

  /** Resolves once everything queued so far on `stream` has completed; `bytes` is the copy just queued. */
  done(stream: StreamHandle, bytes = Infinity): Promise<void> {
    return new Promise<void>((resolve, reject) => this.whenDone(stream, bytes, (err) => (err ? reject(err) : resolve())));
  }

  /**
   * Queues the device copy `dst <- src` (`bytes`) on `stream` and calls `cb`
   * once it completed. This is the per-message path: no promise between the
   * GPU and the FIN that answers it.
   *
   * A copy of at most BATCH_MAX_BYTES joins the open batch: the copies of
   * one synchronous run on one stream are launched by one
   * cuMemcpyBatchAsync when the run ends (a microtask), followed by one
   * event. On 2xH200 four 1 MiB peer copies cost 0.8 µs each to launch that
   * way against 1.7 µs one by one, and run at 261 GB/s against 169: the GPU
   * runs a batch's copies concurrently. A copy whose destination overlaps
   * one already in the batch starts a new one (overlapsBatch), so receives
   * into overlapping memory still land in message order. A batch holds at
   * most BATCH_MAX_BYTES: the first
   * copy's FIN waits for the last one's, which only pays while copies take
   * about as long as the per-message work (on 2xH200, sharing the events of
   * 256 MiB messages cost 8 points of bandwidth, and of staging chunks half
   * of it). A larger copy is launched at once with an event of its own.
   *
   * Throws only when a large copy's launch fails; a batched copy's failure
   * reaches `cb`.
   */
  copy(stream: StreamHandle, dst: bigint, src: bigint, bytes: number, cb: Completion): void {
    if (bytes > BATCH_MAX_BYTES) {
      this.flushNow(false);
      this.driver.memcpyAsync(dst, src, bytes, stream);
      this.record(stream, bytes, cb, false);
      return;
    }
    let b = this.batch;
    const end = dst + BigInt(bytes);
    if (
      b === undefined ||
      b.stream !== stream ||
      b.bytes + bytes > BATCH_MAX_BYTES ||
      b.copies === BATCH_MAX_COPIES ||
      this.overlapsBatch(b, dst, end)
    ) {
      b = this.open(stream);
    }
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
   * BATCH_MAX_BYTES gets an event of its own at once.
   */
  whenDone(stream: StreamHandle, bytes: number, cb: Completion): void {
    if (bytes > BATCH_MAX_BYTES) {
      // A large copy (a staging chunk, a big message) gets its own event: its
      // FIN must not wait for the copies queued after it.
      this.flushNow(false);
      this.record(stream, bytes, cb, false);
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
    const b: Batch = { stream, bytes: 0, cbs: [], copies: 0 };
    this.batch = b;
    queueMicrotask(this.flush);
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
    this.record(b.stream, b.bytes, cbs.length === 1 ? cbs[0]! : (err) => settleAll(cbs, err), inline);
  }

  /** The batch's copies in one call; the ones that could not be queued, with why. */
  private launch(b: Batch): Array<[number, Error]> | undefined {
    const n = b.copies;
    const d = this.driver;
    try {
      if (n === 1) d.memcpyAsync(this.dsts[0]!, this.srcs[0]!, this.sizes[0]!, b.stream);
      else d.memcpyBatchAsync(this.dsts, this.srcs, this.sizes, n, b.stream);
      return undefined;
    } catch (err) {
      if (n === 1) return [[0, err as Error]];
    }
    // The driver refuses a batch whole: one by one, only the bad copies fail.
    const failed: Array<[number, Error]> = [];
    for (let k = 0; k < n; k++) {
      try {
        d.memcpyAsync(this.dsts[k]!, this.srcs[k]!, this.sizes[k]!, b.stream);
      } catch (err) {
        failed.push([k, err as Error]);
      }
    }
    return failed;
  }

  private record(stream: StreamHandle, bytes: number, cb: Completion, inline: boolean): void {
    let ev: EventHandle;
    try {
      ev = this.freeEvents.pop() ?? this.driver.eventCreate({ disableTiming: true });
    } catch {
      // No event to wait with (the driver is out of resources): wait for the
      // stream itself, blocking but rare, so the work queued on it is really
      // done before `cb` lets anyone reuse its memory; or fail it with why.
      const finish = () => {
        let failure: Error | undefined;
        try {
          this.driver.streamSynchronize(stream);
        } catch (e) {
          failure = e as Error;
        }
        callReporting(cb, failure === undefined ? undefined : failure);
      };
      if (inline) finish();
      else queueMicrotask(finish);
      return;
    }
    this.inFlight++;
    let complete: boolean;
    try {
      this.driver.eventRecord(ev, stream);
      complete = inline && this.inFlight === 1 && bytes <= SPIN_MAX_BYTES && this.spinUs > 0 && this.spin(ev);
    } catch (err) {
      if (inline) return this.settle(ev, cb, err as Error);
      queueMicrotask(() => this.settle(ev, cb, err as Error));
      return;
    }
    if (complete) return this.settle(ev, cb);
    if (this.spinner?.pollsGpu) {
      this.polled.push({ ev, cb });
      this.spinner.watchGpu(this);
    } else {
      this.awaitNative(ev, cb);
    }
  }

  /** The event is done with (back to the pool), then `cb` learns the outcome. */
  private settle(ev: EventHandle, cb: Completion, err?: Error): void {
    this.inFlight--;
    if (this.closed) {
      try {
        this.driver.eventDestroy(ev);
      } catch {
        // the driver is closed: the event went with it
      }
    } else {
      this.freeEvents.push(ev);
    }
    try {
      cb(err);
    } catch (e) {
      reportLater(e); // wherever the completion came from (a spin, the spinner, a promise)
    }
  }

  /** Through the native poller (whenComplete below), then back to the pool. */
  private awaitNative(ev: EventHandle, cb: Completion): void {
    this.whenComplete(ev).then(
      () => this.settle(ev, cb),
      (err: Error) => this.settle(ev, cb, err),
    );
  }

  /** driver.whenComplete, counted on the spinner while it is awaited. */
  async whenComplete(ev: EventHandle): Promise<void> {
    const sp = this.spinner;
    if (!sp) return this.driver.whenComplete(ev);
    sp.gpuWaits++;
    try {
      await this.driver.whenComplete(ev);
    } finally {
      sp.gpuWaits--;
    }
  }

  /**
   * Spinner: settles the polled completions that are done, oldest first;
   * true if any. Only the oldest is queried each time (cuEventQuery costs
   * 0.4–1.6 µs): this endpoint's copies go in order on its stream, and a wait
   * on another stream is at worst reported when the ones before it are.
   */
  pollGpu(): boolean {
    const q = this.polled;
    let settled = false;
    while (q.length > 0) {
      const w = q[0]!;
      let err: Error | undefined;
      try {
        if (!this.driver.eventQuery(w.ev)) break;
      } catch (e) {
        err = e as Error;
      }
      q.shift();
      this.settle(w.ev, w.cb, err);
      settled = true;
    }
    return settled;
  }

  get gpuPending(): boolean {
    return this.polled.length > 0;
  }

  /** Spinner stops: the native poller takes what is still pending. */
  handOff(): void {
    for (const w of this.polled.splice(0)) this.awaitNative(w.ev, w.cb);
  }

  /** Polls `ev` for up to spinUs; true when it completed meanwhile. */
  private spin(ev: EventHandle): boolean {
    const until = performance.now() + this.spinUs / 1000;
    do {
      if (this.driver.eventQuery(ev)) return true;
    } while (performance.now() < until);
    return false;
  }

  /** Destroys the stream and idle events; events still awaited are destroyed when they settle. */
  close(): void {
    if (this.closed) return;
    this.flushNow(false);
    this.closed = true;
    this.handOff();
    for (const ev of this.freeEvents) {
      try {
        this.driver.eventDestroy(ev);
      } catch {
        // the driver is closed: the event went with it
      }
    }
    this.freeEvents.length = 0;
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

/** One event settled a batch: every completion learns the outcome, even if one of them throws. */
function settleAll(cbs: readonly Completion[], err: Error | undefined): void {
  for (const cb of cbs) callReporting(cb, err);
}

function callReporting(cb: Completion, err: Error | undefined): void {
  try {
    cb(err);
  } catch (e) {
    reportLater(e);
  }
}

/** A completion threw (a bug): reported as an uncaught error, without keeping other completions from running. */
function reportLater(e: unknown): void {
  queueMicrotask(() => {
    throw e;
  });
}
