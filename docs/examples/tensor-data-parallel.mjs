// Tensor × data parallelism with communicator groups: the ranks form a grid
// of TP = 2 columns (a tensor-parallel group per row) and WORLD_SIZE / 2 rows
// (a data-parallel group per column), as Megatron-style training lays them
// out. With 4 ranks: tensor groups {0,1} {2,3}, data groups {0,2} {1,3}.
//
//   smcuda run -n 4 docs/examples/tensor-data-parallel.mjs [elements=65536] [steps=3]
//
// Each step, in the same moment and on two streams of its own, a rank
//   - sums the partial activations of its tensor group (a row-parallel
//     layer's allreduce sum: every rank of the row holds a part of the sum), and
//   - averages its gradients over its data group (allreduce avg),
// then checks every element of both results. The values are multiples of
// 1/4 small enough that every sum is exact in f32, and an average is that
// sum divided once in f32: the expected values are exact, any difference is
// an error, and the rank exits non-zero (so does the job).
import { Communicator } from 'smcuda';

const TP = 2;
const n = Number(process.argv[2] ?? 65536);
const steps = Number(process.argv[3] ?? 3);

const world = await Communicator.fromEnv(); // RANK, WORLD_SIZE, SMCUDA_RENDEZVOUS (smcuda run sets them)
const { rank, size, driver } = world;
try {
  if (size % TP !== 0) throw new Error(`run an even number of ranks (this job has ${size})`);
  if (rank === 0) console.log(`tensor × data parallel: ${size} ranks on the ${driver.kind === 'sim' ? 'simulated' : 'CUDA'} driver`);
  // Every rank splits twice, in the same order. A row's ranks share a color for the tensor
  // groups, a column's for the data groups; key: order by world rank.
  const tp = await world.split({ color: Math.floor(rank / TP), key: rank });
  const dp = await world.split({ color: rank % TP, key: rank });

  const activation = (r, step, i) => ((r + step) % 5) + (i % 13) * 0.25; // rank r's partial activation
  const gradient = (r, step, i) => r * 2 + step + (i % 29) * 0.25; // rank r's gradient
  const fill = (ptr, f) => {
    const h = new Float32Array(n);
    for (let i = 0; i < n; i++) h[i] = f(i);
    driver.memcpyHtoD(ptr, new Uint8Array(h.buffer));
  };
  const read = (ptr) => {
    const h = new Float32Array(n);
    driver.memcpyDtoH(new Uint8Array(h.buffer), ptr);
    return h;
  };

  const act = driver.memAlloc(n * 4);
  const grad = driver.memAlloc(n * 4);
  const tpStream = driver.streamCreate();
  const dpStream = driver.streamCreate();
  for (let step = 0; step < steps; step++) {
    fill(act, (i) => activation(rank, step, i));
    fill(grad, (i) => gradient(rank, step, i));
    // Both groups' calls at once: each group has its own calls, scratch and tags on the shared endpoints.
    const [a, g] = await Promise.all([
      tp.allreduce({ send: act, count: n, dtype: 'f32', op: 'sum', stream: tpStream }),
      dp.allreduce({ send: grad, count: n, dtype: 'f32', op: 'avg', stream: dpStream }),
    ]);
    const gotAct = read(act);
    const gotGrad = read(grad);
    for (let i = 0; i < n; i++) {
      const wantAct = tp.parentRanks.reduce((s, r) => s + activation(r, step, i), 0);
      const wantGrad = Math.fround(dp.parentRanks.reduce((s, r) => s + gradient(r, step, i), 0) / dp.size); // avg: the f32 sum, one f32 division
      if (gotAct[i] !== wantAct) throw new Error(`rank ${rank}, step ${step}: activation ${i} is ${gotAct[i]}, expected ${wantAct}`);
      if (gotGrad[i] !== wantGrad) throw new Error(`rank ${rank}, step ${step}: gradient ${i} is ${gotGrad[i]}, expected ${wantGrad}`);
    }
    if (step === steps - 1)
      console.log(
        `rank ${rank}/${size}: tensor group [${tp.parentRanks}] sum by ${a.algorithm}, data group [${dp.parentRanks}] avg by ${g.algorithm}: ${steps} steps of ${n} f32, every element checked`,
      );
  }
  driver.streamDestroy(tpStream);
  driver.streamDestroy(dpStream);
  driver.memFree(act);
  driver.memFree(grad);
} finally {
  await world.close(); // closes the groups first
}
