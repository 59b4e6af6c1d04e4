// smcuda's allreduce figures for the record, through the bench's own path
// (COLLECTIVES_UNDER_TEST + timeCollective of src/bench/under-test.ts), without
// the baselines (those are `smcuda bench --suite collectives`):
//   node test/gpu/measure-collectives.mjs [ranks=2] [sizes=8,262144,1048576,16777216,268435456,1073741824]
// (DRIVER=sim GRADIENT_BYTES=65536 runs it on the simulator, to check the script; CASES=<JSON list of
// { bytes, algorithm?, graph?, reduce?, warmup? }> measures those cases only; CPU_PROF_DIR=<dir> writes a CPU
// profile of each rank there; DIST=<folder> takes the build from that folder instead of dist/, for A/B.)
// Rank r runs on device r % visible devices. Per size: RUNS (default 5) runs of
// back-to-back calls, each run's value the slowest rank's µs per call; prints
// one JSON object with median, min, max per size (and bus bandwidth, every run's
// value and each rank's enqueue time a call per run), 8 B in a CUDA graph, and
// the 100 MB gradient average (avg). Not a test.
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
const DIST = process.env.DIST ?? 'dist';
const { openDriver } = await import(new URL(`../../${DIST}/src/cuda/open-driver.js`, import.meta.url).href);
const { COLLECTIVES_UNDER_TEST, timeCollective } = await import(new URL(`../../${DIST}/src/bench/under-test.js`, import.meta.url).href);

const RUNS = Number(process.env.RUNS ?? 5);
const log = (...a) => process.env.VERBOSE && console.error(`[${process.env.MEASURE_RANK ? JSON.parse(process.env.MEASURE_RANK).rank : 'launcher'}]`, ...a);
const iters = (bytes) => Number(process.env.ITERS ?? 0) || Math.max(5, Math.min(1000, Math.floor((4 * 2 ** 30) / Math.max(1, bytes))));

async function rank() {
  const { rank: r, ranks, dir, cases } = JSON.parse(process.env.MEASURE_RANK);
  const { driver } = await openDriver({ driver: process.env.DRIVER ?? 'native' });
  driver.init();
  const device = r % driver.deviceCount();
  driver.setDevice(device);
  const sut = await COLLECTIVES_UNDER_TEST.factory({ driver, rank: r, ranks, device, dir, token: 'm'.repeat(32), timeoutMs: 120_000 });
  const out = [];
  try {
    log('open');
    for (const c of cases) {
      log('case', JSON.stringify(c));
      const buf = driver.memAlloc(Math.max(4, c.bytes));
      driver.memsetD8(buf, 0, Math.max(4, c.bytes));
      const n = iters(c.bytes);
      const t = await timeCollective(driver, sut, buf, c.bytes, {
        runs: RUNS,
        iters: c.graph ? 100 : n,
        warmup: c.warmup ?? Math.max(1, Math.ceil(n / 10)),
        timeoutMs: 120_000,
        ...(c.graph ? { graph: true } : {}),
        ...(c.reduce ? { reduce: c.reduce } : {}),
        ...(c.algorithm ? { algorithm: c.algorithm } : {}),
      });
      driver.memFree(buf);
      out.push({ ...c, ...t });
    }
  } finally {
    await sut.close();
  }
  process.send(out, () => process.exit(0));
}

async function launch() {
  const ranks = Number(process.argv[2] ?? 2);
  const sizes = (process.argv[3] ?? '8,262144,1048576,16777216,268435456,1073741824').split(',').map(Number);
  const extra = process.env.ONLY_SIZES
    ? []
    : [
        { bytes: 8, graph: true },
        { bytes: 1 << 20, algorithm: 'one-shot' },
        { bytes: 1 << 20, algorithm: 'two-shot' },
        { bytes: 1 << 20, algorithm: 'pipeline' },
        { bytes: 256 << 20, algorithm: 'two-shot' },
        { bytes: Number(process.env.GRADIENT_BYTES ?? 100_000_000), reduce: 'avg', gradient: true },
      ];
  // CASES='[{"bytes":16777216,"algorithm":"two-shot"},…]' measures exactly those cases instead.
  const cases = process.env.CASES ? JSON.parse(process.env.CASES) : [...sizes.map((bytes) => ({ bytes })), ...extra];
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-measure-'));
  try {
    const results = await Promise.all(
      [...Array(ranks).keys()].map(
        (r) =>
          new Promise((resolve, reject) => {
            const child = fork(fileURLToPath(import.meta.url), [], {
              env: { ...process.env, MEASURE_RANK: JSON.stringify({ rank: r, ranks, dir, cases }) },
              execArgv: process.env.CPU_PROF_DIR ? ['--cpu-prof', '--cpu-prof-dir', process.env.CPU_PROF_DIR] : [],
            });
            child.once('message', resolve);
            child.once('exit', (code, signal) => (code !== 0 ? reject(new Error(`rank ${r} exited ${code ?? signal}`)) : undefined));
          }),
      ),
    );
    const figures = cases.map((c, i) => {
      const perRun = results[0][i].runsUs.map((_, k) => Math.max(...results.map((x) => x[i].runsUs[k])));
      const sorted = [...perRun].sort((a, b) => a - b);
      const median = sorted[Math.floor(sorted.length / 2)];
      const busGBs = (c.bytes / (median * 1e-6) / 1e9) * ((2 * (ranks - 1)) / ranks);
      const enq = results.flatMap((x) => x[i].enqueueUs ?? []).sort((a, b) => a - b);
      return {
        ...c,
        algorithm: results[0][i].algorithm,
        runs: perRun.length,
        enqueueMedianUs: enq.length ? +enq[Math.floor(enq.length / 2)].toFixed(2) : null,
        medianUs: +median.toFixed(2),
        minUs: +sorted[0].toFixed(2),
        maxUs: +sorted.at(-1).toFixed(2),
        busGBs: +busGBs.toFixed(1),
        perRunUs: perRun.map((x) => +x.toFixed(2)),
        enqueueUsByRank: results.map((x) => (x[i].enqueueUs ?? []).map((e) => +e.toFixed(2))),
      };
    });
    console.log(JSON.stringify({ ranks, figures }, null, 1));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await (process.env.MEASURE_RANK ? rank() : launch());
