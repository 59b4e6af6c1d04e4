/**
 * Ordered asynchronous work: the simulator's streams.
 *
 * A stream is a FIFO of operations. Work items (copies, memsets, event
 * records) run one at a time, each in a later macrotask (setImmediate, or a
 * timer when the work has a simulated duration), so an async copy never
 * completes inside the call that queued it. A wait item (streamWaitEvent)
 * holds the stream until its condition is true.
 *
 * A query (cuEventQuery) runs, without blocking, the work ahead of the
 * event that is already due — as a GPU makes progress while the host polls
 * it — so a process polling its events sees copies complete without handing
 * the thread back to the event loop.
 *
 * Synchronous drains (streamSynchronize, eventSynchronize, memFree of an
 * allocation with queued work) run the queued work to completion right
 * away, blocking the thread for any remaining simulated duration — the way a
 * real synchronize blocks. A wait on another process's event is polled
 * (1 ms) both when draining and while idle.
 *
 * The default stream 0n is an ordinary FIFO here; the legacy default
 * stream's implicit synchronization with other streams is not simulated.
 */
import { ClosedError } from '../../errors.js';
import { cudaError } from './result-codes.js';

export interface WorkItem {
  kind: 'work';
  /** Moves the bytes. May throw: the error is kept on the stream. */
  run(): void;
  durationMs: number;
  /** What the work reads or writes (allocations), so freeing one can drain first. */
  touches: readonly object[];
}

export interface WaitItem {
  kind: 'wait';
  ready(): boolean;
  /** True when readiness depends on another process (must be polled). */
  remote: boolean;
  /** Makes progress toward readiness synchronously (drains the stream holding the awaited record). */
  advance(): void;
}

export type StreamItem = WorkItem | WaitItem;

/** How long a synchronous drain waits on another process before giving up. */
const SYNC_WAIT_LIMIT_MS = 60_000;
const POLL_MS = 1;

export class SimStream {
  readonly queue: StreamItem[] = [];
  /** First error of a work item since the last synchronize. */
  error: Error | undefined;
  timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  headStartedAt = 0;
  /** Destroyed by the user; kept until its queued work has run. */
  destroyed = false;
  constructor(readonly handle: bigint) {}

  touches(target: object): boolean {
    return this.queue.some((op) => op.kind === 'work' && op.touches.includes(target));
  }
}

interface Waiter {
  ready(): boolean;
  remote: boolean;
  resolve(): void;
  reject(err: Error): void;
}

export class Scheduler {
  private readonly streams = new Map<bigint, SimStream>();
  private readonly waiters = new Set<Waiter>();
  private nextHandle = 0x5000n;
  private pollTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor() {
    this.streams.set(0n, new SimStream(0n));
  }

  create(): SimStream {
    const s = new SimStream(this.nextHandle++);
    this.streams.set(s.handle, s);
    return s;
  }

  get(handle: bigint, call: string): SimStream {
    const s = this.streams.get(handle);
    if (!s || s.destroyed) throw cudaError(call, 'CUDA_ERROR_INVALID_HANDLE', `no stream ${handle} in this driver`);
    return s;
  }

  /** Destroys a stream; its queued work still completes (as cuStreamDestroy allows). */
  destroy(s: SimStream): void {
    if (s.handle === 0n) throw cudaError('cuStreamDestroy', 'CUDA_ERROR_INVALID_HANDLE', 'the default stream cannot be destroyed');
    s.destroyed = true;
    this.retireIfDone(s);
  }

  enqueue(s: SimStream, item: StreamItem): void {
    if (this.closed) throw new ClosedError('the simulated driver is closed');
    s.queue.push(item);
    if (s.queue.length === 1) this.pump(s);
  }

  /** Runs everything queued on `s` now (see the file comment); stops early once `until` holds. */
  drain(s: SimStream, until?: () => boolean): void {
    this.cancelHead(s);
    while (s.queue.length > 0 && !until?.()) {
      const head = s.queue[0]!;
      if (head.kind === 'work') {
        const elapsed = s.headStartedAt ? performance.now() - s.headStartedAt : 0;
        sleepSync(head.durationMs - elapsed);
        s.queue.shift();
        s.headStartedAt = 0;
        runWork(s, head);
      } else {
        const deadline = performance.now() + SYNC_WAIT_LIMIT_MS;
        while (!head.ready()) {
          head.advance();
          if (head.ready()) break;
          if (!head.remote || performance.now() > deadline) {
            throw cudaError('cuStreamSynchronize', 'CUDA_ERROR_LAUNCH_TIMEOUT', 'a stream waits on an event that is never recorded to completion');
          }
          sleepSync(POLL_MS);
        }
        s.queue.shift();
      }
    }
    this.notify();
    this.pump(s);
  }

  /**
   * Runs the work at the head of `s` that is due (its simulated duration
   * has passed) until `until` holds, never blocking: stops at a wait that is
   * not ready and at work still in progress.
   */
  advance(s: SimStream, until: () => boolean): void {
    let ran = false;
    while (s.queue.length > 0 && !until()) {
      const head = s.queue[0]!;
      if (head.kind === 'wait') {
        if (!head.ready()) break;
        s.queue.shift();
        ran = true; // the work behind it must be started (pumped) even if it is not due yet
        continue;
      }
      const elapsed = s.headStartedAt ? performance.now() - s.headStartedAt : 0;
      if (head.durationMs > elapsed) break;
      this.cancelHead(s);
      s.queue.shift();
      s.headStartedAt = 0;
      runWork(s, head);
      ran = true;
    }
    if (ran) {
      this.notify();
      this.pump(s);
    }
  }

  /** Whether work queued on any stream touches `target`. */
  anyTouching(target: object): boolean {
    for (const s of this.streams.values()) if (s.touches(target)) return true;
    return false;
  }

  /** Drains every stream whose queued work touches `target`. */
  drainTouching(target: object): void {
    for (const s of this.streams.values()) if (s.touches(target)) this.drain(s);
  }

  /** Resolves once `ready()` holds (checked after every completed item, and polled when remote). */
  waitFor(ready: () => boolean, remote: boolean): Promise<void> {
    if (ready()) return Promise.resolve();
    if (this.closed) return Promise.reject(new ClosedError('the simulated driver is closed'));
    return new Promise<void>((resolve, reject) => {
      this.waiters.add({ ready, remote, resolve, reject });
      if (remote) this.ensurePoll();
    });
  }

  /** Stops every timer, drops queued work, rejects pending waits. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.streams.values()) {
      this.cancelHead(s);
      s.queue.length = 0;
    }
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = undefined;
    for (const w of this.waiters) w.reject(new ClosedError('the simulated driver was closed while waiting for an event'));
    this.waiters.clear();
  }

  private pump(s: SimStream): void {
    if (this.closed || s.timer !== undefined) return;
    while (s.queue.length > 0) {
      const head = s.queue[0]!;
      if (head.kind === 'wait') {
        if (!head.ready()) {
          if (head.remote) this.ensurePoll();
          return; // notify() pumps again when something completes
        }
        s.queue.shift();
        continue;
      }
      s.headStartedAt = performance.now();
      const done = (): void => {
        s.timer = undefined;
        s.headStartedAt = 0;
        if (s.queue[0] !== head) return; // drained synchronously meanwhile
        s.queue.shift();
        runWork(s, head);
        this.notify();
        this.pump(s);
      };
      s.timer = head.durationMs > 0 ? setTimeout(done, head.durationMs) : setImmediate(done);
      return;
    }
    this.retireIfDone(s);
  }

  private retireIfDone(s: SimStream): void {
    if (s.destroyed && s.queue.length === 0) this.streams.delete(s.handle);
  }

  private cancelHead(s: SimStream): void {
    if (s.timer === undefined) return;
    clearTimeout(s.timer as NodeJS.Timeout);
    clearImmediate(s.timer as NodeJS.Immediate);
    s.timer = undefined;
  }

  /** Something completed: unblock waiting streams and promises. */
  private notify(): void {
    let remote = false;
    for (const w of this.waiters) {
      let ready: boolean;
      try {
        ready = w.ready();
      } catch (err) {
        // e.g. the event was destroyed while someone waited for it
        this.waiters.delete(w);
        w.reject(err as Error);
        continue;
      }
      if (ready) {
        this.waiters.delete(w);
        w.resolve();
      } else if (w.remote) {
        remote = true;
      }
    }
    for (const s of this.streams.values()) {
      const head = s.queue[0];
      if (head?.kind === 'wait') {
        if (head.ready()) this.pump(s);
        else if (head.remote) remote = true;
      }
    }
    if (remote) this.ensurePoll();
  }

  private ensurePoll(): void {
    if (this.pollTimer || this.closed) return;
    this.pollTimer = setTimeout(() => {
      this.pollTimer = undefined;
      this.notify();
    }, POLL_MS);
  }
}

function runWork(s: SimStream, item: WorkItem): void {
  try {
    item.run();
  } catch (err) {
    s.error ??= cudaError('cuStreamSynchronize', 'CUDA_ERROR_ILLEGAL_ADDRESS', `queued work failed: ${(err as Error).message}`);
  }
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/** Blocks the thread for `ms` (a synchronize waiting for simulated work). */
export function sleepSync(ms: number): void {
  if (ms > 0) Atomics.wait(sleepCell, 0, 0, ms);
}
