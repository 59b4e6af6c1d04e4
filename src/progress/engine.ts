/**
 * The progress engine: one per Transport, on the model of UCX's worker
 * progress (one loop polls every registered source). What it drives:
 *   - control rings (ShmChannel: frames a peer wrote to shared memory);
 *   - GPU event queues (GpuEventQueue: completions of this endpoint's copies).
 *
 * One policy for both, cheapest first:
 *   1. inline: a caller that expects its work to finish within µs (a lone
 *      small copy) may poll one source right away, blocking, for a short
 *      budget (`spinNow`): the native thread's hand-off to the JS thread
 *      costs more than a small copy takes (measured on H200);
 *   2. polled: a source with activity (`kick`: a frame sent or received, a
 *      completion awaited) stays in the engine's active set for `spinUs`
 *      after its last activity, and the engine polls the whole set on the JS
 *      thread between event-loop turns, so a peer's reply is seen at once
 *      instead of through a socket wake-up (a Unix socket hop costs more:
 *      docs/benchmarks.md, 'socket ping-pong');
 *   3. asleep: a source cold for `spinUs` is armed (`watch(false)`): a ring
 *      asks for doorbells again, a GPU queue hands its events to the native
 *      completion thread (native/completion.cc), and the engine stops
 *      polling it until the next activity.
 *
 * Scheduling: the engine polls in setImmediate callbacks, never in
 * microtasks. A callback ends as soon as a pass made progress (so the code
 * waiting on it runs), when nothing is active, and after SLICE_MS without
 * progress, and the event loop runs its I/O, timers and other transports'
 * engines in between. While completions are awaited through the event loop
 * (`beginLoopWait`: the native thread's hand-off, the simulator's copies) a
 * callback makes one pass only, since a long spin would hold them up.
 *
 * Two transports in one process: each has its own engine, each polling in
 * its own setImmediate callbacks. The slice bounds how long one engine holds
 * the thread while it waits (before, a waiting engine held it for its whole
 * spin budget, 250 µs, and the other's rings went unread meanwhile): each
 * engine's frames are seen at most a slice late, and neither starves.
 *
 * The cost is bounded: at most `spinUs` of one core after the last activity.
 */

/** What the engine polls: a control ring, a GPU event queue. */
export interface ProgressSource {
  /** Does what is ready (delivers frames, settles completions); true if anything was done. */
  poll(): boolean;
  /**
   * true: the engine polls it from now on (a ring: the peer need not ring).
   * false: it is no longer polled: arm the wake-up (a ring: ask for
   * doorbells and look once more; a GPU queue: hand its events to the
   * native completion thread).
   */
  watch(on: boolean): void;
  /**
   * Only a work queue (a GPU event queue) has it: whether work is
   * outstanding that only polling or the armed wake-up completes. A queue
   * with none is dropped at once (nothing to poll until the next kick); one
   * with some is kept past its own budget while another source is active: a
   * long copy keeps being polled while frames flow (its completion usually
   * paces them). A ring has no `pending`: it stays polled for its budget.
   */
  readonly pending?: boolean;
  /** The engine's bookkeeping: performance.now() until which it keeps polling the source. */
  hotUntil: number;
  /** The engine's bookkeeping: active since it last read the clock (it then moves hotUntil). */
  kicked: boolean;
}

/**
 * Passes between two reads of the clock. The clock only decides when a
 * source goes cold (after spinUs, hundreds of µs) and when a slice ends,
 * and reading it cost more than the rest of an idle pass, and 16 bytes
 * of garbage each time (the boxed double): tens of MB/s from a process that
 * only waits (development machine).
 */
const PASSES_PER_CLOCK = 32;

/**
 * Longest run of passes without progress in one callback before the engine
 * yields to the event loop (ms). A loop turn costs a small part of that; at 20 µs a
 * waiting engine yields about once per 8 B round trip, and another
 * transport's engine waits at most this long for the thread.
 */
export const SLICE_MS = 0.02;

export class ProgressEngine {
  /** The sources polled now (an array, not a Set: iterating a Set allocates). */
  private readonly active: ProgressSource[] = [];
  private scheduled = false;
  private stopped = false;
  private readonly spinMs: number;
  /** Completions awaited through the event loop right now. */
  private loopWaits = 0;

  /** `spinUs`: how long a source stays polled after its last activity (0: never polled, wake-ups only). */
  constructor(spinUs: number) {
    this.spinMs = spinUs / 1000;
  }

  /** Whether sources may rely on being polled (it spins at all and is not stopped). */
  get polling(): boolean {
    return this.spinMs > 0 && !this.stopped;
  }

  /** Completions awaited through the event loop (for tests and stats). */
  get loopWaiting(): number {
    return this.loopWaits;
  }

  /**
   * Registers activity on `src` (a frame sent or received, a completion
   * awaited): it is polled from now until `spinUs` after its last activity.
   * No clock read once it is active (this is every frame): the engine moves
   * `hotUntil` when it next reads the clock.
   */
  kick(src: ProgressSource): void {
    if (this.spinMs <= 0 || this.stopped) return;
    src.kicked = true;
    if (!this.active.includes(src)) {
      src.hotUntil = performance.now() + this.spinMs;
      this.active.push(src);
      src.watch(true);
    }
    this.schedule();
  }

  /** `src` closed: unregistered, without a last watch(false). */
  forget(src: ProgressSource): void {
    const i = this.active.indexOf(src);
    if (i >= 0) this.active.splice(i, 1);
  }

  /**
   * Policy step 1: polls `src` right here, blocking, until it makes progress
   * or `us` passed; true when it made progress. Works whether or not the
   * engine polls (spinUs 0 disables only step 2).
   */
  spinNow(src: ProgressSource, us: number): boolean {
    if (us <= 0) return false;
    const until = performance.now() + us / 1000;
    do {
      if (src.poll()) return true;
    } while (performance.now() < until);
    return false;
  }

  /** A completion will arrive through the event loop: callbacks make one pass only until endLoopWait. */
  beginLoopWait(): void {
    this.loopWaits++;
  }

  endLoopWait(): void {
    this.loopWaits--;
  }

  /** No more polling (the transport closed): every active source is armed. */
  stop(): void {
    this.stopped = true;
    for (const src of this.active.splice(0)) src.watch(false);
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.run);
  }

  /** Whether a source other than `except` was active within its budget at `now`. */
  private othersHot(except: ProgressSource, now: number): boolean {
    for (const s of this.active) if (s !== except && (s.kicked || now <= s.hotUntil)) return true;
    return false;
  }

  private readonly run = (): void => {
    this.scheduled = false;
    const active = this.active;
    let sliceEnd = 0;
    for (let pass = 0; ; pass++) {
      let progressed = false;
      // Every PASSES_PER_CLOCK passes (and the first): who went cold, and whether the slice is over.
      const timed = pass % PASSES_PER_CLOCK === 0;
      const now = timed ? performance.now() : 0;
      if (pass === 0) sliceEnd = now + SLICE_MS;
      for (let i = 0; i < active.length; i++) {
        const src = active[i]!;
        if (src.poll()) {
          progressed = true;
          src.kicked = true;
          if (src.pending === false && active[i] === src) active.splice(i--, 1); // drained: nothing to poll
        } else if (src.pending === false) {
          if (active[i] === src) active.splice(i--, 1);
        } else if (timed) {
          if (src.kicked) {
            src.kicked = false;
            src.hotUntil = now + this.spinMs;
          } else if (now > src.hotUntil && active[i] === src && !(src.pending === true && this.othersHot(src, now))) {
            active.splice(i--, 1);
            src.watch(false); // may deliver (a frame that raced the bell): that kicks it again
          }
        }
      }
      if (progressed || active.length === 0 || this.loopWaits > 0 || (timed && now >= sliceEnd)) break;
    }
    if (active.length > 0) this.schedule();
  };
}
