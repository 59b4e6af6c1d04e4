// Dev: back-to-back copies from a peer process's allocation (IPC mapping) by cuMemcpyAsync against
// cuMemcpyBatchAsync (1 copy a call, 4 copies a call), with and without an event record a call.
// SAME=1: both processes on device 0; else rank 1 on device 1. node .dev-main/copy-kinds.mjs
import { fork } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
const DIST = process.env.DIST ?? 'dist';
const { openDriver } = await import(new URL(`../${DIST}/src/cuda/open-driver.js`, import.meta.url).href);
const MiB = 1 << 20;
const SIZES = (process.env.SIZES ?? '0.25,1,4,16').split(',').map((x) => Number(x) * MiB);
const ITERS = Number(process.env.ITERS ?? 200);
const same = process.env.SAME === '1';
if (!process.env.CK_RANK) {
  const dir = mkdtempSync(join(tmpdir(), 'ck-'));
  const kids = [0, 1].map((r) => fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, CK_RANK: String(r), CK_DIR: dir } }));
  await Promise.all(kids.map((k) => new Promise((res) => k.on('exit', res))));
} else {
  const r = Number(process.env.CK_RANK), dir = process.env.CK_DIR;
  const { driver: d } = await openDriver({ driver: process.env.DRIVER ?? 'native' });
  d.init();
  d.setDevice(same ? 0 : r);
  const max = Math.max(...SIZES) * 4;
  const A = d.memAlloc(max);
  d.memsetD8(A, r + 1, max);
  writeFileSync(join(dir, `h${r}`), Buffer.from(d.ipcGetMemHandle(A)).toString('base64'));
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  const peerFile = join(dir, `h${1 - r}`);
  while (!existsSync(peerFile)) await sleep(5);
  await sleep(50);
  if (r === 0) { while (!existsSync(join(dir, 'done'))) await sleep(20); process.exit(0); }
  const pA = d.ipcOpenMemHandle(new Uint8Array(Buffer.from(readFileSync(peerFile, 'utf8'), 'base64')));
  const B = d.memAlloc(max);
  const s = d.streamCreate();
  const e0 = d.eventCreate(), e1 = d.eventCreate();
  const evs = Array.from({ length: 8 }, () => d.eventCreate({ disableTiming: true }));
  const dsts = new BigUint64Array(4), srcs = new BigUint64Array(4), sz = new Float64Array(4);
  const tests = {
    memcpyAsync: (S, i) => d.memcpyAsync(B + BigInt((i % 4) * S), pA + BigInt((i % 4) * S), S, s),
    'batch of 1': (S, i) => { dsts[0] = B + BigInt((i % 4) * S); srcs[0] = pA + BigInt((i % 4) * S); sz[0] = S; d.memcpyBatchAsync(dsts, srcs, sz, 1, s); },
    'batch of 1 + event': (S, i) => { dsts[0] = B + BigInt((i % 4) * S); srcs[0] = pA + BigInt((i % 4) * S); sz[0] = S; d.memcpyBatchAsync(dsts, srcs, sz, 1, s); d.eventRecord(evs[i % 8], s); },
    'memcpyAsync + event': (S, i) => { d.memcpyAsync(B + BigInt((i % 4) * S), pA + BigInt((i % 4) * S), S, s); d.eventRecord(evs[i % 8], s); },
  };
  const batch4 = (S) => { for (let k = 0; k < 4; k++) { dsts[k] = B + BigInt(k * S); srcs[k] = pA + BigInt(k * S); sz[k] = S; } d.memcpyBatchAsync(dsts, srcs, sz, 4, s); };
  const out = [];
  for (const S of SIZES) {
    const cases = [...Object.entries(tests).map(([n, f]) => [n, f, 1]), ['batch of 4 (4 copies a call)', (S2) => batch4(S2), 4]];
    for (const [name, f, per] of cases) {
      const runs = [], hostUs = [];
      for (let run = 0; run < 5; run++) {
        const calls = Math.ceil(ITERS / per);
        for (let i = 0; i < 20; i++) f(S, i);
        d.streamSynchronize(s);
        d.eventRecord(e0, s);
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < calls; i++) f(S, i);
        const t1 = process.hrtime.bigint();
        d.eventRecord(e1, s);
        d.eventSynchronize(e1);
        const ms = d.eventElapsedTime(e0, e1);
        runs.push((S * calls * per) / (ms * 1e-3) / 1e9);
        hostUs.push(Number(t1 - t0) / 1e3 / calls);
      }
      const med = (a) => [...a].sort((x, y) => x - y)[2];
      out.push({ same, MiB: S / MiB, test: name, GBs: +med(runs).toFixed(1), min: +Math.min(...runs).toFixed(1), max: +Math.max(...runs).toFixed(1), usPerCopy: +((S / 1e3) / med(runs)).toFixed(2), hostUsPerCall: +med(hostUs).toFixed(2) });
    }
  }
  for (const o of out) console.log(JSON.stringify(o));
  writeFileSync(join(dir, 'done'), '');
  process.exit(0);
}
