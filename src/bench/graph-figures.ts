/**
 * The figures of `smcuda bench --suite graph` (issue 25, item 7) and why one
 * cannot be measured on a given driver.
 *
 * Targets (2×H200): 8 B half round trip in a graph ≤ 5 µs; 1 MiB ≥ 95 % of
 * raw copy bandwidth; host time per replay of a graph of 16 transfers
 * ≤ 10 µs. smcuda's figures sit beside the raw stream mem-op ping-pong (no
 * smcuda) measured in the same run; the host-driven path is the latency
 * suite's 8 B figure, and the native floor is native/floor.cc's ping-pong.
 */
import type { CudaDriver } from '../cuda/driver.js';
import { atLeast, atMost } from './figures.js';
import type { ScopedSpec } from './suites.js';

/** Transfers (ping-pong iterations) captured in one graph: the issue's "graph of 16 transfers". */
export const GRAPH_TRANSFERS = 16;
export const GRAPH_SIZES = [8, 1 << 20] as const;
export type GraphSize = (typeof GRAPH_SIZES)[number];

const RAW_GRAPH = (size: number) => `raw stream mem-op ping-pong, ${label(size)}, captured in a CUDA graph of ${GRAPH_TRANSFERS} (no smcuda)`;
export const label = (size: number) => (size === 8 ? '8 B' : '1 MiB');

export const GRAPH_FIG = {
  /** smcuda: persistent transfers captured in a graph. */
  smcuda8: {
    name: '8 B ping-pong half round trip, smcuda persistent transfers in a CUDA graph',
    suite: 'graph',
    unit: 'µs',
    baselineName: RAW_GRAPH(8),
    target: atMost(5, '≤ 5 µs'),
    scope: 'gpu-target',
  },
  smcuda1M: {
    name: '1 MiB ping-pong, smcuda persistent transfers in a CUDA graph (bytes per half round trip)',
    suite: 'graph',
    unit: 'GB/s',
    baselineName: RAW_GRAPH(1 << 20),
    target: atLeast(0.95, '≥ 95 % of raw', 'ratio'),
    scope: 'gpu-target',
  },
  smcudaReplayHost: {
    name: `host time per replay, smcuda graph of ${GRAPH_TRANSFERS} persistent transfers`,
    suite: 'graph',
    unit: 'µs',
    baselineName: `host time per replay of the raw graph of ${GRAPH_TRANSFERS} mem-op ping-pong iterations`,
    target: atMost(10, '≤ 10 µs'),
    scope: 'gpu-target',
  },
  /** The baselines themselves, so a run shows them even before smcuda's side exists; measured wherever the driver has the calls (no target). */
  rawHost: (size: GraphSize): ScopedSpec => ({
    name: `raw stream mem-op ping-pong, ${label(size)}, host-enqueued (half round trip)`,
    suite: 'graph',
    unit: 'µs',
    baselineName: 'smcuda host-driven ping-pong of the same size (latency suite)',
    scope: 'any',
  }),
  rawGraph: (size: GraphSize): ScopedSpec => ({
    name: `${RAW_GRAPH(size)} (half round trip)`,
    suite: 'graph',
    unit: 'µs',
    baselineName: `the same, host-enqueued`,
    scope: 'any',
  }),
  rawReplayHost: {
    name: `host time per replay, raw graph of ${GRAPH_TRANSFERS} mem-op ping-pong iterations (8 B)`,
    suite: 'graph',
    unit: 'µs',
    baselineName: `host time to enqueue the same ${GRAPH_TRANSFERS} iterations one call at a time`,
    scope: 'any',
  },
  nativeFloor: {
    name: '8 B native floor: C ping-pong spinning on shared host flags (native/floor.cc), half round trip',
    suite: 'graph',
    unit: 'µs',
    scope: 'gpu',
  },
} satisfies Record<string, ScopedSpec | ((s: GraphSize) => ScopedSpec)>;

/** The smcuda-side figures, in the order the suite lists them. */
export const GRAPH_FIGURES = [GRAPH_FIG.smcuda8, GRAPH_FIG.smcuda1M, GRAPH_FIG.smcudaReplayHost] as const;

export type GpuDrivenStatus = ReturnType<CudaDriver['gpuDrivenStatus']>;

/**
 * Why the raw ping-pong cannot run on a driver with this status, or
 * undefined where it can: it needs stream memory operations (wait, write,
 * batches) and, for the graph figures, capture and graphs.
 */
export function memOpsMissing(s: GpuDrivenStatus, driverKind: string): string | undefined {
  if (s.streamMemOps) return undefined;
  return `the ${driverKind} driver has no stream memory operations${s.reason ? ` (${s.reason})` : ''}`;
}

export function graphsMissing(s: GpuDrivenStatus, driverKind: string): string | undefined {
  const mem = memOpsMissing(s, driverKind);
  if (mem) return mem;
  if (s.graphs) return undefined;
  return `the ${driverKind} driver has no stream capture and graphs${s.reason ? ` (${s.reason})` : ''}`;
}

/** 8 B and 1 MiB: bytes moved per half round trip, as GB/s (10^9). */
export function halfRoundTripGBs(size: number, halfRoundTripUs: number): number {
  return halfRoundTripUs > 0 ? size / (halfRoundTripUs * 1e-6) / 1e9 : 0;
}
