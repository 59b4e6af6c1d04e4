// dev: 8 B ping-pong half round trip and 1 MiB streaming (window 8), GPU0 <-> GPU1, fresh pair; WARM=0 turns the data-path warm-up off
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Transport } from '../dist/src/index.js';
const warmUp = process.env.WARM !== '0';
const Q = process.env.QUICK ? 0.01 : 1; const ITER = 10000 * Q, RUNS = 5, SIZE = 1 << 20, W = 8, NS = 3000 * Q;
async function stream(ep, sender, slices, count) {
  const inflight = [];
  for (let i = 0; i < count; i++) {
    const k = i % W;
    if (i >= W) await inflight[k];
    inflight[k] = sender ? ep.send(slices[k], { tag: 9 }) : ep.recv({ tag: 9, into: slices[k] });
  }
  await Promise.all(inflight);
}
const rank1 = process.argv[2] === 'rank1';
let t, ep, child;
if (!rank1) {
  const dir = mkdtempSync(join(tmpdir(), 'pp-')); const socket = join(dir, 's'); const token = randomBytes(8).toString('hex');
  t = await Transport.create({ device: 0, id: 'r0', token, warmUp });
  await t.listen(socket);
  const epP = new Promise((r) => t.once('endpoint', r));
  child = fork(fileURLToPath(import.meta.url), ['rank1'], { env: { ...process.env, S: socket, T: token } });
  ep = await epP;
} else {
  t = await Transport.create({ device: 1, id: 'r1', token: process.env.T, warmUp });
  ep = await t.connect(process.env.S);
  await ep.negotiate();
}
const d = t.driver;
const small = { ptr: d.memAlloc(8), length: 8 };
const big = d.memAlloc(SIZE * W);
const slices = Array.from({ length: W }, (_, k) => ({ ptr: big + BigInt(k * SIZE), length: SIZE }));
const pp = async (n) => {
  for (let i = 0; i < n; i++) {
    if (rank1) { const r = ep.recv({ tag: 2, into: small }); await ep.send(small, { tag: 1 }); await r; }
    else { await ep.recv({ tag: 1, into: small }); await ep.send(small, { tag: 2 }); }
  }
};
await pp(20000 * Q);
const half = [];
for (let r = 0; r < RUNS; r++) { const t0 = performance.now(); await pp(ITER); half.push(+(((performance.now() - t0) * 1e3) / ITER / 2).toFixed(2)); }
await stream(ep, rank1, slices, NS);
const gbs = [];
for (let r = 0; r < 3; r++) { const t0 = performance.now(); await stream(ep, rank1, slices, NS); gbs.push(+((NS * SIZE) / ((performance.now() - t0) / 1e3) / 1e9).toFixed(1)); }
if (rank1) { console.log(JSON.stringify({ warmUp, halfUs: half, streamGBs: gbs })); await t.close(); process.exit(0); }
else { await new Promise((r) => child.once('exit', r)); await t.close(); }
