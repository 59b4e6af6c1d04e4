// dev: same-GPU copies: cuMemcpyAsync against a direct launch of a one-copy kernel: host cost a call and GPU rate, back to back
import { readFileSync } from 'node:fs';
import { openDriver } from '../dist/src/cuda/open-driver.js';
const { driver: d } = await openDriver({ driver: 'native' });
d.init(); d.setDevice(0);
const sms = d.deviceInfo(0).multiprocessors;
const { module } = d.moduleLoadData(readFileSync(new URL('./one.ptx', import.meta.url), 'utf8'));
const fn = d.moduleGetFunction(module, 'dev_copy_one');
const s = d.streamCreate();
const MAX = 16 << 20;
const src = d.memAlloc(MAX * 8), dst = d.memAlloc(MAX * 8);
const ev0 = d.eventCreate(), ev1 = d.eventCreate();
const evq = d.eventCreate({ disableTiming: true });
const med = (a) => { const b = [...a].sort((x, y) => x - y); return +b[b.length >> 1].toFixed(2); };
function backToBack(label, bytes, n, issue) {
  const host = [], gbs = [];
  for (let r = 0; r < 5; r++) {
    d.streamSynchronize(s);
    d.eventRecord(ev0, s);
    const t0 = performance.now();
    for (let i = 0; i < n; i++) issue(i % 8);
    const t1 = performance.now();
    d.eventRecord(ev1, s); d.eventSynchronize(ev1);
    const ms = d.eventElapsedTime(ev0, ev1);
    host.push((t1 - t0) * 1e3 / n); gbs.push(bytes * n / ms / 1e6);
  }
  console.log(label, bytes, JSON.stringify({ hostUsPerCall: med(host), GBs: med(gbs) }));
}
function lone(label, bytes, n, issue) {
  const lat = [];
  for (let i = 0; i < n; i++) { const t0 = performance.now(); issue(i % 8); d.eventRecord(evq, s); while (!d.eventQuery(evq)); lat.push((performance.now() - t0) * 1e3); }
  console.log(label, bytes, JSON.stringify({ loneUs: med(lat) }));
}
for (const bytes of [1 << 20, 4 << 20, 16 << 20]) {
  const n = Math.max(200, Math.min(4000, (8 << 30) / bytes));
  const mc = (k) => d.memcpyAsync(dst + BigInt(k * bytes), src + BigInt(k * bytes), bytes, s);
  const kern = (grid) => (k) => d.launchKernel(fn, { grid: [grid], block: [512] }, [{ type: 'ptr', value: dst + BigInt(k * bytes) }, { type: 'ptr', value: src + BigInt(k * bytes) }, { type: 'u64', value: BigInt(bytes) }], s);
  for (let rep = 0; rep < 2; rep++) {
    backToBack('memcpy', bytes, n, mc);
    backToBack(`kernel${sms}`, bytes, n, kern(sms));
    backToBack(`kernel${2 * sms}`, bytes, n, kern(2 * sms));
    backToBack(`kernel${4 * sms}`, bytes, n, kern(4 * sms));
  }
  lone('memcpy', bytes, 500, mc);
  lone(`kernel${2 * sms}`, bytes, 500, kern(2 * sms));
}
d.close();
