/**
 * The completion-latency benchmark (src/bench/completion-latency.ts) runs on
 * the simulated driver: its figures are shaped right and it frees what it
 * allocated. The figures themselves mean something only on a GPU
 * (test/gpu/measure-driver.mjs).
 */
import { describe, expect, it, vi } from 'vitest';
import { measureCompletionLatency } from '../../../src/bench/completion-latency.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';

describe('measureCompletionLatency', () => {
  it('measures spin and promise completions and releases its stream, event and memory', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    try {
      const free = vi.spyOn(d, 'memFree');
      const r = await measureCompletionLatency(d, 5);
      expect(r.iterations).toBe(5);
      for (const v of [r.medianUs, r.p99Us, r.spinMedianUs, r.promiseMedianUs]) expect(Number.isFinite(v)).toBe(true);
      expect(r.p99Us).toBeGreaterThanOrEqual(r.medianUs);
      expect(free).toHaveBeenCalledTimes(1);
    } finally {
      d.close();
    }
  });

  it('refuses a driver without a device', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    try {
      await expect(measureCompletionLatency(d, 1)).rejects.toMatchObject({ code: 'SMCUDA_CONFIG' });
    } finally {
      d.close();
    }
  });
});
