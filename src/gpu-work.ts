/**
 * The GPU resources one endpoint uses for its own copies: a stream (created on
 * first use) and a pool of completion events, so the per-message path creates
 * nothing. `done(stream)` records a pooled event and resolves when the GPU
 * reaches it.
 *
 * Latency: when a small copy is the only one in flight (a ping-pong, not a
 * stream of messages), `done` first polls the event on the JS thread for up
 * to `spinUs` — a small copy finishes in a few µs, while the native poller's
 * hand-off to the JS thread costs ~8 µs more (measured on H200). With several
 * copies in flight it never spins: the poller batches their completions while
 * the JS thread keeps launching copies and the GPU stays busy.
 */
import type { CudaDriver, EventHandle, StreamHandle } from './cuda/driver.js';

/** Only copies this small are worth a spin: they finish within it, and a stream of them is latency-bound anyway. */
const SPIN_MAX_BYTES = 64 << 10;

export class GpuWork {
  private stream_: StreamHandle | undefined;
  private readonly freeEvents: EventHandle[] = [];
  private readonly allEvents: EventHandle[] = [];
  private closed = false;
  private inFlight = 0;

  constructor(
    private readonly driver: CudaDriver,
    private readonly spinUs = 0,
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
      if (!(lone && this.spin(ev))) await this.driver.whenComplete(ev);
    } finally {
      this.inFlight--;
      if (this.closed) this.driver.eventDestroy(ev);
      else this.freeEvents.push(ev);
    }
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
