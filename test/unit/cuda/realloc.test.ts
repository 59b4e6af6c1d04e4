/** The free / realloc scenario between two real processes, on the simulated driver. */
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { reallocCases } from '../../helpers/realloc-cases.js';

reallocCases('simulated driver, two processes on devices 0 and 1', {
  kind: 'sim',
  devices: [0, 1],
  makeDriver: () => new SimulatedCudaDriver(),
  skip: false,
});
