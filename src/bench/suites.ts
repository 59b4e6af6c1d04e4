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
 *    (on a GPU the message also carries real copies);
 *  - 'gpu-target': measured anywhere (the simulator runs the plumbing), but
 *    the target holds only on a GPU.
 */
import type { MemoryOption } from '../cli/demo-memory.js';
import { atLeast, atMost, type FigureSpec } from './figures.js';

export const SUITES = [
  'latency',
  'bandwidth',
  'streaming',
  'cache',
  'ipc',
  'same-gpu',
  'negotiation',
  'memory',
  'bidirectional',
  'all-to-all',
  'first-send',
  'memory-across',
  'graph',
  'collectives',
] as const;
export type SuiteName = (typeof SUITES)[number];

export const SUITE_SUMMARY: Record<SuiteName, string> = {
  latency: 'ping-pong half round trip per size; 8 B against a raw Unix-socket ping-pong',
  bandwidth: 'one-way GPU0→GPU1 bandwidth per size with a window of outstanding sends (as osu_bw) against back-to-back raw cuMemcpyAsync',
  streaming: '1 MiB messages with a window of outstanding sends against raw back-to-back copies',
  cache: 'cache hit (one buffer; 8 in turn; 256 in random order) against one cuIpcOpenMemHandle; 64 KiB re-sent with the cache on and off',
  ipc: 'IPC off: the staging path per size against pinned single-buffer staging',
  'same-gpu': 'two processes on one GPU against raw copies',
  negotiation: 'first GPU send → endpoint OK, in control round trips and time',
  graph: 'GPU-driven ping-pong (8 B, 1 MiB): raw stream mem-ops host-enqueued and in a CUDA graph, beside the host-driven path',
  collectives:
    "allreduce among local ranks per size: smcuda's Communicator (host time per call) beside the host-staged allreduce of seed 003 (pageable, pinned), NCCL through its C API where libnccl.so.2 loads (plain and symmetric-window buffers; isolated, back to back, in a CUDA graph), and NCCL through PyTorch where torch imports (stream time)",
  memory:
    'per memory kind (legacy, vmm, vmm-chunked, pool), one GPU two processes: 256 MiB against raw copies over an open mapping of that kind; first import and cache hit against cuIpcOpenMemHandle',
  bidirectional: '256 MiB both ways at once (as osu_bibw) against raw copies both ways at once',
  'all-to-all': '8 processes on 2 GPUs, each sending 16 MiB to every other, aggregate against raw copies between the same pairs',
  'first-send': 'fresh processes: first GPU send → first message delivered, with where the milliseconds went',
  'memory-across': 'per memory kind, GPU0→GPU1: 256 MiB and 1 GiB against raw copies; first import and cache hit',
};

/** Suites that run with rank 0 on device 0 and rank 1 on device 1, in the one "across" pair of workers. */
export const ACROSS_SUITES: readonly SuiteName[] = ['latency', 'bandwidth', 'streaming', 'cache', 'ipc', 'negotiation', 'bidirectional'];

export type Scope = 'gpu' | 'any' | 'sim' | 'gpu-target';
export interface ScopedSpec extends FigureSpec {
  scope: Scope;
}

const MiB = 1 << 20;
const GiB = 1 << 30;
const RAW = 'raw cuMemcpyAsync over an already open IPC mapping';

export const BANDWIDTH_TARGETS: ReadonlyArray<{ size: number; spec: ScopedSpec }> = [
  {
    size: 16 * MiB,
    spec: {
      name: 'GPU0→GPU1 bandwidth, 16 MiB',
      suite: 'bandwidth',
      unit: 'GB/s',
      baselineName: RAW,
      target: atLeast(0.95, '≥ 95 % of raw', 'ratio'),
      scope: 'gpu',
    },
  },
  {
    size: 256 * MiB,
    spec: {
      name: 'GPU0→GPU1 bandwidth, 256 MiB',
      suite: 'bandwidth',
      unit: 'GB/s',
      baselineName: RAW,
      target: atLeast(0.98, '≥ 98 % of raw', 'ratio'),
      scope: 'gpu',
    },
  },
  {
    size: GiB,
    spec: {
      name: 'GPU0→GPU1 bandwidth, 1 GiB',
      suite: 'bandwidth',
      unit: 'GB/s',
      baselineName: RAW,
      target: atLeast(0.98, '≥ 98 % of raw', 'ratio'),
      scope: 'gpu',
    },
  },
];

export const STAGING_TARGET_SIZE = 256 * MiB;
export const SAME_GPU_TARGET_SIZE = 256 * MiB;
export const STREAM_SIZE = MiB;
export const CACHE_SIZE = 64 << 10;
/** The cache suite's hit patterns (cache-hits.ts): a stream's window of buffers in turn, and many buffers in random order. */
export const CACHE_WINDOW = 8;
export const CACHE_RANDOM_BUFFERS = 256;
export const HEADLINE_SIZE = 8;
export const MEMORY_TARGET_SIZE = 256 * MiB;
/** Allocations whose import is timed (as the cache suite's opens). */
export const MEMORY_OPEN_SIZE = 2 * MiB;

/** Where the memory suites run: both workers on one GPU ('memory'), or GPU0→GPU1 ('memory-across'). */
export type MemoryLayout = 'memory' | 'memory-across';
const where = (layout: MemoryLayout) => (layout === 'memory' ? '' : ' across GPUs');
const sizeText = (bytes: number) => (bytes >= GiB ? `${bytes / GiB} GiB` : bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / 1024} KiB`);

/** The memory suites' figures, one set per kind (and per size across GPUs). */
export const MEMORY_FIG = {
  transfer: (kind: MemoryOption, layout: MemoryLayout = 'memory', size = MEMORY_TARGET_SIZE): ScopedSpec => ({
    name: layout === 'memory' ? `memory ${kind}: one GPU, two processes, 256 MiB` : `memory ${kind}: GPU0→GPU1, ${sizeText(size)}`,
    suite: layout,
    unit: 'GB/s',
    baselineName: `raw cuMemcpyAsync over an already open ${kind} mapping`,
    target: atLeast(0.95, '≥ 95 % of raw', 'ratio'),
    scope: 'gpu',
  }),
  import: (kind: MemoryOption, layout: MemoryLayout = 'memory'): ScopedSpec => ({
    name: `memory ${kind}${where(layout)}: first import of an allocation`,
    suite: layout,
    unit: 'µs',
    baselineName: 'one cuIpcOpenMemHandle (memory legacy)',
    scope: 'any',
  }),
  hit: (kind: MemoryOption, layout: MemoryLayout = 'memory'): ScopedSpec => ({
    name: `memory ${kind}${where(layout)}: cache hit (HandlePool lookupImport + release)`,
    suite: layout,
    unit: 'µs',
    baselineName: `first import of ${kind} memory`,
    target: atMost(1, '≤ 1 µs'),
    scope: 'any',
  }),
};

/** Sizes of the memory-across suite on a GPU. */
export const MEMORY_ACROSS_SIZES = [256 * MiB, GiB];
export const BIDIR_SIZE = 256 * MiB;
export const A2A_SIZE = 16 * MiB;
export const A2A_RANKS = 8;
/** The native floor's second size (the first is HEADLINE_SIZE). */
export const FLOOR_LARGE_SIZE = MiB;
/** Same GPU, mid-size messages: the figure is the worst of these sizes. */
export const SAME_GPU_MID_SIZES = [MiB, 4 * MiB, 16 * MiB];

export const FIG = {
  streaming: (window: number): ScopedSpec => ({
    name: `GPU0→GPU1 1 MiB streamed, window ${window}`,
    suite: 'streaming',
    unit: 'GB/s',
    baselineName: 'raw back-to-back 1 MiB copies',
    target: atLeast(200, '≥ 200 GB/s'),
    scope: 'gpu',
  }),
  latency8: {
    name: '8 B GPU message, ping-pong half round trip (endpoint OK, cache warm)',
    suite: 'latency',
    unit: 'µs',
    baselineName: 'native floor: the same RGET ping-pong in C++, spinning on shared host flags (no JS)',
    target: atMost(1.3, '≤ 1.3× the native floor', 'ratio'),
    scope: 'gpu',
  },
  latency8Ready: {
    name: '8 B GPU message with ready: true (no legacy-stream check), ping-pong half round trip',
    suite: 'latency',
    unit: 'µs',
    baselineName: 'the same ping-pong with the default check (an event record and query on the legacy stream per send)',
    scope: 'gpu',
  },
  floor: (size: number): ScopedSpec => ({
    name: `native floor: ${size >= MiB ? `${size / MiB} MiB` : `${size} B`} RGET ping-pong half round trip (C++ threads on shared host flags, no JS)`,
    suite: 'latency',
    unit: 'µs',
    scope: 'any',
  }),
  bidirectional: {
    name: 'GPU0⇄GPU1 bidirectional, 256 MiB both ways at once (aggregate)',
    suite: 'bidirectional',
    unit: 'GB/s',
    baselineName: 'raw cuMemcpyAsync both ways at once over open IPC mappings (aggregate)',
    target: atLeast(0.95, '≥ 95 % of raw', 'ratio'),
    scope: 'gpu-target',
  },
  allToAll: {
    name: 'all-to-all, 8 processes on 2 GPUs, 16 MiB (aggregate)',
    suite: 'all-to-all',
    unit: 'GB/s',
    baselineName: 'raw cuMemcpyAsync between the same pairs at once (aggregate)',
    target: atLeast(0.9, '≥ 90 % of raw', 'ratio'),
    scope: 'gpu-target',
  },
  firstSend: {
    name: 'first GPU send → first message delivered (fresh processes)',
    suite: 'first-send',
    unit: 'ms',
    target: atMost(5, '≤ 5 ms'),
    scope: 'gpu-target',
  },
  firstSendPrepared: {
    name: 'first GPU send → first message delivered, endpoint.negotiate() after connect (fresh processes)',
    suite: 'first-send',
    unit: 'ms',
    target: atMost(5, '≤ 5 ms'),
    scope: 'gpu-target',
  },
  sameGpuMid: {
    name: 'same GPU, two processes, 1–16 MiB (worst size)',
    suite: 'same-gpu',
    unit: 'GB/s',
    baselineName: RAW,
    target: atLeast(0.8, '≥ 80 % of raw', 'ratio'),
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
  cacheHitWindow: {
    name: `cache hit, ${CACHE_WINDOW} buffers in turn (HandlePool lookup + release, each hit on the least recent entry; CPU time)`,
    suite: 'cache',
    unit: 'µs',
    baselineName: 'the same pool, one buffer hit again and again (CPU time)',
    target: atMost(0.3, '≤ 0.3 µs'),
    scope: 'any',
  },
  cacheHitRandom: {
    name: `cache hit, ${CACHE_RANDOM_BUFFERS} buffers in random order (HandlePool lookup + release; CPU time)`,
    suite: 'cache',
    unit: 'µs',
    baselineName: 'the same pool, one buffer hit again and again (CPU time)',
    target: atMost(0.3, '≤ 0.3 µs'),
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
} satisfies Record<string, ScopedSpec | ((x: number) => ScopedSpec)>;
