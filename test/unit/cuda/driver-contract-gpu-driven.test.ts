/**
 * The GPU-driven part of the driver contract (driver-contract-gpu-driven.ts)
 * on the simulated driver: stream memory operations, across processes too,
 * and capture into graphs.
 */
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { simEnv } from '../../../src/cuda/sim/config.js';
import { gpuDrivenContract } from '../../helpers/driver-contract-gpu-driven.js';

const world = {};

gpuDrivenContract('simulated driver', () => new SimulatedCudaDriver({ ...world, env: {} }), {
  kind: 'sim',
  devices: 2,
  childEnv: simEnv(world),
});
