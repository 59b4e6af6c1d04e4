/**
 * `smcuda bench --suite graph` (issue 25, item 7): GPU-driven ping-pong of
 * 8 B and 1 MiB between the two workers.
 *
 *  - smcuda's host-driven ping-pong of 8 B and 1 MiB: the latency suite's,
 *    where it ran in the same invocation, else measured here;
 *  - raw, host-enqueued: memop-pingpong.ts with the host enqueuing every
 *    iteration, beside the host-driven ping-pong;
 *  - raw, in a CUDA graph of GRAPH_TRANSFERS iterations, replayed: per
 *    iteration and host time per replay;
 *  - smcuda's persistent transfers in a graph (under-test.ts,
 *    persistent-pingpong.ts), held to the targets beside the raw
 *    graph (measured on the simulator too, without the targets);
 *  - the native floor (native/floor.cc's C ping-pong): NATIVE_FLOOR.
 *
 * Each value is the median of `runs` runs (the spread is in `stats`). Where
 * a worker's driver lacks stream memory operations or graphs
 * (gpuDrivenStatus), the figures that need them are listed as skipped with
 * that reason.
 */
import { formatBytes } from '../cli/format.js';
import { type Figure, skipped } from './figures.js';
import {
  GRAPH_FIG,
  GRAPH_SIZES,
  GRAPH_TRANSFERS,
  type GpuDrivenStatus,
  graphsMissing,
  type GraphSize,
  halfRoundTripGBs,
  memOpsMissing,
  GRAPH_FIGURES,
} from './graph-figures.js';
import type { MemOpGraphResult, MemOpHostResult } from './memop-pingpong.js';
import type { BenchCommand, BenchWorkerInfo, ExportedBuffer, Repeat, SamplesResult, TimedResult } from './protocol.js';
import { gbPerSecond, summarize, type Summary } from './stats.js';
import { gpuOnly, guarded, scopedFigure, type SuiteContext } from './suite-context.js';
import { both, openSession } from './run-context.js';
import { backToBackSummary } from './graph-replays.js';
import { FIG } from './suites.js';
import { GRAPH_PINGPONG_UNDER_TEST } from './under-test.js';
import type { WorkerGroup } from './worker-group.js';

type Group = WorkerGroup<BenchCommand, BenchWorkerInfo>;

/** The native floor's slot: native/floor.cc (C, spinning on shared host flags), plugged in by runner.ts (which owns the floor's commands). */
export const NATIVE_FLOOR: { measure?: (ctx: SuiteContext, g: Group) => Promise<Summary>; missing: string } = {
  missing: 'the native floor (native/floor.cc) is not in this build',
};

export interface GraphPlan {
  runs: number;
  host: Repeat;
  graph: { replays: number; warmup: number };
}

export function graphPlan(sim: boolean, smoke: boolean): GraphPlan {
  if (smoke) return { runs: 2, host: { iters: 20, warmup: 2 }, graph: { replays: 3, warmup: 1 } };
  if (sim) return { runs: 3, host: { iters: 200, warmup: 20 }, graph: { replays: 10, warmup: 2 } };
  // 10,000 iterations (~0.1 s at 5 µs) per run, and 1,000 replays of 16.
  return { runs: 5, host: { iters: 10_000, warmup: 1_000 }, graph: { replays: 1_000, warmup: 50 } };
}

/** Why the suite cannot run on the workers' drivers, per need (undefined: it can). */
export function graphSkipReasons(statuses: readonly GpuDrivenStatus[], driverKind: string): { memOps?: string; graphs?: string } {
  const memOps = statuses.map((s) => memOpsMissing(s, driverKind)).find((r) => r !== undefined);
  const graphs = statuses.map((s) => graphsMissing(s, driverKind)).find((r) => r !== undefined);
  return { ...(memOps ? { memOps } : {}), ...(graphs ? { graphs } : {}) };
}

export async function runGraphSuite(run: SuiteContext, g: Group, o: { twoDevices: boolean; driverKind: string }): Promise<void> {
  const plan = graphPlan(run.sim, run.opts.smoke);
  const statuses = await Promise.all([g.call<GpuDrivenStatus>(0, { op: 'gpu-driven-status' }), g.call<GpuDrivenStatus>(1, { op: 'gpu-driven-status' })]);
  const why = graphSkipReasons(statuses, o.driverKind);
  if (!o.twoDevices) run.notes.push('graph suite: one device visible, both workers ran on it');
  // smcuda's session: its host-driven ping-pong (where the latency suite did not run) and its persistent transfers.
  await openSession(g, 'graph', { ipc: true, cache: true });
  try {
    await graphSuiteOn(
      run,
      g,
      plan,
      why,
      statuses.every((st) => st.modules),
    );
  } finally {
    await Promise.all([g.call(0, { op: 'close', session: 'graph' }), g.call(1, { op: 'close', session: 'graph' })]);
  }

  await guarded(run, 'graph suite: native floor', [GRAPH_FIG.nativeFloor], async () => {
    if (!NATIVE_FLOOR.measure) run.figures.push(skipped(GRAPH_FIG.nativeFloor, NATIVE_FLOOR.missing));
    else if (run.sim) run.figures.push(skipped(GRAPH_FIG.nativeFloor, gpuOnly()));
    else {
      run.progress('graph: native floor, 8 B (C++ ping-pong on shared host flags)');
      const floor = await NATIVE_FLOOR.measure(run, g);
      run.figures.push(scopedFigure(run.sim, GRAPH_FIG.nativeFloor, floor.median, null, { stats: floor }));
    }
  });
}

async function graphSuiteOn(run: SuiteContext, g: Group, plan: GraphPlan, why: { memOps?: string; graphs?: string }, kernel: boolean): Promise<void> {
  const hostDriven = hostDrivenReference(run);
  for (const size of GRAPH_SIZES) {
    if (hostDriven.has(size)) continue;
    run.progress(`graph: smcuda host-driven ping-pong ${formatBytes(size)}`);
    const repeat = size > 8 ? { iters: Math.max(1, Math.floor(plan.host.iters / 10)), warmup: Math.max(1, Math.floor(plan.host.warmup / 10)) } : plan.host;
    const r = await both<SamplesResult, SamplesResult>(
      g,
      { op: 'pingpong', session: 'graph', size, ...repeat },
      { op: 'pingpong', session: 'graph', size, ...repeat },
    );
    hostDriven.set(size, {
      value: summarize(r[1].samples).median,
      from: `smcuda host-driven ping-pong measured by this suite (median of ${r[1].samples.length})`,
    });
  }
  const raw: RawResults = new Map();

  if (why.memOps) {
    for (const size of GRAPH_SIZES) run.figures.push(skipped(GRAPH_FIG.rawHost(size), why.memOps), skipped(GRAPH_FIG.rawGraph(size), why.memOps));
    run.figures.push(skipped(GRAPH_FIG.rawReplayHost, why.memOps));
  } else {
    const rawSpecs = [...GRAPH_SIZES.flatMap((size) => [GRAPH_FIG.rawHost(size), GRAPH_FIG.rawGraph(size)]), GRAPH_FIG.rawReplayHost];
    await guarded(run, 'graph suite: raw mem-op ping-pong', rawSpecs, () => rawPingPong(run, g, plan, why, raw, hostDriven));
  }

  await guarded(run, 'graph suite: smcuda persistent transfers', GRAPH_FIGURES, () => smcudaFigures(run, g, plan, why, raw, kernel));
}

type RawResults = Map<GraphSize, { host?: Summary; enqueue?: Summary; graph?: Summary; replayHost?: Summary; copyGBs?: number; hostDriven?: number }>;

/** The raw ping-pong, host-enqueued and in a graph, at each size; its figures go to `run`, its summaries to `raw`. */
async function rawPingPong(
  run: SuiteContext,
  g: Group,
  plan: GraphPlan,
  why: { graphs?: string },
  raw: RawResults,
  hostDriven: Map<number, { value: number; from: string }>,
): Promise<void> {
  const timeoutMs = Math.min(run.opts.timeoutMs, 120_000);
  const [{ handle: h0 }, { handle: h1 }] = await Promise.all([
    g.call<{ handle: Uint8Array }>(0, { op: 'memop-prepare', maxSize: 1 << 20, timeoutMs }),
    g.call<{ handle: Uint8Array }>(1, { op: 'memop-prepare', maxSize: 1 << 20, timeoutMs }),
  ]);
  try {
    await Promise.all([g.call(0, { op: 'memop-connect', handle: h1 }), g.call(1, { op: 'memop-connect', handle: h0 })]);
    for (const size of GRAPH_SIZES) {
      const ref0 = hostDriven.get(size);
      const r: RawResults extends Map<GraphSize, infer V> ? V : never = ref0 ? { hostDriven: ref0.value } : {};
      raw.set(size, r);
      run.progress(`graph: raw mem-op ping-pong ${formatBytes(size)}, host-enqueued`);
      const host: MemOpHostResult[] = [];
      for (let k = 0; k < plan.runs; k++) {
        const cmd: BenchCommand = { op: 'memop-host', size, ...plan.host };
        host.push((await Promise.all([g.call<MemOpHostResult>(0, cmd), g.call<MemOpHostResult>(1, cmd)]))[1]);
      }
      r.host = summarize(host.map((x) => x.halfRoundTripUs!));
      r.enqueue = summarize(host.map((x) => x.hostEnqueueUs!));
      const ref = hostDriven.get(size);
      run.figures.push(
        scopedFigure(run.sim, GRAPH_FIG.rawHost(size), r.host.median, ref?.value ?? null, {
          stats: r.host,
          details: {
            size,
            iterationsPerRun: plan.host.iters,
            runs: plan.runs,
            hostEnqueueUsPerIteration: r.enqueue,
            hostDriven: ref?.from ?? 'not measured in this run: add latency to --suite',
          },
        }),
      );
      if (why.graphs) {
        run.figures.push(skipped(GRAPH_FIG.rawGraph(size), why.graphs));
        continue;
      }
      run.progress(`graph: raw mem-op ping-pong ${formatBytes(size)}, graph of ${GRAPH_TRANSFERS}`);
      const graph: MemOpGraphResult[] = [];
      for (let k = 0; k < plan.runs; k++) {
        const cmd: BenchCommand = { op: 'memop-graph', size, transfers: GRAPH_TRANSFERS, ...plan.graph };
        graph.push((await Promise.all([g.call<MemOpGraphResult>(0, cmd), g.call<MemOpGraphResult>(1, cmd)]))[1]);
      }
      r.graph = summarize(graph.map((x) => x.halfRoundTripUs!));
      r.replayHost = summarize(graph.map((x) => summarize(x.hostUsPerReplay!).median));
      // Back-to-back copies of the same size over an open mapping: what "raw copy bandwidth" means elsewhere in the bench.
      const copy = size > 8 ? await rawCopyGBs(g, size, plan.host) : undefined;
      if (copy !== undefined) r.copyGBs = copy;
      run.figures.push(
        scopedFigure(run.sim, GRAPH_FIG.rawGraph(size), r.graph.median, r.host.median, {
          stats: r.graph,
          details: {
            size,
            transfersPerGraph: GRAPH_TRANSFERS,
            replaysPerRun: plan.graph.replays,
            runs: plan.runs,
            hostUsPerReplay: r.replayHost,
            ...(copy !== undefined ? { halfRoundTripGBs: halfRoundTripGBs(size, r.graph.median), rawBackToBackCopyGBs: copy } : {}),
          },
        }),
      );
    }
    const small = raw.get(8);
    if (why.graphs) run.figures.push(skipped(GRAPH_FIG.rawReplayHost, why.graphs));
    else if (small?.replayHost && small.enqueue) {
      run.figures.push(
        scopedFigure(run.sim, GRAPH_FIG.rawReplayHost, small.replayHost.median, small.enqueue.median * GRAPH_TRANSFERS, { stats: small.replayHost }),
      );
    }
  } finally {
    await Promise.all([g.call(0, { op: 'memop-close' }), g.call(1, { op: 'memop-close' })]);
  }
}

/** smcuda's persistent transfers in a graph, beside the raw graph of the same size. */
type Flags = 'memops' | 'kernel';

/** `plan.runs` runs of smcuda's ping-pong of `size` with `flags`; the initiator's results. */
async function smcudaRuns(g: Group, plan: GraphPlan, size: number, flags: Flags): Promise<MemOpGraphResult[]> {
  const results: MemOpGraphResult[] = [];
  for (let k = 0; k < plan.runs; k++) {
    const cmd: BenchCommand = { op: 'sut-pingpong', session: 'graph', size, transfers: GRAPH_TRANSFERS, ...plan.graph, flags };
    results.push((await Promise.all([g.call<MemOpGraphResult>(0, cmd), g.call<MemOpGraphResult>(1, cmd)]))[1]);
  }
  return results;
}

/**
 * smcuda's persistent transfers in a graph, beside the raw graph of the same
 * size, with the flags run by stream memory operations and, where both
 * drivers load modules, by the flag kernel: each figure from the mode that
 * does it better (`details.flags`), the other in `details.otherFlags`.
 */
async function smcudaFigures(
  run: SuiteContext,
  g: Group,
  plan: GraphPlan,
  why: { memOps?: string; graphs?: string },
  raw: RawResults,
  kernel: boolean,
): Promise<void> {
  const reason = why.graphs ?? (GRAPH_PINGPONG_UNDER_TEST.factory ? undefined : GRAPH_PINGPONG_UNDER_TEST.missing);
  if (reason) {
    for (const spec of GRAPH_FIGURES) run.figures.push(skipped(spec, reason));
    return;
  }
  const variants: Flags[] = kernel ? ['kernel', 'memops'] : ['memops'];
  const out: Figure[] = [];
  const hostOf = (rs: MemOpGraphResult[]) => summarize(rs.map((x) => summarize(x.hostUsPerReplay!).median));
  for (const size of GRAPH_SIZES) {
    const by = new Map<Flags, MemOpGraphResult[]>();
    for (const flags of variants) {
      run.progress(`graph: smcuda persistent transfers ${formatBytes(size)}, graph of ${GRAPH_TRANSFERS}, flags by ${flags}`);
      try {
        by.set(flags, await smcudaRuns(g, plan, size, flags));
      } catch (err) {
        if (flags === variants[variants.length - 1]) throw err;
        run.notes.push(`graph suite: smcuda ${formatBytes(size)} with flags '${flags}' failed: ${(err as Error).message}`);
      }
    }
    const medianHalf = (v: Flags) => summarize(by.get(v)!.map((x) => x.halfRoundTripUs!)).median;
    const medianHost = (v: Flags) => hostOf(by.get(v)!).median;
    const ran = variants.filter((v) => by.has(v));
    // Each figure from the flag mode that does it better (the user chooses per transfer); the other beside it.
    const fastest = ran.reduce((a, b) => (medianHalf(b) < medianHalf(a) ? b : a));
    const lightest = ran.reduce((a, b) => (medianHost(b) < medianHost(a) ? b : a));
    const base = raw.get(size)?.graph;
    const r = raw.get(size);
    const detailsOf = (used: Flags) => {
      const results = by.get(used)!;
      return {
        size,
        flags: used,
        transfersPerGraph: GRAPH_TRANSFERS,
        replaysPerRun: plan.graph.replays,
        runs: plan.runs,
        rawGraphHalfRoundTripUs: base?.median ?? null,
        rawHostEnqueuedHalfRoundTripUs: r?.host?.median ?? null,
        hostDrivenHalfRoundTripUs: r?.hostDriven ?? null,
        halfRoundTripUs: summarize(results.map((x) => x.halfRoundTripUs!)),
        hostUsPerReplay: hostOf(results),
        // Launches back to back: the first ones (queue empty) against the later ones (graph-replays.ts says why both).
        backToBackLaunchUs: results.map((x) => backToBackSummary(x.backToBackHostUs ?? [])),
        otherFlags: Object.fromEntries(
          ran
            .filter((v) => v !== used)
            .map((v) => [v, { halfRoundTripUs: summarize(by.get(v)!.map((x) => x.halfRoundTripUs!)), hostUsPerReplay: hostOf(by.get(v)!) }]),
        ),
      };
    };
    if (size === 8) {
      const half = summarize(by.get(fastest)!.map((x) => x.halfRoundTripUs!));
      out.push(scopedFigure(run.sim, GRAPH_FIG.smcuda8, half.median, base?.median ?? null, { stats: half, details: detailsOf(fastest) }));
      const host = hostOf(by.get(lightest)!);
      out.push(
        scopedFigure(run.sim, GRAPH_FIG.smcudaReplayHost, host.median, raw.get(8)?.replayHost?.median ?? null, { stats: host, details: detailsOf(lightest) }),
      );
    } else {
      const gbs = summarize(by.get(fastest)!.map((x) => halfRoundTripGBs(size, x.halfRoundTripUs!)));
      // Held to ≥ 95 % of the raw graph ping-pong of the same size (the same copy and flags without smcuda); back-to-back copies beside it.
      out.push(
        scopedFigure(run.sim, GRAPH_FIG.smcuda1M, gbs.median, base ? halfRoundTripGBs(size, base.median) : null, {
          stats: gbs,
          details: { ...detailsOf(fastest), rawBackToBackCopyGBs: r?.copyGBs ?? null },
        }),
      );
    }
  }
  // In the order: 8 B, 1 MiB, host per replay.
  for (const spec of GRAPH_FIGURES) {
    const f = out.find((x) => x.name === spec.name);
    if (f) run.figures.push(f);
  }
}

/** Rank 1 copies from rank 0's fresh allocation back to back (baselines.ts rawCopy), GB/s. */
async function rawCopyGBs(g: Group, size: number, repeat: Repeat): Promise<number> {
  const [buffer] = await g.call<ExportedBuffer[]>(0, { op: 'export', size, count: 1 });
  try {
    const t = await g.call<TimedResult>(1, { op: 'raw-copy', buffer: buffer!, size, ...repeat });
    return gbPerSecond(t.bytes, t.seconds);
  } finally {
    await g.call(0, { op: 'unexport' });
  }
}

/** smcuda's host-driven ping-pong at 8 B and 1 MiB, from the latency suite of this run (figure, then series). */
function hostDrivenReference(run: SuiteContext): Map<number, { value: number; from: string }> {
  const out = new Map<number, { value: number; from: string }>();
  const headline = run.figures.find((f) => (f.name === FIG.latency8.name || f.name === FIG.overhead8.name) && f.value !== null);
  if (headline) out.set(8, { value: headline.value!, from: headline.name });
  for (const size of GRAPH_SIZES) {
    if (out.has(size)) continue;
    const p = run.series.find((s) => s.plot === 'latency' && s.series.startsWith('smcuda ping-pong') && s.size === size);
    if (p) out.set(size, { value: p.value, from: `latency suite series '${p.series}' at ${formatBytes(size)}` });
  }
  return out;
}
