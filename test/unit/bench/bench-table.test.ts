/**
 * The bench's text report fits a terminal: no line wider than 100 columns by
 * default (docs/bench/bench.json, a real 2×H200 run, and one with many series),
 * with every figure and every series still named (the JSON has the rest).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { BenchReport } from '../../../src/bench/report.js';
import { renderReport, REPORT_COLUMNS, wrap } from '../../../src/bench/table.js';

const real = JSON.parse(readFileSync('docs/bench/bench.json', 'utf8')) as BenchReport;
const widest = (text: string) => Math.max(...text.split('\n').map((l) => [...l].length));

describe('renderReport', () => {
  it('keeps a real report within 100 columns, naming every figure and series', () => {
    const text = renderReport(real);
    expect(REPORT_COLUMNS).toBe(100);
    expect(widest(text)).toBeLessThanOrEqual(100);
    for (const f of real.figures) expect(text.replace(/\n\s+/g, ' ')).toContain(f.name);
    for (const s of new Set(real.series.map((p) => p.series))) expect(text.replace(/\n\s+/g, ' ')).toContain(s);
  });

  it('splits a grid of many series into tables that fit', () => {
    const series = Array.from({ length: 30 }, (_, i) => `series number ${i} with a long descriptive name`);
    const sizes = [8, 4096, 1 << 20, 1 << 30];
    const many: BenchReport = {
      ...real,
      series: series.flatMap((name, i) =>
        sizes.map((size) => ({ plot: 'bandwidth' as const, series: name, size, value: 1234.5678 * (i + 1), unit: 'GB/s' })),
      ) as BenchReport['series'],
      notes: ['a note that is rather long: '.repeat(10)],
    };
    const text = renderReport(many);
    expect(widest(text)).toBeLessThanOrEqual(100);
    expect(text.match(/^ {2}size\b/gm)!.length).toBeGreaterThan(1); // several tables
    expect(widest(renderReport(many, 60))).toBeLessThanOrEqual(60);
  });

  it('wrap breaks on spaces, indents, and cuts what no line holds', () => {
    expect(wrap('aaa bbb ccc', 10, '  ')).toEqual(['  aaa bbb', '  ccc']);
    expect(wrap('x'.repeat(25), 12)).toEqual(['x'.repeat(12), 'x'.repeat(12), 'x']);
  });
});
