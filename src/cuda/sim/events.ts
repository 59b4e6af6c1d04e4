/**
 * Simulated CUDA events.
 *
 * An event is two counters: `recorded` (bumped when eventRecord queues a
 * record) and `completed` (raised when the stream reaches that record). The
 * event is complete when completed >= the generation one waits for. For an
 * interprocess event both counters live in a small shm segment, so another
 * process that opened the event's IPC handle sees records and completions
 * as they happen (it polls; see streams.ts).
 */
import type { EventHandle, SharedSegment } from '../driver.js';
import type { SimStream } from './streams.js';

/** Bytes of the shm segment behind an interprocess event: [recorded, completed] as int32. */
import { cudaError } from './result-codes.js';

export const EVENT_STATE_BYTES = 8;

export class SimEvent {
  /** The stream that holds the latest record (for synchronous drains). */
  recordStream: SimStream | undefined;
  /** performance.now() when the latest record completed (timing events only). */
  stampMs: number | undefined;
  /** An error of the work that preceded the latest record. */
  error: Error | undefined;
  /** Interprocess events: the 64-byte handle naming the segment. */
  ipcHandle: Uint8Array | undefined;
  /** whenComplete waits not settled yet: the completion thread still queries the event. */
  waiters = 0;
  private readonly state: Int32Array;

  constructor(
    readonly handle: EventHandle,
    readonly timing: boolean,
    readonly interprocess: boolean,
    /** The shm segment of an interprocess event (created here, or opened from another process). */
    readonly segment: SharedSegment | undefined,
    /** True when opened from another process's IPC handle. */
    readonly opened: boolean,
  ) {
    this.state = segment ? new Int32Array(segment.bytes.buffer, segment.bytes.byteOffset, 2) : new Int32Array(2);
  }

  get recorded(): number {
    return Atomics.load(this.state, 0);
  }

  get completed(): number {
    return Atomics.load(this.state, 1);
  }

  /** True when completion depends on work in another process. */
  get remote(): boolean {
    return this.opened;
  }

  /** Starts a record; returns the generation the record will complete. */
  beginRecord(): number {
    return Atomics.add(this.state, 0, 1) + 1;
  }

  /** The record of generation `gen` ran. Records on different streams may finish out of order: keep the highest. */
  complete(gen: number): void {
    for (;;) {
      const cur = Atomics.load(this.state, 1);
      if (cur >= gen || Atomics.compareExchange(this.state, 1, cur, gen) === cur) return;
    }
  }

  /** Set by eventDestroy: its shared state is unmapped. */
  destroyed = false;

  isDone(gen: number): boolean {
    if (this.destroyed) throw cudaError('cuEventQuery', 'CUDA_ERROR_INVALID_HANDLE', 'the event was destroyed while being waited for');
    return this.completed >= gen;
  }
}
