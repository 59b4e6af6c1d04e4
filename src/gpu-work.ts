/**
 * The GPU resources one endpoint uses for its own copies: a stream (created on
 * first use) and a pool of completion events, so the per-message path creates
 * nothing. `done(stream)` records a pooled event and resolves when the GPU
 * reaches it.
 *
 * Latency: when a small copy is the only one in flight (a ping-pong, not a
 * stream of messages), `done` first polls the event on the JS thread for up
 * to `spinUs`, blocking — a small copy finishes in a few µs, while the native
 * poller's hand-off to the JS thread costs ~8 µs more (measured on H200).
 */
import type { GpuPollable, Spinner } from './channel/spinner.js';
import type { CudaDriver, EventHandle, StreamHandle } from './cuda/driver.js';

/** Only copies this small are worth a spin: they finish within it, and a stream of them is latency-bound anyway. */
const SPIN_MAX_BYTES = 64 << 10;

interface PolledWait {
  ev: EventHandle;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class GpuWork implements GpuPollable {
  private stream_: StreamHandle | undefined;
  /** Completions the spinner polls (in record order). */
  private readonly polled: PolledWait[] = [];
  private readonly freeEvents: EventHandle[] = [];
  private readonly allEvents: EventHandle[] = [];
  private closed = false;
  private inFlight = 0;

  constructor(
    private readonly driver: CudaDriver,
    private readonly spinUs = 0,
    /**
     * Polls completions on the JS thread while it spins, and is told of those
     * awaited through the event loop, so it does not hold the loop meanwhile.
     */
    private readonly spinner?: Spinner,
    /** Whether eventQuery sees GPU progress without the event loop running (not on the simulator). */
    private readonly pollable = true,
  ) {}

  /** This endpoint's own non-blocking stream. */
  get stream(): StreamHandle {
    if (this.stream_ === undefined) this.stream_ = this.driver.streamCreate();
    return this.stream_;
  }

  /** Resolves once everything queued so far on `stream` has completed; `bytes` is the copy just queued. */
  async done(stream: StreamHandle, bytes = Infinity): Promise<void> {
    const ev = this.freeEvents.pop() ?? this.newEvent();
    this.inFlight++;
    try {
      this.driver.eventRecord(ev, stream);
      const lone = this.inFlight === 1 && bytes <= SPIN_MAX_BYTES && this.spinUs > 0;
      if (lone && this.spin(ev)) return;
      if (this.pollable && this.spinner?.pollsGpu) await this.polledWait(ev);
      else await this.whenComplete(ev);
    } finally {
      this.inFlight--;
      if (this.closed) this.driver.eventDestroy(ev);
      else this.freeEvents.push(ev);
    }
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

  private polledWait(ev: EventHandle): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.polled.push({ ev, resolve, reject });
      this.spinner!.watchGpu(this);
    });
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
      try {
        if (!this.driver.eventQuery(w.ev)) break;
      } catch (err) {
        q.shift();
        w.reject(err as Error);
        settled = true;
        continue;
      }
      q.shift();
      w.resolve();
      settled = true;
    }
    return settled;
  }

  get gpuPending(): boolean {
    return this.polled.length > 0;
  }

  /** Spinner stops: the native poller takes what is still pending. */
  handOff(): void {
    for (const w of this.polled.splice(0)) this.whenComplete(w.ev).then(w.resolve, w.reject);
  }

  /** Polls `ev` for up to spinUs; true when it completed meanwhile. */
  private spin(ev: EventHandle): boolean {
    const until = performance.now() + this.spinUs / 1000;
    do {
      if (this.driver.eventQuery(ev)) return true;
    } while (performance.now() < until);
    return false;
  }

  private newEvent(): EventHandle {
    const ev = this.driver.eventCreate({ disableTiming: true });
    this.allEvents.push(ev);
    return ev;
  }

  /** Destroys the stream and idle events; events still awaited are destroyed when they settle. */
  close(): void {
    if (this.closed) return;
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
