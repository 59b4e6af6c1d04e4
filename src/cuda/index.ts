/**
 * The CUDA layer ('smcuda/cuda'): the driver interface, both
 * implementations, and openDriver, which picks one. Importing this module
 * loads nothing native: the addon is loaded when a driver first needs it.
 *
 * @module smcuda/cuda
 */
export * from './driver.js';
export { DeviceAllocation } from './device-allocation.js';
export { openDriver, type OpenDriverOptions, type OpenedDriver } from './open-driver.js';
export { NativeCudaDriver } from './native-driver.js';
export { SimulatedCudaDriver, SIM_DRIVER_VERSION, type SimDriverOptions } from './sim-driver.js';
export {
  DEFAULT_SIM_DEVICES,
  simEnv,
  type DeviceRef,
  type SimDevice,
  type SimFaults,
  type SimOptions,
} from './sim/config.js';
export type { SimFdFaults } from './sim/fd-faults.js';
export { SIM_SHM_PREFIX } from './sim/ipc-handle.js';
export { sweepSimSegments } from './sim/sweep.js';
export { CUDA_RESULTS, type CudaErrorName } from './sim/result-codes.js';
export { sharedSegment } from './shared-segment.js';
