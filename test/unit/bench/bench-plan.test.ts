/**
 * The bench's plan: how many messages each point measures and warms up with.
 * The counts are the method (a point long enough to pay collections at their
 * real rate, streaming timed at steady state), so they are pinned here.
 */
import { describe, expect, it } from 'vitest';
import { type BenchOptions, makePlan } from '../../../src/bench/plan.js';

const MiB = 1 << 20;
const GiB = 1 << 30;
const opts = (over: Partial<BenchOptions> = {}): BenchOptions => ({ driver: 'auto', suites: [], smoke: false, window: 8, timeoutMs: 60_000, ...over });
const bigGpu = { deviceBytes: 80 * GiB };

describe('makePlan', () => {
  it('times 1 MiB streaming over 20,000 messages after 40,000 of warm-up on a GPU', () => {
    const plan = makePlan(opts(), 'native', bigGpu);
    expect(plan.streamSize).toBe(MiB);
    expect(plan.streaming).toEqual({ iters: 20_000, warmup: 40_000 });
  });

  it('takes the throughput figures that move with the machine (streaming, bidirectional, all-to-all) as the median of 5 runs on a GPU, 3 on the simulator, 2 in smoke runs', () => {
    expect(makePlan(opts(), 'native', bigGpu).throughputRuns).toBe(5);
    expect(makePlan(opts(), 'sim', { deviceBytes: GiB }).throughputRuns).toBe(3);
    expect(makePlan(opts({ smoke: true }), 'sim', { deviceBytes: GiB }).throughputRuns).toBe(2);
  });

  it('gives a bandwidth point ~32 GiB on a GPU, within 32..4000 messages', () => {
    const plan = makePlan(opts(), 'native', bigGpu);
    expect(plan.bandwidth(16 * MiB).iters).toBe(2048);
    expect(plan.bandwidth(GiB).iters).toBe(32);
    expect(plan.bandwidth(8).iters).toBe(4000);
    expect(plan.bandwidth(16 * MiB).warmup).toBe(50);
  });

  it('keeps smoke runs tiny', () => {
    const plan = makePlan(opts({ smoke: true }), 'sim', { deviceBytes: GiB });
    expect(plan.streaming.iters).toBeLessThanOrEqual(3);
    expect(plan.streaming.warmup).toBe(1);
    expect(plan.bandwidth(64 << 10)).toEqual({ iters: 3, warmup: 1 });
  });

  it('leaves out sizes that do not fit the device', () => {
    const plan = makePlan(opts(), 'native', { deviceBytes: 2 * GiB });
    expect(plan.sizes).not.toContain(GiB);
    expect(plan.notes.join(' ')).toMatch(/left out for lack of device memory: 1 GiB/);
  });

  it('moves 256 MiB per memory kind on a GPU, less on the simulator and in smoke runs, halved where it does not fit', () => {
    const memory = opts({ suites: ['memory'] });
    expect(makePlan(memory, 'native', bigGpu).memorySize).toBe(256 * MiB);
    expect(makePlan(memory, 'sim', { deviceBytes: 8 * GiB }).memorySize).toBe(64 * MiB);
    expect(makePlan(opts({ suites: ['memory'], smoke: true }), 'native', bigGpu).memorySize).toBe(64 << 10);
    const small = makePlan(memory, 'native', { deviceBytes: GiB });
    expect(small.memorySize).toBe(128 * MiB); // vmm-chunked holds twice the message: 2.5 × 512 MiB > 0.9 GiB
    expect(small.notes.join(' ')).toMatch(/memory suite: 128 MiB transfers instead of 256 MiB, for lack of device memory/);
  });
});
