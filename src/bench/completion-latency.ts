/**
 * Benchmark of the driver layer (not a test): how long after the GPU finishes does
 * `whenComplete` resolve? The lead runs it on the GPU machine.
 *
 * Method (differential, because the moment the GPU finished is not directly
 * observable from JS while a promise is awaited):
 *  - work: cuMemsetD8Async of 8 bytes on a stream, then cuEventRecord — a
 *    kernel-free operation that completes within microseconds;
 *  - spin run: t0 right after eventRecord, spin on eventQuery until true.
 *    That is the GPU's completion as a host sees it at best (plus one query);
 *  - promise run: the same work, t0 right after eventRecord, await
 *    whenComplete. That adds the poller's pick-up and the hop to the JS
 *    thread (thread-safe function + promise resolution);
 *  - spin and promise runs alternate, so drift affects both alike;
 *  - latency sample = promise time - median spin time; reported as median
 *    and 99th percentile, in microseconds.
 */
import { ArgumentRangeError, ConfigError } from '../errors.js';
import type { CudaDriver } from '../cuda/driver.js';

export interface CompletionLatency {
  /** Median extra time from GPU completion to promise resolution, µs. */
  medianUs: number;
  /** 99th percentile of the same, µs. */
  p99Us: number;
  /** Median eventRecord -> eventQuery true, by spinning, µs (the baseline). */
  spinMedianUs: number;
  /** Median eventRecord -> whenComplete resolved, µs. */
  promiseMedianUs: number;
  iterations: number;
}

const WARMUP = 20;

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

const microsSince = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1000;

/** `driver` must be initialised with a device set (`isReady()`). */
export async function measureCompletionLatency(driver: CudaDriver, iterations: number): Promise<CompletionLatency> {
  if (!Number.isInteger(iterations) || iterations < 1) throw new ArgumentRangeError(`iterations must be a positive integer, got ${iterations}`);
  if (!driver.isReady()) throw new ConfigError('measureCompletionLatency needs a ready driver: call init() and setDevice(index) first');

  const ptr = driver.memAlloc(8);
  const stream = driver.streamCreate();
  const event = driver.eventCreate({ disableTiming: true });
  const spin: number[] = [];
  const promise: number[] = [];
  try {
    for (let i = 0; i < WARMUP + iterations; i++) {
      driver.memsetD8Async(ptr, i & 0xff, 8, stream);
      driver.eventRecord(event, stream);
      let t0 = process.hrtime.bigint();
      while (!driver.eventQuery(event)) {
        /* spin */
      }
      const s = microsSince(t0);

      driver.memsetD8Async(ptr, i & 0xff, 8, stream);
      driver.eventRecord(event, stream);
      t0 = process.hrtime.bigint();
      await driver.whenComplete(event);
      const p = microsSince(t0);

      if (i >= WARMUP) {
        spin.push(s);
        promise.push(p);
      }
    }
  } finally {
    driver.streamSynchronize(stream);
    driver.eventDestroy(event);
    driver.streamDestroy(stream);
    driver.memFree(ptr);
  }

  spin.sort((a, b) => a - b);
  promise.sort((a, b) => a - b);
  const spinMedianUs = quantile(spin, 0.5);
  const extra = promise.map((p) => p - spinMedianUs); // already sorted
  return {
    medianUs: quantile(extra, 0.5),
    p99Us: quantile(extra, 0.99),
    spinMedianUs,
    promiseMedianUs: quantile(promise, 0.5),
    iterations,
  };
}
