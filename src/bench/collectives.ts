/**
 * The collectives suite: an allreduce avg of f32 among N local ranks (one
 * Communicator, the ranks of `smcuda demo --collectives`), per size, beside
 * the host-staged allreduce of seed 003 (device → host, every rank's buffer
 * to every rank, summed on the host, host → device; pageable and pinned)
 * measured in the same run. Each figure is the median of rank 0's calls with
 * p10/p90 (at least 5 per point). NCCL through PyTorch is looked for and,
 * where it cannot be run, left out with a note.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchCase, CollectivesWorkerConfig, CollectivesWorkerReady } from '../cli/demo-collectives-worker.js';
import { formatBytes } from '../cli/format.js';
import { startWorkers, type WorkerClient } from '../cli/worker-protocol.js';
import { atMost, type Figure, measured, skipped, type FigureSpec } from './figures.js';
import { summarize } from './stats.js';

const KiB = 1024;
const MiB = 1024 * KiB;
/** The gradient average of the issue: 100 MB of f32. */
export const GRADIENT_BYTES = 100_000_000;

export interface CollectivesSuiteOptions {
  driver: 'auto' | 'native' | 'sim';
  smoke: boolean;
  /** Ranks per run; default 2. */
  ranks?: number[];
}

const BASELINE = 'host-staged allreduce, pageable (seed 003)';

/** The targets on 2×H200 (stream time per call); held on a GPU only. */
function targetFor(bytes: number): FigureSpec['target'] {
  if (bytes <= 256 * KiB) return atMost(8, '≤ 8 µs');
  if (bytes <= MiB) return atMost(11, '≤ 11 µs');
  if (bytes <= 16 * MiB) return atMost(60, '≤ 60 µs');
  return undefined;
}

function spec(bytes: number, ranks: number, gpu: boolean): FigureSpec {
  const target = gpu ? targetFor(bytes) : undefined;
  return { name: `allreduce avg f32, ${formatBytes(bytes)}, ${ranks} ranks (host time per call)`, suite: 'collectives', unit: 'µs', baselineName: BASELINE, ...(target ? { target } : {}) };
}

/** Whether PyTorch with NCCL can be imported here, in words for the note. */
function ncclNote(): string {
  try {
    const out = execFileSync('python3', ['-c', 'import torch, torch.distributed as d; print(torch.__version__, torch.cuda.is_available(), d.is_nccl_available())'], { timeout: 60_000, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    return `NCCL baseline: python3 imports torch (${out}), but this suite does not run it yet: measure torch.distributed.all_reduce separately`;
  } catch {
    return 'NCCL baseline skipped: python3 cannot import torch here';
  }
}

export async function runCollectivesSuite(o: CollectivesSuiteOptions, progress: (line: string) => void): Promise<{ figures: Figure[]; notes: string[] }> {
  const figures: Figure[] = [];
  const notes: string[] = [ncclNote()];
  for (const ranks of o.ranks ?? [2]) {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-bench-coll-'));
    const token = randomBytes(16).toString('hex');
    let workers: WorkerClient<CollectivesWorkerReady>[] = [];
    try {
      workers = await startWorkers<CollectivesWorkerReady>(
        fileURLToPath(new URL('../cli/demo-collectives-worker.js', import.meta.url)),
        [...Array(ranks).keys()].map((rank) => {
          const cfg: CollectivesWorkerConfig = { rank, ranks, dir, token, driver: o.driver, timeoutMs: 120_000 };
          return { name: `collectives rank ${rank}`, env: { SMCUDA_DEMO_COLLECTIVES: JSON.stringify(cfg) } };
        }),
      );
      const gpu = workers[0]!.ready.driver === 'native';
      if (!gpu) notes.push('collectives on the simulated driver: the kernels are TypeScript over host memory; the figures check the suite, not the targets (held on a GPU only)');
      const sizes = o.smoke ? [8, 64 * KiB] : gpu ? [8, 256 * KiB, MiB, 16 * MiB, GRADIENT_BYTES] : [8, 256 * KiB, MiB];
      const run = async (mode: BenchCase['mode'], bytes: number) => {
        const count = Math.max(1, Math.floor(bytes / 4));
        const iters = o.smoke ? 5 : bytes >= 16 * MiB ? 10 : gpu ? 200 : 20;
        const c: BenchCase = { mode, count, iters, warmup: Math.max(2, Math.ceil(iters / 10)) };
        const res = await Promise.all(workers.map((w) => w.call<{ samples: number[]; algorithm: string }>('bench', c)));
        return res[0]!;
      };
      for (const bytes of sizes) {
        progress(`  collectives: ${ranks} ranks, ${formatBytes(bytes)}`);
        const ours = await run('smcuda', bytes);
        const pageable = await run('host-pageable', bytes);
        const pinned = await run('host-pinned', bytes);
        const s = summarize(ours.samples);
        const base = summarize(pageable.samples).median;
        figures.push(measured(spec(bytes, ranks, gpu), s.median, base, { stats: s, details: { algorithm: ours.algorithm, ranks, hostPinnedUs: summarize(pinned.samples).median, iterations: s.n } }));
        if (bytes === GRADIENT_BYTES) {
          figures.push(measured({ name: `gradient average, 100 MB f32, ${ranks} ranks`, suite: 'collectives', unit: 'µs', baselineName: BASELINE, target: atMost(0.01, '≥ 100× faster than host staging (pageable)', 'ratio') }, s.median, base, { stats: s, details: { algorithm: ours.algorithm } }));
        }
      }
      if (!sizes.includes(GRADIENT_BYTES)) figures.push(skipped({ name: `gradient average, 100 MB f32, ${ranks} ranks`, suite: 'collectives', unit: 'µs', baselineName: BASELINE, target: atMost(0.01, '≥ 100× faster than host staging (pageable)', 'ratio') }, 'GPU figure: run with --driver native on a GPU machine'));
      await Promise.all(workers.map((w) => w.exit()));
    } finally {
      await Promise.all(workers.map((w) => w.kill()));
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return { figures, notes };
}
