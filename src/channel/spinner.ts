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
}

/** What the spinner polls for GPU completions (GpuWork). */
export interface GpuPollable {
  /** Settles completed waits; true if any. */
  pollGpu(): boolean;
  readonly gpuPending: boolean;
  /** The spinner stops: wait for the rest through the native poller. */
  handOff(): void;
}

export class Spinner {
  private readonly hot = new Set<Spinnable>();
  private readonly gpu = new Set<GpuPollable>();
  /** performance.now() of the last GPU completion seen (or the first wait). */
  private gpuActiveAt = 0;
  private scheduled = false;
  private stopped = false;
  private readonly spinMs: number;
  /** GPU completions awaited through the event loop right now (GpuWork counts them). */
  gpuWaits = 0;

  constructor(spinUs: number) {
    this.spinMs = spinUs / 1000;
  }

  /** `ch` just sent or received a frame: keep polling it for a while. */
  kick(ch: Spinnable): void {
    if (this.spinMs <= 0 || this.stopped) return;
    ch.hotUntil = performance.now() + this.spinMs;
    if (!this.hot.has(ch)) {
      this.hot.add(ch);
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
    if (!this.gpu.has(g)) {
      if (this.gpu.size === 0) this.gpuActiveAt = performance.now();
      this.gpu.add(g);
    }
    this.schedule();
  }

  /** `ch` closed: stop polling it (without a last look). */
  forget(ch: Spinnable): void {
    this.hot.delete(ch);
  }

  /** No more spinning (the transport closed). */
  stop(): void {
    this.stopped = true;
    for (const ch of this.hot) ch.watch(false);
    this.hot.clear();
    for (const g of this.gpu) g.handOff();
    this.gpu.clear();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.run);
  }

  private readonly run = (): void => {
    this.scheduled = false;
    for (;;) {
      let delivered = false;
      const now = performance.now();
      for (const ch of this.hot) {
        if (ch.poll()) delivered = true;
        else if (now > ch.hotUntil) {
          this.hot.delete(ch);
          ch.watch(false); // may deliver (a frame that raced the bell): that kicks it again
        }
      }
      if (this.gpu.size > 0) {
        let progressed = false;
        for (const g of this.gpu) {
          if (g.pollGpu()) progressed = true;
          if (!g.gpuPending) this.gpu.delete(g);
        }
        if (progressed) {
          delivered = true;
          this.gpuActiveAt = now;
        } else if (now - this.gpuActiveAt > this.spinMs && this.hot.size === 0) {
          // Nothing for a while (a long copy, or work behind another process's event): the poller takes over.
          for (const g of this.gpu) g.handOff();
          this.gpu.clear();
        }
      }
      if (delivered || (this.hot.size === 0 && this.gpu.size === 0) || this.gpuWaits > 0) break;
    }
    if (this.hot.size > 0 || this.gpu.size > 0) this.schedule();
  };
}
