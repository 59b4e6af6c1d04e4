/**
 * A simulated driver on device 0, closed after each test: for unit tests of
 * one component over a driver (`const drv = simDevice()` inside a test).
 */
import { afterEach } from 'vitest';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';

const open: SimulatedCudaDriver[] = [];

afterEach(() => {
  for (const d of open.splice(0)) d.close();
});

export function simDevice(): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver();
  d.init();
  d.setDevice(0);
  open.push(d);
  return d;
}
