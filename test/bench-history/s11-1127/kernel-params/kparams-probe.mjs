// Dev: host and GPU time a call of the ways to start copies: cuMemcpyAsync (peer mapping -> local),
// CopyList.launch (kernel-node params + graph launch) with 1 and 4 copies, launchKernel with the list.
// SAME=1: both processes on device 0; SAME=0: rank 0 on 0, rank 1 (the copier) on 1.
import { fork } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
const DIST = process.env.DIST ?? 'dist';
const { openDriver } = await import(new URL(`../${DIST}/src/cuda/open-driver.js`, import.meta.url).href);
const { CopyList } = await import(new URL(`../${DIST}/src/copy-list.js`, import.meta.url).href);
const { COPY_PTX } = await import(new URL(`../${DIST}/src/kernels/copy.ptx.js`, import.meta.url).href);
const same = process.env.SAME !== '0';
if (!process.env.LP_RANK) {
  const dir = mkdtempSync(join(tmpdir(), 'kp-'));
  const kids = [0, 1].map((r) => fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, LP_RANK: String(r), LP_DIR: dir } }));
  await Promise.all(kids.map((k) => new Promise((res) => k.on('exit', res))));
} else {
  const r = Number(process.env.LP_RANK), dir = process.env.LP_DIR;
  const { driver: d } = await openDriver({ driver: 'native' });
  d.init();
  const dev = same ? 0 : r;
  d.setDevice(dev);
  const MAXS = 16 << 20;
  const A = d.memAlloc(4 * MAXS);
  d.memsetD8(A, r + 1, 4 * MAXS);
  writeFileSync(join(dir, `h${r}`), Buffer.from(d.ipcGetMemHandle(A)).toString('base64'));
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  const peerFile = join(dir, `h${1 - r}`);
  while (!existsSync(peerFile)) await sleep(5);
  await sleep(50);
  if (r === 0) { while (!existsSync(join(dir, 'done'))) await sleep(20); process.exit(0); }
  const pA = d.ipcOpenMemHandle(new Uint8Array(Buffer.from(readFileSync(peerFile, 'utf8'), 'base64')));
  const B = d.memAlloc(4 * MAXS);
  const s = d.streamCreate();
  const e0 = d.eventCreate(), e1 = d.eventCreate();
  const list = new CopyList(d, dev);
  const dsts = new BigUint64Array(64), srcs = new BigUint64Array(64), sz = new Float64Array(64);
  const { module } = d.moduleLoadData(COPY_PTX);
  const fn = d.moduleGetFunction(module, 'smcuda_copy_list');
  const lbuf = new Uint8Array(1544), lw = new BigUint64Array(lbuf.buffer);
  const cfg = { grid: [d.deviceInfo(dev).multiprocessors], block: [512] };
  const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
  for (const S of [1 << 20, 4 << 20, 16 << 20]) {
    const setList = (i, n) => { for (let k = 0; k < n; k++) { dsts[k] = B + BigInt(((i + k) % 4) * S); srcs[k] = pA + BigInt(((i + k) % 4) * S); sz[k] = S / n; } };
    const tests = {
      'memcpyAsync': (i) => d.memcpyAsync(B + BigInt((i % 4) * S), pA + BigInt((i % 4) * S), S, s),
      'CopyList.launch n=1': (i) => { setList(i, 1); if (!list.launch(dsts, srcs, sz, 1, s)) throw new Error(list.unavailable); },
      'CopyList.launch n=4 (S/4 each)': (i) => { setList(i, 4); list.launch(dsts, srcs, sz, 4, s); },
      'launchKernel list n=1': (i) => { lw[0] = 1n; lw[1] = B + BigInt((i % 4) * S); lw[65] = pA + BigInt((i % 4) * S); lw[129] = BigInt(S); d.launchKernel(fn, cfg, [{ type: 'bytes', value: lbuf }], s); },
    };
    for (const [name, f] of Object.entries(tests)) {
      const gpu = [], host = [];
      for (let run = 0; run < 7; run++) {
        for (let i = 0; i < 30; i++) f(i);
        d.streamSynchronize(s);
        d.eventRecord(e0, s);
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < 200; i++) f(i);
        const t1 = process.hrtime.bigint();
        d.eventRecord(e1, s);
        d.eventSynchronize(e1);
        gpu.push((d.eventElapsedTime(e0, e1) * 1000) / 200);
        host.push(Number(t1 - t0) / 1e3 / 200);
      }
      const gbs = S / (med(gpu) * 1e3);
      console.log(JSON.stringify({ same, MiB: S / (1 << 20), test: name, hostUs: +med(host).toFixed(2), hostMin: +Math.min(...host).toFixed(2), gpuUsPerCall: +med(gpu).toFixed(2), GBs: +gbs.toFixed(0) }));
    }
  }
  // correctness: one launch of 3 copies of odd sizes, bytes compared
  const H = new Uint8Array(3000);
  d.memsetD8(B, 0, 3 * 4096);
  dsts[0] = B; srcs[0] = pA; sz[0] = 1000; dsts[1] = B + 4096n; srcs[1] = pA + 4096n; sz[1] = 3000; dsts[2] = B + 8193n; srcs[2] = pA + 8193n; sz[2] = 17;
  list.launch(dsts, srcs, sz, 3, s);
  d.streamSynchronize(s);
  d.memcpyDtoH(H, B + 4096n);
  console.log(JSON.stringify({ same, check: H.every((x) => x === 1) ? 'ok' : 'BAD' }));
  list.close();
  writeFileSync(join(dir, 'done'), '');
  process.exit(0);
}
