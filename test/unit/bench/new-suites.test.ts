/**
 * Plumbing of the suites of issue 27 (bidirectional, all-to-all, first-send,
 * memory-across) and of the floor ratio: plans, the first-send breakdown and
 * its timed driver, the figures' floor ratio and its column. The suites'
 * smoke run on the simulated driver is checked in bench.test.ts (one run of
 * every suite). No figure value is asserted: speed lives in `smcuda bench`.
 */
import { describe, expect, it } from 'vitest';
import { measured, withFloor } from '../../../src/bench/figures.js';
import { breakdown, epochMs, timedDriver, type CallRecord } from '../../../src/bench/first-send.js';
import { type BenchOptions, makePlan } from '../../../src/bench/plan.js';
import type { FirstSendResult } from '../../../src/bench/protocol.js';
import type { BenchReport } from '../../../src/bench/report.js';
import { ACROSS_SUITES, FIG, MEMORY_FIG, SUITES } from '../../../src/bench/suites.js';
import { renderReport } from '../../../src/bench/table.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';

const MiB = 1 << 20;
const GiB = 1 << 30;
const opts = (over: Partial<BenchOptions> = {}): BenchOptions => ({ driver: 'auto', suites: [], smoke: false, window: 8, timeoutMs: 60_000, ...over });

describe('the plan of the new suites', () => {
  it('on a GPU: 256 MiB both ways, 8 ranks × 16 MiB, 5 fresh pairs per first-send variant, memory across at 256 MiB and 1 GiB', () => {
    const plan = makePlan(opts({ suites: ['memory-across'] }), 'native', { deviceBytes: 80 * GiB });
    expect(plan.bidir.size).toBe(256 * MiB);
    expect(plan.bidir.repeat.iters).toBe(128); // 32 GiB each way, as a bandwidth point
    expect(plan.allToAll).toEqual({ ranks: 8, size: 16 * MiB, repeat: { iters: 100, warmup: 20 } });
    expect(plan.firstSend.reps).toBe(5);
    expect(plan.memoryAcrossSizes).toEqual([256 * MiB, GiB]);
    expect(plan.floor(8).iters).toBeGreaterThan(plan.floor(MiB).iters);
  });

  it('in smoke runs: tiny sizes and one repetition', () => {
    const plan = makePlan(opts({ smoke: true, suites: ['memory-across'] }), 'sim', { deviceBytes: GiB });
    expect(plan.bidir.size).toBe(64 << 10);
    expect(plan.allToAll.size).toBe(64 << 10);
    expect(plan.allToAll.repeat.iters).toBeLessThanOrEqual(2);
    expect(plan.firstSend.reps).toBe(1);
    expect(plan.memoryAcrossSizes).toEqual([64 << 10]);
    expect(plan.floor(8)).toEqual({ iters: 20, warmup: 2 });
  });

  it('leaves out memory-across sizes that do not fit, and says so', () => {
    const plan = makePlan(opts({ suites: ['memory-across'] }), 'native', { deviceBytes: 4 * GiB });
    expect(plan.memoryAcrossSizes).toEqual([256 * MiB]);
    expect(plan.notes.join(' ')).toMatch(/memory-across: 1 GiB left out/);
  });

  it('names every new suite, and runs bidirectional in the across pair', () => {
    for (const s of ['bidirectional', 'all-to-all', 'first-send', 'memory-across'] as const) expect(SUITES).toContain(s);
    expect(ACROSS_SUITES).toContain('bidirectional');
    expect(ACROSS_SUITES).not.toContain('all-to-all');
    expect(MEMORY_FIG.transfer('pool', 'memory-across', GiB).name).toBe('memory pool: GPU0→GPU1, 1 GiB');
    expect(MEMORY_FIG.import('vmm', 'memory-across').suite).toBe('memory-across');
    expect(MEMORY_FIG.transfer('legacy').name).toBe('memory legacy: one GPU, two processes, 256 MiB'); // unchanged
  });
});

describe('the floor ratio', () => {
  it('holds the 8 B half round trip to 1.3× the native floor of the same run', () => {
    const f = measured(FIG.latency8, 12, 8);
    expect(f.ratio).toBe(1.5);
    expect(f.met).toBe(false);
    expect(measured(FIG.latency8, 10, 8).met).toBe(true);
  });

  it('adds value / floor to a latency figure, and leaves a figure without a floor alone', () => {
    const f = withFloor(measured(FIG.overhead8, 12, 10), 8);
    expect(f.floor).toEqual({ value: 8, ratio: 1.5 });
    expect(withFloor(measured(FIG.overhead8, 12, 10), undefined).floor).toBeUndefined();
    expect(withFloor(measured(FIG.overhead8, 12, 10), 0).floor).toBeUndefined();
  });

  it('is a column of the table', () => {
    const report: BenchReport = {
      tool: 'smcuda bench',
      version: 'test',
      date: '2026-11-26T00:00:00Z',
      durationMs: 1,
      machine: { driver: 'sim', driverReason: 'test', node: 'v20', platform: 'linux', arch: 'x64', cpus: 1, cpuModel: 'cpu', hostname: 'h', devices: [] },
      options: { driver: 'sim', sizes: [8], suites: ['latency'], smoke: true, window: 8 },
      figures: [withFloor(measured(FIG.overhead8, 12, 10), 8)],
      series: [],
      notes: [],
    };
    const text = renderReport(report);
    expect(text).toMatch(/× floor/);
    expect(text).toMatch(/1\.50×/);
  });
});

describe('the first-send breakdown', () => {
  const t0 = 1_000_000;
  const initiator: FirstSendResult = {
    at: t0,
    states: [
      { state: 'SENT', at: t0 + 3 },
      { state: 'OK', at: t0 + 9 },
    ],
    calls: [
      { call: 'memAlloc', at: t0 - 5, ms: 0.5 },
      { call: 'ipcOpenMemHandle', at: t0 + 6, ms: 2 },
    ],
  };
  const responder: FirstSendResult = {
    at: t0 + 10,
    states: [{ state: 'ACKING', at: t0 + 4 }],
    calls: [{ call: 'ipcOpenMemHandle', at: t0 + 4, ms: 2.5 }],
  };

  it('times send → delivery, sums the driver calls in between, and keeps the rest as control hops and JS', () => {
    const b = breakdown(initiator, responder);
    expect(b.totalMs).toBe(10);
    expect(b.driverMs).toBe(4.5); // the memAlloc before the send is not on the way
    expect(b.otherMs).toBe(5.5);
    expect(b.firstOpenMs).toEqual({ initiator: 2, responder: 2.5 });
    expect(b.stateAtSend).toBe('INIT');
    expect(b.states.initiator).toEqual([
      { state: 'SENT', ms: 3 },
      { state: 'OK', ms: 9 },
    ]);
    expect(b.slowest[0]).toEqual({ side: 'responder', call: 'ipcOpenMemHandle', atMs: 4, ms: 2.5 });
    expect(b.slowest.at(-1)).toEqual({ side: 'initiator', call: 'memAlloc', atMs: -5, ms: 0.5 });
  });

  it('says where the negotiation stood at the send', () => {
    const settled = { ...initiator, states: [{ state: 'OK', at: t0 - 1 }], negotiateMs: 20 };
    const b = breakdown(settled, responder);
    expect(b.stateAtSend).toBe('OK');
    expect(b.negotiateMs).toBe(20);
  });

  it('times every call of a driver whose methods use private fields, and passes results and errors through', () => {
    class Fake {
      #n = 0;
      kind = 'sim';
      memAlloc(bytes: number): bigint {
        this.#n += bytes;
        return BigInt(this.#n);
      }
      memFree(): void {
        throw new Error('boom');
      }
    }
    const calls: CallRecord[] = [];
    const d = timedDriver(new Fake() as unknown as CudaDriver, calls);
    const before = epochMs();
    expect(d.memAlloc(8)).toBe(8n);
    expect(d.memAlloc(8)).toBe(16n);
    expect(() => d.memFree(1n)).toThrow('boom');
    expect(d.kind).toBe('sim');
    expect(calls.map((c) => c.call)).toEqual(['memAlloc', 'memAlloc', 'memFree']);
    for (const c of calls) {
      expect(c.at).toBeGreaterThanOrEqual(before);
      expect(c.ms).toBeGreaterThanOrEqual(0);
    }
  });
});
