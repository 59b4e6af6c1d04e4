/**
 * The native floor's plumbing (native-floor.ts over native/floor.cc) on the
 * simulated driver: both sides of the ping-pong run on the addon's threads,
 * so one process can hold both ranks. Values are never asserted beyond
 * "a half round trip was measured": speed lives in `smcuda bench`.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadAddon } from '../../../src/cuda/addon.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { FLOOR_HEADER_BYTES, FloorSide, floorSegmentBytes } from '../../../src/bench/native-floor.js';

const drivers: SimulatedCudaDriver[] = [];
const sides: FloorSide[] = [];
afterEach(() => {
  for (const s of sides.splice(0)) s.finish();
  for (const d of drivers.splice(0)) d.close();
});

function pair(): [FloorSide, FloorSide] {
  const d = new SimulatedCudaDriver();
  drivers.push(d);
  const s: [FloorSide, FloorSide] = [new FloorSide(d, 0, 0), new FloorSide(d, 1, 1)];
  sides.push(...s);
  return s;
}

const name = () => `/smcuda-floor-test-${process.pid}-${Math.random().toString(16).slice(2, 10)}`;

describe('the native floor on the simulated driver', () => {
  it('lays the segment out as two flags, plus two data areas where there is no device', () => {
    expect(floorSegmentBytes(8, true)).toBe(FLOOR_HEADER_BYTES);
    expect(floorSegmentBytes(1024, false)).toBe(FLOOR_HEADER_BYTES + 2048);
  });

  it('runs the ping-pong between two sides and returns one half round trip per measured iteration (rank 1 only)', async () => {
    const [r0, r1] = pair();
    const segment = name();
    const size = 4096;
    expect(r0.prepare(segment, size)).toEqual({}); // no device: nothing to export
    expect(r1.prepare(segment, size)).toEqual({});
    const o = { segment, size, timeoutMs: 20_000 };
    const [s0, s1] = await Promise.all([r0.run(o, { iters: 30, warmup: 3 }), r1.run(o, { iters: 30, warmup: 3 })]);
    expect(s0).toEqual([]);
    expect(s1).toHaveLength(30);
    for (const us of s1) expect(us).toBeGreaterThan(0);
  });

  it('unlinks its segment when rank 0 finishes', () => {
    const [r0] = pair();
    const segment = name();
    r0.prepare(segment, 64);
    r0.finish();
    expect(() => drivers[0]!.shmOpen(segment)).toThrow();
  });

  it('refuses a second prepare and a non-positive size', () => {
    const [r0, r1] = pair();
    expect(() => r1.prepare(name(), 0)).toThrow(RangeError);
    r0.prepare(name(), 64);
    expect(() => r0.prepare(name(), 64)).toThrow(/prepared already/);
  });

  it('gives up, with a reason, when the peer never answers', async () => {
    const [r0] = pair();
    const segment = name();
    r0.prepare(segment, 64);
    await expect(r0.run({ segment, size: 64, timeoutMs: 50 }, { iters: 5, warmup: 0 })).rejects.toThrow(/did not answer within 50 ms/);
  });

  it('stops at once when the peer gave up (its flag says abort)', async () => {
    const [r0, r1] = pair();
    const segment = name();
    r0.prepare(segment, 64);
    // rank 0 times out quickly and marks its flag; rank 1, with a long timeout, must not wait for its own.
    const r0run = r0.run({ segment, size: 64, timeoutMs: 30 }, { iters: 1, warmup: 0 }).catch((e: Error) => e);
    expect(await r0run).toBeInstanceOf(Error);
    const t0 = performance.now();
    await expect(r1.run({ segment, size: 64, timeoutMs: 30_000 }, { iters: 3, warmup: 0 })).rejects.toThrow(/gave up/);
    expect(performance.now() - t0).toBeLessThan(20_000);
  });

  it('validates its arguments in the addon: role, alignment, and room in the segment', () => {
    const addon = loadAddon();
    const ab = new ArrayBuffer(256);
    const base = { role: 0 as const, device: -1, size: 8, iters: 1, warmup: 0, timeoutMs: 10 };
    expect(() => addon.floorPingPong(ab, 0, { ...base, role: 2 as 0 })).toThrow(RangeError);
    expect(() => addon.floorPingPong(ab, 8, base)).toThrow(/64-byte aligned/);
    expect(() => addon.floorPingPong(ab, 0, { ...base, size: 1024 })).toThrow(/needs 2176 bytes/);
    expect(() => addon.floorPingPong(ab, 0, { ...base, iters: 'x' as unknown as number })).toThrow(TypeError);
  });
});
