/**
 * What the tests of GpuWork and its copy paths share (test/unit/progress/):
 * pattern bytes, device copies that say whether they landed, completions
 * that record their calls, and a wait on the event loop.
 */
import { expect } from 'vitest';
import type { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import type { Completion } from '../../src/gpu/gpu-work.js';

/** Deterministic non-zero bytes. */
export function pattern(size: number, seed: number): Uint8Array {
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i++) out[i] = ((i * 31 + seed * 7) % 255) + 1;
  return out;
}

/**
 * Lets the event loop turn until `done()` holds, for up to 5 s (a bound in
 * turns alone failed on a fast machine: 10,000 turns passed before the 30 ms
 * of simulated slow copies did).
 */
export async function until(done: () => boolean, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (!done() && performance.now() < end) await new Promise<void>((r) => setImmediate(r));
  expect(done()).toBe(true);
}

/** The completions of one test: how often each was called and with what. */
export function recorder() {
  const calls: Array<Array<Error | undefined>> = [];
  const cb = (onCall?: (err?: Error) => void): Completion => {
    const mine: Array<Error | undefined> = [];
    calls.push(mine);
    return (err) => {
      mine.push(err);
      onCall?.(err);
    };
  };
  return {
    cb,
    calls,
    /** Calls so far, over all completions. */
    total: () => calls.reduce((n, c) => n + c.length, 0),
    /** Every completion called exactly once. */
    allOnce: () => calls.every((c) => c.length === 1),
  };
}

/** `count` copies of `size` pattern bytes (source k: seed `seed + k`) into zeroed destinations, not yet queued: queue them with GpuWork.copy; `landed()` reads a destination back. */
export function copies(d: SimulatedCudaDriver, count: number, size: number, seed = 1) {
  return Array.from({ length: count }, (_, k) => {
    const want = pattern(size, seed + k);
    const src = d.memAlloc(size);
    const dst = d.memAlloc(size);
    d.memcpyHtoD(src, want);
    d.memsetD8(dst, 0, size);
    const landed = () => {
      const out = new Uint8Array(size);
      d.memcpyDtoH(out, dst);
      return Buffer.compare(out, want) === 0;
    };
    return { src, dst, size, landed };
  });
}
