/**
 * The transport's watchdog over persistent transfers: one per transport, not
 * per message. Every tick it reads each watched flag block (one small
 * device-to-host copy on its own stream), and for each transfer in it:
 *
 *  - a start in progress (ARRIVE = 1) that has not finished since the last
 *    tick (STAMP still 1) counts one more stuck tick; a start stuck for
 *    `timeoutMs` fails the transfer (on both sides: the endpoint sends
 *    PT_FAIL) and its waits are released: POISON into the word this side
 *    waits on and, through the peer's mapping, the word the peer waits on;
 *  - a failed transfer's own wait is poisoned again (each wait resets it),
 *    so replays of a graph that holds it never hang;
 *  - STAMP is set to 1 (a start that finishes writes 0).
 *
 * Everything it writes goes through stream memory operations on its own
 * stream, so it never blocks the event loop or a user's stream, and works
 * the same under the simulator and on a GPU. The protocol is in flags.ts.
 *
 * Its stream and the events that mark points on it are the transport's GPU
 * runtime's (src/gpu/): close() only stops the ticks; a tick or flush still
 * waiting keeps its event until its point completed, and the stream goes
 * when the runtime closes, once no point on it is pending.
 */
import type { CudaDriver, DevicePtr, StreamHandle, StreamMemOp } from '../cuda/driver.js';
import { debug } from '../debug.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';
import { ARRIVE, POISON, SLOT_BYTES, STAMP } from './flags.js';

/** One transfer as the watchdog sees it. */
export interface WatchedTransfer {
  readonly slot: number;
  /** Failed (stuck, closed, the peer failed it): keep its own wait poisoned. */
  readonly failed: boolean;
  /** The word this side's start waits on, in its own block. */
  readonly ownAwaited: DevicePtr;
  /** The word the peer's start waits on, through the peer's mapping (undefined once unmapped). */
  peerAwaited(): DevicePtr | undefined;
  /** A write into peerAwaited() was queued on `stream`: the mapping must outlive it (a use of its hold). */
  peerWritten?(stream: StreamHandle): void;
  /** Ticks in a row in which its start was in progress and unfinished. */
  stuckTicks: number;
  /** The watchdog found it stuck: fail it (it poisons the waits itself). */
  stuck(ms: number): void;
  /** This tick's reading: a start in progress (ARRIVE = 1) or not. */
  observed?(inProgress: boolean): void;
  /** Eager starts its stream has not passed yet: once the transfer failed, each of them waits once, so each needs a POISON of its own. */
  readonly releasing?: boolean;
}

export interface WatchedBlock {
  readonly ptr: DevicePtr;
  readonly slots: number;
  transfers(): Iterable<WatchedTransfer>;
  /** The watchdog queued a read or write of the block on `stream`: it must outlive that work (a use of its hold). */
  touched?(stream: StreamHandle): void;
}

export interface WatchdogOptions {
  /** A start that has not finished within this time fails its transfer (ms). */
  timeoutMs: number;
  /** Tick period (ms); default timeoutMs / 8, between 1 and 250. */
  tickMs?: number;
}

/**
 * The tick period while a failed transfer still has queued starts. Each
 * start's wait consumes the POISON that released it (it resets the word for
 * the next round), so k queued starts take k writes: at the normal period
 * 8 starts took about 8 ticks, and a transport closing stopped the ticks
 * with the stream still waiting.
 */
const RELEASE_TICK_MS = 1;

export class Watchdog {
  readonly timeoutMs: number;
  readonly tickMs: number;
  private readonly blocks = new Set<WatchedBlock>();
  private timer: NodeJS.Timeout | undefined;
  private stream: StreamHandle | undefined;
  private busy = false;
  private closed = false;
  /** The tick in progress, if any. */
  private ticking: Promise<void> | undefined;
  /** Ticks run (for tests and stats). */
  ticks = 0;

  private readonly driver: CudaDriver;

  constructor(
    /** The transport's GPU runtime: the watchdog's stream, and the points it waits for on it. */
    readonly gpu: GpuRuntime,
    options: WatchdogOptions,
  ) {
    this.driver = gpu.driver;
    this.timeoutMs = options.timeoutMs;
    this.tickMs = options.tickMs ?? Math.min(250, Math.max(1, Math.floor(options.timeoutMs / 8)));
  }

  /** Watches `block` until the returned function is called. */
  watch(block: WatchedBlock): () => void {
    this.blocks.add(block);
    this.schedule();
    return () => {
      this.blocks.delete(block);
    };
  }

  /**
   * Writes POISON at once into the given words (a transfer failed or closed
   * outside a tick); `queued` learns the stream the writes went on (a write
   * through a peer's mapping keeps it mapped until the GPU passed it).
   */
  poison(words: readonly DevicePtr[], queued?: (stream: StreamHandle) => void): void {
    if (this.closed || words.length === 0) return;
    try {
      const stream = this.ensureStream();
      this.driver.streamBatchMemOp(
        stream,
        words.map((addr) => ({ op: 'write64', addr, value: POISON }) as StreamMemOp),
      );
      queued?.(stream);
    } catch (err) {
      debug('watchdog: could not poison %d words: %s', words.length, (err as Error).message);
    }
  }

  /**
   * Zeroes `words` on the watchdog's stream — after every POISON it wrote
   * there — and waits for it: a slot is reused only once its old values are
   * gone. Synchronous (a new transfer's first call, not per round).
   */
  reset(words: readonly DevicePtr[]): void {
    if (this.closed || words.length === 0) return;
    const stream = this.ensureStream();
    this.driver.streamBatchMemOp(
      stream,
      words.map((addr) => ({ op: 'write64', addr, value: 0n }) as StreamMemOp),
    );
    this.gpu.synchronize(stream);
  }

  /**
   * Resolves once every write the watchdog queued so far has completed (a
   * point marked on its stream): memory it wrote into may go then.
   */
  async flushed(): Promise<void> {
    // Closed: nothing more is queued; a tick still in flight is the last thing that reads the blocks.
    if (this.closed || this.stream === undefined) return this.ticking;
    await this.gpu.marked(this.stream);
  }

  /**
   * Resolves once no watched transfer is failed with queued starts (the
   * ticks release them meanwhile), true; or false after `limitMs`. A
   * transport calls it before close(): its endpoints' transfers failed as
   * they closed, and their streams must not be left waiting. Replays of a
   * captured start are the graph owner's (the host cannot see them).
   */
  async released(limitMs: number): Promise<boolean> {
    const end = performance.now() + limitMs;
    while (this.releasing()) {
      if (this.closed || performance.now() >= end) return false;
      await new Promise((r) => setTimeout(r, RELEASE_TICK_MS));
    }
    return true;
  }

  private releasing(): boolean {
    for (const block of this.blocks) for (const t of block.transfers()) if (t.failed && t.releasing) return true;
    return false;
  }

  /** Stops the ticks; the stream stays the runtime's (see the file comment). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.blocks.clear();
  }

  private schedule(): void {
    if (this.closed || this.timer || this.blocks.size === 0) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        void this.tick().finally(() => this.schedule());
      },
      this.releasing() ? RELEASE_TICK_MS : this.tickMs,
    );
    this.timer.unref();
  }

  private ensureStream(): StreamHandle {
    return (this.stream ??= this.gpu.stream('watchdog'));
  }

  /** @internal One tick now (tests drive the watchdog by hand). */
  tickNow(): Promise<void> {
    return this.tick();
  }

  private tick(): Promise<void> {
    if (this.busy || this.closed) return this.ticking ?? Promise.resolve();
    const t = this.tickOnce().finally(() => {
      if (this.ticking === t) this.ticking = undefined;
    });
    this.ticking = t;
    return t;
  }

  private async tickOnce(): Promise<void> {
    this.busy = true;
    this.ticks++;
    try {
      const d = this.driver;
      const stream = this.ensureStream();
      const reads = [...this.blocks].map((block) => {
        const bytes = new Uint8Array(block.slots * SLOT_BYTES);
        d.memcpyDtoHAsync(bytes, block.ptr, stream);
        block.touched?.(stream);
        return { block, bytes };
      });
      await this.gpu.completed(stream);
      if (this.closed) return;
      const ops: StreamMemOp[] = [];
      /** Transfers whose peer word is written this tick (through the peer's mapping). */
      const peers: WatchedTransfer[] = [];
      for (const { block, bytes } of reads) {
        if (!this.blocks.has(block)) continue;
        const view = new DataView(bytes.buffer);
        for (const t of block.transfers()) {
          if (t.failed) {
            ops.push({ op: 'write64', addr: t.ownAwaited, value: POISON });
            continue;
          }
          const at = t.slot * SLOT_BYTES;
          const arrive = view.getBigUint64(at + ARRIVE, true);
          const stamp = view.getBigUint64(at + STAMP, true);
          t.stuckTicks = arrive === 1n && stamp === 1n ? t.stuckTicks + 1 : 0;
          t.observed?.(arrive === 1n);
          const ms = Math.max(0, t.stuckTicks - 1) * this.tickMs;
          if (ms >= this.timeoutMs) {
            t.stuck(ms);
            ops.push({ op: 'write64', addr: t.ownAwaited, value: POISON });
            const peer = t.peerAwaited();
            if (peer !== undefined) {
              ops.push({ op: 'write64', addr: peer, value: POISON });
              peers.push(t);
            }
            continue;
          }
          ops.push({ op: 'write64', addr: block.ptr + BigInt(at + STAMP), value: 1n });
        }
      }
      if (ops.length > 0) {
        d.streamBatchMemOp(stream, ops);
        for (const { block } of reads) if (this.blocks.has(block)) block.touched?.(stream);
      }
      for (const t of peers) t.peerWritten?.(stream);
    } catch (err) {
      debug('watchdog: tick failed: %s', (err as Error).message);
      try {
        // A write into memory unmapped meanwhile leaves an error on the stream: clear it for the next tick.
        if (this.stream !== undefined) this.gpu.synchronize(this.stream);
      } catch {
        // reported once
      }
    } finally {
      this.busy = false;
    }
  }
}
