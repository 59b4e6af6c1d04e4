// Dev: host time a call (and GPU time) of the ways to start a same-GPU 1 MiB copy: driver copies from a peer
// process's mapping or a local allocation, against stream mem-op writes + a one-kernel graph launch. SAME=1 as copy-kinds.
import { fork } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
const DIST = process.env.DIST ?? 'dist';
const { openDriver } = await import(new URL(`../${DIST}/src/cuda/open-driver.js`, import.meta.url).href);
const { FILL_PTX } = await import(new URL(`../${DIST}/src/kernels/fill.ptx.js`, import.meta.url).href);
const S = Number(process.env.MIB ?? 1) * (1 << 20);
const ITERS = Number(process.env.ITERS ?? 400);
const same = process.env.SAME !== '0';
if (!process.env.LP_RANK) {
  const dir = mkdtempSync(join(tmpdir(), 'lp-'));
  const kids = [0, 1].map((r) => fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, LP_RANK: String(r), LP_DIR: dir } }));
  await Promise.all(kids.map((k) => new Promise((res) => k.on('exit', res))));
} else {
  const r = Number(process.env.LP_RANK), dir = process.env.LP_DIR;
  const { driver: d } = await openDriver({ driver: process.env.DRIVER ?? 'native' });
  d.init();
  d.setDevice(same ? 0 : r);
  const A = d.memAlloc(4 * S);
  d.memsetD8(A, r + 1, 4 * S);
  writeFileSync(join(dir, `h${r}`), Buffer.from(d.ipcGetMemHandle(A)).toString('base64'));
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  const peerFile = join(dir, `h${1 - r}`);
  while (!existsSync(peerFile)) await sleep(5);
  await sleep(50);
  if (r === 0) { while (!existsSync(join(dir, 'done'))) await sleep(20); process.exit(0); }
  const pA = d.ipcOpenMemHandle(new Uint8Array(Buffer.from(readFileSync(peerFile, 'utf8'), 'base64')));
  const B = d.memAlloc(4 * S);
  const desc = d.memAlloc(4096);
  const s = d.streamCreate();
  const e0 = d.eventCreate(), e1 = d.eventCreate();
  const { module } = d.moduleLoadData(FILL_PTX);
  const fn = d.moduleGetFunction(module, 'smcuda_fill_u32');
  const cfg = { grid: [1], block: [32] };
  const args = [{ type: 'ptr', value: desc + 2048n }, { type: 'u32', value: 7 }, { type: 'u64', value: 1n }];
  d.streamBeginCapture(s);
  d.launchKernel(fn, cfg, args, s);
  const exec = d.graphInstantiate(d.streamEndCapture(s));
  const dsts = new BigUint64Array(4), srcs = new BigUint64Array(4), sz = new Float64Array(4);
  const ops4 = (i) => [0, 1, 2, 3].map((k) => ({ op: 'write64', addr: desc + BigInt(8 * k), value: BigInt(i + k) }));
  const ops13 = (i) => Array.from({ length: 13 }, (_, k) => ({ op: 'write64', addr: desc + BigInt(8 * k), value: BigInt(i + k) }));
  const tests = {
    'memcpyAsync peer→local': (i) => d.memcpyAsync(B + BigInt((i % 4) * S), pA + BigInt((i % 4) * S), S, s),
    'memcpyAsync local→local': (i) => d.memcpyAsync(B + BigInt((i % 4) * S), A + BigInt(((i + 1) % 4) * S), S, s),
    'batch1 peer→local': (i) => { dsts[0] = B + BigInt((i % 4) * S); srcs[0] = pA + BigInt((i % 4) * S); sz[0] = S; d.memcpyBatchAsync(dsts, srcs, sz, 1, s); },
    'batch1 local→local': (i) => { dsts[0] = B + BigInt((i % 4) * S); srcs[0] = A + BigInt(((i + 1) % 4) * S); sz[0] = S; d.memcpyBatchAsync(dsts, srcs, sz, 1, s); },
    'graphLaunch (1 kernel)': () => d.graphLaunch(exec, s),
    'launchKernel': () => d.launchKernel(fn, cfg, args, s),
    'batchMemOp 4 write64': (i) => d.streamBatchMemOp(s, ops4(i)),
    'batchMemOp 4 write64 + graphLaunch': (i) => { d.streamBatchMemOp(s, ops4(i)); d.graphLaunch(exec, s); },
    'batchMemOp 13 write64 + graphLaunch': (i) => { d.streamBatchMemOp(s, ops13(i)); d.graphLaunch(exec, s); },
    'writeValue64 + graphLaunch': (i) => { d.streamWriteValue64(s, desc, BigInt(i)); d.graphLaunch(exec, s); },
  };
  const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
  for (const [name, f] of Object.entries(tests)) {
    const gpu = [], host = [];
    for (let run = 0; run < 7; run++) {
      for (let i = 0; i < 50; i++) f(i);
      d.streamSynchronize(s);
      d.eventRecord(e0, s);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < ITERS; i++) f(i);
      const t1 = process.hrtime.bigint();
      d.eventRecord(e1, s);
      d.eventSynchronize(e1);
      gpu.push((d.eventElapsedTime(e0, e1) * 1000) / ITERS);
      host.push(Number(t1 - t0) / 1e3 / ITERS);
    }
    console.log(JSON.stringify({ same, MiB: S / (1 << 20), test: name, hostUs: +med(host).toFixed(2), hostMin: +Math.min(...host).toFixed(2), gpuUsPerCall: +med(gpu).toFixed(2) }));
  }
  writeFileSync(join(dir, 'done'), '');
  process.exit(0);
}
