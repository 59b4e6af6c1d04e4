/**
 * How the NCCL C-API anchor (nccl-anchor.ts) shows in a report:
 *
 *  - series of the allreduce table, one per kind of buffer and mode, beside
 *    smcuda's and PyTorch's (which stays as the second NCCL column);
 *  - figures of smcuda against it: each smcuda allreduce figure of the
 *    issue table (stream time, or bus bandwidth from 256 MiB) again, with
 *    NCCL's best back to back as the baseline, and the 8 B graph figure
 *    against NCCL's best per operation in a graph. No targets yet: the
 *    issue 45 targets come with the work they hold smcuda to. The details
 *    keep every anchor number at that size, the isolated ones included.
 */
import { formatBytes } from '../cli/format.js';
import { type Figure, skipped } from './figures.js';
import { ANCHOR_BUFFERS, ANCHOR_MODES, type AnchorMode, type AnchorOutcome, type AnchorPoint, type AnchorReport, anchorAt, anchorBest } from './nccl-anchor.js';
import type { AnchorBuffers } from './nccl-anchor-rank.js';
import type { SeriesPoint } from './report.js';
import { scopedFigure } from './run-context.js';
import type { ScopedSpec } from './suites.js';

const BUFFERS: Readonly<Record<AnchorBuffers, string>> = { plain: 'plain buffers', window: 'symmetric window' };

function modeWords(mode: AnchorMode, graphOps: number): string {
  if (mode === 'isolated') return 'isolated (launch to completion seen on the host)';
  return mode === 'back-to-back' ? 'back to back (stream time)' : `in a CUDA graph of ${graphOps}, per operation`;
}

/** The series name of one kind of buffer and mode. */
export function anchorSeriesName(buffers: AnchorBuffers, mode: AnchorMode, graphOps: number): string {
  return `NCCL C API, ${BUFFERS[buffers]}, ${modeWords(mode, graphOps)}`;
}

/** Every measured point as a series point of the allreduce table (µs); `iters`: calls per run at a size. */
export function anchorSeries(report: AnchorReport, iters: (size: number) => number): SeriesPoint[] {
  // A graph run is whole launches of graphOps operations (nccl-anchor.ts).
  const perRun = (p: AnchorPoint) => (p.mode === 'graph' ? report.graphOps * Math.max(1, Math.ceil(iters(p.size) / report.graphOps)) : iters(p.size));
  return report.points.map((p) => ({
    plot: 'allreduce',
    series: anchorSeriesName(p.buffers, p.mode, report.graphOps),
    size: p.size,
    value: p.stats.median,
    unit: 'µs',
    p10: p.stats.p10,
    p90: p.stats.p90,
    iterations: perRun(p) * p.runsUs.length,
  }));
}

const BEST = 'NCCL through its C API, same run: the best of plain buffers and a symmetric window';

/** smcuda's allreduce at `size` against the anchor: stream time, or bus bandwidth from 256 MiB (as allreduceSpec). */
export function anchorVersusSpec(size: number, unit: 'µs' | 'GB/s'): ScopedSpec {
  const what = unit === 'GB/s' ? 'bus bandwidth' : 'stream time';
  return {
    name: `allreduce f32 ${formatBytes(size)}, smcuda, ${what}, against the NCCL C API`,
    suite: 'collectives',
    unit,
    baselineName: `${BEST}, calls back to back, ${what}`,
    scope: 'gpu',
  };
}

/** smcuda's 8 B in a graph against the anchor's in a graph. */
export const ANCHOR_GRAPH8: ScopedSpec = {
  name: 'allreduce f32 8 B inside a CUDA graph, smcuda, per call, against the NCCL C API',
  suite: 'collectives',
  unit: 'µs',
  baselineName: `${BEST}, in a CUDA graph of 100 operations, per operation`,
  scope: 'gpu',
};

/** The baseline of a figure of `spec.unit` from NCCL's best point in `mode`: µs, or bus bandwidth. */
export function anchorBaseline(report: AnchorReport | undefined, size: number, mode: AnchorMode, unit: string): number | null {
  const best = anchorBest(report, size, mode);
  if (!best) return null;
  return unit === 'GB/s' ? best.busGBs : best.stats.median;
}

/** Every anchor number at `size` for a figure's details: per kind of buffer, per mode, the median and spread, or why not. */
export function anchorDetails(report: AnchorReport | undefined, size: number): Record<string, unknown> | undefined {
  if (!report) return undefined;
  const out: Record<string, unknown> = { nccl: report.version, graphOps: report.graphOps };
  for (const buffers of ANCHOR_BUFFERS) {
    const missing = report.missing[buffers];
    const points = ANCHOR_MODES.flatMap((m) => anchorAt(report, size, buffers, m) ?? []);
    if (points.length === 0 && missing) out[buffers] = missing;
    else out[buffers] = Object.fromEntries(points.map((p: AnchorPoint) => [p.mode, { ...p.stats, busGBs: p.busGBs }]));
  }
  return out;
}

/**
 * smcuda's `value` at `size` as a figure of `spec`, against NCCL's best in
 * `mode`; skipped, with why, where the anchor was skipped or has no point
 * there. The details carry every anchor number at that size.
 */
export function versusAnchor(
  outcome: AnchorOutcome,
  spec: ScopedSpec,
  size: number,
  mode: AnchorMode,
  value: number,
  extra: Parameters<typeof scopedFigure>[4] = {},
): Figure {
  if ('skipped' in outcome) return skipped(spec, `the NCCL C API anchor was skipped: ${outcome.skipped}`);
  const base = anchorBaseline(outcome.report, size, mode, spec.unit);
  if (base === null) {
    const why = Object.values(outcome.report.missing).join('; ') || `the anchor did not measure ${formatBytes(size)}`;
    return skipped(spec, `no NCCL C API figure at ${formatBytes(size)}: ${why}`);
  }
  const f = scopedFigure(false, spec, value, base, extra);
  return { ...f, details: { ...f.details, anchor: anchorDetails(outcome.report, size) } };
}
