/**
 * The baselines, measured in the same run as the figures they sit beside:
 * what the hardware and driver give with no transport in the way.
 *
 *  - rawCopy: back-to-back cuMemcpyAsync from an already open IPC mapping of
 *    the peer's allocation into local memory, timed by CUDA events (what an
 *    RGET copy is, minus the protocol). Over one pair of buffers, or over
 *    `slices` of them in turn, as the bench's streams use their window.
 *  - ipcOpen: one cuIpcOpenMemHandle (and its close) of a fresh allocation.
 *  - cacheHit: HandlePool.lookup + release on a warm pool, in process.
 *  - copyCompletion: an 8 B cuMemcpyAsync, event record, and whenComplete.
 *  - rawCopyMany: the same from several peers' buffers, round-robin (all-to-all).
 *  - stagingBaseline: pinned single-buffer staging: device→host into pinned
 *    memory, synchronize, host→device, synchronize (no pipelining).
 */
import { HandlePool } from '../../cache/index.js';
import type { CudaDriver } from '../cuda/driver.js';
import { ArgumentRangeError } from '../errors.js';
import type { ExportedBuffer, IpcOpenResult, Repeat, SamplesResult, TimedResult } from './protocol.js';

const micros = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1000;

/** Memory this process allocates, freed whatever happens. */
async function withAllocations<T>(driver: CudaDriver, sizes: number[], body: (ptrs: bigint[]) => Promise<T> | T): Promise<T> {
  const ptrs: bigint[] = [];
  try {
    for (const s of sizes) ptrs.push(driver.memAlloc(s));
    return await body(ptrs);
  } finally {
    for (const p of ptrs) driver.memFree(p);
  }
}

export async function rawCopy(driver: CudaDriver, buffer: ExportedBuffer, size: number, repeat: Repeat, slices = 1): Promise<TimedResult> {
  if (!Number.isSafeInteger(slices) || slices < 1 || size * slices > buffer.size)
    throw new ArgumentRangeError(`rawCopy: ${slices} slices of ${size} B do not fit the exported ${buffer.size} B`);
  const src = driver.ipcOpenMemHandle(buffer.handle);
  const stream = driver.streamCreate();
  const start = driver.eventCreate();
  const end = driver.eventCreate();
  try {
    return await withAllocations(driver, [size * slices], ([dst]) => {
      const copy = (i: number): void => {
        const at = BigInt((i % slices) * size);
        driver.memcpyAsync(dst! + at, src + at, size, stream);
      };
      for (let i = 0; i < repeat.warmup; i++) copy(i);
      driver.streamSynchronize(stream);
      driver.eventRecord(start, stream);
      for (let i = 0; i < repeat.iters; i++) copy(i);
      driver.eventRecord(end, stream);
      driver.eventSynchronize(end);
      const ms = driver.eventElapsedTime(start, end);
      return { seconds: ms / 1000, bytes: size * repeat.iters };
    });
  } finally {
    driver.eventDestroy(start);
    driver.eventDestroy(end);
    driver.streamDestroy(stream);
    driver.ipcCloseMemHandle(src);
  }
}

/**
 * Back-to-back copies from several peers' buffers (opened here), each peer
 * on its own stream so copies from different peers overlap as the
 * transport's may: the all-to-all baseline, run by every rank at once.
 * `iters` rounds, each one copy from every buffer; timed on the wall clock
 * from the first enqueue to the last stream's completion.
 */
export async function rawCopyMany(driver: CudaDriver, buffers: ExportedBuffer[], size: number, repeat: Repeat): Promise<TimedResult> {
  const srcs: bigint[] = [];
  const streams = buffers.map(() => driver.streamCreate());
  try {
    for (const b of buffers) srcs.push(driver.ipcOpenMemHandle(b.handle));
    return await withAllocations(
      driver,
      srcs.map(() => size),
      (dsts) => {
        const rounds = (n: number) => {
          for (let i = 0; i < n; i++) for (let k = 0; k < srcs.length; k++) driver.memcpyAsync(dsts[k]!, srcs[k]!, size, streams[k]!);
          for (const s of streams) driver.streamSynchronize(s);
        };
        rounds(repeat.warmup);
        const t0 = process.hrtime.bigint();
        rounds(repeat.iters);
        return { seconds: micros(t0) / 1e6, bytes: size * srcs.length * repeat.iters };
      },
    );
  } finally {
    for (const p of srcs) driver.ipcCloseMemHandle(p);
    for (const s of streams) driver.streamDestroy(s);
  }
}

export function ipcOpen(driver: CudaDriver, buffers: ExportedBuffer[]): IpcOpenResult {
  const openUs: number[] = [];
  const closeUs: number[] = [];
  for (const b of buffers) {
    let t0 = process.hrtime.bigint();
    const ptr = driver.ipcOpenMemHandle(b.handle);
    openUs.push(micros(t0));
    t0 = process.hrtime.bigint();
    driver.ipcCloseMemHandle(ptr);
    closeUs.push(micros(t0));
  }
  return { openUs, closeUs };
}

/** ns per lookup+release, one sample per batch. */
export async function cacheHit(driver: CudaDriver, buffer: ExportedBuffer, batches: number, perBatch: number): Promise<SamplesResult> {
  const pool = new HandlePool(driver);
  const req = { deviceUuid: buffer.deviceUuid, base: buffer.base, size: buffer.size, handle: buffer.handle, bufferId: buffer.bufferId };
  try {
    (await pool.acquire(req)).release();
    const samples: number[] = [];
    for (let b = 0; b <= batches; b++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < perBatch; i++) pool.lookup(req)!.release();
      const ns = Number(process.hrtime.bigint() - t0) / perBatch;
      if (b > 0) samples.push(ns); // the first batch warms the JIT
    }
    return { samples };
  } finally {
    pool.close();
  }
}

/** µs per 8 B copy + event + whenComplete. */
export async function copyCompletion(driver: CudaDriver, repeat: Repeat): Promise<SamplesResult> {
  const stream = driver.streamCreate();
  const event = driver.eventCreate({ disableTiming: true });
  try {
    return await withAllocations(driver, [8, 8], async ([a, b]) => {
      const samples: number[] = [];
      for (let i = 0; i < repeat.warmup + repeat.iters; i++) {
        const t0 = process.hrtime.bigint();
        driver.memcpyAsync(b!, a!, 8, stream);
        driver.eventRecord(event, stream);
        await driver.whenComplete(event);
        if (i >= repeat.warmup) samples.push(micros(t0));
      }
      return { samples };
    });
  } finally {
    driver.eventDestroy(event);
    driver.streamDestroy(stream);
  }
}

export async function stagingBaseline(driver: CudaDriver, size: number, repeat: Repeat): Promise<TimedResult> {
  const pinned = driver.hostAlloc(size);
  const stream = driver.streamCreate();
  try {
    return await withAllocations(driver, [size, size], ([src, dst]) => {
      let seconds = 0;
      for (let i = 0; i < repeat.warmup + repeat.iters; i++) {
        const t0 = process.hrtime.bigint();
        driver.memcpyDtoHAsync(pinned.bytes, src!, stream);
        driver.streamSynchronize(stream);
        driver.memcpyHtoDAsync(dst!, pinned.bytes, stream);
        driver.streamSynchronize(stream);
        if (i >= repeat.warmup) seconds += micros(t0) / 1e6;
      }
      return { seconds, bytes: size * repeat.iters };
    });
  } finally {
    driver.streamDestroy(stream);
    pinned.free();
  }
}
