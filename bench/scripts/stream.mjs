// Streaming between two processes: this one sends from GPU0, a forked child receives on GPU1.
// After WARM warm-up messages, REPS timed windows of N messages each (W sends outstanding,
// SIZE bytes each). Per window, in both processes: GC count/total pause (PerformanceObserver
// 'gc'), CPU user+system ms, voluntary/involuntary context switches; the receiver also counts
// copies per launch ("cpl" size:launches) and cuEventQuery calls per message ("q/msg").
//
// Environment:
//   DIST   directory holding the compiled library (src/index.js); default: this repository's dist/
//   SIZE   message size in bytes (default 1048576)
//   W      sends/receives outstanding (default 8)
//   RW     receives outstanding, when not W (a sender that runs ahead of the receiver's window)
//   N      messages per timed window (default 20000)
//   REPS   timed windows (default 3)
//   WARM   warm-up messages before the first window (default max(200, N/10))
//   DRV    driver: native (default) or sim
//   LABEL  name printed at the head of the result (default "dist")
//   MARK   if set, prints "@@window R" before each window (to line up with external traces)
//   CHILD_CPUS  CPU list for the receiver (taskset -c); pin the sender by running this under taskset
//   PROF   directory: a V8 CPU profile (20 µs sampling) of the last window, send.cpuprofile and
//          recv.cpuprofile (summarise with profile-summary.mjs)
//
// Example (GPU machine, repository root):
//   SMCUDA_ADDON=$PWD/build/Release/smcuda.node SIZE=1048576 W=8 N=20000 REPS=3 \
//     node bench/scripts/stream.mjs
import { mkdtempSync, chmodSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { PerformanceObserver } from 'node:perf_hooks';
import { fork } from 'node:child_process';
import { profileTo } from './cpu-profile.mjs';

const lib = process.env.DIST
  ? pathToFileURL(resolve(process.env.DIST, 'src/index.js')).href
  : new URL('../../dist/src/index.js', import.meta.url).href;
const { Transport } = await import(lib);

// PROF=dir: a CPU profile (20 µs sampling) of the last window in each process
const prof = (tag, fn) => profileTo(process.env.PROF, tag, 20, fn);
const maybeProf = (tag, last, fn) => (process.env.PROF && last ? prof(tag, fn) : fn());

const SIZE = Number(process.env.SIZE ?? 1 << 20);
const W = Number(process.env.W ?? 8);
const N = Number(process.env.N ?? 20000);
const REPS = Number(process.env.REPS ?? 3);
const WARM = Number(process.env.WARM ?? Math.max(200, N / 10));

// collections are counted only while a window is open
const gc = { n: 0, ms: 0, on: false };
new PerformanceObserver((l) => {
  if (!gc.on) return;
  for (const e of l.getEntries()) { gc.n++; gc.ms += e.duration; }
}).observe({ entryTypes: ['gc'] });

let counters = null; // the receiver's driver-call counters
const win = async (fn) => {
  gc.n = 0; gc.ms = 0; gc.on = true;
  if (counters) counters.reset();
  const r0 = process.resourceUsage();
  const t0 = process.hrtime.bigint();
  await fn();
  const t1 = process.hrtime.bigint();
  const r1 = process.resourceUsage();
  const c = counters ? counters.read() : '';
  await new Promise((r) => setTimeout(r, 5)); // let the observer deliver the window's entries
  gc.on = false;
  const cpu = `${((r1.userCPUTime - r0.userCPUTime) / 1000).toFixed(0)}+${((r1.systemCPUTime - r0.systemCPUTime) / 1000).toFixed(0)}ms`;
  const csw = `${r1.voluntaryContextSwitches - r0.voluntaryContextSwitches}/${r1.involuntaryContextSwitches - r0.involuntaryContextSwitches}`;
  return { us: Number(t1 - t0) / 1000, s: `gc ${gc.n}/${gc.ms.toFixed(1)}ms cpu ${cpu} csw ${csw}${c}` };
};

if (process.argv[2] === 'child') {
  // receiver, GPU1
  const b = await Transport.create({ driver: process.env.DRV ?? 'native', device: 1, id: 'b' });
  const d = b.driver;
  const c = { q: 0, hist: {} };
  if (d.memcpyBatchAsync) {
    const mb = d.memcpyBatchAsync.bind(d);
    d.memcpyBatchAsync = (...a) => { c.hist[a[3]] = (c.hist[a[3]] ?? 0) + 1; mb(...a); };
  }
  const mc = d.memcpyAsync.bind(d);
  d.memcpyAsync = (...a) => { c.hist[1] = (c.hist[1] ?? 0) + 1; mc(...a); };
  const eq = d.eventQuery.bind(d);
  d.eventQuery = (e) => { c.q++; return eq(e); };
  counters = {
    reset() { c.q = 0; c.hist = {}; },
    read() { return ` q/msg ${(c.q / N).toFixed(2)} cpl ${Object.entries(c.hist).map(([k, v]) => k + ':' + v).join(',')}`; },
  };
  const eb = await b.connect(process.argv[3]);
  const RW = Number(process.env.RW ?? W);
  const buf = d.memAlloc(SIZE * RW);
  const ro = [...Array(RW)].map((_, k) => ({ tag: 4, into: { ptr: buf + BigInt(k * SIZE), length: SIZE } }));
  const run = async (count) => {
    const fl = [];
    for (let i = 0; i < count; i++) {
      const k = i % RW;
      if (i >= RW) await fl[k];
      fl[k] = eb.recv(ro[k]);
    }
    await Promise.all(fl);
  };
  await run(WARM);
  const out = [];
  for (let r = 0; r < REPS; r++) {
    const w = await win(() => maybeProf('recv', r === REPS - 1, () => run(N)));
    out.push(w.s);
  }
  process.send(out);
  await new Promise((r) => setTimeout(r, 100));
  await b.close();
  process.exit(0);
} else {
  // sender, GPU0
  const dir = mkdtempSync('/tmp/st-');
  chmodSync(dir, 0o700);
  const a = await Transport.create({ driver: process.env.DRV ?? 'native', device: 0, id: 'a' });
  const epA = new Promise((r) => a.once('endpoint', r));
  await a.listen(dir + '/a.sock');
  // CHILD_CPUS: the receiver runs under `taskset -c CHILD_CPUS` (pin the sender with taskset on this command).
  const pin = process.env.CHILD_CPUS ? { execPath: 'taskset', execArgv: ['-c', process.env.CHILD_CPUS, process.execPath] } : {};
  const child = fork(fileURLToPath(import.meta.url), ['child', dir + '/a.sock'], { env: process.env, ...pin });
  const msg = new Promise((r) => child.once('message', r));
  const ea = await epA;
  const buf = a.driver.memAlloc(SIZE * W);
  const sl = [...Array(W)].map((_, k) => ({ ptr: buf + BigInt(k * SIZE), length: SIZE }));
  const so = { tag: 4 };
  const run = async (count) => {
    const fl = [];
    for (let i = 0; i < count; i++) {
      const k = i % W;
      if (i >= W) await fl[k];
      fl[k] = ea.send(sl[k], so);
    }
    await Promise.all(fl);
  };
  await run(WARM);
  const res = [];
  for (let r = 0; r < REPS; r++) {
    if (process.env.MARK) console.log(`@@window ${r}`);
    const w = await win(() => maybeProf('send', r === REPS - 1, () => run(N)));
    res.push(w);
  }
  const rc = await msg;
  const name = process.env.LABEL ?? 'dist';
  const size = SIZE >= 1 << 20 ? SIZE / 2 ** 20 + 'MiB' : SIZE + 'B';
  console.log(`${name} ${size} W=${W}\n` +
    res.map((w, i) => `  ${(SIZE * N / w.us / 1000).toFixed(1)} GB/s  send ${w.s}  | recv ${rc[i]}`).join('\n'));
  await new Promise((r) => child.once('exit', r));
  await a.close();
  process.exit(0);
}
