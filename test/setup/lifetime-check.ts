/**
 * After every test: no simulated driver made in this test process released
 * anything under GPU work (test/helpers/lifetime-check.ts). Registered first,
 * so it runs after the test file's own afterEach hooks (their closes) have run.
 */
import { afterAll, afterEach, expect } from 'vitest';
import { newLifetimeViolations, startLifetimeRegistry } from '../helpers/lifetime-check.js';

startLifetimeRegistry();

afterEach(() => {
  expect(newLifetimeViolations(), 'simulated driver lifetime violations (releases under GPU work)').toEqual([]);
});

afterAll(() => {
  expect(newLifetimeViolations(), 'simulated driver lifetime violations after the last test').toEqual([]);
});
