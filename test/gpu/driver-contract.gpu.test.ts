/**
 * The CudaDriver contract (../helpers/driver-contract.ts) on the native driver, over
 * the real libcuda.so.1. Where no GPU is usable (no addon, no libcuda, no
 * device) every case is reported as skipped, with the reason in the suite
 * name; the cross-device cases need 2 devices.
 *
 * The native driver is imported lazily, so this file loads (and skips) even
 * where the native build is missing.
 */
import { driverContract } from '../helpers/driver-contract.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();

driverContract('native driver', () => probe.make!(), {
  kind: 'native',
  devices: probe.devices,
  skip: probe.skip,
});
