/**
 * The cache suite's hit patterns (src/bench/cache-hits.ts): the orders are
 * what they say, the same every run, and the measurement refuses what would
 * not be a hit's cost.
 */
import { describe, expect, it } from 'vitest';
import { cacheHitPattern, hitOrder } from '../../../src/bench/cache-hits.js';
import type { ExportedBuffer } from '../../../src/bench/protocol.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { ArgumentRangeError } from '../../../src/errors.js';
import { FakeIpcDriver } from '../../helpers/fake-ipc-driver.js';

const GPU0 = 'GPU-00000000-0000-0000-0000-000000000000';

function buffers(n: number): { driver: CudaDriver; buffers: ExportedBuffer[] } {
  const fake = new FakeIpcDriver();
  const out = Array.from({ length: n }, (_, i) => {
    const a = fake.allocate(GPU0, 0x7000_0000_0000n + BigInt(i) * 0x4000_0000n, 1 << 20);
    return { handle: a.handle, base: a.base, size: a.size, bufferId: a.bufferId, deviceUuid: GPU0 };
  });
  return { driver: fake as unknown as CudaDriver, buffers: out };
}

describe('cache hit patterns', () => {
  it('window: the buffers in turn', () => {
    const order = hitOrder('window', 8);
    expect([...order.subarray(0, 18)]).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1]);
  });

  it('random: every index in range, most of them used, the same order every run', () => {
    const a = hitOrder('random', 256);
    expect(Math.max(...a)).toBeLessThan(256);
    expect(new Set(a).size).toBeGreaterThan(250);
    expect([...hitOrder('random', 256)]).toEqual([...a]);
  });

  it('measures only hits: one sample per batch, CPU and wall time, and the one-buffer hit beside them', async () => {
    const { driver, buffers: b } = buffers(16);
    const r = await cacheHitPattern(driver, b, 'random', 3, 200);
    for (const samples of [r.cpuNs, r.wallNs, r.sameCpuNs]) {
      expect(samples).toHaveLength(3);
      for (const ns of samples) expect(Number.isFinite(ns) && ns >= 0).toBe(true);
    }
  });

  it('refuses fewer than two buffers with ArgumentRangeError, before opening anything', async () => {
    const { driver, buffers: b } = buffers(1);
    await expect(cacheHitPattern(driver, b, 'window', 1, 1)).rejects.toBeInstanceOf(ArgumentRangeError);
    expect((driver as unknown as FakeIpcDriver).openCalls).toBe(0);
  });
});
