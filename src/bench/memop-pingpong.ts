/**
 * The raw stream mem-op ping-pong of `smcuda bench --suite graph`, without
 * smcuda: what a GPU-driven transfer costs when only the driver is in the way.
 *
 * Each worker allocates a region in its own device memory, a flag word at
 * offset 0 and a landing area for the peer's data at DATA_OFFSET, and opens
 * the peer's region through its IPC handle. Per iteration (as NCCL's
 * copy-engine paths under capture: a fixed value 1, and the waiter resets its
 * own flag to 0 in the same batch as the wait, so the same operations can be
 * replayed by a graph any number of times):
 *
 *   initiator: [copy own source → peer's landing area]  write32(peer flag, 1)   batch(wait32(own flag == 1), write32(own flag, 0))
 *   responder: batch(wait32(own flag == 1), write32(own flag, 0))   [copy own source → peer's landing area]   write32(peer flag, 1)
 *
 * The copy (cuMemcpyAsync through the mapping) is there only for sizes past
 * 8 B: an 8 B message is the flag alone. Half a round trip is the initiator's
 * stream time per iteration, halved; CUDA events time it.
 *
 * Host-enqueued: every iteration's operations are enqueued by the host, one
 * call each. Graph: `transfers` iterations are captured once on each side
 * and the graph is replayed (graph-replays.ts); the initiator also times
 * each graphLaunch call on the host.
 */
import type { CudaDriver, DevicePtr, EventHandle, StreamHandle } from '../cuda/driver.js';
import type { Repeat } from './protocol.js';
import { timeReplays } from './graph-replays.js';
import { withinMs } from './stuck.js';
import { ArgumentRangeError } from '../errors.js';

/** The flag word, then the landing area on its own 256-byte line. */
export const DATA_OFFSET = 256;

export type PingPongRole = 'initiator' | 'responder';

/** One stream item of an iteration. */
export type PingPongStep =
  /** cuMemcpyAsync(peer landing area ← own source, size) */
  | 'copy'
  /** streamWriteValue32(peer flag, 1) */
  | 'signal'
  /** streamBatchMemOp([wait32(own flag == 1), write32(own flag, 0)]) */
  | 'await';

/** The stream items of one iteration, in order. */
export function iterationSteps(role: PingPongRole, size: number): PingPongStep[] {
  const send: PingPongStep[] = size > 8 ? ['copy', 'signal'] : ['signal'];
  return role === 'initiator' ? [...send, 'await'] : ['await', ...send];
}

export interface MemOpHostResult {
  /** Initiator only: stream time per iteration / 2, µs. */
  halfRoundTripUs?: number;
  /** Initiator only: host time to enqueue one iteration, µs. */
  hostEnqueueUs?: number;
}

export interface MemOpGraphResult {
  /** Initiator only: stream time per captured iteration / 2, µs (replays back to back). */
  halfRoundTripUs?: number;
  /** Initiator only: host time of each graphLaunch call while the stream's queue has room (graph-replays.ts), µs. */
  hostUsPerReplay?: number[];
  /** Initiator only: host time of each graphLaunch call back to back, µs. */
  backToBackHostUs?: number[];
}

/** One worker's side of the raw ping-pong. */
export class MemOpPingPong {
  readonly #d: CudaDriver;
  readonly #region: DevicePtr;
  readonly #source: DevicePtr;
  readonly #stream: StreamHandle;
  readonly #maxSize: number;
  #peer: DevicePtr | undefined;

  /** Allocates the region (flag + landing area for `maxSize`) and a source of `maxSize`, zeroed. */
  constructor(
    driver: CudaDriver,
    maxSize: number,
    readonly timeoutMs = 60_000,
  ) {
    if (!Number.isInteger(maxSize) || maxSize < 8) throw new ArgumentRangeError(`maxSize must be an integer ≥ 8, got ${maxSize}`);
    this.#d = driver;
    this.#maxSize = maxSize;
    this.#region = driver.memAlloc(DATA_OFFSET + maxSize);
    try {
      this.#source = driver.memAlloc(maxSize);
    } catch (err) {
      driver.memFree(this.#region);
      throw err;
    }
    driver.memsetD8(this.#region, 0, DATA_OFFSET + maxSize);
    driver.memsetD8(this.#source, 0x5a, maxSize);
    this.#stream = driver.streamCreate();
  }

  /** The IPC handle of this side's region, for the peer. */
  handle(): Uint8Array {
    return this.#d.ipcGetMemHandle(this.#region);
  }

  connect(peerHandle: Uint8Array): void {
    if (this.#peer !== undefined) throw new Error('the peer region is open already');
    this.#peer = this.#d.ipcOpenMemHandle(peerHandle);
  }

  /** Enqueues one iteration's operations on the stream. */
  #enqueue(steps: readonly PingPongStep[], size: number): void {
    const d = this.#d;
    const peer = this.#peerRegion();
    for (const s of steps) {
      if (s === 'copy') d.memcpyAsync(peer + BigInt(DATA_OFFSET), this.#source, size, this.#stream);
      else if (s === 'signal') d.streamWriteValue32(this.#stream, peer, 1);
      else
        d.streamBatchMemOp(this.#stream, [
          { op: 'wait32', addr: this.#region, value: 1, condition: 'eq' },
          { op: 'write32', addr: this.#region, value: 0 },
        ]);
    }
  }

  /** Host-enqueued: `warmup` then `iters` iterations, the initiator timing the latter. */
  async host(role: PingPongRole, size: number, repeat: Repeat): Promise<MemOpHostResult> {
    this.#checkSize(size);
    const steps = iterationSteps(role, size);
    const d = this.#d;
    return this.#withEvents(async (start, end) => {
      for (let i = 0; i < repeat.warmup; i++) this.#enqueue(steps, size);
      d.eventRecord(start, this.#stream);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < repeat.iters; i++) this.#enqueue(steps, size);
      const enqueueUs = Number(process.hrtime.bigint() - t0) / 1000;
      d.eventRecord(end, this.#stream);
      await this.#complete(end, `${role}: ${repeat.warmup + repeat.iters} host-enqueued iterations`);
      if (role === 'responder') return {};
      return { halfRoundTripUs: (d.eventElapsedTime(start, end) * 1000) / repeat.iters / 2, hostEnqueueUs: enqueueUs / repeat.iters };
    });
  }

  /** Captures `transfers` iterations in a graph, replays it `warmup` + `replays` times; the initiator times the latter. */
  async graph(role: PingPongRole, size: number, transfers: number, replays: number, warmup: number): Promise<MemOpGraphResult> {
    this.#checkSize(size);
    const steps = iterationSteps(role, size);
    const d = this.#d;
    d.streamBeginCapture(this.#stream);
    let graph: bigint;
    try {
      for (let i = 0; i < transfers; i++) this.#enqueue(steps, size);
    } finally {
      graph = d.streamEndCapture(this.#stream);
    }
    try {
      const exec = d.graphInstantiate(graph);
      try {
        const t = await timeReplays(d, exec, this.#stream, replays, warmup, (what) => this.#settle(`${role}: ${what} of a graph of ${transfers} iterations`));
        if (role === 'responder') return {};
        return { halfRoundTripUs: t.streamUsPerReplay / transfers / 2, hostUsPerReplay: t.hostUs, backToBackHostUs: t.backToBackUs };
      } finally {
        d.graphExecDestroy(exec);
      }
    } finally {
      d.graphDestroy(graph);
    }
  }

  close(): void {
    const d = this.#d;
    if (this.#peer !== undefined) d.ipcCloseMemHandle(this.#peer);
    this.#peer = undefined;
    d.streamDestroy(this.#stream);
    d.memFree(this.#source);
    d.memFree(this.#region);
  }

  #peerRegion(): DevicePtr {
    if (this.#peer === undefined) throw new Error('connect to the peer region first');
    return this.#peer;
  }

  #checkSize(size: number): void {
    if (!Number.isInteger(size) || size < 1 || size > this.#maxSize)
      throw new ArgumentRangeError(`size must be an integer from 1 to ${this.#maxSize}, got ${size}`);
  }

  async #withEvents<T>(body: (start: EventHandle, end: EventHandle) => Promise<T>): Promise<T> {
    const start = this.#d.eventCreate();
    const end = this.#d.eventCreate();
    try {
      return await body(start, end);
    } finally {
      this.#d.eventDestroy(start);
      this.#d.eventDestroy(end);
    }
  }

  async #settle(what: string): Promise<void> {
    const ev = this.#d.eventCreate({ disableTiming: true });
    try {
      this.#d.eventRecord(ev, this.#stream);
      await this.#complete(ev, what);
    } finally {
      this.#d.eventDestroy(ev);
    }
  }

  /** Waits for `event` without blocking the worker's event loop, failing after timeoutMs rather than hanging. */
  #complete(event: EventHandle, what: string): Promise<void> {
    return withinMs(this.#d.whenComplete(event), this.timeoutMs, what);
  }
}
