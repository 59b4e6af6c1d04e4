/**
 * `smcuda bench --suite collectives` (issue 26, item 6): allreduce f32 among
 * the ranks (the two across workers, one per GPU; or --ranks N workers
 * spread over the visible GPUs), per size.
 *
 *  - host-staged, as seed 003 (host-staged-allreduce.ts): pageable, and
 *    pinned as a second baseline; every rank checks the first call of each
 *    size against the seed's expected average;
 *  - NCCL through PyTorch (nccl-torch.ts), stream time and inside a CUDA
 *    graph, where python3 imports torch and one GPU per rank is visible;
 *    otherwise skipped with a note;
 *  - NCCL through its C API, the anchor (nccl-anchor.ts): plain buffers
 *    and a symmetric window, each isolated, back to back and in a CUDA
 *    graph, in a worker group of its own, where libnccl.so.2 loads and one
 *    GPU per rank is visible; otherwise skipped with a note;
 *  - smcuda (under-test.ts): the issue table's targets, per algorithm at
 *    1 MiB, 8 B in a graph, and the 100 MB gradient average against seed
 *    003's pageable staging; each table figure again against the anchor
 *    (nccl-anchor-figures.ts). Skipped, with why, until a Communicator is
 *    plugged in.
 *
 * Every value is the median of `runs` runs; a run's value is the slowest
 * rank's median call. Sizes that are not whole f32 elements are left out.
 */
import { freemem } from 'node:os';
import { join } from 'node:path';
import { formatBytes } from '../cli/format.js';
import { skipped } from './figures.js';
import {
  ALGORITHMS,
  allreduceSpec,
  COLLECTIVE_FIG,
  COLLECTIVE_GPU_SIZES,
  COLLECTIVE_SIM_SIZES,
  COLLECTIVE_SMOKE_SIZES,
  GRADIENT_BYTES,
  GRAPH_COLLECTIVE_SIZES,
} from './collective-figures.js';
import { stagedSegmentBytes } from './host-staged-allreduce.js';
import { type AnchorOutcome, runNcclAnchor } from './nccl-anchor.js';
import { ANCHOR_GRAPH8, anchorSeries, anchorVersusSpec, versusAnchor } from './nccl-anchor-figures.js';
import { ncclAt, type NcclOutcome, type NcclReport, runNcclAllreduce } from './nccl-torch.js';
import { shmFreeBytes } from './plan.js';
import type { BenchCommand, BenchWorkerInfo, Repeat } from './protocol.js';
import { summarize, type Summary } from './stats.js';
import { gpuOnly, guarded, scopedFigure, type SuiteContext } from './suite-context.js';
import type { ScopedSpec } from './suites.js';
import { type CollectiveTiming, COLLECTIVES_UNDER_TEST } from './under-test.js';
import type { WorkerGroup } from './worker-group.js';
import type { StagedAllreduceResult } from './worker-suites.js';

type Group = WorkerGroup<BenchCommand, BenchWorkerInfo>;

export interface CollectivesPlan {
  sizes: number[];
  /** The gradient average's size: 100 MB on a GPU, less on the simulator. */
  gradientBytes: number;
  runs: number;
  /** Calls per run at `size` for the host staging (slow: bounded by bytes). */
  staged(size: number): Repeat;
  /** Calls per run at `size` for smcuda and NCCL. */
  device(size: number): Repeat;
  notes: string[];
}

const clamp = (x: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, x));

export function collectivesPlan(ctx: Pick<SuiteContext, 'sim' | 'opts'>, ranks: number, room: { shmBytes?: number; hostBytes: number }): CollectivesPlan {
  const { sim, opts } = ctx;
  const notes: string[] = [];
  let sizes = opts.sizes ? [...opts.sizes] : opts.smoke ? [...COLLECTIVE_SMOKE_SIZES] : sim ? [...COLLECTIVE_SIM_SIZES] : [...COLLECTIVE_GPU_SIZES];
  const odd = sizes.filter((s) => s % 4 !== 0);
  if (odd.length > 0) notes.push(`collectives: sizes that are not whole f32 elements left out: ${odd.map(formatBytes).join(', ')}`);
  sizes = [...new Set(sizes.filter((s) => s % 4 === 0))].sort((a, b) => a - b);
  const gradientBytes = opts.smoke ? 64 << 10 : sim ? 1_000_000 : GRADIENT_BYTES;
  if (gradientBytes !== GRADIENT_BYTES) notes.push(`collectives: the gradient average is of ${formatBytes(gradientBytes)} here (100 MB on a GPU)`);
  // Per worker: the pageable and pinned staging buffers and the seed's gradient and check (4 × size); the segment: ranks + 1 slots.
  const fits = (s: number) => (room.shmBytes === undefined || stagedSegmentBytes(ranks, s) <= 0.8 * room.shmBytes) && 4 * ranks * s <= 0.5 * room.hostBytes;
  const dropped = sizes.filter((s) => !fits(s));
  if (dropped.length > 0) notes.push(`collectives: sizes left out for lack of host or /dev/shm memory: ${dropped.map(formatBytes).join(', ')}`);
  sizes = sizes.filter(fits);
  let gradient = gradientBytes;
  while (gradient > 64 << 10 && !fits(gradient)) gradient = Math.floor(gradient / 8) * 4; // halved, whole f32 elements
  if (gradient !== gradientBytes)
    notes.push(
      `collectives: the gradient average is of ${formatBytes(gradient)} instead of ${formatBytes(gradientBytes)}, for lack of host or /dev/shm memory`,
    );
  const stagedBudget = opts.smoke ? { bytes: 0, min: 3, max: 3 } : sim ? { bytes: 8 << 20, min: 3, max: 50 } : { bytes: 1 << 30, min: 3, max: 200 };
  // Bytes per run on a GPU: 4 GiB, written 4 * 2 ** 30 (4 << 30 is 0 in JavaScript's 32-bit shift, which made every GPU run 5 calls long).
  const deviceBudget = opts.smoke ? { bytes: 0, min: 5, max: 5 } : sim ? { bytes: 16 << 20, min: 5, max: 200 } : { bytes: 4 * 2 ** 30, min: 5, max: 1000 };
  const repeat =
    (b: { bytes: number; min: number; max: number }) =>
    (size: number): Repeat => {
      const iters = clamp(Math.floor(b.bytes / Math.max(1, size)), b.min, b.max);
      return { iters, warmup: opts.smoke ? 1 : clamp(Math.ceil(iters / 10), 1, 20) };
    };
  return { sizes, gradientBytes: gradient, runs: opts.smoke ? 2 : sim ? 3 : 5, staged: repeat(stagedBudget), device: repeat(deviceBudget), notes };
}

/**
 * Warm-up calls before the first size on a GPU: about 1 s of calls, estimated as 10 µs and the bytes
 * at 300 GB/s a call (100,000 at 8 B, 279 at 1 GiB). A count, not a time: every rank makes the same
 * calls. Fresh processes ran their small sizes slowly and spread for their first second or so,
 * whatever the sizes (bench/results-history.md, sessions 7 and 9): after 20,000 calls of 8 B, 1 KiB
 * and 16 KiB were still slower and more spread a call than the same sizes measured again a moment
 * later.
 */
export function firstWarmupCalls(size: number): number {
  const perCallUs = 10 + size / 300e3;
  return Math.min(100_000, Math.ceil(1_000_000 / perCallUs));
}

export interface CollectivesLayout {
  devices: number;
  dir: string;
  /** Starts a worker group of its own, for the NCCL C-API anchor (runner.ts's); absent: the anchor is skipped. */
  startGroup?: (layout: string, devices: number[]) => Promise<Group>;
}

export async function runCollectivesSuite(run: SuiteContext, g: Group, o: CollectivesLayout): Promise<void> {
  const ranks = g.size;
  const shm = shmFreeBytes();
  const plan = collectivesPlan(run, ranks, { ...(shm !== undefined ? { shmBytes: shm } : {}), hostBytes: freemem() });
  run.notes.push(...plan.notes);
  run.notes.push(`collectives: ${ranks} rank${ranks === 1 ? '' : 's'} on ${o.devices} GPU${o.devices === 1 ? '' : 's'}`);
  const all = <R>(cmd: BenchCommand) => Promise.all(Array.from({ length: ranks }, (_, r) => g.call<R>(r, cmd)));

  // -- seed 003's host staging, pageable and pinned
  const maxBytes = Math.max(plan.gradientBytes, ...plan.sizes);
  const timeoutMs = Math.min(run.opts.timeoutMs, 300_000);
  const staged = new Map<string, Summary>();
  const phases = new Map<string, StagedAllreduceResult['breakdown']>();
  const wrong: string[] = [];
  const stagedSpec = COLLECTIVE_FIG.stagedPinned(plan.gradientBytes);
  await guarded(run, 'collectives: host staging', [stagedSpec], async () => {
    const { segment } = await g.call<{ segment: string }>(0, { op: 'staged-create', ranks, maxBytes, timeoutMs });
    try {
      await Promise.all(Array.from({ length: ranks - 1 }, (_, k) => g.call(k + 1, { op: 'staged-open', segment, ranks, maxBytes, timeoutMs })));
      await g.call(0, { op: 'staged-unlink' });
      const measure = async (bytes: number, pinned: boolean, reduce: 'sum' | 'avg'): Promise<Summary> => {
        const perRun: number[] = [];
        for (let k = 0; k < plan.runs; k++) {
          const results = await all<StagedAllreduceResult>({ op: 'staged-allreduce', bytes, pinned, reduce, verify: k === 0, ...plan.staged(bytes) });
          phases.set(`${pinned}/${bytes}`, results[0]!.breakdown);
          for (const [r, x] of results.entries())
            if (x.verified === false) wrong.push(`rank ${r}, ${formatBytes(bytes)} ${pinned ? 'pinned' : 'pageable'}: ${x.mismatches} elements`);
          perRun.push(Math.max(...results.map((x) => summarize(x.samples).median)));
        }
        return summarize(perRun);
      };
      for (const pinned of [false, true]) {
        const series = `host-staged as seed 003, ${pinned ? 'pinned' : 'pageable'}`;
        for (const size of plan.sizes) {
          run.progress(`collectives: ${series}, ${formatBytes(size)}`);
          const s = await measure(size, pinned, 'sum');
          staged.set(`${pinned}/${size}`, s);
          run.series.push({
            plot: 'allreduce',
            series,
            size,
            value: s.median,
            unit: 'µs',
            p10: s.p10,
            p90: s.p90,
            iterations: plan.staged(size).iters * plan.runs,
          });
        }
        run.progress(`collectives: gradient average ${formatBytes(plan.gradientBytes)}, ${series}`);
        staged.set(`${pinned}/gradient`, await measure(plan.gradientBytes, pinned, 'avg'));
      }
    } finally {
      await all({ op: 'staged-close' });
    }
    if (wrong.length > 0) run.notes.push(`collectives: the host-staged allreduce gave wrong averages: ${wrong.join('; ')}`);
    const pageable = staged.get('false/gradient')!;
    const pinned = staged.get('true/gradient')!;
    const ms = (s: Summary): Summary => ({ n: s.n, median: s.median / 1000, p10: s.p10 / 1000, p90: s.p90 / 1000, min: s.min / 1000, max: s.max / 1000 });
    run.figures.push(
      scopedFigure(run.sim, stagedSpec, pinned.median / 1000, pageable.median / 1000, {
        stats: ms(pinned),
        details: {
          bytes: plan.gradientBytes,
          ranks,
          runs: plan.runs,
          pageable: ms(pageable),
          phasesUs: { pinned: phases.get(`true/${plan.gradientBytes}`), pageable: phases.get(`false/${plan.gradientBytes}`) },
          verified: wrong.length === 0,
        },
      }),
    );
  });

  // -- NCCL through PyTorch
  let nccl: NcclReport | undefined;
  if (run.sim) run.notes.push('collectives: NCCL baseline not run on the simulated driver (it needs a GPU per rank)');
  else {
    run.progress('collectives: NCCL all_reduce through PyTorch');
    const outcome: NcclOutcome = await runNcclAllreduce({
      ranks,
      sizes: plan.sizes,
      graphSizes: GRAPH_COLLECTIVE_SIZES.filter((s) => plan.sizes.includes(s)),
      runs: plan.runs,
      timeoutMs: Math.min(run.opts.timeoutMs, 1_800_000),
    }).catch((err: unknown): NcclOutcome => ({ skipped: `it failed: ${(err as Error)?.message ?? String(err)}` }));
    if ('skipped' in outcome) run.notes.push(`collectives: NCCL baseline skipped: ${outcome.skipped}`);
    else {
      nccl = outcome.report;
      run.notes.push(
        `collectives: NCCL baseline: torch ${nccl.torch}, NCCL ${nccl.nccl}, CUDA ${nccl.cuda ?? '?'}, ${nccl.ranks} ranks on ${nccl.devices.join(', ')}; result ${nccl.verified ? 'verified' : 'WRONG'}`,
      );
      for (const p of nccl.results) {
        const s = summarize(p.runsUs);
        run.series.push({
          plot: 'allreduce',
          series: p.mode === 'graph' ? 'NCCL (PyTorch) in a CUDA graph' : 'NCCL (PyTorch), stream time',
          size: p.size,
          value: p.median,
          unit: 'µs',
          p10: s.p10,
          p90: s.p90,
          iterations: p.iters * p.runsUs.length,
        });
      }
    }
  }

  const anchor = await ncclAnchor(run, g, plan, o.startGroup);
  await guarded(run, 'collectives: smcuda', smcudaSpecs(plan), () => smcudaFigures(run, g, plan, { nccl, anchor }, staged.get('false/gradient'), o.dir));
}

/** The NCCL C-API anchor on the suite's devices, its series and notes; skipped with why, never an error. */
async function ncclAnchor(run: SuiteContext, g: Group, plan: CollectivesPlan, startGroup: CollectivesLayout['startGroup']): Promise<AnchorOutcome> {
  run.progress('collectives: NCCL through its C API (the anchor)');
  const outcome = await runNcclAnchor({
    sim: run.sim,
    devices: g.infos.map((i) => i.device.index),
    gpus: new Set(g.infos.map((i) => i.device.uuid)).size,
    sizes: plan.sizes,
    dtype: 'f32',
    runs: plan.runs,
    repeat: plan.device,
    // Fresh processes, as smcuda's: the first size warms up for about a second of calls (firstWarmupCalls).
    ...(run.sim || run.opts.smoke ? {} : { firstWarmup: firstWarmupCalls }),
    timeoutMs: Math.min(run.opts.timeoutMs, 300_000),
    ...(startGroup ? { startGroup } : {}),
    progress: run.progress,
  }).catch((err: unknown): AnchorOutcome => ({ skipped: `it failed: ${(err as Error)?.message ?? String(err)}` }));
  if ('skipped' in outcome) {
    run.notes.push(`collectives: NCCL C API anchor skipped: ${outcome.skipped}`);
    return outcome;
  }
  const r = outcome.report;
  const checked = r.verified === null ? 'not checked on the simulated driver' : r.verified ? 'verified' : 'WRONG';
  run.notes.push(
    `collectives: NCCL C API anchor: NCCL ${r.version} (${r.path}), ${r.ranks} ranks, one per GPU, NCCL_NVLS_ENABLE=0, blocking communicator; result ${checked}`,
  );
  for (const [buffers, why] of Object.entries(r.missing))
    run.notes.push(`collectives: NCCL C API anchor, ${buffers === 'window' ? 'symmetric window' : 'plain buffers'}: ${why}`);
  for (const p of r.problems) run.notes.push(`collectives: NCCL C API anchor: ${p}`);
  run.series.push(...anchorSeries(r, (size) => plan.device(size).iters));
  return outcome;
}

/** smcuda's figures for this plan: the table's sizes that were measured (and each against the anchor), 8 B in a graph (the same), each algorithm, the gradient. */
function smcudaSpecs(plan: CollectivesPlan): ScopedSpec[] {
  const targets = plan.sizes.flatMap((size) => {
    const spec = allreduceSpec(size);
    return spec ? [spec, anchorVersusSpec(size, spec.unit as 'µs' | 'GB/s')] : [];
  });
  return [...targets, COLLECTIVE_FIG.graph8, ANCHOR_GRAPH8, ...ALGORITHMS.map(COLLECTIVE_FIG.algorithm), COLLECTIVE_FIG.gradient];
}

/** smcuda's figures: measured where a Communicator is plugged in (under-test.ts) and on a GPU, else skipped with why. */
async function smcudaFigures(
  run: SuiteContext,
  g: Group,
  plan: CollectivesPlan,
  baselines: { nccl: NcclReport | undefined; anchor: AnchorOutcome },
  pageable: Summary | undefined,
  dir: string,
): Promise<void> {
  const { nccl, anchor } = baselines;
  const targets = plan.sizes.flatMap((size) => {
    const spec = allreduceSpec(size);
    return spec ? [{ size, spec }] : [];
  });
  const specs = smcudaSpecs(plan);
  const reason = COLLECTIVES_UNDER_TEST.factory ? (run.sim ? gpuOnly() : undefined) : COLLECTIVES_UNDER_TEST.missing;
  if (reason) {
    for (const spec of specs) run.figures.push(skipped(spec, reason));
    return;
  }
  const ranks = g.size;
  const all = <R>(cmd: BenchCommand) => Promise.all(Array.from({ length: ranks }, (_, r) => g.call<R>(r, cmd)));
  const timeoutMs = Math.min(run.opts.timeoutMs, 300_000);
  const time = async (bytes: number, extra: { algorithm?: (typeof ALGORITHMS)[number]; graph?: boolean; reduce?: 'avg'; warmup?: number } = {}) => {
    const rs = await all<CollectiveTiming>({ op: 'sut-collective-time', bytes, runs: plan.runs, timeoutMs, ...plan.device(bytes), ...extra });
    const perRun = rs[0]!.runsUs.map((_, k) => Math.max(...rs.map((x) => x.runsUs[k]!)));
    const enqueue = rs.flatMap((x) => x.enqueueUs ?? []);
    return { s: summarize(perRun), algorithm: rs[0]!.algorithm, ...(enqueue.length > 0 ? { enqueueUs: summarize(enqueue).median } : {}) };
  };
  const bus = (size: number, us: number) => (size / (us * 1e-6) / 1e9) * ((2 * (ranks - 1)) / ranks);
  await all({ op: 'sut-collective-open', ranks, dir: join(dir, 'collectives'), timeoutMs });
  try {
    for (const [k, { size, spec }] of targets.entries()) {
      run.progress(`collectives: smcuda allreduce ${formatBytes(size)}`);
      // Fresh processes run slow and spread for about their first second whatever the size: the first size
      // warms up longer (firstWarmupCalls).
      const warm = Math.max(plan.device(size).warmup, firstWarmupCalls(size));
      const { s, algorithm, enqueueUs } = await time(size, k === 0 && !run.sim && !run.opts.smoke ? { warmup: warm } : {});
      run.series.push({
        plot: 'allreduce',
        series: 'smcuda',
        size,
        value: s.median,
        unit: 'µs',
        p10: s.p10,
        p90: s.p90,
        iterations: plan.device(size).iters * plan.runs,
      });
      const base = ncclAt(nccl, size);
      // enqueueUs: host µs per call spent queueing (median over ranks and runs); near the figure, the host is the limit.
      const details = { size, runs: plan.runs, algorithm, enqueueUs, ncclRunsUs: base?.runsUs };
      const versus = anchorVersusSpec(size, spec.unit as 'µs' | 'GB/s');
      if (spec.unit === 'GB/s') {
        run.figures.push(scopedFigure(false, spec, bus(size, s.median), base?.busGBs ?? null, { details: { ...details, stats: s } }));
        run.figures.push(versusAnchor(anchor, versus, size, 'back-to-back', bus(size, s.median), { details: { stats: s } }));
      } else {
        run.figures.push(scopedFigure(false, spec, s.median, base?.median ?? null, { stats: s, details }));
        run.figures.push(versusAnchor(anchor, versus, size, 'back-to-back', s.median, { stats: s }));
      }
    }
    let graph8: Summary | undefined;
    await tryFigure(run, COLLECTIVE_FIG.graph8, async () => {
      const { s } = await time(8, { graph: true });
      graph8 = s;
      return scopedFigure(false, COLLECTIVE_FIG.graph8, s.median, ncclAt(nccl, 8, 'graph')?.median ?? null, { stats: s });
    });
    run.figures.push(
      graph8
        ? versusAnchor(anchor, ANCHOR_GRAPH8, 8, 'graph', graph8.median, { stats: graph8 })
        : skipped(ANCHOR_GRAPH8, "smcuda's 8 B graph figure failed (above)"),
    );
    for (const a of ALGORITHMS) {
      await tryFigure(run, COLLECTIVE_FIG.algorithm(a), async () => {
        const { s } = await time(1 << 20, { algorithm: a });
        return scopedFigure(false, COLLECTIVE_FIG.algorithm(a), s.median, ncclAt(nccl, 1 << 20)?.median ?? null, { stats: s });
      });
    }
    await tryFigure(run, COLLECTIVE_FIG.gradient, async () => {
      const { s, algorithm } = await time(plan.gradientBytes, { reduce: 'avg' });
      const ms = s.median / 1000;
      return scopedFigure(false, COLLECTIVE_FIG.gradient, ms, pageable ? pageable.median / 1000 : null, {
        details: { bytes: plan.gradientBytes, algorithm, stats: s },
      });
    });
  } finally {
    await all({ op: 'sut-collective-close' });
  }
}

/** A figure that may fail on its own (an algorithm the size does not allow, no capture): skipped with the error, the rest go on. */
async function tryFigure(run: SuiteContext, spec: Parameters<typeof skipped>[0], f: () => Promise<ReturnType<typeof scopedFigure>>): Promise<void> {
  try {
    run.figures.push(await f());
  } catch (err) {
    run.figures.push(skipped(spec, `smcuda failed: ${(err as Error).message}`));
  }
}
