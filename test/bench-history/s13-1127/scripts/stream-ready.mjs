// dev: streaming 1 MiB window 8, GPU0 -> GPU1, default vs ready:true, alternating; plus the legacy check's parts
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Transport } from '../dist/src/index.js';
const SIZE = Number(process.env.SIZE ?? (1 << 20)), W = 8, DEV1 = Number(process.env.DEV1 ?? 1), N = Number(process.env.N ?? 3000), RUNS = Number(process.env.RUNS ?? 5);
async function run(ep, sender, slices, count, opts) {
  const inflight = [];
  for (let i = 0; i < count; i++) {
    const k = i % W;
    if (i >= W) await inflight[k];
    inflight[k] = sender ? ep.send(slices[k], opts) : ep.recv({ tag: 9, into: slices[k] });
  }
  await Promise.all(inflight);
}
if (process.argv[2] !== 'rank1') {
  const dir = mkdtempSync(join(tmpdir(), 'sr-')); const socket = join(dir, 's'); const token = randomBytes(8).toString('hex');
  const t = await Transport.create({ device: 0, id: 'r0', token });
  await t.listen(socket);
  const epP = new Promise((r) => t.once('endpoint', r));
  const child = fork(fileURLToPath(import.meta.url), ['rank1'], { env: { ...process.env, S: socket, T: token } });
  if (process.env.PIN) {
    const [a, b] = process.env.PIN.split('/');
    const { execFileSync } = await import('node:child_process');
    execFileSync('taskset', ['-acp', a, String(process.pid)], { stdio: 'ignore' });
    execFileSync('taskset', ['-acp', b, String(child.pid)], { stdio: 'ignore' });
  }
  const ep = await epP;
  const base = t.driver.memAlloc(SIZE * W);
  const slices = Array.from({ length: W }, (_, k) => ({ ptr: base + BigInt(k * SIZE), length: SIZE }));
  const total = (RUNS * 2 + 1) * N;
  await run(ep, false, slices, total, null);
  console.log('receiver', JSON.stringify(ep.stats().copyKernel ?? null));
  await new Promise((r) => child.once('exit', r));
  await t.close();
} else {
  const t = await Transport.create({ device: DEV1, id: 'r1', token: process.env.T });
  const ep = await t.connect(process.env.S);
  await ep.negotiate();
  const d = t.driver;
  const base = d.memAlloc(SIZE * W);
  const slices = Array.from({ length: W }, (_, k) => ({ ptr: base + BigInt(k * SIZE), length: SIZE }));
  await run(ep, true, slices, N, { tag: 9 }); // warm-up
  const res = { default: [], ready: [] };
  for (let r = 0; r < RUNS; r++) {
    for (const mode of ['default', 'ready']) {
      const t0 = performance.now();
      await run(ep, true, slices, N, mode === 'ready' ? { tag: 9, ready: true } : { tag: 9 });
      res[mode].push(+((N * SIZE) / ((performance.now() - t0) / 1e3) / 1e9).toFixed(1));
    }
  }
  // the check's parts, 20000 each
  const ev = d.eventCreate({ disableTiming: true });
  const M = 20000; let idle = 0;
  let t0 = performance.now(); for (let i = 0; i < M; i++) d.eventRecord(ev, 0n); const recUs = (performance.now() - t0) * 1e3 / M;
  t0 = performance.now(); for (let i = 0; i < M; i++) { d.eventRecord(ev, 0n); if (d.eventQuery(ev)) idle++; } const bothUs = (performance.now() - t0) * 1e3 / M;
  t0 = performance.now(); for (let i = 0; i < M; i++) d.eventQuery(ev); const qUs = (performance.now() - t0) * 1e3 / M;
  let sq = 0; t0 = performance.now(); for (let i = 0; i < M; i++) { if (d.streamQuery?.(0n)) sq++; } const sqUs = (performance.now() - t0) * 1e3 / M;
  const g = ep.link.gpu(); t0 = performance.now(); for (let i = 0; i < M; i++) g.legacyStreamIdle(); const liUs = (performance.now() - t0) * 1e3 / M;
  console.log(JSON.stringify({ size: SIZE, dev1: DEV1, gbs: res, check: { recordUs: +recUs.toFixed(2), recordQueryUs: +bothUs.toFixed(2), idleFraction: idle / M, queryOnlyUs: +qUs.toFixed(2), streamQueryUs: +sqUs.toFixed(2), streamQueryIdle: sq / M, legacyStreamIdleUs: +liUs.toFixed(2) } }));
  await t.close(); process.exit(0);
}
