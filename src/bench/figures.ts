/**
 * A figure: one measured number beside its baseline, measured in the same
 * run, and the target it is held to. Every figure in the JSON document has
 * the same keys (name, value, unit, baseline, ratio, target, met), so a
 * reader can check targets without knowing the suite.
 *
 *   ratio = value / baseline (null without a baseline)
 *   target: a bound on `value` or on `ratio`; met: whether it holds
 *           (null where there is no target or the figure was skipped)
 *
 * A figure that cannot be measured here (a GPU target on the simulated
 * driver, a size left out by --sizes, one visible device) is still listed,
 * with value null and `skipped` saying why.
 */
import type { Summary } from './stats.js';

export interface Target {
  /** What the bound applies to. */
  on: 'value' | 'ratio';
  relation: '>=' | '<=';
  bound: number;
  /** As the issue states it, e.g. '≥ 98 % of raw'. */
  text: string;
}

export interface Figure {
  name: string;
  /** Suite that produced it (see suites.ts). */
  suite: string;
  value: number | null;
  unit: string;
  baseline: number | null;
  /** What the baseline is, in words. */
  baselineName: string | null;
  ratio: number | null;
  target: Target | null;
  met: boolean | null;
  /** Why no value: the figure could not be measured in this run. */
  skipped?: string;
  /** Latency spread (value is the median), where the figure is a latency. */
  stats?: Summary;
  /** Data path counters of the measured messages (eager / rget / staging), where relevant. */
  paths?: Record<string, number>;
  /** Anything else worth keeping: sizes, window, iterations, time. */
  details?: Record<string, unknown>;
  /** Latency figures: the native floor measured in the same run, and value / floor. */
  floor?: { value: number; ratio: number };
}

export interface FigureSpec {
  name: string;
  suite: string;
  unit: string;
  baselineName?: string;
  target?: Target;
}

export function measured(spec: FigureSpec, value: number, baseline: number | null, extra: Pick<Figure, 'stats' | 'paths' | 'details' | 'floor'> = {}): Figure {
  const ratio = baseline !== null && baseline !== 0 && Number.isFinite(baseline) ? value / baseline : null;
  const target = spec.target ?? null;
  return {
    name: spec.name,
    suite: spec.suite,
    value,
    unit: spec.unit,
    baseline,
    baselineName: spec.baselineName ?? null,
    ratio,
    target,
    met: target ? meets(target, value, ratio) : null,
    ...extra,
  };
}

export function skipped(spec: FigureSpec, why: string): Figure {
  return {
    name: spec.name,
    suite: spec.suite,
    value: null,
    unit: spec.unit,
    baseline: null,
    baselineName: spec.baselineName ?? null,
    ratio: null,
    target: spec.target ?? null,
    met: null,
    skipped: why,
  };
}

function meets(t: Target, value: number, ratio: number | null): boolean | null {
  const x = t.on === 'value' ? value : ratio;
  if (x === null || !Number.isFinite(x)) return null;
  return t.relation === '>=' ? x >= t.bound : x <= t.bound;
}

/** `f` with its ratio to the native floor (a latency figure measured in the same run as the floor). */
export function withFloor(f: Figure, floor: number | undefined): Figure {
  if (floor === undefined || !(floor > 0) || f.value === null) return f;
  return { ...f, floor: { value: floor, ratio: f.value / floor } };
}

export const atLeast = (bound: number, text: string, on: Target['on'] = 'value'): Target => ({ on, relation: '>=', bound, text });
export const atMost = (bound: number, text: string, on: Target['on'] = 'value'): Target => ({ on, relation: '<=', bound, text });
