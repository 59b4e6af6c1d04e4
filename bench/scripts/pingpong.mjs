// Ping-pong between two processes: this one on GPU DA, a forked child on GPU DB. N round trips
// of SIZE-byte messages; prints the median, p10 and p90 of half a round trip in µs over the last
// three quarters of them. The first half is unprofiled; with PROF, the second half is profiled.
//
// Environment:
//   DIST   directory holding the compiled library (src/index.js); default: this repository's dist/
//   SIZE   message size in bytes (default 8)
//   N      round trips (default 5000)
//   HOST   1: host buffers (Uint8Array) instead of device memory
//   OPTS   JSON of extra Transport.create options for both sides (default {})
//   DRV    driver: native (default) or sim
//   DA     the parent's device (default 0)
//   DB     the child's device (default 1)
//   LABEL  text printed at the head of the result line
//   PROF   directory: a V8 CPU profile (10 µs sampling) of the second half of the round trips,
//          ppparent.cpuprofile and ppchild.cpuprofile (summarise with profile-summary.mjs)
//   RAW    1 (device buffers only): then times, on the parent's GPU alone, one local copy + event
//          record + query spin, and the memcpyAsync and eventRecord calls by themselves
//
// Example (GPU machine, repository root):
//   SMCUDA_ADDON=$PWD/build/Release/smcuda.node SIZE=8 N=20000 \
//     node bench/scripts/pingpong.mjs
import { mkdtempSync, chmodSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { fork } from 'node:child_process';
import { profileTo } from './cpu-profile.mjs';

const lib = process.env.DIST
  ? pathToFileURL(resolve(process.env.DIST, 'src/index.js')).href
  : new URL('../../dist/src/index.js', import.meta.url).href;
const { Transport } = await import(lib);

const prof = (tag, fn) => (process.env.PROF ? profileTo(process.env.PROF, tag, 10, fn) : fn());

const opts = JSON.parse(process.env.OPTS ?? '{}');
const size = Number(process.env.SIZE ?? 8);
const host = process.env.HOST === '1';
const N = Number(process.env.N ?? 5000);
// median, p10, p90 of all but the first quarter
const med = (s) => {
  s = s.slice(N / 4).sort((x, y) => x - y);
  return `median ${s[s.length >> 1].toFixed(1)} p10 ${s[Math.floor(s.length * 0.1)].toFixed(1)} p90 ${s[Math.floor(s.length * 0.9)].toFixed(1)}`;
};

if (process.argv[2] === 'child') {
  const b = await Transport.create({ driver: process.env.DRV ?? 'native', device: Number(process.env.DB ?? 1), id: 'b', ...opts });
  const eb = await b.connect(process.argv[3]);
  const mk = () => (host ? new Uint8Array(size) : { ptr: b.driver.memAlloc(size), length: size });
  const outB = mk(), inB = mk();
  await eb.recv({ tag: 9, into: inB });
  for (let i = 0; i < N / 2; i++) {
    await eb.recv({ tag: 1, into: inB });
    await eb.send(outB, { tag: 2 });
  }
  await prof('ppchild', async () => {
    for (let i = N / 2; i < N; i++) {
      await eb.recv({ tag: 1, into: inB });
      await eb.send(outB, { tag: 2 });
    }
  });
  await new Promise((r) => setTimeout(r, 100));
  await b.close();
  process.exit(0);
} else {
  const dir = mkdtempSync('/tmp/ppd-');
  chmodSync(dir, 0o700);
  const a = await Transport.create({ driver: process.env.DRV ?? 'native', device: Number(process.env.DA ?? 0), id: 'a', ...opts });
  const epA = new Promise((r) => a.once('endpoint', r));
  await a.listen(dir + '/a.sock');
  const child = fork(fileURLToPath(import.meta.url), ['child', dir + '/a.sock'], { env: process.env, execArgv: process.execArgv });
  const ea = await epA;
  const d = a.driver;
  const mk = () => (host ? new Uint8Array(size) : { ptr: d.memAlloc(size), length: size });
  const outA = mk(), inA = mk();
  await ea.send(outA, { tag: 9 });
  await new Promise((r) => setTimeout(r, 100));
  const s = [];
  const loop = async (from, to) => {
    for (let i = from; i < to; i++) {
      const t0 = process.hrtime.bigint();
      const back = ea.recv({ tag: 2, into: inA });
      await ea.send(outA, { tag: 1 });
      await back;
      s.push(Number(process.hrtime.bigint() - t0) / 2000); // half a round trip, µs
    }
  };
  await loop(0, N / 2);
  await prof('ppparent', () => loop(N / 2, N));
  console.log(process.env.LABEL ?? '', JSON.stringify(opts), 'size', size, host ? 'host' : 'device', ea.state, 'half RT µs', med(s));
  if (process.env.RAW === '1' && !host) {
    // one local copy + event + spin on this thread (same GPU), and launch-only costs
    const st = d.streamCreate();
    const ev = d.eventCreate({ disableTiming: true });
    const c = [], l = [], r = [];
    for (let i = 0; i < N; i++) {
      const t0 = process.hrtime.bigint();
      d.memcpyAsync(inA.ptr, outA.ptr, size, st);
      const t1 = process.hrtime.bigint();
      d.eventRecord(ev, st);
      const t2 = process.hrtime.bigint();
      while (!d.eventQuery(ev)) {}
      const t3 = process.hrtime.bigint();
      c.push(Number(t3 - t0) / 1000);
      l.push(Number(t1 - t0) / 1000);
      r.push(Number(t2 - t1) / 1000);
    }
    console.log('  local copy+record+spin', med(c), '| memcpyAsync call', med(l), '| eventRecord call', med(r));
  }
  await new Promise((r) => child.once('exit', r));
  await a.close();
  process.exit(0);
}
