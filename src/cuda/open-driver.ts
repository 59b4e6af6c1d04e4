/**
 * openDriver: picks the CUDA driver for this process and says why.
 *
 *  - 'native': the real driver (libcuda.so.1 through the addon); refused with
 *    DriverUnavailableError, carrying the reason, where it cannot be used.
 *  - 'sim': the simulated driver (shared memory; no GPU needed).
 *  - 'auto' (default): native when it is available and sees at least one
 *    device, else the simulator; `reason` tells which and why, e.g.
 *    "simulated driver: libcuda.so.1 not found".
 *
 * Both drivers' modules are imported lazily: a missing or broken native build
 * only matters when the native driver is asked for, and the simulator (sim-driver.ts
 * and src/cuda/sim/, src/kernels/sim/) is loaded only when it is chosen, so that
 * `import 'smcuda'` does not load it. The returned driver
 * is initialised (init()), and made current on `device` when one is given.
 */
import { ArgumentTypeError, DriverUnavailableError } from '../errors.js';
import type { CudaDriver, DriverKind } from './driver.js';
import type { SimDriverOptions } from './sim-driver.js';
import { withoutSimHint } from './without-sim-hint.js';

export { withoutSimHint };

export interface OpenDriverOptions {
  driver?: 'auto' | DriverKind;
  /** Options of the simulated driver (else SMCUDA_SIM / SMCUDA_SIM_VISIBLE from the environment). */
  sim?: SimDriverOptions;
  /** setDevice(device) on the returned driver. */
  device?: number;
}

export interface OpenedDriver {
  driver: CudaDriver;
  kind: DriverKind;
  /** Which driver was chosen and why, in words. */
  reason: string;
}

/** Where native-driver.ts lives, relative to this module (a variable so the import stays lazy). */
const NATIVE_DRIVER_MODULE = './native-driver.js';

export async function openDriver(options: OpenDriverOptions = {}): Promise<OpenedDriver> {
  const choice = options.driver ?? 'auto';
  if (choice !== 'auto' && choice !== 'native' && choice !== 'sim') {
    throw new ArgumentTypeError(`driver must be 'auto', 'native' or 'sim', got ${JSON.stringify(choice)}`);
  }
  let opened: OpenedDriver;
  if (choice === 'sim') {
    opened = { driver: await openSim(options.sim), kind: 'sim', reason: 'simulated driver: requested' };
  } else {
    const native = await tryNative();
    if (native.driver) {
      opened = { driver: native.driver, kind: 'native', reason: native.reason };
    } else if (choice === 'native') {
      throw new DriverUnavailableError(
        `the native CUDA driver cannot be used: ${withoutSimHint(native.reason)}; or pass driver: 'sim' (or 'auto'; CLI: --driver sim) to run without a GPU`,
      );
    } else {
      // Already on the simulator: the reason must not advise using it.
      opened = { driver: await openSim(options.sim), kind: 'sim', reason: `simulated driver: ${withoutSimHint(native.reason)} (for the native driver)` };
    }
  }
  if (options.device !== undefined) {
    try {
      opened.driver.setDevice(options.device);
    } catch (err) {
      opened.driver.close();
      throw err;
    }
  }
  return opened;
}

async function openSim(options: SimDriverOptions | undefined): Promise<CudaDriver> {
  // Loaded on first use: the simulator is no part of `import 'smcuda'`.
  const { SimulatedCudaDriver } = await import('./sim-driver.js');
  const driver = new SimulatedCudaDriver(options);
  const status = driver.status();
  if (!status.available) {
    driver.close();
    throw new DriverUnavailableError(`the simulated driver cannot be used: ${status.reason}`);
  }
  driver.init();
  return driver;
}

/** The native driver, initialised and with a device, or why not. */
async function tryNative(): Promise<{ driver?: CudaDriver; reason: string }> {
  let Native: new () => CudaDriver;
  try {
    const mod = (await import(NATIVE_DRIVER_MODULE)) as { NativeCudaDriver?: new () => CudaDriver };
    if (typeof mod.NativeCudaDriver !== 'function') return { reason: 'native-driver.js does not export NativeCudaDriver' };
    Native = mod.NativeCudaDriver;
  } catch (err) {
    return { reason: `native driver module failed to load: ${firstLine(err)}` };
  }
  let driver: CudaDriver;
  try {
    driver = new Native();
  } catch (err) {
    return { reason: firstLine(err) };
  }
  const status = driver.status();
  if (!status.available) {
    driver.close();
    return { reason: status.reason ?? 'the native driver reports it is unavailable' };
  }
  try {
    driver.init();
    const count = driver.deviceCount();
    if (count === 0) {
      driver.close();
      return { reason: 'libcuda loaded but no CUDA device is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)' };
    }
    return { driver, reason: `native driver: ${count} CUDA device(s), driver version ${status.driverVersion}` };
  } catch (err) {
    driver.close();
    return { reason: `cuInit failed: ${firstLine(err)}` };
  }
}

function firstLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .join(' ')
    .slice(0, 500);
}
