/**
 * Same-GPU copies by smcuda's copy kernel (src/copy-list.ts) on a real GPU:
 * GpuWork of an endpoint whose peer shares device 0 makes a run of two or
 * more copies into device 0 as one graph launch (its list copied from
 * pinned host memory, then smcuda_copy_list over it); every byte lands, at aligned and unaligned
 * addresses and sizes, and lists are reused once their copies completed.
 * Skipped, visibly, where no GPU is usable.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { CudaDriver, DevicePtr } from '../../src/cuda/driver.js';
import { GpuWork } from '../../src/gpu/gpu-work.js';
import { ProgressEngine } from '../../src/progress/engine.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
const KiB = 1024;
const MiB = 1 << 20;

describe.skipIf(p.skip)(`same-GPU copies by the copy kernel on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    vi.restoreAllMocks();
    for (const c of cleanups.splice(0).reverse()) c();
  });

  function setup(): { d: CudaDriver; g: GpuWork } {
    const d = p.make!();
    d.init();
    d.setDevice(0);
    const engine = new ProgressEngine(200);
    const g = new GpuWork(d, 0, engine, { device: 0, uuid: d.deviceInfo(0).uuid });
    cleanups.push(
      () => d.close(),
      () => g.close(),
      () => engine.stop(),
    );
    return { d, g };
  }

  function pattern(bytes: number, seed: number): Uint8Array {
    return new Uint8Array(bytes).map((_, i) => (i * 13 + seed * 7 + (i >> 9)) & 0xff);
  }

  it('runs of copies at aligned and unaligned offsets and sizes land byte for byte, each run one graph launch', async () => {
    const { d, g } = setup();
    const graph = vi.spyOn(d, 'graphLaunch');
    const batch = vi.spyOn(d, 'memcpyBatchAsync');
    const single = vi.spyOn(d, 'memcpyAsync');
    const sizes = [1, 15, 16, 4 * KiB + 3, 64 * KiB, 1 * MiB, 1 * MiB + 17, 3 * MiB - 5, 9 * MiB - 5];
    const offsets = [0, 1, 16, 7];
    const span = 10 * MiB + 64;
    const src = d.memAlloc(span);
    const dst = d.memAlloc(span * 2);
    const host = pattern(span, 3);
    d.memcpyHtoD(src, host);
    d.streamSynchronize(0n);
    let runs = 0; // graph launches expected
    for (const off of offsets) {
      for (const size of sizes) {
        d.memsetD8(dst, 0, span * 2);
        d.streamSynchronize(0n);
        // Two copies of the run: one at `off`, one at `off` shifted by a 16-byte-unaligned amount past it.
        const second = BigInt(span + 3);
        const done = [0, 1].map(
          (k) =>
            new Promise<void>((resolve, reject) =>
              g.copy(
                g.stream,
                dst + BigInt(off) + (k ? second : 0n),
                src + BigInt(off) + BigInt(k),
                size,
                (err) => (err ? reject(err) : resolve()),
                undefined,
                0,
              ),
            ),
        );
        if (2 * size <= 16 * MiB) runs++; // else a batch each (same-GPU batches hold at most 16 MiB), lone copies: cuMemcpyAsync
        await Promise.all(done);
        for (const k of [0, 1]) {
          const back = new Uint8Array(size);
          d.memcpyDtoH(back, dst + BigInt(off) + (k ? second : 0n));
          expect(Buffer.compare(back, host.subarray(off + k, off + k + size)), `offset ${off}, size ${size}, copy ${k}`).toBe(0);
        }
        // Nothing written outside the copies.
        const before = new Uint8Array(Math.min(off, 64));
        if (before.length > 0) {
          d.memcpyDtoH(before, dst);
          expect(before.every((b) => b === 0)).toBe(true);
        }
      }
    }
    expect(graph).toHaveBeenCalledTimes(runs);
    expect(batch).not.toHaveBeenCalled();
    // The lone copies (9 MiB - 5 twice: a batch each) went to cuMemcpyAsync on the endpoint's stream.
    expect(single.mock.calls.filter((c) => c[3] === g.stream)).toHaveLength(2 * offsets.length);
  });

  it('more runs in flight than lists (runs of two): the rest go to the driver; every copy lands', async () => {
    const { d, g } = setup();
    const graph = vi.spyOn(d, 'graphLaunch');
    const n = 40;
    const size = 256 * KiB;
    const src = d.memAlloc(size * n);
    const dst = d.memAlloc(size * n);
    const host = pattern(size * n, 9);
    d.memcpyHtoD(src, host);
    d.streamSynchronize(0n);
    d.memsetD8(dst, 0, size * n);
    d.streamSynchronize(0n);
    const done: Array<Promise<void>> = [];
    for (let k = 0; k < n; k++) {
      const at = BigInt(k * size);
      done.push(new Promise<void>((resolve, reject) => g.copy(g.stream, dst + at, src + at, size, (err) => (err ? reject(err) : resolve()), undefined, 0)));
      if (k % 2 === 1) await Promise.resolve(); // runs of two
    }
    await Promise.all(done);
    const back = new Uint8Array(size * n);
    d.memcpyDtoH(back, dst);
    expect(Buffer.compare(back, host)).toBe(0);
    expect(graph.mock.calls.length).toBeGreaterThanOrEqual(16);
    const ptrs: DevicePtr[] = [src, dst];
    for (const ptr of ptrs) d.memFree(ptr);
  });
});
