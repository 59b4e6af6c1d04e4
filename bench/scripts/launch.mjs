// Copy-launch costs over a peer IPC mapping: node bench/scripts/launch.mjs (copied as run from .gpu/launch.mjs; run from the repository root)
import { openDriver } from '../../dist/src/cuda/open-driver.js';
import { fork } from 'node:child_process';
import { createRequire } from 'node:module';
const N = 5000;
const med = (s) => { s = [...s].sort((x, y) => x - y); return `p50 ${s[s.length >> 1].toFixed(2)} p10 ${s[Math.floor(s.length * 0.1)].toFixed(2)} p90 ${s[Math.floor(s.length * 0.9)].toFixed(2)}`; };
const ns = () => Number(process.hrtime.bigint()) / 1000;
if (process.argv[2] === 'child') {
  const { driver: d } = await openDriver({ driver: 'native' });
  d.setDevice(Number(process.env.DB ?? 1));
  const addon = createRequire(import.meta.url)('../../build/Release/smcuda.node');
  const src = d.ipcOpenMemHandle(Uint8Array.from(Buffer.from(process.env.HANDLE, 'hex')));
  const dst = d.memAlloc(16 << 20);
  const st = d.streamCreate(); const ev = d.eventCreate({ disableTiming: true });
  const variants = {
    memcpyAsync: (n) => d.memcpyAsync(dst, src, n, st),
    'addon.cuMemcpyAsync': (n) => addon.cuMemcpyAsync(dst, src, n, st),
    'addon.cuMemcpyDtoDAsync': (n) => addon.cuMemcpyDtoDAsync(dst, src, n, st),
  };
  for (const [name, f] of Object.entries(variants)) {
    for (const n of [8, 1 << 20]) {
      const call = [], whole = [];
      for (let i = 0; i < N + 500; i++) {
        const t0 = ns(); f(n); const t1 = ns(); d.eventRecord(ev, st); while (!d.eventQuery(ev)) {} const t2 = ns();
        if (i >= 500) { call.push(t1 - t0); whole.push(t2 - t0); }
      }
      // 8 back-to-back launches, one record, spin: bandwidth
      const t0 = ns(); let reps = 0;
      for (; reps < 500; reps++) { for (let k = 0; k < 8; k++) f(n); d.eventRecord(ev, st); while (!d.eventQuery(ev)) {} }
      const dt = ns() - t0;
      console.log(name.padEnd(24), String(n).padStart(8), 'B | call µs', med(call), '| call+record+spin', med(whole), '| 8 back-to-back', (8 * reps * n / dt / 1000).toFixed(1), 'GB/s');
    }
  }
  const q = [], r = [];
  for (let i = 0; i < N; i++) { const t0 = ns(); d.eventQuery(ev); const t1 = ns(); d.eventRecord(ev, st); const t2 = ns(); q.push(t1 - t0); r.push(t2 - t1); while (!d.eventQuery(ev)) {} }
  console.log('eventQuery(done) µs', med(q), '| eventRecord µs', med(r));
  const b = [], p = [];
  for (let i = 0; i < N; i++) { const t0 = ns(); d.bufferId(dst); const t1 = ns(); d.pointerAttributes(dst); const t2 = ns(); b.push(t1 - t0); p.push(t2 - t1); }
  console.log('bufferId µs', med(b), '| pointerAttributes µs', med(p));
  process.exit(0);
} else {
  const { driver: d } = await openDriver({ driver: 'native' });
  d.setDevice(Number(process.env.DA ?? 0));
  const a = d.memAlloc(16 << 20);
  const HANDLE = Buffer.from(d.ipcGetMemHandle(a)).toString('hex');
  const child = fork(new URL(import.meta.url).pathname, ['child'], { env: { ...process.env, HANDLE } });
  await new Promise((r) => child.once('exit', r));
  process.exit(0);
}
