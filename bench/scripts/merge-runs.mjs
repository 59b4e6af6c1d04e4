// Merges several `smcuda bench --json` documents of one device call into one document of the same shape:
// each figure's value, baseline, ratio and floor ratio become the median over the runs, `stats` the spread
// of the values over the runs (n = runs), `details.runs` every run's value and ratio; each series point
// the median over the runs. Documents of different suites (run one after another in each round) are
// merged by figure name. Writes bench.json, bench.txt (the table, then the spread per figure) and, with
// vega installed, bandwidth.svg and latency.svg.
//
//   node bench/scripts/merge-runs.mjs OUTDIR run1.json run2.json …
//   DIST=/abs/path/to/dist (default: this checkout's dist/)
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const dist = resolve(process.env.DIST ?? join(here, '../../dist'));
const { renderReport } = await import(join(dist, 'src/bench/table.js'));
const { summarize, median } = await import(join(dist, 'src/bench/stats.js'));
const { drawPlots } = await import(join(dist, 'src/bench/plots.js'));

const [out, ...files] = process.argv.slice(2);
if (!out || files.length === 0) {
  console.error('usage: merge-runs.mjs OUTDIR run.json…');
  process.exit(2);
}
const docs = files.map((f) => JSON.parse(readFileSync(f, 'utf8')));

const meets = (t, value, ratio) => {
  const x = t.on === 'value' ? value : ratio;
  if (x === null || !Number.isFinite(x)) return null;
  return t.relation === '>=' ? x >= t.bound : x <= t.bound;
};
const med = (xs) => (xs.length ? median(xs) : null);

const figures = [];
const names = [...new Set(docs.flatMap((d) => d.figures.map((f) => f.name)))];
for (const name of names) {
  const all = docs.flatMap((d) => d.figures.filter((f) => f.name === name));
  const got = all.filter((f) => !f.skipped && typeof f.value === 'number');
  const first = all[0];
  if (got.length === 0) {
    figures.push(first);
    continue;
  }
  const value = med(got.map((f) => f.value));
  const baseline = med(got.map((f) => f.baseline).filter((x) => typeof x === 'number'));
  const ratio = med(got.map((f) => f.ratio).filter((x) => typeof x === 'number'));
  const floors = got.filter((f) => f.floor);
  const f = {
    ...got[0],
    value,
    baseline,
    ratio,
    met: got[0].target ? meets(got[0].target, value, ratio) : null,
    stats: summarize(got.map((x) => x.value)),
    details: {
      ...(got[0].details ?? {}),
      runs: { n: got.length, values: got.map((x) => x.value), ratios: got.map((x) => x.ratio), met: got.map((x) => x.met), ...(got[0].stats ? { withinRunMedians: got.map((x) => x.stats.median) } : {}) },
    },
  };
  if (floors.length) f.floor = { value: med(floors.map((x) => x.floor.value)), ratio: med(floors.map((x) => x.floor.ratio)) };
  figures.push(f);
}

const seriesKeys = new Map();
for (const d of docs) for (const p of d.series) {
  const k = `${p.plot}|${p.series}|${p.size}`;
  if (!seriesKeys.has(k)) seriesKeys.set(k, []);
  seriesKeys.get(k).push(p);
}
const series = [...seriesKeys.values()].map((ps) => ({ ...ps[0], value: median(ps.map((p) => p.value)), runs: ps.length }));

const base = docs[0];
const report = {
  ...base,
  durationMs: docs.reduce((a, d) => a + d.durationMs, 0),
  options: { ...base.options, suites: [...new Set(docs.flatMap((d) => d.options.suites))], sizes: [...new Set(docs.flatMap((d) => d.options.sizes))].sort((a, b) => a - b) },
  machine: { ...base.machine, devices: [...new Map(docs.flatMap((d) => d.machine.devices).map((x) => [`${x.layout}/${x.rank}`, x])).values()] },
  figures,
  series,
  notes: [...new Set(docs.flatMap((d) => d.notes))],
  merged: { runs: files.length / new Set(docs.map((d) => d.options.suites.join(','))).size, documents: files.length },
};

const fmt = (x) => (x === null || x === undefined || !Number.isFinite(x) ? '-' : Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2));
const spread = ['', `spread over the runs (median [min – max] of the per-run values; n runs):`];
for (const f of figures) {
  if (!f.details?.runs) continue;
  const r = f.details.runs;
  const ratios = r.ratios.filter((x) => typeof x === 'number');
  spread.push(`  ${f.name}: ${fmt(f.value)} [${fmt(Math.min(...r.values))} – ${fmt(Math.max(...r.values))}] ${f.unit}` + (ratios.length ? `; ratio ${fmt(f.ratio)} [${fmt(Math.min(...ratios))} – ${fmt(Math.max(...ratios))}]` : '') + `; met ${r.met.map((m) => (m === null ? '-' : m ? 'y' : 'n')).join('')}; n=${r.n}`);
}

mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'bench.json'), `${JSON.stringify(report, null, 2)}\n`);
writeFileSync(join(out, 'bench.txt'), `${renderReport(report)}\n${spread.join('\n')}\n`);
try {
  for (const [name, svg] of Object.entries(await drawPlots(report))) writeFileSync(join(out, name), svg);
} catch (err) {
  console.error(`no plots: ${err.message}`);
}
console.log(`wrote ${out}: ${figures.length} figures, ${series.length} series points from ${files.length} documents`);
