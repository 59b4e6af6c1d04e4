/**
 * The control spinner: one per Transport. After a channel sends or receives
 * a frame it stays "hot" for `spinUs`; while any channel is hot, the spinner
 * polls their shared-memory rings on the JS thread, so a reply is picked up
 * within a fraction of a µs instead of through a socket wake-up (a Unix
 * socket hop costs ~5 µs each way in Node; ANCHORS.md).
 *
 * It spins in setImmediate callbacks, never in microtasks: each callback ends
 * as soon as it delivered a frame (so the code waiting on it runs) or every
 * channel went cold, and the event loop runs its I/O and timers between two
 * callbacks. While GPU completions are awaited (`gpuWaits`), a callback makes
 * one pass only: they arrive through the event loop (the native poller's
 * hand-off; the simulator's copies), which a long spin would hold up.
 * A channel that goes cold asks for doorbells again (watch(false)) and looks
 * at its ring one last time, so nothing written meanwhile waits.
 *
 * It also polls the GPU completions endpoints wait for (GpuWork), so a busy
 * endpoint sees them without the native poller's hand-off.
 *
 * The cost is bounded: at most `spinUs` of one core after the last frame or
 * completion.
 */

/** What the spinner polls (ShmChannel). */
export interface Spinnable {
  /** Delivers what its ring holds; true if it delivered anything. */
  poll(): boolean;
  /** true: the spinner watches the ring (the peer need not ring); false: ring me. */
  watch(on: boolean): void;
  /** performance.now() until which the spinner keeps polling it. */
  hotUntil: number;
  /** Sent or received since the spinner last read the clock (it then moves hotUntil). */
  kicked: boolean;
}

/** What the spinner polls for GPU completions (GpuWork). */
export interface GpuPollable {
  /** Settles completed waits; true if any. */
  pollGpu(): boolean;
  readonly gpuPending: boolean;
  /** The spinner stops: wait for the rest through the native poller. */
  handOff(): void;
}

/**
 * Passes between two reads of the clock. The clock only decides when a
 * channel goes cold or GPU waits are handed off (after spinUs, hundreds of
 * µs), and reading it cost more than the rest of an idle pass: ~100 ns, and
 * 16 bytes of garbage each time (the boxed double), up to 30 MB/s from a
 * process that only waits (development machine).
 */
const PASSES_PER_CLOCK = 32;

export class Spinner {
  /** The channels it polls (arrays, not Sets: iterating a Set allocates). */
  private readonly hot: Spinnable[] = [];
  private readonly gpu: GpuPollable[] = [];
  /**
   * performance.now() of the last GPU completion seen (or the first wait);
   * -1 when one was seen on a pass without a clock read (set at the next).
   */
  private gpuActiveAt = 0;
  private scheduled = false;
  private stopped = false;
  private readonly spinMs: number;
  /** GPU completions awaited through the event loop right now (GpuWork counts them). */
  gpuWaits = 0;

  constructor(spinUs: number) {
    this.spinMs = spinUs / 1000;
  }

  /**
   * `ch` just sent or received a frame: keep polling it for a while. No
   * clock read here (this is every frame): the spinner moves `hotUntil` when
   * it next reads the clock.
   */
  kick(ch: Spinnable): void {
    if (this.spinMs <= 0 || this.stopped) return;
    ch.kicked = true;
    if (!this.hot.includes(ch)) {
      ch.hotUntil = performance.now() + this.spinMs;
      this.hot.push(ch);
      ch.watch(true);
    }
    this.schedule();
  }

  /** Whether GPU completions may be handed to it (it spins at all). */
  get pollsGpu(): boolean {
    return this.spinMs > 0 && !this.stopped;
  }

  /** `g` waits for a completion: poll it until done, or for spinUs without progress. */
  watchGpu(g: GpuPollable): void {
    if (!this.gpu.includes(g)) {
      if (this.gpu.length === 0) this.gpuActiveAt = performance.now();
      this.gpu.push(g);
    }
    this.schedule();
  }

  /** `ch` closed: stop polling it (without a last look). */
  forget(ch: Spinnable): void {
    const i = this.hot.indexOf(ch);
    if (i >= 0) this.hot.splice(i, 1);
  }

  /** No more spinning (the transport closed). */
  stop(): void {
    this.stopped = true;
    for (const ch of this.hot.splice(0)) ch.watch(false);
    for (const g of this.gpu.splice(0)) g.handOff();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.run);
  }

  private readonly run = (): void => {
    this.scheduled = false;
    const hot = this.hot;
    const gpu = this.gpu;
    for (let pass = 0; ; pass++) {
      let delivered = false;
      // Every PASSES_PER_CLOCK passes (and the first): who went cold, and whether to hand GPU waits off.
      const timed = pass % PASSES_PER_CLOCK === 0;
      const now = timed ? performance.now() : 0;
      for (let i = 0; i < hot.length; i++) {
        const ch = hot[i]!;
        if (ch.poll()) {
          delivered = true;
        } else if (timed) {
          if (ch.kicked) {
            ch.kicked = false;
            ch.hotUntil = now + this.spinMs;
          } else if (now > ch.hotUntil && hot[i] === ch) {
            hot.splice(i--, 1);
            ch.watch(false); // may deliver (a frame that raced the bell): that kicks it again
          }
        }
      }
      if (gpu.length > 0) {
        let progressed = false;
        for (let i = 0; i < gpu.length; i++) {
          const g = gpu[i]!;
          if (g.pollGpu()) progressed = true;
          if (!g.gpuPending && gpu[i] === g) gpu.splice(i--, 1);
        }
        if (progressed) {
          delivered = true;
          this.gpuActiveAt = timed ? now : -1;
        } else if (timed) {
          if (this.gpuActiveAt < 0) this.gpuActiveAt = now;
          else if (now - this.gpuActiveAt > this.spinMs && hot.length === 0) {
            // Nothing for a while (a long copy, or work behind another process's event): the poller takes over.
            for (const g of gpu.splice(0)) g.handOff();
          }
        }
      }
      if (delivered || (hot.length === 0 && gpu.length === 0) || this.gpuWaits > 0) break;
    }
    if (hot.length > 0 || gpu.length > 0) this.schedule();
  };
}
