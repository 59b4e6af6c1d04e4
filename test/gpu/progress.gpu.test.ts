/**
 * The progress engine's three steps on a real GPU (src/progress/): a lone
 * small copy settles by the inline spin, copies in flight are settled by the
 * engine's polling, and once the engine stops, by the native completion
 * thread; every copy's bytes are right. Skipped, visibly, where no GPU is
 * usable.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { CudaDriver } from '../../src/cuda/driver.js';
import { GpuWork } from '../../src/gpu/gpu-work.js';
import { ProgressEngine } from '../../src/progress/engine.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
const MiB = 1 << 20;

describe.skipIf(p.skip)(`progress engine on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    vi.restoreAllMocks();
    for (const c of cleanups.splice(0).reverse()) c();
  });

  function setup(spinUs: number, engineUs: number): { d: CudaDriver; g: GpuWork; engine: ProgressEngine } {
    const d = p.make!();
    d.init();
    d.setDevice(0);
    const engine = new ProgressEngine(engineUs);
    const g = new GpuWork(d, spinUs, engine);
    cleanups.push(
      () => d.close(),
      () => g.close(),
      () => engine.stop(),
    );
    return { d, g, engine };
  }

  /** A device copy of `bytes` pattern bytes through GpuWork; resolves with whether the destination holds them. */
  function copy(d: CudaDriver, g: GpuWork, bytes: number, seed: number): Promise<boolean> {
    const host = new Uint8Array(bytes).map((_, i) => (i * 13 + seed) & 0xff);
    const src = d.memAlloc(bytes);
    const dst = d.memAlloc(bytes);
    d.memcpyHtoD(src, host);
    d.streamSynchronize(0n); // a pageable cuMemcpyHtoD may return before its DMA is done; g.stream does not wait for stream 0
    return new Promise<boolean>((resolve, reject) =>
      g.copy(g.stream, dst, src, bytes, (err) => {
        if (err) return reject(err);
        const back = new Uint8Array(bytes);
        d.memcpyDtoH(back, dst);
        d.memFree(src);
        d.memFree(dst);
        resolve(Buffer.compare(Buffer.from(back), Buffer.from(host)) === 0);
      }),
    );
  }

  it('a lone 8 B copy settles by the inline spin, not the native thread', async () => {
    const { d, g } = setup(1000, 250);
    const native = vi.spyOn(d, 'whenComplete');
    expect(await copy(d, g, 8, 1)).toBe(true);
    expect(native).not.toHaveBeenCalled();
  });

  it('copies in flight together are settled by the engine polling (no native wait)', async () => {
    const { d, g } = setup(0, 1_000_000);
    const native = vi.spyOn(d, 'whenComplete');
    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => copy(d, g, 1 * MiB, i)));
    expect(results.every(Boolean)).toBe(true);
    expect(native).not.toHaveBeenCalled();
  });

  it('after the engine stops, the native completion thread settles them', async () => {
    const { d, g, engine } = setup(0, 250);
    engine.stop();
    const native = vi.spyOn(d, 'whenComplete');
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => copy(d, g, 16 * MiB, i)));
    expect(results.every(Boolean)).toBe(true);
    expect(native).toHaveBeenCalled();
  });
});
