/**
 * The suites `smcuda bench` runs (--suite filters them) and the figures
 * they produce, with the targets of issue 6. Names are stable: the JSON
 * document and docs/benchmarks.md refer to them.
 *
 * Scope says where a target means something:
 *  - 'gpu': a hardware target (NVLink bandwidth, real open cost); on the
 *    simulated driver the figure is listed as skipped, with the reason;
 *  - 'any': a property of smcuda's own code (protocol, cache), measured anywhere;
 *  - 'sim': measured anywhere, but the target holds only on the simulator
 *    (on a GPU the message also carries real copies).
 */
import type { MemoryOption } from '../cli/demo-memory.js';
import { atLeast, atMost, type FigureSpec } from './figures.js';

export const SUITES = ['latency', 'bandwidth', 'streaming', 'cache', 'ipc', 'same-gpu', 'negotiation', 'memory', 'collectives'] as const;
export type SuiteName = (typeof SUITES)[number];

export const SUITE_SUMMARY: Record<SuiteName, string> = {
  latency: 'ping-pong half round trip per size; 8 B against a raw Unix-socket ping-pong',
  bandwidth: 'one-way GPU0→GPU1 bandwidth per size with a window of outstanding sends (as osu_bw) against back-to-back raw cuMemcpyAsync',
  streaming: '1 MiB messages with a window of outstanding sends against raw back-to-back copies',
  cache: 'cache hit against one cuIpcOpenMemHandle; 64 KiB re-sent with the cache on and off',
  ipc: 'IPC off: the staging path per size against pinned single-buffer staging',
  'same-gpu': 'two processes on one GPU against raw copies',
  negotiation: 'first GPU send → endpoint OK, in control round trips and time',
  collectives: 'allreduce avg of f32 among local ranks per size (one Communicator) against the host-staged allreduce of seed 003 (pageable and pinned); NCCL through PyTorch where it can run',
  memory: 'per memory kind (legacy, vmm, vmm-chunked, pool), one GPU two processes: 256 MiB against raw copies over an open mapping of that kind; first import and cache hit against cuIpcOpenMemHandle',
};

export type Scope = 'gpu' | 'any' | 'sim';
export interface ScopedSpec extends FigureSpec {
  scope: Scope;
}

const MiB = 1 << 20;
const GiB = 1 << 30;
const RAW = 'raw cuMemcpyAsync over an already open IPC mapping';

export const BANDWIDTH_TARGETS: ReadonlyArray<{ size: number; spec: ScopedSpec }> = [
  { size: 16 * MiB, spec: { name: 'GPU0→GPU1 bandwidth, 16 MiB', suite: 'bandwidth', unit: 'GB/s', baselineName: RAW, target: atLeast(0.95, '≥ 95 % of raw', 'ratio'), scope: 'gpu' } },
  { size: 256 * MiB, spec: { name: 'GPU0→GPU1 bandwidth, 256 MiB', suite: 'bandwidth', unit: 'GB/s', baselineName: RAW, target: atLeast(0.98, '≥ 98 % of raw', 'ratio'), scope: 'gpu' } },
  { size: GiB, spec: { name: 'GPU0→GPU1 bandwidth, 1 GiB', suite: 'bandwidth', unit: 'GB/s', baselineName: RAW, target: atLeast(0.98, '≥ 98 % of raw', 'ratio'), scope: 'gpu' } },
];

export const STAGING_TARGET_SIZE = 256 * MiB;
export const SAME_GPU_TARGET_SIZE = 256 * MiB;
export const STREAM_SIZE = MiB;
export const CACHE_SIZE = 64 << 10;
export const HEADLINE_SIZE = 8;
export const MEMORY_TARGET_SIZE = 256 * MiB;
/** Allocations whose import is timed (as the cache suite's opens). */
export const MEMORY_OPEN_SIZE = 2 * MiB;

/** The memory suite's figures, one set per kind. */
export const MEMORY_FIG = {
  transfer: (kind: MemoryOption): ScopedSpec => ({
    name: `memory ${kind}: one GPU, two processes, 256 MiB`,
    suite: 'memory',
    unit: 'GB/s',
    baselineName: `raw cuMemcpyAsync over an already open ${kind} mapping`,
    target: atLeast(0.95, '≥ 95 % of raw', 'ratio'),
    scope: 'gpu',
  }),
  import: (kind: MemoryOption): ScopedSpec => ({
    name: `memory ${kind}: first import of an allocation`,
    suite: 'memory',
    unit: 'µs',
    baselineName: 'one cuIpcOpenMemHandle (memory legacy)',
    scope: 'any',
  }),
  hit: (kind: MemoryOption): ScopedSpec => ({
    name: `memory ${kind}: cache hit (HandlePool lookupImport + release)`,
    suite: 'memory',
    unit: 'µs',
    baselineName: `first import of ${kind} memory`,
    target: atMost(1, '≤ 1 µs'),
    scope: 'any',
  }),
};

export const FIG = {
  streaming: (window: number): ScopedSpec => ({
    name: `GPU0→GPU1 1 MiB streamed, window ${window}`,
    suite: 'streaming',
    unit: 'GB/s',
    baselineName: 'raw back-to-back 1 MiB copies',
    target: atLeast(150, '≥ 150 GB/s'),
    scope: 'gpu',
  }),
  latency8: {
    name: '8 B GPU message, ping-pong half round trip (endpoint OK, cache warm)',
    suite: 'latency',
    unit: 'µs',
    baselineName: 'Unix-socket ping-pong of 64 B frames + 8 B copy with completion',
    target: atMost(15, '≤ 15 µs'),
    scope: 'gpu',
  },
  overhead8: {
    name: '8 B message: transport cost per message (ping-pong half round trip)',
    suite: 'latency',
    unit: 'µs',
    baselineName: 'raw Node Unix-socket ping-pong half round trip (64 B frames)',
    target: atMost(1.5, '≤ 1.5× the raw ping-pong', 'ratio'),
    scope: 'sim',
  },
  cacheHit: {
    name: 'cache hit (HandlePool lookup + release)',
    suite: 'cache',
    unit: 'µs',
    baselineName: 'one cuIpcOpenMemHandle',
    target: atMost(1, '≤ 1 µs'),
    scope: 'any',
  },
  cacheOnOff: {
    name: '64 KiB GPU messages re-sent from the same buffers, cache on (half round trip)',
    suite: 'cache',
    unit: 'µs',
    baselineName: 'the same with the cache off (cache: { maxEntries: 0 })',
    target: atMost(0.25, '≥ 4× lower latency', 'ratio'),
    scope: 'gpu',
  },
  staging: {
    name: 'staging path (IPC off), 256 MiB GPU0→GPU1',
    suite: 'ipc',
    unit: 'GB/s',
    baselineName: 'pinned single-buffer staging (device→host, then host→device)',
    target: atLeast(40, '≥ 40 GB/s'),
    scope: 'gpu',
  },
  sameGpu: {
    name: 'same GPU, two processes, 256 MiB',
    suite: 'same-gpu',
    unit: 'GB/s',
    baselineName: RAW,
    target: atLeast(0.95, '≥ 95 % of raw', 'ratio'),
    scope: 'gpu',
  },
  negotiationRtt: {
    name: 'first GPU send → endpoint OK, control round trips',
    suite: 'negotiation',
    unit: 'round trips',
    target: atMost(3, '≤ 3 control round trips'),
    scope: 'any',
  },
  negotiationMs: {
    name: 'first GPU send → endpoint OK, time (initiator)',
    suite: 'negotiation',
    unit: 'ms',
    scope: 'any',
  },
} satisfies Record<string, ScopedSpec | ((w: number) => ScopedSpec)>;
