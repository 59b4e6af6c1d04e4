/**
 * The terminal rendering of a report: the figures (each beside its baseline,
 * the ratio, the target and whether it is met), then every measured point
 * by size, then the notes.
 */
import { formatBytes, table } from '../cli/format.js';
import type { Figure } from './figures.js';
import type { BenchReport } from './report.js';

export function formatNumber(v: number | null): string {
  if (v === null || !Number.isFinite(v)) return '-';
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  return v.toPrecision(2);
}

function met(f: Figure): string {
  if (f.skipped) return 'skipped';
  if (f.met === null) return '-';
  return f.met ? 'yes' : 'NO';
}

function ratio(f: Figure): string {
  if (f.ratio === null) return '-';
  return f.target?.on === 'ratio' && f.target.text.includes('%') ? `${(f.ratio * 100).toFixed(1)} %` : `${formatNumber(f.ratio)}×`;
}

export function renderReport(r: BenchReport): string {
  const out: string[] = [];
  const m = r.machine;
  out.push(`smcuda bench ${r.version}, ${r.date}: ${m.driver} driver (${m.driverReason}); node ${m.node}, ${m.cpus} × ${m.cpuModel}`);
  const seen = new Set<string>();
  for (const d of m.devices) {
    const key = `${d.layout}/${d.rank}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(`  ${d.layout} rank${d.rank}: device ${d.index} ${d.name} ${d.uuid}`);
  }
  out.push('');
  const rows = [['figure', 'value', 'unit', 'baseline', 'ratio', '× floor', 'target', 'met']];
  for (const f of r.figures) {
    rows.push([f.name, formatNumber(f.value), f.unit, formatNumber(f.baseline), ratio(f), f.floor ? `${formatNumber(f.floor.ratio)}×` : '-', f.target?.text ?? '-', met(f)]);
  }
  out.push(table(rows));
  const skippedFigures = r.figures.filter((f) => f.skipped);
  if (skippedFigures.length > 0) {
    const reasons = new Map<string, string[]>();
    for (const f of skippedFigures) reasons.set(f.skipped!, [...(reasons.get(f.skipped!) ?? []), f.name]);
    out.push('', 'skipped:');
    for (const [why, names] of reasons) out.push(`  ${why}:`, ...names.map((n) => `    ${n}`));
  }
  for (const plot of ['bandwidth', 'latency'] as const) {
    const points = r.series.filter((p) => p.plot === plot);
    if (points.length === 0) continue;
    const names = [...new Set(points.map((p) => p.series))];
    const sizes = [...new Set(points.map((p) => p.size))].sort((a, b) => a - b);
    const unit = points[0]!.unit;
    const grid = [['size', ...names.map((n) => `${n} ${unit}`)]];
    for (const size of sizes) {
      grid.push([formatBytes(size), ...names.map((n) => formatNumber(points.find((p) => p.series === n && p.size === size)?.value ?? null))]);
    }
    out.push('', `${plot} by size:`, table(grid).replace(/^/gm, '  '));
  }
  if (r.notes.length > 0) out.push('', 'notes:', ...r.notes.map((n) => `  ${n}`));
  if (r.files?.length) out.push('', `wrote: ${r.files.join(', ')}`);
  out.push('', `${(r.durationMs / 1000).toFixed(1)} s`);
  return out.join('\n');
}
