// dev: completion by event query against a word the stream writes into pinned host memory (cuStreamWriteValue32)
import { openDriver } from '../dist/src/cuda/open-driver.js';
const M = +(process.env.M ?? 20000);
const { driver: d } = await openDriver({ driver: 'native' });
d.init(); d.setDevice(0);
console.log('gpuDriven', JSON.stringify(d.gpuDrivenStatus()));
const s = d.streamCreate();
const src = d.memAlloc(1 << 20), dst = d.memAlloc(1 << 20);
const ev = d.eventCreate({ disableTiming: true });
const pin = d.hostAlloc(4096);
const w = new Uint32Array(pin.bytes.buffer, pin.bytes.byteOffset, 1024);
const med = (a) => { const b = [...a].sort((x, y) => x - y); return +b[b.length >> 1].toFixed(3); };
const pct = (a, p) => { const b = [...a].sort((x, y) => x - y); return +b[Math.floor(b.length * p)].toFixed(3); };
let k = 0;
function run(label, bytes, mode) {
  const lat = new Float64Array(M); let polls = 0;
  for (let i = 0; i < M; i++) {
    const t0 = performance.now();
    if (bytes > 0) d.memcpyAsync(dst, src, bytes, mode === 'legacy-word' ? 0n : s);
    if (mode === 'event') { d.eventRecord(ev, s); while (!d.eventQuery(ev)) polls++; }
    else { k = (k + 1) >>> 0; d.streamWriteValue32(mode === 'legacy-word' ? 0n : s, pin.devicePtr, k); while (Atomics.load(w, 0) !== k) polls++; }
    lat[i] = (performance.now() - t0) * 1e3;
  }
  console.log(label, JSON.stringify({ medUs: med(lat), p10: pct(lat, 0.1), p90: pct(lat, 0.9), pollsPerIter: +(polls / M).toFixed(1) }));
}
function hostCost() {
  d.streamSynchronize(s);
  let t0 = performance.now(); for (let i = 0; i < M; i++) d.eventRecord(ev, s); const rec = (performance.now() - t0) * 1e3 / M; d.streamSynchronize(s);
  t0 = performance.now(); for (let i = 0; i < M; i++) d.streamWriteValue32(s, pin.devicePtr + 64n, i); const wv = (performance.now() - t0) * 1e3 / M; d.streamSynchronize(s);
  t0 = performance.now(); for (let i = 0; i < M; i++) d.eventQuery(ev); const q = (performance.now() - t0) * 1e3 / M;
  t0 = performance.now(); for (let i = 0; i < M; i++) d.memcpyAsync(dst, src, 8, s); const cp = (performance.now() - t0) * 1e3 / M; d.streamSynchronize(s);
  console.log('hostCost', JSON.stringify({ recordUs: +rec.toFixed(3), writeValueUs: +wv.toFixed(3), queryUs: +q.toFixed(3), memcpy8Us: +cp.toFixed(3) }));
}
for (let r = 0; r < 2; r++) {
  hostCost();
  run('event 8B', 8, 'event');
  run('word 8B', 8, 'word');
  run('event 1MiB', 1 << 20, 'event');
  run('word 1MiB', 1 << 20, 'word');
  run('event empty', 0, 'event');
  run('word empty', 0, 'word');
  run('legacy-word empty', 0, 'legacy-word');
}
pin.free(); d.eventDestroy(ev); d.memFree(src); d.memFree(dst); d.streamDestroy(s); d.close();
