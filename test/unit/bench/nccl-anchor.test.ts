/**
 * The NCCL C-API anchor's pieces without processes: when it is skipped and
 * why, how the ranks' runs combine, and how its numbers become series and
 * figures beside smcuda's (the runs themselves: nccl-anchor-fake.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { NcclUnavailableError } from '../../../src/errors.js';
import type { Nccl } from '../../../src/nccl/nccl.js';
import {
  type AnchorPoint,
  type AnchorReport,
  allreduceBusGBs,
  anchorBest,
  anchorSkipReason,
  runNcclAnchor,
  slowestPerRun,
} from '../../../src/bench/nccl-anchor.js';
import { ANCHOR_GRAPH8, anchorSeries, anchorSeriesName, anchorVersusSpec, versusAnchor } from '../../../src/bench/nccl-anchor-figures.js';
import { filled } from '../../../src/bench/nccl-anchor-rank.js';
import { summarize } from '../../../src/bench/stats.js';

const loads = () => ({}) as Nccl;
const group = async () => {
  throw new Error('not started in these tests');
};

describe('when the anchor is skipped', () => {
  const base = { sim: false, devices: [0, 1], gpus: 2, startGroup: group, env: {}, load: loads };

  it('runs with NCCL loaded and a GPU per rank', () => {
    expect(anchorSkipReason(base)).toBeUndefined();
  });

  it('fewer GPUs than ranks: NCCL puts one rank of a communicator per GPU', () => {
    expect(anchorSkipReason({ ...base, devices: [0, 1, 0, 1], gpus: 2 })).toBe('4 ranks on 2 GPUs: NCCL cannot put two ranks of one communicator on one GPU');
    expect(anchorSkipReason({ ...base, devices: [0, 0], gpus: 1 })).toMatch(/^2 ranks on 1 GPU: /);
  });

  it('libnccl.so.2 not loadable: where it looked', () => {
    const load = () => {
      throw new NcclUnavailableError('no NCCL', 'SMCUDA_NCCL_UNAVAILABLE', ['libnccl.so.2 through the loader', "PyTorch's nvidia/nccl/lib: none"]);
    };
    expect(anchorSkipReason({ ...base, load })).toBe(
      "libnccl.so.2 could not be loaded (looked for libnccl.so.2 through the loader; PyTorch's nvidia/nccl/lib: none)",
    );
  });

  it('the simulated driver: only with SMCUDA_NCCL_LIBRARY (a fake NCCL) named', () => {
    expect(anchorSkipReason({ ...base, sim: true })).toMatch(/^the simulated driver has no GPU for NCCL/);
    expect(anchorSkipReason({ ...base, sim: true, env: { SMCUDA_NCCL_LIBRARY: '/x/libnccl.so.2' } })).toBeUndefined();
  });

  it('no group of its own to run in', () => {
    expect(anchorSkipReason({ ...base, startGroup: undefined })).toMatch(/no worker group/);
  });
});

describe('combining the ranks', () => {
  it("a run's value is the slowest rank's", () => {
    expect(
      slowestPerRun([
        [1, 5, 3],
        [2, 4, 3],
      ]),
    ).toEqual([2, 5, 3]);
  });

  it("bus bandwidth as nccl-tests': size / time × 2(n−1)/n", () => {
    expect(allreduceBusGBs(1e9, 1e6, 2)).toBeCloseTo(1);
    expect(allreduceBusGBs(1e9, 1e6, 8)).toBeCloseTo(1.75);
  });
});

function point(size: number, buffers: 'plain' | 'window', mode: AnchorPoint['mode'], us: number): AnchorPoint {
  const runsUs = [us, us * 1.1, us * 0.9];
  return { size, buffers, mode, runsUs, stats: summarize(runsUs), busGBs: allreduceBusGBs(size, us, 2) };
}

const report = (points: AnchorPoint[], missing: AnchorReport['missing'] = {}): AnchorReport => ({
  version: '2.27.7',
  path: '/x/libnccl.so.2',
  ranks: 2,
  dtype: 'f32',
  graphOps: 100,
  points,
  missing,
  verified: true,
  problems: [],
});

describe('the anchor beside smcuda', () => {
  const both = report([
    point(8, 'plain', 'isolated', 20),
    point(8, 'plain', 'back-to-back', 10),
    point(8, 'plain', 'graph', 6),
    point(8, 'window', 'isolated', 15),
    point(8, 'window', 'back-to-back', 8),
    point(8, 'window', 'graph', 3),
    point(1 << 30, 'plain', 'back-to-back', 3000),
    point(1 << 30, 'window', 'back-to-back', 3300),
  ]);

  it("one series per kind of buffer and mode, the graph's run counted in whole launches", () => {
    const series = anchorSeries(both, () => 150);
    expect(new Set(series.map((p) => p.series)).size).toBe(6);
    expect(anchorSeriesName('window', 'graph', 100)).toBe('NCCL C API, symmetric window, in a CUDA graph of 100, per operation');
    expect(series.find((p) => p.series === anchorSeriesName('plain', 'graph', 100))).toMatchObject({ size: 8, value: 6, unit: 'µs', iterations: 200 * 3 });
    expect(series.find((p) => p.series === anchorSeriesName('plain', 'isolated', 100))).toMatchObject({ iterations: 150 * 3 });
  });

  it("NCCL's best: the least time over the kinds of buffer measured", () => {
    expect(anchorBest(both, 8, 'back-to-back')).toMatchObject({ buffers: 'window', stats: { median: 8 } });
    expect(anchorBest(both, 1 << 30, 'back-to-back')).toMatchObject({ buffers: 'plain' });
    expect(anchorBest(both, 16, 'back-to-back')).toBeUndefined();
  });

  it('smcuda against it: the ratio to the best, every anchor number at that size in the details', () => {
    const f = versusAnchor({ report: both }, anchorVersusSpec(8, 'µs'), 8, 'back-to-back', 4);
    expect(f).toMatchObject({ name: 'allreduce f32 8 B, smcuda, stream time, against the NCCL C API', value: 4, baseline: 8, ratio: 0.5, target: null });
    expect(f.details?.anchor).toMatchObject({
      nccl: '2.27.7',
      plain: { isolated: { median: 20 }, graph: { median: 6 } },
      window: { 'back-to-back': { median: 8 } },
    });
    const g = versusAnchor({ report: both }, ANCHOR_GRAPH8, 8, 'graph', 4.5);
    expect(g).toMatchObject({ baseline: 3, ratio: 1.5 });
    const bw = versusAnchor({ report: both }, anchorVersusSpec(1 << 30, 'GB/s'), 1 << 30, 'back-to-back', 400);
    expect(bw.baseline).toBeCloseTo(allreduceBusGBs(1 << 30, 3000, 2));
  });

  it('skipped, with why, where the anchor was skipped or lacks the size; a missing window is said in the details', () => {
    expect(versusAnchor({ skipped: '2 ranks on 1 GPU: …' }, ANCHOR_GRAPH8, 8, 'graph', 4)).toMatchObject({
      value: null,
      skipped: 'the NCCL C API anchor was skipped: 2 ranks on 1 GPU: …',
    });
    const plainOnly = report([point(8, 'plain', 'back-to-back', 10)], { window: 'not available in NCCL 2.26 (ncclCommWindowRegister is 2.27’s)' });
    expect(versusAnchor({ report: plainOnly }, anchorVersusSpec(16, 'µs'), 16, 'back-to-back', 4).skipped).toMatch(
      /^no NCCL C API figure at 16 B: not available in NCCL 2\.26/,
    );
    const f = versusAnchor({ report: plainOnly }, anchorVersusSpec(8, 'µs'), 8, 'back-to-back', 4);
    expect(f).toMatchObject({ baseline: 10, details: { anchor: { window: 'not available in NCCL 2.26 (ncclCommWindowRegister is 2.27’s)' } } });
  });
});

describe('the runner side over stub workers', () => {
  /** A group of `ranks` stub workers: records every command, answers as a rank would. */
  function stubGroup(ranks: number, answer: (rank: number, cmd: { op: string }) => unknown = () => null) {
    const calls: Array<{ rank: number; cmd: Record<string, unknown> }> = [];
    let closed = false;
    const g = {
      size: ranks,
      call: async (rank: number, cmd: { op: string }) => {
        calls.push({ rank, cmd: cmd as Record<string, unknown> });
        if (cmd.op === 'nccl-anchor-hello') return { id: new Uint8Array(128).fill(7), version: '2.28.3', path: '/x/libnccl.so.2' };
        if (cmd.op === 'nccl-anchor-time') return answer(rank, cmd) ?? { isolatedUs: [9, 9], backToBackUs: [5 + rank, 5], graphUs: [2, 2], verified: true };
        return null;
      },
      abort: () => {},
      close: async () => {
        closed = true;
      },
    };
    return { g, calls, closed: () => closed };
  }
  const request = (g: unknown) => ({
    sim: false,
    devices: [0, 1],
    gpus: 2,
    sizes: [8, 1024],
    dtype: 'f32' as const,
    runs: 2,
    repeat: () => ({ iters: 250, warmup: 3 }),
    firstWarmup: () => 1000,
    timeoutMs: 5000,
    startGroup: async () => g as never,
    progress: () => {},
    load: loads,
  });

  it('rank 0’s id to every rank; each kind of buffer at each size on every rank; the first command warms up longer; the group closed', async () => {
    const { g, calls, closed } = stubGroup(2);
    const out = await runNcclAnchor(request(g));
    if (!('report' in out)) throw new Error(out.skipped);
    const opens = calls.filter((c) => c.cmd.op === 'nccl-anchor-open');
    expect(opens.map((c) => c.rank)).toEqual([0, 1]);
    for (const o of opens) expect(o.cmd).toMatchObject({ ranks: 2, id: new Uint8Array(128).fill(7) });
    const times = calls.filter((c) => c.cmd.op === 'nccl-anchor-time' && c.rank === 0).map((c) => c.cmd);
    expect(times.map((t) => [t.buffers, t.bytes, t.warmup])).toEqual([
      ['plain', 8, 1000],
      ['plain', 1024, 3],
      ['window', 8, 3],
      ['window', 1024, 3],
    ]);
    expect(times[0]).toMatchObject({ graphOps: 100, graphLaunches: 3, verify: true, iters: 250, runs: 2, dtype: 'f32' });
    expect(out.report).toMatchObject({ version: '2.28.3', ranks: 2, verified: true, missing: {}, problems: [] });
    expect(out.report.points).toHaveLength(2 * 2 * 3);
    expect(out.report.points.find((p) => p.mode === 'back-to-back')?.runsUs).toEqual([6, 5]); // the slowest rank's run
    expect(calls.filter((c) => c.cmd.op === 'nccl-anchor-close')).toHaveLength(2);
    expect(closed()).toBe(true);
  });

  it('a wrong sum and a graph that could not be captured are problems; the figures that could be taken stay', async () => {
    const { g } = stubGroup(2, (rank, cmd) =>
      (cmd as { op: string; bytes?: number }).bytes === 8 && rank === 1
        ? { isolatedUs: [9], backToBackUs: [5], graphUs: [], graphError: 'capture refused', verified: false }
        : undefined,
    );
    const out = await runNcclAnchor({ ...request(g), sizes: [8] });
    if (!('report' in out)) throw new Error(out.skipped);
    expect(out.report.verified).toBe(false);
    expect(out.report.problems).toContain('8 B (plain): wrong sum on rank 1');
    expect(out.report.problems).toContain('8 B (plain): no graph figure: capture refused');
    expect(out.report.points.filter((p) => p.mode === 'graph')).toEqual([]);
    expect(out.report.points.filter((p) => p.mode === 'isolated')).toHaveLength(2);
  });
});

describe('the check values', () => {
  it('ones in f32 and in bf16 (the high half of the f32)', () => {
    expect([...filled('f32', 2, 1)]).toEqual([0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f]);
    expect([...filled('bf16', 2, 2)]).toEqual([0x00, 0x40, 0x00, 0x40]);
  });
});
