/**
 * The raw-copy baseline (src/bench/baselines.ts) on the simulated driver: one
 * pair of buffers, or a window's slices in turn (the same-GPU suite measures
 * both: one pair of 1-16 MiB buffers stays in a GPU's L2 cache, a window's
 * slices do not). Two driver instances stand for the exporting and the
 * copying process.
 */
import { describe, expect, it, vi } from 'vitest';
import { rawCopy } from '../../../src/bench/baselines.js';
import type { ExportedBuffer } from '../../../src/bench/protocol.js';
import type { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { simDevice } from '../../helpers/sim-device.js';

function pair(): { exporter: SimulatedCudaDriver; copier: SimulatedCudaDriver } {
  return { exporter: simDevice({ env: {} }), copier: simDevice({ env: {} }) };
}

function exportBuffer(d: SimulatedCudaDriver, size: number): ExportedBuffer {
  const base = d.memAlloc(size);
  return { handle: d.ipcGetMemHandle(base), base, size, bufferId: d.pointerAttributes(base).bufferId, deviceUuid: d.deviceInfo(0).uuid };
}

describe('rawCopy', () => {
  it('copies slice i mod slices of the peer buffer into the same slice of its own, and times every copy', async () => {
    const { exporter, copier } = pair();
    const size = 4096;
    const buffer = exportBuffer(exporter, 3 * size);
    const copies = vi.spyOn(copier, 'memcpyAsync');
    const free = vi.spyOn(copier, 'memFree');
    const r = await rawCopy(copier, buffer, size, { iters: 7, warmup: 2 }, 3);
    expect(r.bytes).toBe(7 * size);
    expect(r.seconds).toBeGreaterThan(0);
    expect(copies).toHaveBeenCalledTimes(9);
    const [dst0, src0] = copies.mock.calls[0]!;
    // warm-up 0, 1, then timed 0..6: slice (i mod 3) on both sides
    const slices = copies.mock.calls.map(([dst, src, bytes]) => {
      expect(bytes).toBe(size);
      expect(src - src0).toBe(dst - dst0);
      return Number(dst - dst0) / size;
    });
    expect(slices).toEqual([0, 1, 0, 1, 2, 0, 1, 2, 0]);
    expect(free).toHaveBeenCalledWith(dst0);
  });

  it('copies one pair of buffers by default', async () => {
    const { exporter, copier } = pair();
    const buffer = exportBuffer(exporter, 1024);
    const copies = vi.spyOn(copier, 'memcpyAsync');
    await rawCopy(copier, buffer, 1024, { iters: 3, warmup: 1 });
    expect(new Set(copies.mock.calls.map(([dst, src]) => `${dst}:${src}`)).size).toBe(1);
  });

  it('refuses slices that do not fit the exported buffer, before opening it', async () => {
    const { exporter, copier } = pair();
    const buffer = exportBuffer(exporter, 2 * 1024);
    const open = vi.spyOn(copier, 'ipcOpenMemHandle');
    await expect(rawCopy(copier, buffer, 1024, { iters: 1, warmup: 0 }, 3)).rejects.toMatchObject({ code: 'SMCUDA_OUT_OF_RANGE' });
    await expect(rawCopy(copier, buffer, 1024, { iters: 1, warmup: 0 }, 0)).rejects.toThrow(/slices/);
    expect(open).not.toHaveBeenCalled();
  });
});
