/**
 * The allreduce of seed 003 (cuda-samples' multi-GPU gradient average), as a
 * bench baseline: each rank copies its device buffer to host memory, the
 * ranks reduce over host memory, and each copies the result back. The seed
 * does `grad.get()` (device→host into pageable memory), MPI_Allreduce on the
 * host buffers (intra-node MPI goes through shared memory), `/= world_size`,
 * and `cp.asarray` (host→device). Here:
 *
 *   1. device → host: pageable (a plain Uint8Array, cuMemcpyDtoH) or, as a
 *      second baseline, pinned (cuMemHostAlloc, async copy + synchronize);
 *   2. copy-in: into this rank's slot of a shared segment, then publish the
 *      call's sequence number in this rank's `arrived` word;
 *   3. once every rank arrived: reduce this rank's 1/N of the elements over
 *      all slots (f32, in rank order) into the shared result, divided by N
 *      for 'avg'; publish `reduced`;
 *   4. once every rank reduced: copy-out of the whole result, then host →
 *      device (pageable or pinned, as in 1).
 *
 * Shared-memory MPI does the same copy-in / reduce / copy-out. Where it
 * differs, it favours the baseline: the device buffer is reused rather than
 * allocated per call (cp.asarray allocates), and the reduction is split
 * among the ranks. Waits spin on the shared words, yielding to the event
 * loop, and fail with BenchStuckError after `timeoutMs`.
 *
 * Segment layout: one 64-byte line per word (arrived[0..N), reduced[0..N)),
 * header rounded to 4096 bytes, then N slots and the result, each
 * `slotBytes` (maxBytes rounded up to 64).
 */
import type { CudaDriver, DevicePtr, PinnedHostBuffer, SharedSegment, StreamHandle } from '../cuda/driver.js';
import { newSegmentName } from '../segment-owner.js';
import { BenchStuckError } from './stuck.js';
import { ArgumentRangeError } from '../errors.js';

export type StagedReduce = 'sum' | 'avg';

const LINE_WORDS = 16; // 64 bytes of Int32
const align = (n: number, a: number) => Math.ceil(n / a) * a;

export function stagedSegmentBytes(ranks: number, maxBytes: number): number {
  return headerBytes(ranks) + (ranks + 1) * align(maxBytes, 64);
}

function headerBytes(ranks: number): number {
  return align(2 * ranks * LINE_WORDS * 4, 4096);
}

/** Time spent per phase over the timed calls, µs per call (means). */
export interface StagedBreakdown {
  deviceToHostUs: number;
  /** Copy-in, waits, reduction and copy-out. */
  exchangeUs: number;
  /** Of exchangeUs: this rank's share of the reduction (a JavaScript loop over Float32Array). */
  reduceUs: number;
  hostToDeviceUs: number;
}

export interface StagedRunResult {
  /** µs per call, one sample per timed call. */
  samples: number[];
  breakdown: StagedBreakdown;
}

export class HostStagedAllreduce {
  readonly #d: CudaDriver;
  readonly #segment: SharedSegment;
  readonly #words: Int32Array;
  readonly #slotBytes: number;
  readonly #base: number;
  readonly #stream: StreamHandle;
  #seq = 0;
  #pinned: PinnedHostBuffer | undefined;
  #pageable: Uint8Array | undefined;

  private constructor(
    driver: CudaDriver,
    segment: SharedSegment,
    readonly rank: number,
    readonly ranks: number,
    readonly maxBytes: number,
    readonly timeoutMs: number,
  ) {
    const need = stagedSegmentBytes(ranks, maxBytes);
    if (segment.bytes.byteLength < need) throw new ArgumentRangeError(`staging segment ${segment.name} has ${segment.bytes.byteLength} bytes, ${need} needed`);
    this.#d = driver;
    this.#segment = segment;
    this.#words = new Int32Array(segment.bytes.buffer, segment.bytes.byteOffset, headerBytes(ranks) / 4);
    this.#slotBytes = align(maxBytes, 64);
    this.#base = segment.bytes.byteOffset + headerBytes(ranks);
    this.#stream = driver.streamCreate();
  }

  /** Rank 0: creates the shared segment (its name goes to the other ranks). */
  static create(driver: CudaDriver, ranks: number, maxBytes: number, timeoutMs = 60_000): HostStagedAllreduce {
    check(ranks, maxBytes, 0);
    const seg = driver.shmCreate(newSegmentName('stg'), stagedSegmentBytes(ranks, maxBytes));
    try {
      return new HostStagedAllreduce(driver, seg, 0, ranks, maxBytes, timeoutMs);
    } catch (err) {
      seg.close();
      driver.shmUnlink(seg.name);
      throw err;
    }
  }

  /** Ranks 1..N-1: map rank 0's segment. */
  static open(driver: CudaDriver, name: string, rank: number, ranks: number, maxBytes: number, timeoutMs = 60_000): HostStagedAllreduce {
    check(ranks, maxBytes, rank);
    const seg = driver.shmOpen(name);
    try {
      return new HostStagedAllreduce(driver, seg, rank, ranks, maxBytes, timeoutMs);
    } catch (err) {
      seg.close();
      throw err;
    }
  }

  get segmentName(): string {
    return this.#segment.name;
  }

  /** Rank 0, once every rank has mapped the segment: the name goes, the mappings stay. */
  unlink(): void {
    this.#d.shmUnlink(this.#segment.name);
  }

  /**
   * `warmup` then `iters` allreduces of the f32 elements of `dev` (`bytes`
   * bytes, a multiple of 4) in place, each timed on the host from the start
   * of its device→host copy to the end of its host→device copy.
   */
  async run(dev: DevicePtr, bytes: number, o: { pinned: boolean; reduce: StagedReduce; iters: number; warmup: number }): Promise<StagedRunResult> {
    if (!Number.isInteger(bytes) || bytes < 0 || bytes % 4 !== 0 || bytes > this.maxBytes)
      throw new ArgumentRangeError(`bytes must be a multiple of 4 from 0 to ${this.maxBytes}, got ${bytes}`);
    const host = this.#hostBuffer(o.pinned, bytes);
    const samples: number[] = [];
    const sum = { deviceToHostUs: 0, exchangeUs: 0, reduceUs: 0, hostToDeviceUs: 0 };
    for (let i = 0; i < o.warmup + o.iters; i++) {
      const t0 = process.hrtime.bigint();
      this.#toHost(host, dev, o.pinned);
      const t1 = process.hrtime.bigint();
      const reduceNs = await this.#exchange(host, o.reduce);
      const t2 = process.hrtime.bigint();
      this.#toDevice(dev, host, o.pinned);
      const t3 = process.hrtime.bigint();
      if (i < o.warmup) continue;
      samples.push(Number(t3 - t0) / 1000);
      sum.deviceToHostUs += Number(t1 - t0) / 1000;
      sum.exchangeUs += Number(t2 - t1) / 1000;
      sum.reduceUs += reduceNs / 1000;
      sum.hostToDeviceUs += Number(t3 - t2) / 1000;
    }
    const n = Math.max(1, o.iters);
    return {
      samples,
      breakdown: { deviceToHostUs: sum.deviceToHostUs / n, exchangeUs: sum.exchangeUs / n, reduceUs: sum.reduceUs / n, hostToDeviceUs: sum.hostToDeviceUs / n },
    };
  }

  close(): void {
    this.#pinned?.free();
    this.#pinned = undefined;
    this.#d.streamDestroy(this.#stream);
    this.#segment.close();
  }

  #hostBuffer(pinned: boolean, bytes: number): Uint8Array {
    if (pinned) {
      this.#pinned ??= this.#d.hostAlloc(Math.max(64, this.maxBytes));
      return this.#pinned.bytes.subarray(0, bytes);
    }
    this.#pageable ??= new Uint8Array(Math.max(64, this.maxBytes));
    return this.#pageable.subarray(0, bytes);
  }

  #toHost(host: Uint8Array, dev: DevicePtr, pinned: boolean): void {
    if (host.byteLength === 0) return;
    if (!pinned) return this.#d.memcpyDtoH(host, dev);
    this.#d.memcpyDtoHAsync(host, dev, this.#stream);
    this.#d.streamSynchronize(this.#stream);
  }

  #toDevice(dev: DevicePtr, host: Uint8Array, pinned: boolean): void {
    if (host.byteLength === 0) return;
    if (!pinned) return this.#d.memcpyHtoD(dev, host);
    this.#d.memcpyHtoDAsync(dev, host, this.#stream);
    this.#d.streamSynchronize(this.#stream);
  }

  /** Copy-in, reduce this rank's share, copy-out: `host` holds the result after. Returns the reduction's ns. */
  async #exchange(host: Uint8Array, reduce: StagedReduce): Promise<number> {
    const seq = (this.#seq = (this.#seq + 1) | 0);
    const bytes = host.byteLength;
    const buf = this.#segment.bytes.buffer;
    new Uint8Array(buf, this.#slot(this.rank), bytes).set(host);
    Atomics.store(this.#words, this.rank * LINE_WORDS, seq);
    await this.#waitAll(0, seq, 'arrived');

    const count = bytes / 4;
    const share = Math.ceil(count / this.ranks);
    const lo = Math.min(count, this.rank * share);
    const hi = Math.min(count, lo + share);
    const r0 = process.hrtime.bigint();
    if (hi > lo) {
      const out = new Float32Array(buf, this.#slot(this.ranks) + lo * 4, hi - lo);
      const slots = Array.from({ length: this.ranks }, (_, r) => new Float32Array(buf, this.#slot(r) + lo * 4, hi - lo));
      out.set(slots[0]!);
      for (let r = 1; r < this.ranks; r++) {
        const s = slots[r]!;
        for (let k = 0; k < out.length; k++) out[k]! += s[k]!;
      }
      if (reduce === 'avg') for (let k = 0; k < out.length; k++) out[k]! /= this.ranks;
    }
    const reduceNs = Number(process.hrtime.bigint() - r0);
    Atomics.store(this.#words, (this.ranks + this.rank) * LINE_WORDS, seq);
    await this.#waitAll(this.ranks, seq, 'reduced');
    host.set(new Uint8Array(buf, this.#slot(this.ranks), bytes));
    return reduceNs;
  }

  #slot(k: number): number {
    return this.#base + k * this.#slotBytes;
  }

  /** Until every rank's word from `first` has reached `seq` (wrap-around compare); spins, then yields. */
  async #waitAll(first: number, seq: number, what: string): Promise<void> {
    const deadline = performance.now() + this.timeoutMs;
    let spins = 0;
    for (;;) {
      let all = true;
      for (let r = 0; r < this.ranks && all; r++) all = ((Atomics.load(this.#words, (first + r) * LINE_WORDS) - seq) | 0) >= 0;
      if (all) return;
      if (++spins % 256 === 0) {
        if (performance.now() > deadline) throw new BenchStuckError(`rank ${this.rank}: waiting for every rank to have ${what} call ${seq}`, this.timeoutMs);
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
  }
}

function check(ranks: number, maxBytes: number, rank: number): void {
  if (!Number.isInteger(ranks) || ranks < 1) throw new ArgumentRangeError(`ranks must be an integer ≥ 1, got ${ranks}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= ranks) throw new ArgumentRangeError(`rank must be an integer from 0 to ${ranks - 1}, got ${rank}`);
  if (!Number.isInteger(maxBytes) || maxBytes < 0) throw new ArgumentRangeError(`maxBytes must be a non-negative integer, got ${maxBytes}`);
}

/** Seed 003's gradient of rank r: element i is r + 0.001 i (f32). */
export function seedGradient(rank: number, count: number): Float32Array {
  const g = new Float32Array(count);
  for (let i = 0; i < count; i++) g[i] = rank + 0.001 * i;
  return g;
}

/** What every element of the average of `ranks` seed gradients is, as seed 003 checks it: (N-1)/2 + 0.001 i. */
export function seedAverage(ranks: number, i: number): number {
  return (ranks - 1) / 2 + 0.001 * i;
}
