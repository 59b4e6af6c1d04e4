/**
 * What a suite gets from the runner (runner.ts): the run's options, where
 * its figures, series and notes go, and the rule for scoped figures (a GPU
 * target is skipped on the simulator; a 'sim' target is dropped on a GPU).
 */
import { type Figure, type FigureSpec, measured, skipped } from './figures.js';
import type { BenchOptions, Plan } from './plan.js';
import type { SeriesPoint } from './report.js';
import type { ScopedSpec } from './suites.js';

export type Progress = (line: string) => void;

export interface SuiteContext {
  opts: BenchOptions;
  plan: Plan;
  sim: boolean;
  figures: Figure[];
  series: SeriesPoint[];
  notes: string[];
  progress: Progress;
}

export function gpuOnly(): string {
  return 'GPU target: not meaningful on the simulated driver (its copies are host memcpy); run with --driver native on a GPU machine';
}

/** A figure of `spec`: skipped on the simulator when its target is a GPU one; the 'sim' scope's target dropped on a GPU. */
export function scopedFigure(sim: boolean, spec: ScopedSpec, value: number, baseline: number | null, extra: Parameters<typeof measured>[3] = {}): Figure {
  if (spec.scope === 'sim' && !sim) {
    const { target: _t, ...rest } = spec;
    return measured(rest, value, baseline, extra);
  }
  return measured(spec, value, baseline, extra);
}

/**
 * Runs one part of a suite; where it throws, each of `specs` it did not list
 * yet is listed as skipped with the error, and a note says so, so that one
 * failing baseline does not cost the run its other figures.
 */
export async function guarded(run: SuiteContext, what: string, specs: readonly FigureSpec[], body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    const message = `${what} failed: ${(err as Error)?.message ?? String(err)}`;
    run.notes.push(message);
    const listed = new Set(run.figures.map((f) => f.name));
    for (const spec of specs) if (!listed.has(spec.name)) run.figures.push(skipped(spec, message));
  }
}
