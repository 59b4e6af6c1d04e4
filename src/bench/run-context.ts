/**
 * What every suite's runner shares: one run's state (options, plan, the
 * figures and series so far, the native floor of this run), how a figure is
 * made from a spec (its scope decides whether its target holds here), and
 * the calls that drive a pair of workers (sessions, one-way transfers).
 */
import type { MemoryOption } from '../cli/demo-memory.js';
import { type Figure, measured } from './figures.js';
import type { BenchOptions, Plan } from './plan.js';
import type { BenchCommand, BenchWorkerInfo, NegotiationResult, PathCounts, SessionOptions, TimedResult } from './protocol.js';
import type { SeriesPoint } from './report.js';
import { gbPerSecond } from './stats.js';
import type { ScopedSpec } from './suites.js';
import type { WorkerGroup } from './worker-group.js';

export type Group = WorkerGroup<BenchCommand, BenchWorkerInfo>;
export type Progress = (line: string) => void;

/** One run's state, passed to each suite. */
export interface Run {
  opts: BenchOptions;
  plan: Plan;
  sim: boolean;
  figures: Figure[];
  series: SeriesPoint[];
  notes: string[];
  progress: Progress;
  /** The native floor's median half round trip by size, measured in this run (µs). */
  floor: Map<number, number>;
}

export function gpuOnly(): string {
  return 'GPU target: not meaningful on the simulated driver (its copies are host memcpy); run with --driver native on a GPU machine';
}

/** A figure of `spec`: skipped on the simulator when its target is a GPU one; the 'sim' scope's target dropped on a GPU. */
export function figure(run: Run, spec: ScopedSpec, value: number, baseline: number | null, extra: Parameters<typeof measured>[3] = {}): Figure {
  return scopedFigure(run.sim, spec, value, baseline, extra);
}

/** The rule of `figure`, for a run known only by whether it is on the simulator. */
export function scopedFigure(sim: boolean, spec: ScopedSpec, value: number, baseline: number | null, extra: Parameters<typeof measured>[3] = {}): Figure {
  // 'gpu-target': measured anywhere, held to its target only on a GPU.
  if ((spec.scope === 'sim' && !sim) || (spec.scope === 'gpu-target' && sim)) {
    const { target: _t, ...rest } = spec;
    return measured(rest, value, baseline, extra);
  }
  return measured(spec, value, baseline, extra);
}

export async function both<A, B>(g: Group, c0: BenchCommand, c1: BenchCommand): Promise<[A, B]> {
  return Promise.all([g.call<A>(0, c0), g.call<B>(1, c1)]);
}

export async function openSession(g: Group, session: string, options: SessionOptions): Promise<void> {
  await g.call(0, { op: 'open', session, options }); // rank 0 listens first
  await g.call(1, { op: 'open', session, options });
}

export async function negotiateSession(g: Group, session: string): Promise<[NegotiationResult, NegotiationResult]> {
  return both(g, { op: 'negotiate', session }, { op: 'negotiate', session });
}

export async function oneway(
  g: Group,
  session: string,
  size: number,
  window: number,
  repeat: { iters: number; warmup: number },
  memory?: MemoryOption,
): Promise<TimedResult> {
  const cmd: BenchCommand = { op: 'oneway', session, size, window, ...repeat, ...(memory ? { memory } : {}) };
  const [r0] = await both<TimedResult, TimedResult>(g, cmd, cmd);
  return r0; // rank 0 sends and times
}

/** Path counts summed (no first term: none yet). */
export function addPaths(a: PathCounts | undefined, b: PathCounts): PathCounts {
  return a === undefined ? { ...b } : { eager: a.eager + b.eager, rget: a.rget + b.rget, staging: a.staging + b.staging };
}

/** Bytes of every part over the longest part's time, in GB/s: parts that ran at once. */
export function aggregate(parts: readonly TimedResult[]): number {
  return gbPerSecond(
    parts.reduce((a, p) => a + p.bytes, 0),
    Math.max(...parts.map((p) => p.seconds)),
  );
}
