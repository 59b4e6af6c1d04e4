/**
 * What the bench runner (runner.ts) asks its two workers (worker.ts) to do,
 * and what they answer. Rank 0 listens and exports memory; rank 1 connects,
 * initiates, and does the receiver-side baselines (RGET is a read by the
 * receiver, so the raw copy is timed where smcuda's copy runs).
 */
import type { MemoryOption } from '../cli/demo-memory.js';
import type { DriverKind } from '../cuda/driver.js';
import type { HitPattern } from './cache-hits.js';
import type { KindExport } from './memory-kinds.js';
import type { SuiteCommand } from './worker-suites.js';

/** Environment variable carrying a worker's BenchWorkerConfig. */
export const BENCH_WORKER_ENV = 'SMCUDA_BENCH_WORKER';

export interface BenchWorkerConfig {
  /** 0 and 1 in a pair; 0…n-1 in the all-to-all group and the collectives suite's group (--ranks N). */
  rank: number;
  /** Device ordinal this worker uses. */
  device: number;
  driver: 'auto' | 'native' | 'sim';
  /** Private directory (0700) for the sockets. */
  dir: string;
  /** Job token shared by the two workers. */
  token: string;
}

export interface BenchWorkerInfo {
  rank: number;
  pid: number;
  driver: DriverKind;
  reason: string;
  deviceCount: number;
  device: { index: number; name: string; uuid: string; totalMemory: number };
}

/** One Transport pair ("session") with its own options. */
export interface SessionOptions {
  /** negotiation.ipc */
  ipc: boolean;
  /** false: the handle pool keeps nothing once released (cache: { maxEntries: 0 }). */
  cache: boolean;
  /** Count control frames by type on rank 1's channel (the negotiation figure). */
  countFrames?: boolean;
  /** Time the driver's peer calls and record the negotiation's states (the first-send figure). */
  timeCalls?: boolean;
}

/** An allocation made by rank 0 for rank 1 to open directly (not through smcuda). */
export interface ExportedBuffer {
  handle: Uint8Array;
  base: bigint;
  size: number;
  bufferId: bigint;
  deviceUuid: string;
}

export interface Repeat {
  iters: number;
  warmup: number;
}

export type BenchCommand =
  | { op: 'open'; session: string; options: SessionOptions }
  | { op: 'close'; session: string }
  /** Rank 1 sends one device message to rank 0; both wait until the negotiation settles. */
  | { op: 'negotiate'; session: string }
  /** `ready`: the sends pass `ready: true` (no legacy-stream check: the bench's buffers are written before the clock starts). */
  | ({ op: 'pingpong'; session: string; size: number; ready?: boolean } & Repeat)
  /** `memory`: both sides' buffers of that kind (default legacy, cuMemAlloc). */
  | ({ op: 'oneway'; session: string; size: number; window: number; memory?: MemoryOption } & Repeat)
  | { op: 'export'; size: number; count: number }
  | { op: 'unexport' }
  /** `slices`: the buffer holds that many `size` slices, and copy i reads and writes slice i mod slices (default 1). */
  | ({ op: 'raw-copy'; buffer: ExportedBuffer; size: number; slices?: number } & Repeat)
  | { op: 'ipc-open'; buffers: ExportedBuffer[] }
  | { op: 'cache-hit'; buffer: ExportedBuffer; batches: number; perBatch: number }
  | { op: 'cache-hit-pattern'; buffers: ExportedBuffer[]; pattern: HitPattern; batches: number; perBatch: number }
  | ({ op: 'copy-completion' } & Repeat)
  | ({ op: 'staging-baseline'; size: number } & Repeat)
  | { op: 'socket-serve' }
  | ({ op: 'socket-ping'; path: string; frameBytes: number } & Repeat)
  | { op: 'frames'; session: string }
  // The memory suite (memory-kinds.ts): a descriptor channel from rank 1 to rank 0, exports of each kind,
  // and a probe of whether the endpoint can send a kind at all (rank 1 posts a receive, rank 0 sends one
  // message, rank 1 then waits for it, or cancels it where the send failed).
  | { op: 'fd-listen' }
  | { op: 'fd-accept' }
  | { op: 'fd-connect'; path: string; token: Uint8Array }
  | { op: 'kind-export'; kind: MemoryOption; size: number; count: number }
  | { op: 'kind-unexport' }
  | { op: 'kind-open'; exports: KindExport[]; batches: number; perBatch: number }
  | ({ op: 'kind-raw-copy'; export: KindExport } & Repeat)
  | { op: 'probe-recv'; session: string; size: number; memory: MemoryOption }
  | { op: 'probe-send'; session: string; size: number; memory: MemoryOption }
  | { op: 'probe-finish'; session: string; abort: boolean }
  // The native floor (native-floor.ts): rank 0 creates the flag segment, both export a buffer, then both run.
  | { op: 'floor-prepare'; segment: string; size: number }
  | ({ op: 'floor-run'; segment: string; size: number; peerHandle?: Uint8Array; timeoutMs: number } & Repeat)
  | { op: 'floor-finish' }
  /** Both ranks at once: send `size` to the peer and receive as much from it, W outstanding each way. */
  | ({ op: 'bidir'; session: string; size: number; window: number } & Repeat)
  /** Raw copies from several peers' exported buffers, round-robin on one stream (all-to-all baseline). */
  | ({ op: 'raw-copy-many'; buffers: ExportedBuffer[]; size: number } & Repeat)
  /** A fresh session's first device message, timed from rank 1's send to rank 0's delivery. */
  | { op: 'first-send'; session: string; size: number; negotiateFirst?: boolean }
  // The all-to-all group (all-to-all.ts): every rank listens, connects to the ranks below it, then exchanges.
  | { op: 'a2a-listen' }
  | { op: 'a2a-connect'; ranks: number }
  | ({ op: 'a2a-run'; size: number } & Repeat)
  | { op: 'a2a-close' }
  // The graph and collectives suites (worker-suites.ts).
  | SuiteCommand;

/** Both directions of `bidir` on one rank. */
export interface BidirResult {
  sent: TimedResult;
  received: TimedResult;
}

/** Wall-clock instants are ms since the epoch (performance.timeOrigin + now()), comparable across the bench's processes. */
export interface FirstSendResult {
  /** Rank 1: when send() was called; rank 0: when the message was delivered (recv resolved). */
  at: number;
  /** Each negotiation state this side entered, and when. */
  states: Array<{ state: string; at: number }>;
  /** Each driver call the endpoint made, and how long it took. */
  calls: Array<{ call: string; at: number; ms: number }>;
  paths?: PathCounts;
  settleMs?: number;
  /** negotiateFirst: how long Endpoint.negotiate() took on rank 1, before the send. */
  negotiateMs?: number;
}

/** Whether one message of a memory kind went through, and the error where not. */
export interface ProbeResult {
  ok: boolean;
  error?: string;
  paths?: PathCounts;
}

/** Messages per data path, as counted by the endpoint during an operation. */
export type PathCounts = Record<'eager' | 'rget' | 'staging', number>;

export interface NegotiationResult {
  state: string;
  path: string[];
  tries: number;
  settleMs?: number;
}

export interface TimedResult {
  seconds: number;
  bytes: number;
  paths?: PathCounts;
  /** Why the sender's messages went by staging (endpoint stats), where any did. */
  stagingReasons?: Record<string, number>;
}

export interface SamplesResult {
  /** One sample per measured iteration, in µs (or ns where named so). */
  samples: number[];
  paths?: PathCounts;
}

export interface IpcOpenResult {
  openUs: number[];
  closeUs: number[];
}

export interface FramesResult {
  /** Frames by type name and direction, e.g. { 'IPC_REQ sent': 1 }. */
  frames: Record<string, number>;
  /** Negotiation frames (IPC_*) in both directions. */
  negotiation: number;
}
