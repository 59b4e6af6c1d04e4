// Dev: GPU and host time of the copy kernel: CopyList (graph, pinned list) vs launchKernel over a pinned list vs
// launchKernel over a device list vs cuMemcpyAsync; 1 MiB local copies on device 0.
const DIST = process.env.DIST ?? 'dist';
const imp = (p) => import(new URL(`../${DIST}/src/${p}`, import.meta.url).href);
const { openDriver } = await imp('cuda/open-driver.js');
const { CopyList } = await imp('copy-list.js');
const { COPY_PTX } = await imp('kernels/copy.ptx.js');
const { driver: d } = await openDriver({ driver: process.env.DRIVER ?? 'native' });
d.init(); d.setDevice(0);
const S = Number(process.env.MIB ?? 1) * (1 << 20);
const N = Number(process.env.N ?? 200);
const src = d.memAlloc(4 * S), dst = d.memAlloc(4 * S);
const s = d.streamCreate();
const e0 = d.eventCreate(), e1 = d.eventCreate();
const { module } = d.moduleLoadData(COPY_PTX);
const fn = d.moduleGetFunction(module, 'smcuda_copy_list');
const sms = d.deviceInfo(0).multiprocessors;
const pinned = d.hostAlloc(4096);
const pw = new BigUint64Array(pinned.bytes.buffer, pinned.bytes.byteOffset, 512);
pw[0] = 1n; pw[1] = dst; pw[2] = src; pw[3] = BigInt(S);
const devList = d.memAlloc(4096);
d.memcpyHtoD(devList, new Uint8Array(pinned.bytes.buffer, pinned.bytes.byteOffset, 32));
const cl = new CopyList(d, 0);
const dsts = new BigUint64Array(64), srcs = new BigUint64Array(64), sizes = new Float64Array(64);
for (let k = 0; k < 4; k++) { dsts[k] = dst + BigInt(k * S); srcs[k] = src + BigInt(k * S); sizes[k] = S; }
const cfg = { grid: [sms], block: [512] };
const capS = d.streamCreate();
d.streamBeginCapture(capS, 'thread-local');
d.launchKernel(fn, cfg, [{ type: 'ptr', value: devList }], capS);
const kexec = d.graphInstantiate(d.streamEndCapture(capS));
const tests = {
  memcpyAsync: () => d.memcpyAsync(dst, src, S, s),
  'launchKernel, device list': () => d.launchKernel(fn, cfg, [{ type: 'ptr', value: devList }], s),
  'launchKernel, pinned list': () => d.launchKernel(fn, cfg, [{ type: 'ptr', value: pinned.devicePtr }], s),
  'CopyList (graph, pinned)': () => { const k = cl.launch(dsts, srcs, sizes, 1, s); if (k < 0) throw new Error('no slot'); cl.release(k); },
  'CopyList, 2 copies': () => { const k = cl.launch(dsts, srcs, sizes, 2, s); if (k < 0) throw new Error('no slot'); cl.release(k); },
  'CopyList, 4 copies': () => { const k = cl.launch(dsts, srcs, sizes, 4, s); if (k < 0) throw new Error('no slot'); cl.release(k); },
  'memcpyBatchAsync, 2 copies': () => d.memcpyBatchAsync(dsts, srcs, sizes, 2, s),
  'memcpyBatchAsync, 4 copies': () => d.memcpyBatchAsync(dsts, srcs, sizes, 4, s),
  'graph of the kernel alone, device list': () => d.graphLaunch(kexec, s),
};
console.log(JSON.stringify({ sms, devicePtr: '0x' + pinned.devicePtr.toString(16) }));
const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
for (const [name, f] of Object.entries(tests)) {
  const gpu = [], host = [];
  for (let r = 0; r < 7; r++) {
    for (let i = 0; i < 5; i++) f();
    d.streamSynchronize(s);
    d.eventRecord(e0, s);
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) f();
    const t1 = process.hrtime.bigint();
    d.eventRecord(e1, s);
    d.eventSynchronize(e1);
    gpu.push((d.eventElapsedTime(e0, e1) * 1000) / N);
    host.push(Number(t1 - t0) / 1e3 / N);
  }
  console.log(JSON.stringify({ MiB: S / (1 << 20), test: name, gpuUsPerCall: +med(gpu).toFixed(2), hostUs: +med(host).toFixed(2) }));
}
// correctness of one CopyList copy
dsts[0] = dst; srcs[0] = src; sizes[0] = S;
const want = new Uint8Array(S).map((_, i) => (i * 7 + 3) & 255);
d.memcpyHtoD(src, want); d.memsetD8(dst, 0, S); d.streamSynchronize(0n);
const k = cl.launch(dsts, srcs, sizes, 1, s); d.streamSynchronize(s); cl.release(k);
const back = new Uint8Array(S); d.memcpyDtoH(back, dst);
console.log('copy ok:', Buffer.compare(back, want) === 0);
process.exit(0);
