/**
 * GpuEventQueue: the completion tracking of one endpoint's GPU work, a
 * source of the transport's progress engine (engine.ts). It owns a pool of
 * completion events, so the per-message path creates none; `record` puts an
 * event behind the work queued on a stream and calls back once it completed.
 *
 * Who notices the completion is the engine's policy, cheapest first:
 *   1. a small wait that is the only one in flight (a ping-pong, not a
 *      stream of messages) is polled right away (engine.spinNow) for up to
 *      `inlineSpinUs`: a small copy finishes sooner than the native
 *      thread's hand-off to the JS thread (measured on H200);
 *   2. otherwise the engine polls the queue between event-loop turns;
 *   3. when the engine stops polling it (nothing for its budget), the native
 *      completion thread (driver.whenComplete) takes what is left.
 *
 * Completion style: callbacks, not promises. The per-message path goes from
 * the GPU straight into the FIN: a promise would add an allocation and a
 * microtask turn per message between the event and the code that answers
 * it, and callers that want a promise (rare, off the fast path) wrap one.
 */
import type { CudaDriver, EventHandle, StreamHandle } from '../cuda/driver.js';
import type { ProgressEngine, ProgressSource } from '../progress/engine.js';

/** Called once a completion is known: no argument when it completed, the error when it failed. */
export type Completion = (err?: Error) => void;

/** Only waits this small are worth an inline spin: they finish within it, and a stream of them is latency-bound anyway. */
const SPIN_MAX_BYTES = 64 << 10;

interface PolledWait {
  ev: EventHandle;
  cb: Completion;
  /** Settled by settleCompleted while the native thread still waits on `ev` (it only gives the event back then). */
  early?: boolean;
}

/** A wait on a peer's event: its callback runs once, at the event's completion or when the queue closes. */
interface PeerWait {
  cb: Completion;
  done: boolean;
}

export class GpuEventQueue implements ProgressSource {
  hotUntil = 0;
  kicked = false;
  /** Waits the engine polls (in record order). */
  private readonly polled: PolledWait[] = [];
  private readonly freeEvents: EventHandle[] = [];
  /** Peer events with waits in flight (whenEvent), and whether their owner let go of them (retire). */
  private readonly peerWaits = new Map<EventHandle, { waits: number; retired: boolean }>();
  /** Waits on peer events whose callback has not run: close fails them at once. */
  private readonly peerCallbacks = new Set<PeerWait>();
  /** Waits handed to the native completion thread and not settled yet (settleCompleted queries them). */
  private readonly nativeWaits = new Set<PolledWait>();
  private closed = false;
  private closeReason: Error | undefined;
  /** Events recorded and not yet settled. */
  private inFlight = 0;

  constructor(
    private readonly driver: CudaDriver,
    private readonly engine: ProgressEngine,
    /** Policy step 1's budget (µs; 0: no inline spin). */
    private readonly inlineSpinUs = 0,
  ) {}

  /**
   * Records an event on `stream` behind the work queued so far and calls
   * `cb` once it completed; `bytes` is that work's size (a small lone wait
   * is spun on). `inline`: the caller lets `cb` run before this returns (a
   * microtask of its own); otherwise no callback runs before it returns.
   */
  record(stream: StreamHandle, bytes: number, cb: Completion, inline: boolean): void {
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
        callReporting(cb, failure);
      };
      if (inline) finish();
      else queueMicrotask(finish);
      return;
    }
    this.inFlight++;
    try {
      this.driver.eventRecord(ev, stream);
    } catch (err) {
      if (inline) return this.settle(ev, cb, err as Error);
      queueMicrotask(() => this.settle(ev, cb, err as Error));
      return;
    }
    this.polled.push({ ev, cb });
    if (inline && this.inFlight === 1 && bytes <= SPIN_MAX_BYTES && this.engine.spinNow(this, this.inlineSpinUs)) return;
    if (this.engine.polling) this.engine.kick(this);
    else this.watch(false);
  }

  /**
   * Calls `cb` once `ev`, an event this queue does not own (a peer's, opened
   * by IPC handle), completed. Through the native thread: the peer's stream
   * is not ours, so it is not polled in order with our own events. The wait
   * is this queue's: closing the queue (its endpoint closed, or lost the
   * peer, whose event may then never complete) calls `cb` with the close
   * reason at once, while the native thread's query of the event goes on
   * until it lets go; only then can a retired event be destroyed.
   */
  whenEvent(ev: EventHandle, cb: Completion): void {
    if (this.closed) return callReporting(cb, this.closeReason);
    const w = this.peerWaits.get(ev) ?? { waits: 0, retired: false };
    w.waits++;
    this.peerWaits.set(ev, w);
    const wait: PeerWait = { cb, done: false };
    this.peerCallbacks.add(wait);
    const settled = (err: Error | undefined): void => {
      if (--w.waits === 0) {
        this.peerWaits.delete(ev);
        // The completion thread is done with it: a retired event can go now
        // (not after the driver closed: the event went with its context).
        if (w.retired && (err as { code?: string } | undefined)?.code !== 'SMCUDA_CLOSED') this.destroy(ev);
      }
      if (wait.done) return; // failed by close already
      wait.done = true;
      this.peerCallbacks.delete(wait);
      callReporting(cb, err);
    };
    this.native(ev).then(
      () => settled(undefined),
      (err: Error) => settled(err),
    );
  }

  /**
   * The owner of `ev` (a peer's event, opened here) is done with it: it is
   * destroyed now if no wait on it is in flight, else once the last one has
   * settled. Never while the native completion thread may still query it
   * (a receive abandoned on close or peer loss stops waiting at once; the
   * event lives until the thread lets go).
   */
  retire(ev: EventHandle): void {
    const w = this.peerWaits.get(ev);
    if (w === undefined) this.destroy(ev);
    else w.retired = true;
  }

  /** Peer events still awaited (tests: nothing is destroyed under the completion thread). */
  get peerEventsAwaited(): number {
    return this.peerWaits.size;
  }

  private destroy(ev: EventHandle): void {
    try {
      this.driver.eventDestroy(ev);
    } catch {
      // the driver is closed: the event went with it
    }
  }

  // ------------------------------------------------------------ ProgressSource

  /**
   * Settles the polled waits that are done, oldest first; true if any. Only
   * the oldest is queried each time (each cuEventQuery is a driver call): this
   * endpoint's copies go in order on its stream, and a wait on another
   * stream is at worst reported when the ones before it are.
   */
  poll(): boolean {
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

  get pending(): boolean {
    return this.polled.length > 0;
  }

  /** Waits not settled: recorded ones (polled or with the native thread) and waits on peer events (the transport's keep-alive). */
  get outstanding(): number {
    return this.inFlight + this.peerCallbacks.size;
  }

  /**
   * Settles now every wait whose work has completed, polled or with the
   * native thread, querying each (not only the oldest), and again until
   * none is left or `ms` passed. For close: a copy that completed reports
   * it (its FIN) before the channel goes, although no poll or hand-off saw
   * it yet. A wait still running after `ms` is left to close.
   */
  settleCompleted(ms: number): void {
    const until = performance.now() + ms;
    for (;;) {
      let left = 0;
      for (let i = 0; i < this.polled.length; ) {
        const w = this.polled[i]!;
        const done = this.query(w.ev);
        if (done === false) {
          i++;
          left++;
          continue;
        }
        this.polled.splice(i, 1);
        this.settle(w.ev, w.cb, done === true ? undefined : done);
      }
      for (const w of [...this.nativeWaits]) {
        if (w.early === true) continue;
        const done = this.query(w.ev);
        if (done === false) {
          left++;
          continue;
        }
        // The native thread still queries the event: it goes back to the pool when that wait ends (settleNative).
        w.early = true;
        this.inFlight--;
        callReporting(w.cb, done === true ? undefined : done);
      }
      if (left === 0 || performance.now() >= until) return;
    }
  }

  /** true: completed; false: not yet; an error: the work failed. */
  private query(ev: EventHandle): boolean | Error {
    try {
      return this.driver.eventQuery(ev);
    } catch (err) {
      return err as Error;
    }
  }

  /** Engine: false: no longer polled, the native completion thread takes what is pending. */
  watch(on: boolean): void {
    if (on) return;
    for (const w of this.polled.splice(0)) this.awaitNative(w);
  }

  // ------------------------------------------------------------ internals

  /** The event is done with (back to the pool), then `cb` learns the outcome. */
  private settle(ev: EventHandle, cb: Completion, err?: Error): void {
    this.inFlight--;
    this.recycle(ev);
    callReporting(cb, err); // wherever the completion came from (a spin, the engine, the native thread)
  }

  /** Back to the pool, or destroyed once the queue is closed. */
  private recycle(ev: EventHandle): void {
    if (this.closed) {
      try {
        this.driver.eventDestroy(ev);
      } catch {
        // the driver is closed: the event went with it
      }
    } else {
      this.freeEvents.push(ev);
    }
  }

  /** Through the native completion thread, then back to the pool. */
  private awaitNative(w: PolledWait): void {
    this.nativeWaits.add(w);
    this.native(w.ev).then(
      () => this.settleNative(w),
      (err: Error) => this.settleNative(w, err),
    );
  }

  private settleNative(w: PolledWait, err?: Error): void {
    this.nativeWaits.delete(w);
    if (w.early === true) return this.recycle(w.ev); // its callback ran already (settleCompleted)
    this.settle(w.ev, w.cb, err);
  }

  /** driver.whenComplete, counted on the engine while it is awaited (its callbacks then make one pass each). */
  private async native(ev: EventHandle): Promise<void> {
    this.engine.beginLoopWait();
    try {
      await this.driver.whenComplete(ev);
    } finally {
      this.engine.endLoopWait();
    }
  }

  /**
   * Stops polling (the native thread takes pending waits) and destroys idle
   * events; awaited ones are destroyed when they settle. Waits on peer
   * events fail now with `reason` (see whenEvent).
   */
  close(reason: Error = new Error('the endpoint closed')): void {
    if (this.closed) return;
    this.closed = true;
    this.closeReason = reason;
    this.engine.forget(this);
    this.watch(false);
    for (const wait of [...this.peerCallbacks]) {
      wait.done = true;
      this.peerCallbacks.delete(wait);
      callReporting(wait.cb, reason);
    }
    for (const ev of this.freeEvents) {
      try {
        this.driver.eventDestroy(ev);
      } catch {
        // the driver is closed: the event went with it
      }
    }
    this.freeEvents.length = 0;
  }
}

export function callReporting(cb: Completion, err: Error | undefined): void {
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
