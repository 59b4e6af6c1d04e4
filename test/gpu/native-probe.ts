/**
 * Whether the native driver can run the GPU tests here, and why not. The
 * native driver is imported lazily, so GPU test files load (and skip, visibly,
 * with the reason in their suite names) where the addon or libcuda is missing.
 */
import type { CudaDriver } from '../../src/cuda/driver.js';

type GpuDrivenStatus = ReturnType<CudaDriver['gpuDrivenStatus']>;

export interface NativeProbe {
  /** Devices visible to this process (0 where skipped). */
  devices: number;
  /** false, or why the GPU tests cannot run here. */
  skip: string | false;
  /** A new native driver (only where `skip` is false). */
  make?: () => CudaDriver;
}

export async function probeNative(): Promise<NativeProbe> {
  try {
    const { NativeCudaDriver } = await import('../../src/cuda/native-driver.js');
    const d: CudaDriver = new NativeCudaDriver();
    try {
      const status = d.status();
      if (!status.available) return { devices: 0, skip: status.reason ?? 'native driver unavailable' };
      d.init();
      const devices = d.deviceCount();
      if (devices === 0) return { devices: 0, skip: 'no CUDA device visible' };
      return { devices, skip: false, make: () => new NativeCudaDriver() };
    } finally {
      d.close();
    }
  } catch (err) {
    return { devices: 0, skip: `native driver failed to load: ${(err as Error).message.split('\n')[0]}` };
  }
}

/**
 * probeNative, then a GPU-driven capability the tests need: `lacks` returns
 * why they cannot run with this driver's GPU-driven status (or undefined).
 */
export async function probeNativeGpuDriven(lacks: (g: GpuDrivenStatus) => string | undefined): Promise<NativeProbe> {
  const p = await probeNative();
  if (p.skip !== false) return p;
  const d = p.make!();
  try {
    d.init();
    const why = lacks(d.gpuDrivenStatus());
    return why === undefined ? p : { ...p, skip: why };
  } finally {
    d.close();
  }
}
