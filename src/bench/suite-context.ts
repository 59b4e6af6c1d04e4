/**
 * What a suite gets from the runner (runner.ts): the run's options, where
 * its figures, series and notes go, and the rule for scoped figures (a GPU
 * target is skipped on the simulator; a 'sim' target is dropped on a GPU).
 */
import { type FigureSpec, skipped } from './figures.js';
import type { Run } from './run-context.js';

export { gpuOnly, type Progress, scopedFigure } from './run-context.js';

/** What a suite gets from the runner: the run (run-context.ts). */
export type SuiteContext = Run;

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
