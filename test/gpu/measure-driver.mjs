// Driver-level figures for the record, on the native driver (GPU machine):
//   node test/gpu/measure-driver.mjs            → JSON on stdout
// - GPU-completion-to-Promise latency (measureCompletionLatency)
// - cuIpcGetMemHandle, and cuIpcOpenMemHandle first / later (median) / again / close,
//   opened by a second process on the same GPU and (where there are two) on GPU1.
// Not a test: speed targets live in `smcuda bench`.
import { fork } from 'node:child_process';
import { NativeCudaDriver } from '../../dist/src/cuda/native-driver.js';
import { measureCompletionLatency } from '../../dist/src/bench/completion-latency.js';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const us = (t0) => Number(process.hrtime.bigint() - t0) / 1000;

if (process.argv[2] === 'child') {
  const d = new NativeCudaDriver();
  d.init();
  d.setDevice(Number(process.argv[3]));
  process.on('message', (m) => {
    const handles = m.handles.map((h) => new Uint8Array(Buffer.from(h, 'hex')));
    const opens = [];
    const ptrs = [];
    for (const h of handles) {
      const t0 = process.hrtime.bigint();
      ptrs.push(d.ipcOpenMemHandle(h));
      opens.push(us(t0));
    }
    let t0 = process.hrtime.bigint();
    const again = d.ipcOpenMemHandle(handles[1]);
    const againUs = us(t0);
    const samePointer = again === ptrs[1];
    d.ipcCloseMemHandle(again);
    const closes = [];
    for (const p of ptrs) {
      t0 = process.hrtime.bigint();
      d.ipcCloseMemHandle(p);
      closes.push(us(t0));
    }
    process.send({
      firstOpenUs: opens[0],
      laterOpenMedianUs: median(opens.slice(1)),
      openAgainUs: againUs,
      openAgainSamePointer: samePointer,
      closeMedianUs: median(closes),
    });
    d.close();
    process.disconnect();
  });
  process.send({ ready: true });
} else {
  const d = new NativeCudaDriver();
  const status = d.status();
  if (!status.available) {
    console.log(JSON.stringify({ available: false, reason: status.reason }));
    process.exit(0);
  }
  d.init();
  d.setDevice(0);
  const n = d.deviceCount();
  const result = { driverVersion: status.driverVersion, devices: Array.from({ length: n }, (_, i) => d.deviceInfo(i).name) };
  result.completion = await measureCompletionLatency(d, 2000);
  const ptrs = Array.from({ length: 64 }, () => d.memAlloc(2 << 20));
  const gets = [];
  const handles = ptrs.map((p) => {
    const t0 = process.hrtime.bigint();
    const h = d.ipcGetMemHandle(p);
    gets.push(us(t0));
    return Buffer.from(h).toString('hex');
  });
  result.ipcGetMemHandleMedianUs = median(gets);
  for (const dev of n > 1 ? [0, 1] : [0]) {
    const child = fork(new URL(import.meta.url).pathname, ['child', String(dev)]);
    const r = await new Promise((resolve) => {
      child.on('message', (m) => (m.ready ? child.send({ handles }) : resolve(m)));
    });
    result[dev === 0 ? 'openSameGpu' : 'openGpu0ToGpu1'] = r;
  }
  for (const p of ptrs) d.memFree(p);
  d.close();
  console.log(JSON.stringify(result, null, 2));
}
