/**
 * A simulated driver on device 0, closed after each test: for unit tests of
 * one component over a driver (`const drv = simDevice()` inside a test).
 * `options` go to the driver (e.g. `{ env: {} }`: ignore SMCUDA_SIM).
 * Its afterEach was registered first, so it runs after the test file's own
 * (which may close what uses the driver first).
 */
import { afterEach } from 'vitest';
import { type SimDriverOptions, SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';

const open: SimulatedCudaDriver[] = [];

afterEach(() => {
  for (const d of open.splice(0)) d.close();
});

export function simDevice(options: SimDriverOptions = {}): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver(options);
  d.init();
  d.setDevice(0);
  open.push(d);
  return d;
}
