/**
 * The GPU resources one endpoint uses for its own copies: a stream (created on
 * first use) and a pool of completion events, so the per-message path creates
 * nothing. `copyDone(stream)` records a pooled event and resolves when the GPU
 * reaches it.
 */
import type { CudaDriver, EventHandle, StreamHandle } from './cuda/driver.js';

export class GpuWork {
  private stream_: StreamHandle | undefined;
  private readonly freeEvents: EventHandle[] = [];
  private readonly allEvents: EventHandle[] = [];
  private closed = false;

  constructor(private readonly driver: CudaDriver) {}

  /** This endpoint's own non-blocking stream. */
  get stream(): StreamHandle {
    if (this.stream_ === undefined) this.stream_ = this.driver.streamCreate();
    return this.stream_;
  }

  /** Resolves once everything queued so far on `stream` has completed. */
  async done(stream: StreamHandle): Promise<void> {
    const ev = this.freeEvents.pop() ?? this.newEvent();
    try {
      this.driver.eventRecord(ev, stream);
      await this.driver.whenComplete(ev);
    } finally {
      if (this.closed) this.driver.eventDestroy(ev);
      else this.freeEvents.push(ev);
    }
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
