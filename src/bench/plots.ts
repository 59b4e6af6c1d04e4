/**
 * The plots: bandwidth against size and latency against size, drawn by
 * Vega (a charting library that renders SVG in Node without a browser) from
 * declarative specs. Vega is an optional dependency: only `--out` needs it,
 * and it is imported on first use; without it the JSON is still written and
 * the error says how to get the plots.
 */
import { SmcudaError } from '../errors.js';
import type { BenchReport, SeriesPoint } from './report.js';

/** The part of Vega's API used here. */
interface VegaModule {
  parse(spec: object): unknown;
  View: new (runtime: unknown, options: { renderer: 'none' }) => { toSVG(): Promise<string>; finalize(): void };
}

/** A variable, so TypeScript does not need vega's typings and the import stays lazy. */
const VEGA = 'vega';

export class PlotsUnavailableError extends SmcudaError {
  constructor(cause: unknown) {
    super(
      'SMCUDA_BENCH_PLOTS_UNAVAILABLE',
      `cannot draw plots: the optional peer dependency 'vega' did not load (${(cause as Error)?.message ?? String(cause)}). Install it with 'npm install vega' (it is pure JavaScript), or leave out --out to skip the plots.`,
      { cause },
    );
  }
}

async function loadVega(): Promise<VegaModule> {
  try {
    return (await import(VEGA)) as VegaModule;
  } catch (err) {
    throw new PlotsUnavailableError(err);
  }
}

/** Tick labels as binary sizes (8 B, 64 KiB, 1 GiB), in Vega's expression language. */
const BYTES_LABEL =
  "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB' : " +
  "datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB' : " +
  "datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB' : format(datum.value, '~g') + ' B'";

export function plotSpec(title: string, yTitle: string, yType: 'linear' | 'log', points: SeriesPoint[]): object {
  const sizes = [...new Set(points.map((p) => p.size))].sort((a, b) => a - b);
  return {
    $schema: 'https://vega.github.io/schema/vega/v6.json',
    width: 640,
    height: 360,
    padding: 8,
    title: { text: title },
    data: [{ name: 'points', values: points.map((p) => ({ series: p.series, size: p.size, value: p.value })) }],
    scales: [
      { name: 'x', type: 'log', base: 2, domain: { data: 'points', field: 'size' }, range: 'width', nice: false },
      { name: 'y', type: yType, domain: { data: 'points', field: 'value' }, range: 'height', nice: true, zero: yType === 'linear' },
      { name: 'color', type: 'ordinal', domain: { data: 'points', field: 'series' }, range: 'category' },
    ],
    axes: [
      {
        orient: 'bottom',
        scale: 'x',
        title: 'message size',
        values: sizes,
        encode: { labels: { update: { text: { signal: BYTES_LABEL } } } },
        labelAngle: -40,
        labelAlign: 'right',
      },
      { orient: 'left', scale: 'y', title: yTitle, grid: true },
    ],
    legends: [{ stroke: 'color', title: 'series', orient: 'right', symbolType: 'stroke', labelLimit: 400 }],
    marks: [
      {
        type: 'group',
        from: { facet: { name: 'line', data: 'points', groupby: 'series' } },
        marks: [
          {
            type: 'line',
            from: { data: 'line' },
            sort: { field: 'datum.size' },
            encode: {
              enter: {
                x: { scale: 'x', field: 'size' },
                y: { scale: 'y', field: 'value' },
                stroke: { scale: 'color', field: 'series' },
                strokeWidth: { value: 2 },
              },
            },
          },
          {
            type: 'symbol',
            from: { data: 'line' },
            encode: {
              enter: { x: { scale: 'x', field: 'size' }, y: { scale: 'y', field: 'value' }, fill: { scale: 'color', field: 'series' }, size: { value: 30 } },
            },
          },
        ],
      },
    ],
  };
}

async function render(vega: VegaModule, spec: object): Promise<string> {
  const view = new vega.View(vega.parse(spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** SVG text of each plot that has points: { 'bandwidth.svg': '<svg…', 'latency.svg': … }. */
export async function drawPlots(report: BenchReport): Promise<Record<string, string>> {
  const vega = await loadVega();
  const out: Record<string, string> = {};
  const where = `${report.machine.driver} driver, ${report.date.slice(0, 10)}`;
  const bw = report.series.filter((p) => p.plot === 'bandwidth' && p.value > 0);
  if (bw.length > 0) out['bandwidth.svg'] = await render(vega, plotSpec(`smcuda bandwidth against message size (${where})`, 'GB/s', 'log', bw));
  const lat = report.series.filter((p) => p.plot === 'latency' && p.value > 0);
  if (lat.length > 0) out['latency.svg'] = await render(vega, plotSpec(`smcuda half round trip against message size (${where})`, 'µs', 'log', lat));
  return out;
}
