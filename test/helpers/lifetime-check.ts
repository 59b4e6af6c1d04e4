/**
 * The simulated driver's lifetime check, asserted after every test
 * (test/setup/lifetime-check.ts, a vitest setup file): each SimulatedCudaDriver
 * made in this test process is noted, and a test fails if any of them noted a
 * release under GPU work (lifetimeViolations) since the last check. A test that
 * provokes violations on purpose says so with `expectLifetimeViolations(driver)`.
 */
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';

const drivers = new Set<SimulatedCudaDriver>();
/** Violations of each driver already reported (or expected): only new ones fail a test. */
const seen = new WeakMap<SimulatedCudaDriver, number>();
const expected = new WeakSet<SimulatedCudaDriver>();

export function startLifetimeRegistry(): void {
  SimulatedCudaDriver.registry = drivers;
}

/** `driver` is made to release under GPU work (a test of the check itself): its violations are not a failure. */
export function expectLifetimeViolations(driver: SimulatedCudaDriver): void {
  expected.add(driver);
}

/** The violations noted since the last call, each with its driver's instance tag. */
export function newLifetimeViolations(): string[] {
  const found: string[] = [];
  for (const d of drivers) {
    const all = d.lifetimeViolations;
    const from = seen.get(d) ?? 0;
    seen.set(d, all.length);
    if (expected.has(d)) continue;
    for (const v of all.slice(from)) found.push(`sim driver ${d.instance}: ${v}`);
  }
  return found;
}
