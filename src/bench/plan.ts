/**
 * What a run measures and how often: the sizes (defaults per driver, capped
 * by memory), and iteration counts per measurement. Counts come from a byte
 * budget per point, clamped, so a 1 GiB point and an 8 B point each take a
 * bounded time; warm-up is a tenth of that (at least one), which also takes
 * the first open of each fresh buffer out of the timed part.
 */
import { statfsSync } from 'node:fs';
import type { DriverKind } from '../cuda/driver.js';
import { formatBytes } from '../cli/format.js';
import type { Repeat } from './protocol.js';
import type { SuiteName } from './suites.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

export const DEFAULT_GPU_SIZES = [8, 64, 512, 4 * KiB, 32 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB];
/** The simulator's device memory is /dev/shm and its copies are memcpy: past 64 MiB a point only costs time. */
export const SIM_SIZE_CAP = 64 * MiB;
export const SMOKE_SIZES = [8, 4 * KiB, 64 * KiB];

export interface BenchOptions {
  driver: 'auto' | 'native' | 'sim';
  /** Sizes given with --sizes (else the defaults). */
  sizes?: number[];
  suites: SuiteName[];
  smoke: boolean;
  /** Outstanding sends in the streaming suite. */
  window: number;
  /** Ranks of the collectives suite (default 2, one per GPU of the across layout). */
  ranks?: number;
  timeoutMs: number;
}

export interface Budget {
  bytes: number;
  min: number;
  max: number;
}

export interface Plan {
  sizes: number[];
  notes: string[];
  latency(size: number): Repeat;
  bandwidth(size: number): Repeat;
  /** Small fixed-cost measurements (socket ping-pong, 8 B copy). */
  small: Repeat;
  negotiationReps: number;
  ipcOpens: number;
  cacheHit: { batches: number; perBatch: number };
  streamSize: number;
  /** The memory suite's transfer size: 256 MiB, less on the simulator, in smoke runs, or where it does not fit. */
  memorySize: number;
  /** The streaming figure: long, and measured after V8 and the heap reached their steady state. */
  streaming: Repeat;
  /** The native floor's ping-pong (native-floor.ts), per size. */
  floor(size: number): Repeat;
  /** Bidirectional: the message size (256 MiB on a GPU) and its repetitions each way. */
  bidir: { size: number; repeat: Repeat };
  /** All-to-all: processes, message size (16 MiB on a GPU), rounds. */
  allToAll: { ranks: number; size: number; repeat: Repeat };
  /** First send: fresh pairs of processes, one message each. */
  firstSend: { reps: number; size: number };
  /** Memory kinds across GPUs: transfer sizes. */
  memoryAcrossSizes: number[];
  /** Runs of each figure that moves with the machine (paired-runs.ts lists them): the figure is their median. */
  throughputRuns: number;
}

/**
 * `warmAll`: as many warm-up repetitions as measured ones. Latency needs it:
 * the per-message path reaches V8's optimised code only after a few thousand
 * messages (on 2×H200 the 8 B figure measured right after 50 warm-up round
 * trips was far above the steady state).
 */
function repeatFor(budget: Budget, size: number, smoke: boolean, warmAll = false): Repeat {
  if (smoke) return { iters: budget.min, warmup: 1 };
  const iters = Math.max(budget.min, Math.min(budget.max, Math.floor(budget.bytes / Math.max(1, size))));
  return { iters, warmup: warmAll ? iters : Math.max(1, Math.min(50, Math.ceil(iters / 10))) };
}

export interface MemoryLimit {
  /** Bytes one process may allocate on its device. */
  deviceBytes: number;
  /** Where the simulator keeps device memory (/dev/shm): bytes free for the whole run. */
  shmBytes?: number;
}

/** Bytes free in /dev/shm, or undefined where it cannot be read. */
export function shmFreeBytes(): number | undefined {
  try {
    const s = statfsSync('/dev/shm');
    return s.bavail * s.bsize;
  } catch {
    return undefined;
  }
}

export function makePlan(o: BenchOptions, kind: DriverKind, memory: MemoryLimit): Plan {
  const notes: string[] = [];
  const sim = kind === 'sim';
  let sizes: number[];
  if (o.sizes) sizes = [...o.sizes];
  else if (o.smoke) sizes = [...SMOKE_SIZES];
  else if (sim) {
    sizes = DEFAULT_GPU_SIZES.filter((s) => s <= SIM_SIZE_CAP);
    notes.push(`simulated driver: default sizes capped at ${formatBytes(SIM_SIZE_CAP)} (its copies are host memcpy; give --sizes to go further)`);
  } else sizes = [...DEFAULT_GPU_SIZES];
  sizes = [...new Set(sizes)].sort((a, b) => a - b);
  // Per process at one size: a send and a receive buffer, or a raw copy's
  // source and destination; the staging baseline adds pinned host memory.
  const fits = (s: number) => 2.5 * s <= 0.9 * memory.deviceBytes && (memory.shmBytes === undefined || 6 * s <= memory.shmBytes);
  const dropped = sizes.filter((s) => !fits(s));
  if (dropped.length > 0) {
    notes.push(`sizes left out for lack of ${sim ? '/dev/shm space' : 'device memory'}: ${dropped.map(formatBytes).join(', ')}`);
    sizes = sizes.filter(fits);
  }
  // smcuda is timed on the wall clock from the first send to the last FIN,
  // the raw copies by CUDA events, so a point must hold enough messages that
  // the start and end of a run (waking an idle peer, the last completion's
  // hand-off, a fraction of a millisecond on 2xH200) do not count: 8 messages of 1 GiB lost
  // ~1.5 % to them, 32 lose 0.5 % (osu_bw sends 20 x 64 at large sizes).
  // A point also lasts long at line rate (32 GiB): young-generation
  // collections pause a process now and then, so a short point
  // (the former 8 GiB budget at 16 MiB) read 100 % of raw or 92 % depending
  // on whether one fell into it; a longer point pays them at their real rate
  // (2000 x 16 MiB: within a few % of raw on 2xH200, bench/notes/steady-state.txt).
  const bw: Budget = sim ? { bytes: 256 * MiB, min: 3, max: 200 } : { bytes: 32 * GiB, min: 32, max: 4000 };
  // Small messages run long enough for the per-message path to reach V8's optimised code and stay there.
  const lat: Budget = sim ? { bytes: 64 * MiB, min: 3, max: 5000 } : { bytes: 2 * GiB, min: 5, max: 10_000 };
  if (o.smoke) {
    bw.min = 3;
    lat.min = 5;
  }
  const small = o.smoke ? { iters: 20, warmup: 2 } : { iters: sim ? 2000 : 5000, warmup: 200 };
  let memorySize = o.smoke ? 64 * KiB : sim ? SIM_SIZE_CAP : 256 * MiB;
  if (o.suites.includes('memory')) {
    // vmm-chunked allocates twice the message (demo-memory.ts); halve until both sides' buffers fit.
    const wanted = memorySize;
    while (memorySize > 64 * KiB && !fits(2 * memorySize)) memorySize /= 2;
    if (memorySize !== wanted)
      notes.push(
        `memory suite: ${formatBytes(memorySize)} transfers instead of ${formatBytes(wanted)}, for lack of ${sim ? '/dev/shm space' : 'device memory'}`,
      );
  }
  const bidirSize = o.smoke ? 64 * KiB : sim ? 16 * MiB : 256 * MiB;
  const a2aSize = o.smoke ? 64 * KiB : sim ? MiB : 16 * MiB;
  let memoryAcrossSizes = o.smoke ? [64 * KiB] : sim ? [16 * MiB] : [256 * MiB, GiB];
  if (o.suites.includes('memory-across')) {
    const left = memoryAcrossSizes.filter((s) => !fits(2 * s));
    if (left.length > 0) notes.push(`memory-across: ${left.map(formatBytes).join(', ')} left out for lack of ${sim ? '/dev/shm space' : 'device memory'}`);
    memoryAcrossSizes = memoryAcrossSizes.filter((s) => fits(2 * s));
  }
  return {
    sizes,
    notes,
    // The floor has no JavaScript to warm up; its warm-up takes the first opens and peer access out.
    floor: (s) => (o.smoke ? { iters: 20, warmup: 2 } : { iters: sim ? 2000 : s > 64 * KiB ? 2000 : 10_000, warmup: sim ? 200 : 1000 }),
    bidir: { size: bidirSize, repeat: repeatFor(bw, bidirSize, o.smoke) },
    // All ranks send to all others every round: 8 × 7 × 16 MiB ≈ 0.9 GiB a round on a GPU.
    allToAll: { ranks: 8, size: a2aSize, repeat: o.smoke ? { iters: 2, warmup: 1 } : sim ? { iters: 5, warmup: 2 } : { iters: 100, warmup: 20 } },
    firstSend: { reps: o.smoke ? 1 : sim ? 3 : 5, size: 64 * KiB },
    memoryAcrossSizes,
    latency: (s) => repeatFor(lat, s, o.smoke, true),
    bandwidth: (s) => repeatFor(bw, s, o.smoke),
    small,
    negotiationReps: o.smoke ? 1 : 5,
    ipcOpens: o.smoke ? 3 : 21,
    cacheHit: o.smoke ? { batches: 3, perBatch: 1000 } : { batches: 30, perBatch: 20_000 },
    streamSize: o.smoke ? 64 * KiB : MiB,
    memorySize,
    // 20,000 messages after 40,000 of warm-up. A fresh process streams 1 MiB
    // slower for its first ~20,000 messages,
    // while V8 still optimises (and deoptimises) the per-message path and
    // sizes its young generation, then at its steady state (bench/notes/steady-state.txt); osu_bw too times only after its warm-up iterations.
    streaming: o.smoke ? { iters: bw.min, warmup: 1 } : sim ? { iters: 2000, warmup: 2000 } : { iters: 20_000, warmup: 40_000 },
    throughputRuns: o.smoke ? 2 : sim ? 3 : 5,
  };
}
