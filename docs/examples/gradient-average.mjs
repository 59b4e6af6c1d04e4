// The classic gradient average of data-parallel training (the "Multi-GPU
// Gradient Average" sample of cuda-samples, which stages through host memory
// and MPI), with smcuda's allreduce on device memory instead.
//
//   node gradient-average.mjs [ranks=4] [elements=1048576]
//
// This process is rank 0; it starts the other ranks (this file again) the way
// torchrun does: RANK, WORLD_SIZE and a rendezvous directory in the
// environment. Each rank puts its "gradients" in device memory on device
// rank % devices (grad[i] = rank + 0.001 * i, as the sample's kernel
// computes them; here they are written from the host), averages them with
// allreduce avg, and checks every element on every rank: bit for bit against
// the documented order (f32 sum in rank order, then one division), and
// within 1e-6 relative of the exact mean.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Communicator } from 'smcuda';

async function rank() {
  const comm = await Communicator.fromEnv(); // RANK, WORLD_SIZE, SMCUDA_RENDEZVOUS
  const { rank, size, driver } = comm;
  const n = Number(process.env.GRADIENTS);
  try {
    const grad = driver.memAlloc(n * 4);
    const host = new Float32Array(n);
    for (let i = 0; i < n; i++) host[i] = rank + 0.001 * i;
    driver.memcpyHtoD(grad, new Uint8Array(host.buffer));

    const stream = driver.streamCreate();
    const { algorithm, us } = await comm.allreduce({ send: grad, count: n, dtype: 'f32', op: 'avg', stream }); // in place

    driver.memcpyDtoH(new Uint8Array(host.buffer), grad);
    let worst = 0;
    for (let i = 0; i < n; i++) {
      let sum = Math.fround(0.001 * i); // rank 0's gradient, as stored in f32
      for (let k = 1; k < size; k++) sum = Math.fround(sum + Math.fround(k + 0.001 * i));
      const expected = Math.fround(sum / size);
      if (host[i] !== expected) throw new Error(`rank ${rank}: element ${i} is ${host[i]}, expected ${expected}`);
      const exact = (size - 1) / 2 + 0.001 * i;
      worst = Math.max(worst, Math.abs(host[i] - exact) / Math.max(1, Math.abs(exact)));
    }
    if (worst > 1e-6) throw new Error(`rank ${rank}: relative error ${worst} against the exact mean`);
    console.log(`rank ${rank}/${size}: averaged ${n} f32 gradients by ${algorithm} in ${(us / 1000).toFixed(1)} ms, every element checked (max relative error ${worst.toExponential(1)})`);
    driver.streamDestroy(stream);
    driver.memFree(grad);
  } finally {
    await comm.close();
  }
}

async function launch() {
  const size = Number(process.argv[2] ?? 4);
  const gradients = String(Number(process.argv[3] ?? 1 << 20));
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-rendezvous-')); // 0700: only this user's ranks meet here
  try {
    const env = (rank) => ({ ...process.env, RANK: String(rank), WORLD_SIZE: String(size), SMCUDA_RENDEZVOUS: dir, GRADIENTS: gradients });
    const children = [...Array(size - 1).keys()].map((k) => spawn(process.execPath, [fileURLToPath(import.meta.url)], { env: env(k + 1), stdio: 'inherit' }));
    const exited = children.map((c) => new Promise((resolve) => c.once('exit', resolve)));
    Object.assign(process.env, env(0));
    await rank();
    const codes = await Promise.all(exited);
    if (codes.some((c) => c !== 0)) throw new Error(`a rank failed: exit codes ${codes.join(', ')}`);
    console.log(`gradient average: ${size} ranks verified`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await (process.env.RANK === undefined ? launch() : rank());
