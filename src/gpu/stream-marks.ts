/**
 * Where a communicator's calls are on their streams: each call ends with a
 * mark (an event recorded on its stream) whose promise resolves once the
 * stream reached it. The newest mark orders a call on another stream after
 * the previous call (cuStreamWaitEvent), and the marks not reached yet are
 * what closing waits for (the caller's streams are never synchronised: they
 * may be destroyed by then).
 *
 * Only the newest mark of a stream is polled (whenComplete), once the calls
 * queued back to back in this turn of the event loop are in: the marks
 * before it on the same stream are reached when it is. A poll per call made
 * the completion poller compete with the enqueuing for the driver.
 *
 * For the same reason the marks of a stream that are not polled yet share
 * one event, recorded again after each call (a record moves the event; a
 * cuStreamWaitEvent waits for the record it sees): calls queued back to
 * back in a turn cost one eventRecord each and one event between them, not
 * an event each (1000 calls in flight made 1000 cuEventCreate, each a
 * driver call of its own). A mark is thus reached once the stream has run its call
 * and the communicator's calls queued after it in the same turn: never
 * before its own work, at most one turn's calls after.
 */
import type { CudaDriver, EventHandle, StreamHandle } from '../cuda/driver.js';
import { debug } from '../debug.js';

/** Told once a mark is reached (or failed with its stream's error). */
export interface MarkWaiter {
  reached(err?: Error): void;
}

interface Mark {
  stream: StreamHandle;
  event: EventHandle;
  done: boolean;
  waiter: MarkWaiter;
}

/** A waiter that settles a promise (mark()). */
class PromiseWaiter implements MarkWaiter {
  resolve!: () => void;
  reject!: (err: Error) => void;
  readonly promise = new Promise<void>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });
  constructor() {
    // Handled here too: a caller that stopped waiting (its call failed first) must not leave an unhandled rejection.
    this.promise.catch(() => undefined);
  }
  reached(err?: Error): void {
    if (err) this.reject(err);
    else this.resolve();
  }
}

export class StreamMarks {
  private last: Mark | undefined;
  /** Marks recorded and not polled yet, by stream. */
  private readonly unpolled = new Map<StreamHandle, Mark[]>();
  private pollSoon: NodeJS.Immediate | undefined;
  /** Events of reached marks, for reuse. */
  private readonly events: EventHandle[] = [];
  /** Marks not reached yet. */
  private pending = 0;
  /** Told when `pending` drops to 0 (reached()). */
  private drained: Array<() => void> = [];

  private destroyed = false;

  constructor(
    private readonly driver: CudaDriver,
    /** Told once destroyed (the GPU runtime that made it forgets it). */
    private readonly onDestroy?: () => void,
  ) {}

  /** Calls whose last mark is not reached yet. */
  get inFlight(): number {
    return this.pending;
  }

  /** Makes `stream` wait for the newest mark where that is on another stream and not reached yet. */
  orderAfterLast(stream: StreamHandle): void {
    const last = this.last;
    if (last && last.stream !== stream && !last.done) this.driver.streamWaitEvent(stream, last.event);
  }

  /** Records a mark on `stream` now; resolves once the stream reached it (rejects with the stream's error). */
  mark(stream: StreamHandle): Promise<void> {
    const w = new PromiseWaiter();
    this.markWith(stream, w);
    return w.promise;
  }

  /**
   * Records a mark on `stream` now and tells `waiter` once the stream reached
   * it: mark() without a promise, a call's own record being its waiter
   * (part of the PendingCall change in communicator.ts, measured there as a
   * whole: the promise, its two reactions and a set of pending promises
   * were per-call garbage).
   */
  markWith(stream: StreamHandle, waiter: MarkWaiter): void {
    const marks = this.unpolled.get(stream);
    const event = marks !== undefined ? marks[0]!.event : (this.events.pop() ?? this.driver.eventCreate({ disableTiming: true }));
    this.driver.eventRecord(event, stream);
    const mark: Mark = { stream, event, done: false, waiter };
    this.last = mark;
    this.pending++;
    if (marks !== undefined) marks.push(mark);
    else this.unpolled.set(stream, [mark]);
    this.pollSoon ??= setImmediate(() => this.poll());
  }

  /** Resolves true once every mark recorded so far is reached (or failed), false after `ms`. */
  async reached(ms: number): Promise<boolean> {
    if (this.pending === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        new Promise<true>((resolve) => this.drained.push(() => resolve(true))),
        new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Destroys the events of reached marks now, and of those still pending once they are reached (never under their wait). Idempotent. */
  destroy(): void {
    if (!this.destroyed) {
      this.destroyed = true;
      this.onDestroy?.();
    }
    for (const e of this.events.splice(0)) this.destroyEvent(e);
  }

  private destroyEvent(e: EventHandle): void {
    try {
      this.driver.eventDestroy(e);
    } catch (err) {
      debug('stream marks: %s', (err as Error).message); // the driver closed first: the event went with it
    }
  }

  private poll(): void {
    this.pollSoon = undefined;
    for (const [stream, marks] of this.unpolled) {
      this.unpolled.delete(stream);
      const finish = (err?: Error) => {
        // The one event of these marks: pooled, or destroyed once this was (its wait is over now).
        if (this.destroyed) this.destroyEvent(marks[0]!.event);
        else this.events.push(marks[0]!.event);
        for (const m of marks) {
          m.done = true;
          if (this.last === m) this.last = undefined;
          this.pending--;
          try {
            m.waiter.reached(err);
          } catch (e) {
            // A waiter's failure is its own; the other marks are reached all the same.
            debug('stream marks: a waiter failed: %s', (e as Error).message);
          }
        }
        if (this.pending === 0 && this.drained.length > 0) for (const d of this.drained.splice(0)) d();
      };
      let polled: Promise<void>;
      try {
        polled = this.driver.whenComplete(marks.at(-1)!.event);
      } catch (err) {
        polled = Promise.reject(err as Error);
      }
      polled.then(
        () => finish(),
        (err: Error) => finish(err),
      );
    }
  }
}
