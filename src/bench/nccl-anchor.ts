/**
 * The NCCL C-API anchor of the collectives suite (issue 45, item 1): NCCL
 * at its best in the same run, through smcuda's NCCL binding rather than
 * PyTorch (whose figure stays beside it as a second baseline).
 *
 * One worker per rank, in a group of its own (fresh processes: NCCL's
 * threads, peer mappings and memory never touch smcuda's measurements, and
 * a rank stuck in NCCL is killed with its group alone), on the devices the
 * suite's ranks use. Rank 0 makes the ncclUniqueId and the runner hands it
 * to every rank, as the suite's ranks exchange everything else. Per kind of
 * buffer (plain; symmetric window where NCCL has ncclCommWindowRegister)
 * and per size, every rank times allreduce isolated, back to back and in a
 * CUDA graph of ANCHOR_GRAPH_OPS (nccl-anchor-rank.ts); a run's value is
 * the slowest rank's, as everywhere in the suite.
 *
 * Skipped, with the reason and never an error: libnccl.so.2 cannot be
 * loaded; fewer GPUs than ranks (NCCL puts one rank of a communicator per
 * GPU); the simulated driver, unless SMCUDA_NCCL_LIBRARY names a library
 * (the tests' fake NCCL, which runs the plumbing on the simulator).
 */
import { formatBytes } from '../cli/format.js';
import { type Env, envNccl } from '../env.js';
import { loadNccl, type Nccl } from '../nccl/nccl.js';
import type { AnchorBuffers, AnchorDtype, AnchorHello, AnchorRankTiming } from './nccl-anchor-rank.js';
import type { BenchCommand, BenchWorkerInfo, Repeat } from './protocol.js';
import { summarize, type Summary } from './stats.js';
import { BenchStuckError, withinMs } from './stuck.js';
import { type WorkerGroup, WorkerFailedError } from './worker-group.js';

type Group = WorkerGroup<BenchCommand, BenchWorkerInfo>;

/** Operations captured in one graph, as nccl-tests -G 100 runs it. */
export const ANCHOR_GRAPH_OPS = 100;

export const ANCHOR_BUFFERS: readonly AnchorBuffers[] = ['plain', 'window'];
export type AnchorMode = 'isolated' | 'back-to-back' | 'graph';
export const ANCHOR_MODES: readonly AnchorMode[] = ['isolated', 'back-to-back', 'graph'];

export interface AnchorPoint {
  size: number;
  buffers: AnchorBuffers;
  mode: AnchorMode;
  /** µs per call (per operation in a graph), one per run: the slowest rank's. */
  runsUs: number[];
  stats: Summary;
  /** nccl-tests' allreduce bus bandwidth at the median, GB/s. */
  busGBs: number;
}

export interface AnchorReport {
  version: string;
  path: string;
  ranks: number;
  dtype: AnchorDtype;
  graphOps: number;
  points: AnchorPoint[];
  /** Per kind of buffer not measured (or not at every size): why. */
  missing: Partial<Record<AnchorBuffers, string>>;
  /** null: not checked (the simulator); else whether every checked sum was right. */
  verified: boolean | null;
  /** What went wrong on the way: a wrong sum, a graph that could not be captured. */
  problems: string[];
}

export type AnchorOutcome = { report: AnchorReport } | { skipped: string };

export interface AnchorRequest {
  sim: boolean;
  /** The device index of each rank, as the suite's ranks have them. */
  devices: number[];
  /** Distinct GPUs among them. */
  gpus: number;
  sizes: number[];
  dtype: AnchorDtype;
  runs: number;
  repeat(size: number): Repeat;
  /** Warm-up calls before the first size measured (fresh processes run slow for about their first second); absent: the repeat's. */
  firstWarmup?: (size: number) => number;
  timeoutMs: number;
  /** Starts a worker group of its own (runner.ts's); absent: the anchor is skipped. */
  startGroup?: (layout: string, devices: number[]) => Promise<Group>;
  progress(what: string): void;
  env?: Env;
  /** Tests: loads NCCL in this process for the check (default loadNccl). */
  load?: (env: Env | undefined) => Nccl;
}

/** Why the anchor cannot run here, or undefined where it can (NCCL loaded, to be sure). */
export function anchorSkipReason(r: Pick<AnchorRequest, 'sim' | 'devices' | 'gpus' | 'startGroup' | 'env' | 'load'>): string | undefined {
  const ranks = r.devices.length;
  if (r.sim && envNccl(r.env).library === undefined)
    return 'the simulated driver has no GPU for NCCL (SMCUDA_NCCL_LIBRARY naming a fake NCCL runs the plumbing there)';
  if (r.gpus < ranks) return `${ranks} ranks on ${r.gpus} GPU${r.gpus === 1 ? '' : 's'}: NCCL cannot put two ranks of one communicator on one GPU`;
  if (!r.startGroup) return 'no worker group of its own to run in';
  try {
    (r.load ?? ((env) => loadNccl(env ? { env } : {})))(r.env);
  } catch (err) {
    const looked = (err as { looked?: readonly string[] }).looked;
    return `libnccl.so.2 could not be loaded${looked?.length ? ` (looked for ${looked.join('; ')})` : `: ${(err as Error).message}`}`;
  }
  return undefined;
}

/** nccl-tests' bus bandwidth of allreduce: size / time × 2(n−1)/n, GB/s. */
export function allreduceBusGBs(size: number, us: number, ranks: number): number {
  return us > 0 ? (size / (us * 1e-6) / 1e9) * ((2 * (ranks - 1)) / ranks) : 0;
}

/** Per run, the slowest rank's value. */
export function slowestPerRun(perRank: readonly number[][]): number[] {
  const runs = Math.min(...perRank.map((x) => x.length));
  return Array.from({ length: runs }, (_, k) => Math.max(...perRank.map((x) => x[k]!)));
}

export async function runNcclAnchor(r: AnchorRequest): Promise<AnchorOutcome> {
  const why = anchorSkipReason(r);
  if (why) return { skipped: why };
  const g = await r.startGroup!('nccl-anchor', r.devices);
  try {
    return { report: await measure(r, g) };
  } finally {
    await closeAnchor(g, r.timeoutMs);
  }
}

async function measure(r: AnchorRequest, g: Group): Promise<AnchorReport> {
  const ranks = g.size;
  let lost = false;
  const within = <T>(p: Promise<T>, what: string) =>
    withinMs(p, r.timeoutMs, `the NCCL anchor's ${what}`).catch((err: unknown) => {
      if (err instanceof BenchStuckError || err instanceof WorkerFailedError) {
        lost = true;
        g.abort(err); // a rank may be stuck inside NCCL: its group goes, the suite goes on
      }
      throw err;
    });
  // Every rank settles before the next command: a rank that failed alone may leave the others inside a
  // collective NCCL call, and the timeout then ends the group rather than the next command queueing behind it.
  const all = async <T>(cmd: BenchCommand, what: string): Promise<T[]> => {
    const settled = await within(Promise.allSettled(Array.from({ length: ranks }, (_, k) => g.call<T>(k, cmd))), what);
    const failed = settled.find((x) => x.status === 'rejected');
    if (failed) throw failed.reason;
    return settled.map((x) => (x as PromiseFulfilledResult<T>).value);
  };
  const hello = await within(g.call<AnchorHello>(0, { op: 'nccl-anchor-hello' }), 'unique id');
  r.progress(`collectives: NCCL ${hello.version} C API, ${ranks} ranks: communicator`);
  await all({ op: 'nccl-anchor-open', id: hello.id, ranks }, 'communicator');
  const report: AnchorReport = {
    version: hello.version,
    path: hello.path,
    ranks,
    dtype: r.dtype,
    graphOps: ANCHOR_GRAPH_OPS,
    points: [],
    missing: hello.noWindow ? { window: hello.noWindow } : {},
    verified: r.sim ? null : true,
    problems: [],
  };
  for (const buffers of ANCHOR_BUFFERS) {
    if (report.missing[buffers]) continue;
    const failures: string[] = [];
    for (const size of r.sizes) {
      if (lost) break; // a rank was stuck or lost: its group is gone, and what it measured stays
      r.progress(`collectives: NCCL C API, ${buffers === 'plain' ? 'plain buffers' : 'symmetric window'}, allreduce ${formatBytes(size)}`);
      const base = r.repeat(size);
      const first = buffers === ANCHOR_BUFFERS[0] && size === r.sizes[0]; // the processes' first calls
      const repeat = first && r.firstWarmup ? { ...base, warmup: Math.max(base.warmup, r.firstWarmup(size)) } : base;
      const graphLaunches = Math.max(1, Math.ceil(repeat.iters / ANCHOR_GRAPH_OPS));
      try {
        const timings = await all<AnchorRankTiming>(
          { op: 'nccl-anchor-time', bytes: size, dtype: r.dtype, buffers, runs: r.runs, graphOps: ANCHOR_GRAPH_OPS, graphLaunches, verify: !r.sim, ...repeat },
          `allreduce ${formatBytes(size)} (${buffers})`,
        );
        report.points.push(...pointsOf(size, buffers, timings, ranks));
        noteProblems(report, size, buffers, timings);
      } catch (err) {
        // One size failing (a window NCCL refused) leaves the other sizes and the other kind of buffer.
        failures.push(`${formatBytes(size)} (${buffers}): failed: ${(err as Error)?.message ?? String(err)}`);
      }
    }
    // Failed at every size: one line for the kind of buffer; else one per size that failed.
    if (failures.length > 0 && !report.points.some((p) => p.buffers === buffers)) report.missing[buffers] = `failed at every size; first ${failures[0]}`;
    else report.problems.push(...failures);
  }
  return report;
}

/** The three points of one size and kind of buffer, from every rank's runs. */
function pointsOf(size: number, buffers: AnchorBuffers, timings: readonly AnchorRankTiming[], ranks: number): AnchorPoint[] {
  const runsOf: Record<AnchorMode, number[][]> = {
    isolated: timings.map((t) => t.isolatedUs),
    'back-to-back': timings.map((t) => t.backToBackUs),
    graph: timings.map((t) => t.graphUs),
  };
  return ANCHOR_MODES.flatMap((mode) => {
    if (runsOf[mode].some((x) => x.length === 0)) return [];
    const runsUs = slowestPerRun(runsOf[mode]);
    const stats = summarize(runsUs);
    return [{ size, buffers, mode, runsUs, stats, busGBs: allreduceBusGBs(size, stats.median, ranks) }];
  });
}

function noteProblems(report: AnchorReport, size: number, buffers: AnchorBuffers, timings: readonly AnchorRankTiming[]): void {
  const at = `${formatBytes(size)} (${buffers})`;
  const wrong = timings.flatMap((t, rank) => (t.verified === false ? [rank] : []));
  if (wrong.length > 0) {
    report.verified = false;
    report.problems.push(`${at}: wrong sum on rank${wrong.length > 1 ? 's' : ''} ${wrong.join(', ')}`);
  }
  const graph = timings.find((t) => t.graphError !== undefined);
  if (graph) report.problems.push(`${at}: no graph figure: ${graph.graphError}`);
}

/** Lets every rank destroy its communicator, then closes the group (SIGKILL for a rank stuck in NCCL). */
async function closeAnchor(g: Group, timeoutMs: number): Promise<void> {
  try {
    await withinMs(
      Promise.all(Array.from({ length: g.size }, (_, k) => g.call(k, { op: 'nccl-anchor-close' }))),
      Math.min(timeoutMs, 30_000),
      'the NCCL anchor close',
    );
  } catch {
    // the group is closed below either way
  } finally {
    await g.close();
  }
}

/** The point at `size`, kind and mode, if measured. */
export function anchorAt(report: AnchorReport | undefined, size: number, buffers: AnchorBuffers, mode: AnchorMode): AnchorPoint | undefined {
  return report?.points.find((p) => p.size === size && p.buffers === buffers && p.mode === mode);
}

/** NCCL's best at `size` in `mode` over the kinds of buffer measured: the least time. */
export function anchorBest(report: AnchorReport | undefined, size: number, mode: AnchorMode): AnchorPoint | undefined {
  const points = ANCHOR_BUFFERS.flatMap((b) => anchorAt(report, size, b, mode) ?? []);
  return points.sort((a, b) => a.stats.median - b.stats.median)[0];
}
