/**
 * The CudaDriver contract (driver-contract.ts) on the simulated driver, with
 * its default world of two devices; child processes join the same world
 * through SMCUDA_SIM.
 */
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { simEnv } from '../../../src/cuda/sim/config.js';
import { driverContract } from '../../helpers/driver-contract.js';

const world = {}; // the defaults: 'Simulated GPU 0/1', full peer access

driverContract('simulated driver', () => new SimulatedCudaDriver({ ...world, env: {} }), {
  kind: 'sim',
  devices: 2,
  childEnv: simEnv(world),
});
