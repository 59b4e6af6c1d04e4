/**
 * The GPU-driven part of the driver contract (../helpers/driver-contract-gpu-driven.ts)
 * on the native driver. Where no GPU is usable every case is reported as
 * skipped, with the reason in the suite name; where the driver says stream
 * memory operations or graphs are not offered (gpuDrivenStatus), those
 * cases are skipped, each with that reason.
 */
import { gpuDrivenContract } from '../helpers/driver-contract-gpu-driven.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();

gpuDrivenContract('native driver', () => probe.make!(), {
  kind: 'native',
  devices: probe.devices,
  skip: probe.skip,
});
