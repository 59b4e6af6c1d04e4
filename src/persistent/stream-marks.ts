/**
 * Points marked on streams, to learn when the GPU has passed them: an eager
 * start of a persistent transfer marks its stream so that deregistration and
 * close know when its work is done. The events are pooled — one is made only
 * when none is idle, and goes back to the pool when its point completes —
 * so a start costs no cuEventCreate / cuEventDestroy. An event is destroyed
 * only once no wait queries it: idle ones at close, busy ones as they complete.
 */
import type { CudaDriver, EventHandle, StreamHandle } from '../cuda/driver.js';

export class StreamMarks {
  private readonly idle: EventHandle[] = [];
  private closed = false;

  constructor(private readonly driver: CudaDriver) {}

  /**
   * Records a point on `stream` now; resolves once the GPU passed it (an
   * error on the stream resolves it too: the work is over either way).
   */
  mark(stream: StreamHandle): Promise<void> {
    const d = this.driver;
    const ev = this.idle.pop() ?? d.eventCreate({ disableTiming: true });
    try {
      d.eventRecord(ev, stream);
    } catch (err) {
      this.giveBack(ev);
      throw err;
    }
    return d
      .whenComplete(ev)
      .catch(() => undefined)
      .finally(() => this.giveBack(ev));
  }

  /** No more marks: idle events go now, busy ones once their point completes. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const ev of this.idle.splice(0)) this.destroy(ev);
  }

  private giveBack(ev: EventHandle): void {
    if (this.closed) this.destroy(ev);
    else this.idle.push(ev);
  }

  private destroy(ev: EventHandle): void {
    try {
      this.driver.eventDestroy(ev);
    } catch {
      // the driver was closed first (it destroyed everything)
    }
  }
}
