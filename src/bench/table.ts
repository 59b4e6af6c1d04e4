/**
 * The terminal rendering of a report: the figures (each beside its baseline,
 * the ratio, the target and whether it is met), then every measured point
 * by size, then the notes; at most 100 columns (every detail is in --json).
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

/** Default width of the text report: a terminal's 100 columns; the JSON (--json) has every detail. */
export const REPORT_COLUMNS = 100;

/**
 * The report as text no wider than `columns`: each figure on two lines (its
 * name, then value, baseline, ratio, target and whether met); the series by
 * size as tables whose columns are lettered (a legend names them), split so
 * that none is wider than `columns`; long lines wrapped.
 */
export function renderReport(r: BenchReport, columns = REPORT_COLUMNS): string {
  const out: string[] = [];
  const m = r.machine;
  out.push(...wrap(`smcuda bench ${r.version}, ${r.date}`, columns));
  out.push(...wrap(`${m.driver} driver (${m.driverReason})`, columns, '  '));
  out.push(...wrap(`node ${m.node}, ${m.cpus} × ${m.cpuModel}`, columns, '  '));
  const seen = new Set<string>();
  for (const d of m.devices) {
    const key = `${d.layout}/${d.rank}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(...wrap(`${d.layout} rank${d.rank}: device ${d.index} ${d.name} ${d.uuid}`, columns, '  '));
  }
  out.push('', ...wrap('figures (value, same-run baseline, ratio, × native floor where measured, target, met):', columns));
  for (const f of r.figures) {
    out.push(...wrap(f.name, columns, '  '));
    const detail = [
      `${formatNumber(f.value)} ${f.unit}`,
      `baseline ${formatNumber(f.baseline)}`,
      `ratio ${ratio(f)}`,
      ...(f.floor ? [`${formatNumber(f.floor.ratio)}× floor`] : []),
      `target ${f.target?.text ?? '-'}`,
      `met ${met(f)}`,
    ].join(' · ');
    out.push(...wrap(detail, columns, '      '));
  }
  const skippedFigures = r.figures.filter((f) => f.skipped);
  if (skippedFigures.length > 0) {
    const reasons = new Map<string, string[]>();
    for (const f of skippedFigures) reasons.set(f.skipped!, [...(reasons.get(f.skipped!) ?? []), f.name]);
    out.push('', 'skipped:');
    for (const [why, names] of reasons) out.push(...wrap(`${why}:`, columns, '  '), ...names.flatMap((n) => wrap(n, columns, '    ')));
  }
  for (const plot of ['bandwidth', 'latency', 'allreduce'] as const) {
    const points = r.series.filter((p) => p.plot === plot);
    if (points.length === 0) continue;
    const names = [...new Set(points.map((p) => p.series))];
    const sizes = [...new Set(points.map((p) => p.size))].sort((a, b) => a - b);
    const unit = points[0]!.unit;
    const letter = (i: number) => String.fromCharCode(65 + (i % 26)) + (i >= 26 ? String(Math.floor(i / 26)) : '');
    out.push('', `${plot} by size (${unit}):`);
    names.forEach((n, i) => out.push(...wrap(`${letter(i)}: ${n}`, columns, '  ')));
    // As many lettered columns per table as fit in `columns`.
    const cell = (size: number, n: string) => formatNumber(points.find((p) => p.series === n && p.size === size)?.value ?? null);
    const widthOf = (i: number) => Math.max(letter(i).length, ...sizes.map((s) => cell(s, names[i]!).length));
    const sizeWidth = Math.max(4, ...sizes.map((s) => formatBytes(s).length));
    for (let first = 0; first < names.length; ) {
      let used = 2 + sizeWidth;
      let last = first;
      while (last < names.length && (last === first || used + 2 + widthOf(last) <= columns)) used += 2 + widthOf(last++);
      const grid = [['size', ...names.slice(first, last).map((_, k) => letter(first + k))]];
      for (const size of sizes) grid.push([formatBytes(size), ...names.slice(first, last).map((n) => cell(size, n))]);
      out.push(table(grid).replace(/^/gm, '  '));
      first = last;
    }
  }
  if (r.notes.length > 0) out.push('', 'notes:', ...r.notes.flatMap((n) => wrap(n, columns, '  ')));
  if (r.files?.length) out.push('', ...wrap(`wrote: ${r.files.join(', ')}`, columns));
  out.push('', `${(r.durationMs / 1000).toFixed(1)} s`);
  return out.join('\n');
}

/** `text` in lines of at most `columns` characters, each starting with `indent` (words longer than a line are cut). */
export function wrap(text: string, columns: number, indent = ''): string[] {
  const room = Math.max(10, columns - indent.length);
  const lines: string[] = [];
  let line = '';
  for (let word of text.split(/\s+/).filter((w) => w.length > 0)) {
    while ([...word].length > room) {
      if (line) lines.push(line);
      line = '';
      lines.push([...word].slice(0, room).join(''));
      word = [...word].slice(room).join('');
    }
    if (line && [...line].length + 1 + [...word].length > room) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line || lines.length === 0) lines.push(line);
  return lines.map((l) => indent + l);
}
