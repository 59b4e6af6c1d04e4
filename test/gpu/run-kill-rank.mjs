// One rank of the kill test of run-launcher.gpu.test.ts, started by `smcuda run`: joins by
// Communicator.fromEnv on the driver RUN_LAUNCHER_DRIVER names ('native', the default, or 'sim'),
// verifies a first allreduce (sum, f32, out of place, every element), prints
//   { rank, pid, ready: true, dir (SMCUDA_RENDEZVOUS), device (its UUID) }
// and then loops the same allreduce, every result checked, until the communicator aborts (the test
// SIGKILLs one rank): prints { rank, error: { code, causeCode, failedRank, failedPid }, calls, wrong }
// and exits 0 once closed. A wrong element, or an error that is not the abort, exits 1.
import { Communicator } from 'smcuda';

const comm = await Communicator.fromEnv({ driver: process.env.RUN_LAUNCHER_DRIVER ?? 'native', timeoutMs: 30_000 });
const { rank, size, driver: d } = comm;
const n = Number(process.env.RUN_KILL_COUNT ?? 1 << 20);
const send = d.memAlloc(n * 4);
const recv = d.memAlloc(n * 4);
const stream = d.streamCreate();
d.memcpyHtoD(send, new Uint8Array(Float32Array.from({ length: n }, (_, i) => rank + (i % 1000)).buffer));
const got = new Float32Array(n);
const base = (size * (size - 1)) / 2;
let calls = 0;
let wrong = false;
const call = async () => {
  await comm.allreduce({ send, recv, count: n, dtype: 'f32', op: 'sum', stream });
  d.memcpyDtoH(new Uint8Array(got.buffer), recv);
  for (let i = 0; i < n; i++) {
    if (got[i] !== base + size * (i % 1000)) {
      wrong = true;
      throw new Error(`rank ${rank}, call ${calls}: element ${i} is ${got[i]}, expected ${base + size * (i % 1000)}`);
    }
  }
  calls++;
};
let exitCode = 0;
try {
  await call();
  console.log(JSON.stringify({ rank, pid: process.pid, ready: true, dir: process.env.SMCUDA_RENDEZVOUS, device: d.deviceInfo(d.currentDevice()).uuid }));
  try {
    for (;;) await call();
  } catch (err) {
    if (wrong || err.code !== 'SMCUDA_COMM_ABORTED') throw err;
    console.log(
      JSON.stringify({ rank, error: { code: err.code, causeCode: err.causeCode, failedRank: err.failedRank, failedPid: err.failedPid }, calls, wrong }),
    );
  }
} catch (err) {
  console.error(err);
  exitCode = 1;
} finally {
  // After an abort too (as comm-rank.mjs die-loop does): the poison released the calls' waits.
  d.streamDestroy(stream);
  d.memFree(send);
  d.memFree(recv);
  await comm.close();
}
process.exitCode = exitCode;
