/**
 * The free / realloc scenario between two real processes on the native
 * driver: same GPU, and across two GPUs where there are two. Skipped, visibly,
 * where no GPU is usable.
 */
import type { CudaDriver } from '../../src/cuda/driver.js';
import { reallocCases } from '../realloc-cases.js';

async function probe(): Promise<{ devices: number; skip: string | false; make?: () => CudaDriver }> {
  try {
    const { NativeCudaDriver } = await import('../../src/cuda/native-driver.js');
    const d = new NativeCudaDriver();
    try {
      const s = d.status();
      if (!s.available) return { devices: 0, skip: s.reason ?? 'native driver unavailable' };
      d.init();
      const devices = d.deviceCount();
      return devices > 0 ? { devices, skip: false, make: () => new NativeCudaDriver() } : { devices: 0, skip: 'no CUDA device' };
    } finally {
      d.close();
    }
  } catch (err) {
    return { devices: 0, skip: `native driver failed to load: ${(err as Error).message.split('\n')[0]}` };
  }
}

const p = await probe();
reallocCases('native driver, same GPU', { kind: 'native', devices: [0, 0], makeDriver: () => p.make!(), skip: p.skip });
reallocCases('native driver, GPU0 → GPU1', {
  kind: 'native',
  devices: [0, 1],
  makeDriver: () => p.make!(),
  skip: p.skip || (p.devices < 2 ? `needs 2 GPUs, ${p.devices} visible` : false),
});
