/**
 * The CudaDriver contract (../driver-contract.ts) on the native driver, over
 * the real libcuda.so.1. Where no GPU is usable (no addon, no libcuda, no
 * device) every case is reported as skipped, with the reason in the suite
 * name; the cross-device cases need 2 devices.
 *
 * The native driver is imported lazily, so this file loads (and skips) even
 * where the native build is missing.
 */
import type { CudaDriver } from '../../src/cuda/driver.js';
import { driverContract } from '../driver-contract.js';

interface Probe {
  make?: () => CudaDriver;
  devices: number;
  skip: string | false;
}

async function probeNative(): Promise<Probe> {
  try {
    const { NativeCudaDriver } = await import('../../src/cuda/native-driver.js');
    const d: CudaDriver = new NativeCudaDriver();
    try {
      const status = d.status();
      if (!status.available) return { devices: 0, skip: status.reason ?? 'native driver unavailable' };
      d.init();
      const devices = d.deviceCount();
      if (devices === 0) return { devices: 0, skip: 'no CUDA device visible' };
      return { make: () => new NativeCudaDriver(), devices, skip: false };
    } finally {
      d.close();
    }
  } catch (err) {
    return { devices: 0, skip: `native driver failed to load: ${(err as Error).message.split('\n')[0]}` };
  }
}

const probe = await probeNative();

driverContract('native driver', () => probe.make!(), {
  kind: 'native',
  devices: probe.devices,
  skip: probe.skip,
});
