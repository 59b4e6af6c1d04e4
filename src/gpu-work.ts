/**
 * The GPU resources one endpoint uses for its own copies: a stream (created on
 * first use) and a pool of completion events, so the per-message path creates
 * nothing. `whenDone(stream, bytes, cb)` records a pooled event and calls
 * back when the GPU reaches it (`done` is the same as a promise).
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

/** Called once a copy's completion is known: no argument when it completed, the error when it failed. */
export type Completion = (err?: Error) => void;

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
  /** whenDone calls of the current synchronous run, waiting for their shared event. */
  private batch: { stream: StreamHandle; bytes: number; cbs: Completion[] } | undefined;

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
   * Calls `cb` once everything queued so far on `stream` has completed.
   * The per-message path uses this, not `done`: no promise between the GPU
   * and the FIN that answers it.
   *
   * Small calls made in one synchronous run (the copies for all the frames
   * one look at the control ring found) share one event, recorded after the
   * last of them in a microtask: one cuEventRecord and one cuEventQuery
   * (together 2–3 µs on H200) per burst instead of per message. A batch
   * holds at most BATCH_MAX_BYTES, and a larger copy gets an event of its
   * own at once: the first copy's FIN waits for the last one's, which only
   * pays while copies take about as long as the per-message work (on 2×H200,
   * batching 256 MiB messages cost 8 points of bandwidth, and staging chunks
   * half of it).
   */
  whenDone(stream: StreamHandle, bytes: number, cb: Completion): void {
    const b = this.batch;
    if (bytes > BATCH_MAX_BYTES) {
      // A large copy (a staging chunk, a big message) gets its own event: its
      // FIN must not wait for the copies queued after it.
      if (b !== undefined) this.flushNow(false);
      this.record(stream, bytes, cb, false);
      return;
    }
    if (b !== undefined && b.stream === stream && b.bytes + bytes <= BATCH_MAX_BYTES) {
      b.bytes += bytes;
      b.cbs.push(cb);
      return;
    }
    if (b !== undefined) this.flushNow(false);
    this.batch = { stream, bytes, cbs: [cb] };
    queueMicrotask(this.flush);
  }

  /** The microtask after a run of whenDone calls. */
  private readonly flush = (): void => this.flushNow(true);

  /**
   * Records the event for the open batch and starts waiting for it.
   * `inline`: from the microtask, where callbacks may run at once; otherwise
   * (inside whenDone or close) no callback runs before the caller returns.
   */
  private flushNow(inline: boolean): void {
    const b = this.batch;
    if (b === undefined) return;
    this.batch = undefined;
    const cbs = b.cbs;
    this.record(b.stream, b.bytes, cbs.length === 1 ? cbs[0]! : (err) => settleAll(cbs, err), inline);
  }

  private record(stream: StreamHandle, bytes: number, cb: Completion, inline: boolean): void {
    const ev = this.freeEvents.pop() ?? this.driver.eventCreate({ disableTiming: true });
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
    for (const ev of this.freeEvents) this.driver.eventDestroy(ev);
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
  for (const cb of cbs) {
    try {
      cb(err);
    } catch (e) {
      reportLater(e);
    }
  }
}

/** A completion threw (a bug): reported as an uncaught error, without keeping other completions from running. */
function reportLater(e: unknown): void {
  queueMicrotask(() => {
    throw e;
  });
}
