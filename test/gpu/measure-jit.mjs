// The reduction module's first load into an empty JIT cache, whole (reduce.ptx.ts, 49 entries) against
// one dtype's entries (src/kernels/ptx-entries.ts), each in a fresh process with its own empty
// CUDA_CACHE_PATH, then a second process on the same cache (warm):
//   node test/gpu/measure-jit.mjs [reps=3]
// Prints one JSON object: ms per case (each rep), and context creation for scale. Not a test.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

if (process.env.MEASURE_JIT_CASE) {
  const { openDriver } = await import('../../dist/src/cuda/open-driver.js');
  const { reducePtx } = await import('../../dist/src/kernels/reduce.ptx.js');
  const { dtypePtx } = await import('../../dist/src/collectives/reduce-kernels.js');
  const { driver } = await openDriver({ driver: 'native' });
  driver.init();
  const t0 = performance.now();
  driver.setDevice(0);
  const contextMs = performance.now() - t0;
  const ptx = process.env.MEASURE_JIT_CASE === 'whole' ? reducePtx() : dtypePtx(process.env.MEASURE_JIT_CASE);
  const { loadMs } = driver.moduleLoadData(ptx);
  console.log(JSON.stringify({ loadMs, contextMs, ptxBytes: ptx.length }));
} else {
  const reps = Number(process.argv[2] ?? 3);
  const out = {};
  for (const c of ['whole', 'f32', 'bf16']) {
    out[c] = { cold: [], warm: [] };
    for (let r = 0; r < reps; r++) {
      const cache = mkdtempSync(join(tmpdir(), 'smcuda-jit-'));
      const env = { ...process.env, MEASURE_JIT_CASE: c, CUDA_CACHE_PATH: cache };
      for (const k of ['cold', 'warm']) out[c][k].push(JSON.parse(execFileSync(process.execPath, [fileURLToPath(import.meta.url)], { env, encoding: 'utf8' })));
      rmSync(cache, { recursive: true, force: true });
    }
  }
  console.log(JSON.stringify(out, null, 1));
}
