// One rank of the graph-capture GPU test (collectives.gpu.test.ts): joins the
// communicator from the environment (RANK, WORLD_SIZE, SMCUDA_RENDEZVOUS),
// captures allreduce sum (f32, COUNT elements, out of place, ALGORITHM or by
// size) on its stream in a CUDA graph, replays it REPLAYS times with fresh
// inputs written between replays, with an eager call after every other
// replay (by the same algorithm), and checks every element of every replay.
// Prints one JSON line.
import { Communicator } from 'smcuda';

const comm = await Communicator.fromEnv();
const { rank, size, driver: d } = comm;
const n = Number(process.env.COUNT ?? 1000);
const replays = Number(process.env.REPLAYS ?? 5);
const algorithm = process.env.ALGORITHM || undefined;
try {
  const send = d.memAlloc(n * 4);
  const recv = d.memAlloc(n * 4);
  const stream = d.streamCreate();
  const done = d.eventCreate({ disableTiming: true });
  const input = (r, k) => Float32Array.from({ length: n }, (_, i) => r * 1000 + k * 10 + (i % 7));
  const check = (k, what) => {
    const got = new Float32Array(n);
    d.memcpyDtoH(new Uint8Array(got.buffer), recv);
    for (let i = 0; i < n; i++) {
      let want = 0;
      for (let r = 0; r < size; r++) want += r * 1000 + k * 10 + (i % 7);
      if (got[i] !== want) throw new Error(`rank ${rank}: ${what} ${k}: element ${i} is ${got[i]}, expected ${want}`);
    }
  };
  d.streamBeginCapture(stream, 'thread-local');
  const captured = comm.allreduce({ send, recv, count: n, dtype: 'f32', op: 'sum', stream, ...(algorithm ? { algorithm } : {}) });
  const graph = d.streamEndCapture(stream);
  const { algorithm: ran } = await captured;
  const exec = d.graphInstantiate(graph);
  for (let k = 0; k < replays; k++) {
    // On `stream`, not the legacy default stream: cuMemcpyHtoD from pageable memory and cuMemsetD8
    // return before the device has the bytes, and `stream` is non-blocking, so a replay was not ordered
    // after them (a late zeroing left element 303648 of a replay at 0 once, 2 x H200).
    const bytes = new Uint8Array(input(rank, k).buffer);
    d.memcpyHtoDAsync(send, bytes, stream);
    d.memsetD8Async(recv, 0, n * 4, stream);
    d.graphLaunch(exec, stream);
    d.eventRecord(done, stream);
    await d.whenComplete(done);
    check(k, 'replay');
    if (k % 2 === 1) {
      d.memsetD8Async(recv, 0, n * 4, stream);
      await comm.allreduce({ send, recv, count: n, dtype: 'f32', op: 'sum', stream, ...(algorithm ? { algorithm } : {}) });
      check(k, 'eager call after replay');
    }
  }
  d.graphExecDestroy(exec);
  d.graphDestroy(graph);
  console.log(JSON.stringify({ rank, size, algorithm: ran, replays, verified: true, steps: comm.stats().steps }));
} finally {
  await comm.close();
}
