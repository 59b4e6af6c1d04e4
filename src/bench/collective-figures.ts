/**
 * The figures of `smcuda bench --suite collectives` (issue 26, item 6) and
 * the sizes it measures.
 *
 * Targets (2×H200, allreduce f32, two ranks), against NCCL measured in the
 * same run through PyTorch where torch imports: ≤ 8 µs from 8 B to 256 KiB
 * (stream time), ≤ 11 µs at 1 MiB, ≤ 60 µs at 16 MiB, ≥ 340 GB/s bus
 * bandwidth from 256 MiB to 1 GiB, ≤ 5 µs for 8 B inside a CUDA graph; and
 * the gradient average of 100 MB ≥ 100× faster than seed 003's pageable
 * host staging.
 */
import { formatBytes } from '../cli/format.js';
import { atLeast, atMost } from './figures.js';
import type { ScopedSpec } from './suites.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

/** The issue table's sizes. */
export const COLLECTIVE_GPU_SIZES = [8, KiB, 16 * KiB, 256 * KiB, MiB, 16 * MiB, 256 * MiB, GiB];
/** On the simulator the host staging is all there is to run: small sizes. */
export const COLLECTIVE_SIM_SIZES = [8, KiB, 16 * KiB, 256 * KiB, MiB];
export const COLLECTIVE_SMOKE_SIZES = [8, 16 * KiB];
/** Sizes NCCL is also timed at inside a CUDA graph (ANCHORS.md). */
export const GRAPH_COLLECTIVE_SIZES = [8, 16 * KiB, MiB];
/** Seed 003's gradient: 100 MB of f32 (25,000,000 elements). */
export const GRADIENT_BYTES = 100_000_000;

export type Algorithm = 'one-shot' | 'one-shot-ll' | 'two-shot' | 'pipeline';
export const ALGORITHMS: readonly Algorithm[] = ['one-shot', 'one-shot-ll', 'two-shot', 'pipeline'];

const NCCL = 'NCCL all_reduce through PyTorch, same run (stream time, host-synchronised)';
const fmt = formatBytes;

/** The target the issue table sets for smcuda's allreduce at `size` (f32, stream time), if any. */
export function allreduceSpec(size: number): ScopedSpec | undefined {
  if (size <= 256 * KiB) return latencySpec(size, 8);
  if (size === MiB) return latencySpec(size, 11);
  if (size === 16 * MiB) return latencySpec(size, 60);
  if (size >= 256 * MiB)
    return {
      name: `allreduce f32 ${fmt(size)}, smcuda, bus bandwidth`,
      suite: 'collectives',
      unit: 'GB/s',
      baselineName: `${NCCL}, bus bandwidth`,
      target: atLeast(340, '≥ 340 GB/s'),
      scope: 'gpu',
    };
  return undefined;
}

function latencySpec(size: number, us: number): ScopedSpec {
  return {
    name: `allreduce f32 ${fmt(size)}, smcuda, stream time`,
    suite: 'collectives',
    unit: 'µs',
    baselineName: NCCL,
    target: atMost(us, `≤ ${us} µs`),
    scope: 'gpu',
  };
}

export const COLLECTIVE_FIG = {
  graph8: {
    name: 'allreduce f32 8 B inside a CUDA graph, smcuda, per call',
    suite: 'collectives',
    unit: 'µs',
    baselineName: 'NCCL all_reduce captured in a CUDA graph through PyTorch, same run, per call',
    target: atMost(5, '≤ 5 µs'),
    scope: 'gpu',
  },
  gradient: {
    name: 'gradient average (allreduce avg) of 100 MB f32 across two GPUs, smcuda',
    suite: 'collectives',
    unit: 'ms',
    baselineName: "seed 003's host staging (pageable device→host, allreduce over shared memory, host→device), same run",
    target: atMost(0.01, '≥ 100× faster than seed 003', 'ratio'),
    scope: 'gpu',
  },
  /** One per algorithm, forced, at 1 MiB (where one-shot and two-shot meet, as in SymmetricMemory). */
  algorithm: (a: Algorithm): ScopedSpec => ({
    name: `allreduce f32 1 MiB, smcuda ${a} (forced), stream time`,
    suite: 'collectives',
    unit: 'µs',
    baselineName: NCCL,
    scope: 'gpu',
  }),
  /** The baselines, listed so a run shows them before smcuda's side exists: seed 003 at 100 MB, pinned beside pageable. */
  stagedPinned: (bytes: number): ScopedSpec => ({
    name: `host-staged allreduce avg of ${bytes === GRADIENT_BYTES ? '100 MB' : fmt(bytes)} f32, pinned`,
    suite: 'collectives',
    unit: 'ms',
    baselineName: "the same with pageable memory (seed 003's way)",
    scope: 'any',
  }),
} satisfies Record<string, ScopedSpec | ((a: Algorithm) => ScopedSpec) | ((bytes: number) => ScopedSpec)>;
