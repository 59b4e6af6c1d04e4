/**
 * `smcuda bench`: the benchmark suite (src/bench/). Two worker processes
 * with a Transport each measure latency, bandwidth, windowed streaming, the
 * cache on and off, IPC on and off, same GPU and across GPUs; every figure is
 * printed beside its baseline measured in the same run, the ratio and its
 * target. `--json` prints the document, `--out DIR` writes bench.json and
 * the plots. Figures are never pass/fail for CI: `--smoke` only checks that
 * the suite runs.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchOptions } from '../bench/plan.js';
import { drawPlots } from '../bench/plots.js';
import type { BenchReport } from '../bench/report.js';
import { runBench } from '../bench/runner.js';
import { SUITE_SUMMARY, SUITES, type SuiteName } from '../bench/suites.js';
import { renderReport } from '../bench/table.js';
import { summarizeProfiles } from '../bench/cpu-profile.js';
import { mpsStatus, sharedGpuAdvice } from './mps.js';
import { parseSize } from './format.js';
import { parse, UsageError } from './usage.js';

const HELP = `usage: smcuda bench [options]

Runs smcuda's benchmark suite between two local worker processes and prints
each figure beside its baseline (measured in the same run), the ratio, the
target and whether it is met. On the simulated driver (no GPU) the GPU
targets are listed as skipped and the headline is the transport's own cost
per 8 B message against a raw Unix-socket ping-pong.

  --driver KIND         auto | native | sim (default auto)
  --sizes LIST          message sizes, comma-separated, e.g. 8,4K,1M,1G
                        (default 8 B to 1 GiB on a GPU; up to 64 MiB on the simulator)
  --suite LIST          suites to run, comma-separated (default all):
${SUITES.map((s) => `                          ${s.padEnd(12)} ${SUITE_SUMMARY[s]}`).join('\n')}
  --window W            outstanding sends in the streaming suite (default 8)
  --ranks N             ranks of the collectives suite, spread over the visible
                        GPUs (default 2: one per GPU of the across layout)
  --out DIR             write DIR/bench.json, DIR/bandwidth.svg, DIR/latency.svg
                        (plots need the optional peer dependency 'vega': npm install vega)
  --smoke               tiny sizes and few iterations: checks the suite works (CI)
  --check               exit 1 when a measured figure misses its target
  --timeout SECONDS     give up after this long (default 3600)
  --json                print the JSON document instead of tables
  --progress            progress lines on stderr even when it is not a terminal
  --profile-summary F   instead of running: self time per function in the CPU
                        profile F (repeatable); profile a run with
                        node --cpu-prof --cpu-prof-dir=DIR dist/src/cli/main.js bench …
                        (the workers inherit the flag)
  -h, --help            this help

Progress goes to stderr when it is a terminal. On the native driver, when both
workers of a layout share a GPU and the CUDA Multi-Process Service is not
running, a note says what that costs and how to start it (also in notes).

JSON: { tool, version, date, durationMs,
  machine: { driver, driverReason, node, platform, arch, cpus, cpuModel, hostname, devices: [...] },
  options: { driver, sizes, suites, smoke, window },
  figures: [{ name, suite, value, unit, baseline, baselineName, ratio,
              target: { on: 'value'|'ratio', relation: '>='|'<=', bound, text } | null,
              met: boolean | null, skipped?, stats?: { n, median, p10, p90, min, max }, paths?, details? }],
  series: [{ plot: 'bandwidth'|'latency'|'allreduce', series, size, value, unit, p10?, p90?, iterations?, paths? }],
  notes: string[], files?: string[] }`;

export async function runBenchCommand(argv: string[]): Promise<number> {
  const a = parse(argv, {
    driver: { type: 'string', default: 'auto' },
    sizes: { type: 'string' },
    suite: { type: 'string' },
    window: { type: 'string', default: '8' },
    ranks: { type: 'string', default: '2' },
    out: { type: 'string' },
    smoke: { type: 'boolean', default: false },
    check: { type: 'boolean', default: false },
    timeout: { type: 'string', default: '3600' },
    json: { type: 'boolean', default: false },
    progress: { type: 'boolean', default: false },
    'profile-summary': { type: 'string', multiple: true },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  if (a['profile-summary']) {
    console.log(summarizeProfiles(a['profile-summary']));
    return 0;
  }
  const opts = benchOptions(a);
  const tty = process.stderr.isTTY === true;
  // --progress: one line per step even when stderr is a file (a log says where a run stopped).
  const progress = tty
    ? (line: string) => process.stderr.write(`\r\x1b[K${line}`)
    : a.progress
      ? (line: string) => process.stderr.write(`${line}\n`)
      : () => {};
  let report: BenchReport;
  try {
    report = await runBench(opts, progress);
  } finally {
    if (tty) process.stderr.write('\r\x1b[K');
  }
  for (const line of mpsAdvice(report)) {
    console.error(`smcuda bench: ${line}`);
    report.notes.push(line);
  }
  if (a.out) writeOutputs(a.out, report, await plots(report));
  if (a.json) console.log(JSON.stringify(report, null, 2));
  else console.log(renderReport(report));
  if (a.check && report.figures.some((f) => f.met === false)) return 1;
  return 0;
}

function benchOptions(a: {
  driver?: string;
  sizes?: string;
  suite?: string;
  window?: string;
  ranks?: string;
  smoke?: boolean;
  timeout?: string;
}): BenchOptions {
  if (!['auto', 'native', 'sim'].includes(a.driver!)) throw new UsageError(`--driver must be auto, native or sim, got ${a.driver}`);
  let sizes: number[] | undefined;
  if (a.sizes !== undefined) {
    try {
      sizes = a.sizes.split(',').map(parseSize);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const bad = sizes.find((s) => s < 1 || s > 2 ** 32);
    if (bad !== undefined) throw new UsageError(`--sizes: each size must be from 1 B to 4 GiB, got ${bad}`);
  }
  let suites: SuiteName[] = [...SUITES];
  if (a.suite !== undefined) {
    const names = a.suite
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const unknown = names.filter((s) => !(SUITES as readonly string[]).includes(s));
    if (unknown.length > 0 || names.length === 0)
      throw new UsageError(`--suite: unknown suite ${unknown.join(', ') || "''"}; choose from ${SUITES.join(', ')}`);
    suites = names as SuiteName[];
  }
  const window = Number(a.window);
  if (!Number.isInteger(window) || window < 1 || window > 1024) throw new UsageError(`--window must be an integer from 1 to 1024, got ${a.window}`);
  const ranks = Number(a.ranks);
  if (!Number.isInteger(ranks) || ranks < 1 || ranks > 64) throw new UsageError(`--ranks must be an integer from 1 to 64, got ${a.ranks}`);
  const timeout = Number(a.timeout);
  if (!(timeout > 0)) throw new UsageError(`--timeout must be a positive number of seconds, got ${a.timeout}`);
  return { driver: a.driver as BenchOptions['driver'], ...(sizes ? { sizes } : {}), suites, smoke: a.smoke === true, window, ranks, timeoutMs: timeout * 1000 };
}

/** What sharing a GPU without MPS costs, when a layout of this run put both workers on one GPU and MPS is not running. */
function mpsAdvice(report: BenchReport): string[] {
  if (report.machine.driver !== 'native') return [];
  const uuids = new Map<string, Set<string>>();
  let sharing = false;
  for (const d of report.machine.devices) {
    const seen = uuids.get(d.layout) ?? new Set<string>();
    if (seen.has(d.uuid)) sharing = true;
    seen.add(d.uuid);
    uuids.set(d.layout, seen);
  }
  return sharedGpuAdvice(sharing, mpsStatus()).map((l) => l.trim());
}

/** The plots, or none (with a warning) where the optional charting library is missing. */
async function plots(report: BenchReport): Promise<Record<string, string>> {
  try {
    return await drawPlots(report);
  } catch (err) {
    const e = err as Error & { code?: string };
    if (e.code !== 'SMCUDA_BENCH_PLOTS_UNAVAILABLE') throw err;
    console.error(`smcuda bench: ${e.message}`);
    report.notes.push(`plots not drawn: ${e.message}`);
    return {};
  }
}

function writeOutputs(dir: string, report: BenchReport, svgs: Record<string, string>): void {
  mkdirSync(dir, { recursive: true });
  report.files = ['bench.json', ...Object.keys(svgs)];
  for (const [name, svg] of Object.entries(svgs)) writeFileSync(join(dir, name), svg);
  writeFileSync(join(dir, 'bench.json'), `${JSON.stringify(report, null, 2)}\n`);
}
