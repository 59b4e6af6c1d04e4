/**
 * The collectives suite's plumbing: the figures carry issue 26's table as
 * targets, the plan picks the issue's sizes on a GPU and small ones on the
 * simulator; smcuda's figures come from the Communicator plugged in there.
 */
import { describe, expect, it } from 'vitest';
import { ALGORITHMS, allreduceSpec, COLLECTIVE_FIG, COLLECTIVE_GPU_SIZES, GRADIENT_BYTES } from '../../../src/bench/collective-figures.js';
import { collectivesPlan, firstWarmupCalls } from '../../../src/bench/collectives-suite.js';
import type { BenchOptions } from '../../../src/bench/plan.js';
import { SUITES } from '../../../src/bench/suites.js';
import { COLLECTIVES_UNDER_TEST } from '../../../src/bench/under-test.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;
const opts = (o: Partial<BenchOptions> = {}): BenchOptions => ({ driver: 'auto', suites: ['collectives'], smoke: false, window: 8, timeoutMs: 60_000, ...o });
const roomy = { shmBytes: 64 * GiB, hostBytes: 256 * GiB };

describe('collectives figures', () => {
  it('holds smcuda to the issue table: ≤ 8 µs to 256 KiB, ≤ 11 µs at 1 MiB, ≤ 60 µs at 16 MiB, ≥ 340 GB/s bus bandwidth from 256 MiB', () => {
    expect(SUITES).toContain('collectives');
    for (const size of [8, KiB, 16 * KiB, 256 * KiB])
      expect(allreduceSpec(size)).toMatchObject({ unit: 'µs', scope: 'gpu', target: { on: 'value', relation: '<=', bound: 8 } });
    expect(allreduceSpec(MiB)?.target).toMatchObject({ relation: '<=', bound: 11 });
    expect(allreduceSpec(16 * MiB)?.target).toMatchObject({ relation: '<=', bound: 60 });
    for (const size of [256 * MiB, GiB]) expect(allreduceSpec(size)).toMatchObject({ unit: 'GB/s', target: { on: 'value', relation: '>=', bound: 340 } });
    expect(allreduceSpec(4 * MiB)).toBeUndefined(); // not in the table
    for (const size of COLLECTIVE_GPU_SIZES) expect(allreduceSpec(size)?.baselineName).toMatch(/^NCCL all_reduce through PyTorch, same run/);
    expect(COLLECTIVE_FIG.graph8).toMatchObject({ unit: 'µs', target: { on: 'value', bound: 5 } });
  });

  it('the gradient average must be at least 100× faster than seed 003: value / pageable baseline ≤ 0.01', () => {
    expect(COLLECTIVE_FIG.gradient).toMatchObject({ unit: 'ms', scope: 'gpu', target: { on: 'ratio', relation: '<=', bound: 0.01 } });
    expect(COLLECTIVE_FIG.gradient.baselineName).toMatch(/seed 003.*pageable/);
    expect(GRADIENT_BYTES).toBe(100_000_000);
    expect(COLLECTIVE_FIG.stagedPinned(GRADIENT_BYTES).name).toContain('100 MB');
    expect(COLLECTIVE_FIG.stagedPinned(GRADIENT_BYTES).scope).toBe('any');
  });

  it('one untargeted figure per algorithm, with distinct names', () => {
    const names = ALGORITHMS.map((a) => COLLECTIVE_FIG.algorithm(a).name);
    expect(names).toEqual([
      'allreduce f32 1 MiB, smcuda one-shot (forced), stream time',
      'allreduce f32 1 MiB, smcuda one-shot-ll (forced), stream time',
      'allreduce f32 1 MiB, smcuda two-shot (forced), stream time',
      'allreduce f32 1 MiB, smcuda pipeline (forced), stream time',
    ]);
    for (const a of ALGORITHMS) expect(COLLECTIVE_FIG.algorithm(a).target).toBeUndefined();
  });

  it("smcuda's Communicator is plugged in (a build without it lists the figures as skipped, naming it)", () => {
    expect(typeof COLLECTIVES_UNDER_TEST.factory).toBe('function');
    expect(COLLECTIVES_UNDER_TEST.missing).toMatch(/Communicator/);
  });
});

describe('collectives plan', () => {
  it('on a GPU: the issue sizes 8 B to 1 GiB, 100 MB gradient, 5 runs', () => {
    const p = collectivesPlan({ sim: false, opts: opts() }, 2, roomy);
    expect(p.sizes).toEqual(COLLECTIVE_GPU_SIZES);
    expect(p.gradientBytes).toBe(GRADIENT_BYTES);
    expect(p.runs).toBeGreaterThanOrEqual(5);
    expect(p.staged(GiB).iters).toBeGreaterThanOrEqual(3);
    expect(p.staged(8).iters).toBeLessThanOrEqual(200);
    // Small calls run back to back in long runs (a run of 5 was mostly the final synchronise), large ones at least 5 a run.
    expect(p.device(8).iters).toBe(1000);
    expect(p.device(16 * MiB).iters).toBe(256);
    expect(p.device(GiB).iters).toBe(5);
    expect(p.notes).toEqual([]);
  });

  it('on the simulator: small sizes and a smaller gradient, said in a note; smoke smaller still', () => {
    const sim = collectivesPlan({ sim: true, opts: opts() }, 2, roomy);
    expect(Math.max(...sim.sizes)).toBeLessThanOrEqual(MiB);
    expect(sim.gradientBytes).toBeLessThan(GRADIENT_BYTES);
    expect(sim.notes.join('\n')).toMatch(/gradient average is of/);
    const smoke = collectivesPlan({ sim: true, opts: opts({ smoke: true }) }, 2, roomy);
    expect(smoke.sizes.length).toBeLessThanOrEqual(sim.sizes.length);
    expect(smoke.staged(8).iters).toBeLessThanOrEqual(5);
  });

  it('--sizes: whole f32 elements only; what does not fit in /dev/shm or host memory is left out, with a note', () => {
    const p = collectivesPlan({ sim: false, opts: opts({ sizes: [6, 8, 4 * KiB, 512 * MiB] }) }, 2, { shmBytes: 1 * GiB, hostBytes: 256 * GiB });
    expect(p.sizes).toEqual([8, 4 * KiB]);
    expect(p.notes.join('\n')).toMatch(/not whole f32 elements left out: 6 B/);
    expect(p.notes.join('\n')).toMatch(/lack of host or \/dev\/shm memory: 512 MiB/);
  });
});

describe('collectives plan, short of memory', () => {
  it('shrinks the gradient average to what fits, and says so', () => {
    const p = collectivesPlan({ sim: false, opts: opts({ sizes: [8] }) }, 2, { shmBytes: 256 * MiB, hostBytes: 256 * GiB });
    expect(p.gradientBytes).toBeLessThan(GRADIENT_BYTES);
    expect(p.gradientBytes % 4).toBe(0);
    expect(3 * p.gradientBytes).toBeLessThanOrEqual(0.8 * 256 * MiB);
    expect(p.notes.join('\n')).toMatch(/gradient average is of .* instead of 95.4 MiB/);
  });
});

describe('the first size warms up for about 1 s of calls, whatever its size', () => {
  it('100,000 small calls, fewer as calls grow: a 1 GiB first size is not held up for minutes', () => {
    expect(firstWarmupCalls(8)).toBe(100_000);
    expect(firstWarmupCalls(1 << 20)).toBeGreaterThan(50_000);
    expect(firstWarmupCalls(1 << 30)).toBeLessThan(300);
    // About 1 s at the estimate's 10 µs and 300 GB/s a call, at every size.
    for (const size of [1 << 20, 16 << 20, 256 << 20, 1 << 30]) {
      const us = firstWarmupCalls(size) * (10 + size / 300e3);
      expect(us).toBeGreaterThanOrEqual(1_000_000);
      expect(us).toBeLessThan(1_000_000 + 10 + size / 300e3);
    }
  });
});
