// Host time of one cuGraphLaunch by what the graph holds, on the native
// driver (GPU machine), one process, no peer (every wait is already met):
//   node test/gpu/measure-graph-launch.mjs      → JSON on stdout
// Graphs of N nodes of one kind: write64 (one op per batch node), batches of
// 8 ops, the flag kernel with the same 8 ops, 8 B device-to-device copies, and the two mixed as one persistent
// ping-pong iteration per (batch, copy). Launched in bursts of 8, the host
// waiting for each burst, so the queue never fills: the launch call's own
// cost. Not a test: speed targets live in `smcuda bench`.
import { NativeCudaDriver } from '../../dist/src/cuda/native-driver.js';
import { FLAG_OPS_ENTRY, FLAG_OPS_PTX } from '../../dist/src/kernels/flag-ops.ptx.js';
import { flagOpsArgs } from '../../dist/src/persistent/transfers.js';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const d = new NativeCudaDriver();
d.init();
d.setDevice(0);
const mem = d.memAlloc(1 << 16);
d.memsetD8(mem, 0, 1 << 16);
const stream = d.streamCreate();
const word = (i) => mem + BigInt(8 * (i % 512));
const load = d.moduleLoadData(FLAG_OPS_PTX);
const flagKernel = d.moduleGetFunction(load.module, FLAG_OPS_ENTRY);
const kinds = {
  flagKernel8: (i) =>
    d.launchKernel(
      flagKernel,
      { grid: [1], block: [1] },
      flagOpsArgs(
        Array.from({ length: 8 }, (_, k) =>
          k === 3 ? { op: 'wait64', addr: word(600), value: 0n, condition: 'geq' } : { op: 'write64', addr: word(i * 8 + k), value: 1n },
        ),
      ),
      stream,
    ),
  write64: (i) => d.streamBatchMemOp(stream, [{ op: 'write64', addr: word(i), value: 1n }]),
  batch8: (i) =>
    d.streamBatchMemOp(
      stream,
      Array.from({ length: 8 }, (_, k) =>
        k === 3 ? { op: 'wait64', addr: word(600), value: 0n, condition: 'geq' } : { op: 'write64', addr: word(i * 8 + k), value: 1n },
      ),
    ),
  copy8B: (i) => d.memcpyAsync(mem + 8192n + BigInt(8 * (i % 256)), mem + 12288n, 8, stream),
  batchAndCopy: (i) => (i % 2 ? kinds.copy8B(i) : kinds.batch8(i)),
};
const out = { flagKernelLoadMs: load.loadMs, results: [] };
for (const [kind, add] of Object.entries(kinds)) {
  for (const n of [1, 8, 16, 32, 64]) {
    d.streamBeginCapture(stream);
    for (let i = 0; i < n; i++) add(i);
    const graph = d.streamEndCapture(stream);
    const exec = d.graphInstantiate(graph);
    for (let w = 0; w < 8; w++) d.graphLaunch(exec, stream);
    d.streamSynchronize(stream);
    const times = [];
    for (let b = 0; b < 40; b++) {
      for (let k = 0; k < 8; k++) {
        const t0 = process.hrtime.bigint();
        d.graphLaunch(exec, stream);
        times.push(Number(process.hrtime.bigint() - t0) / 1000);
      }
      d.streamSynchronize(stream);
    }
    out.results.push({ kind, nodes: n, launchUsMedian: median(times) });
    d.graphExecDestroy(exec);
    d.graphDestroy(graph);
  }
}
console.log(JSON.stringify(out, null, 1));
d.streamDestroy(stream);
d.memFree(mem);
d.close();
