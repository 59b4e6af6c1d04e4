/**
 * What the hierarchy of a communicator across nodes (multinode-communicator.ts)
 * needs between nodes: one engine per rank, joining the ranks of every node
 * that have the same local rank (engine rank = node index). Two engines
 * implement it: NCCL's (nccl-engine.ts, the real one) and a twin over host
 * sockets (socket-engine.ts) that runs on the simulated driver in CI.
 *
 * Every call is stream-ordered on the caller's stream and resolves once the
 * stream has passed it; counts are elements of `dtype`; `avgOver` (only
 * where `exactAvg`) divides the sum by that many after the reduction, so that
 * an integer average is the sum over the world divided once. A call that
 * differs between the engine's ranks (kind, count, dtype, op, root) fails
 * with CallMismatchError on every one of them, before any data is taken.
 * A lost or aborted peer fails the calls in flight and after, and is told
 * once to `onError` (the hierarchy aborts its communicator with it).
 */
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import { ConfigError } from '../errors.js';
import type { DType, ReduceOp } from '../kernels/dtypes.js';

/** The engines: NCCL's, or the socket twin (CI, the simulated driver). */
export const ENGINE_KINDS = ['nccl', 'sockets'] as const;
export type EngineKind = (typeof ENGINE_KINDS)[number];

/** The reductions both engines take between nodes (premul and avg are composed: multinode-communicator.ts). */
export type EngineOp = Extract<ReduceOp, 'sum' | 'prod' | 'min' | 'max' | 'avg' | 'band' | 'bor' | 'bxor'>;

/** What the store part of an engine's set-up needs (TcpStore's calls). */
export interface EngineStore {
  set(key: string, value: Uint8Array | string): Promise<void>;
  get(key: string, o?: { timeoutMs?: number }): Promise<Uint8Array>;
  add(key: string, delta: number): Promise<number>;
}

/** What every engine is opened with. */
export interface EngineOptions {
  store: EngineStore;
  /** The engine's group: the local rank its members share. */
  group: number;
  /** This node's index, and how many nodes. */
  rank: number;
  size: number;
  driver: CudaDriver;
  /** Resolves once `stream` has reached what was queued on it so far. */
  reached: (stream: StreamHandle) => Promise<void>;
  /** The global rank of the group's member on node k (for errors). */
  globalRank: (node: number) => number;
  /** The set-up's limit, ms: the store, and joining the engine's group (the communicator's join timeout). */
  setupMs: number;
  /** Each call's limit, ms, unless the call gives its own (the communicator's call timeout). */
  timeoutMs: number;
}

export interface EngineCall {
  count: number;
  dtype: DType;
  stream: StreamHandle;
  /** What else must agree between the engine's ranks (a hash of a call's counts per rank), compared with the rest. */
  check?: number;
  /** This call's limit, ms (the caller's `timeoutMs`); default the engine's `timeoutMs`. */
  timeoutMs?: number;
}

export interface InterNodeEngine {
  readonly kind: EngineKind;
  /** This rank's node index, and how many nodes. */
  readonly rank: number;
  readonly size: number;
  /** Whether `avgOver` divides exactly once after the sum (the socket twin); NCCL's avg divides by its own size. */
  readonly exactAvg: boolean;
  /** Whether the engine reduces `dtype` with `op` (NCCL: no bitwise ops). */
  supports(op: EngineOp, dtype: DType): boolean;
  allreduce(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; avgOver?: number }): Promise<void>;
  broadcast(a: EngineCall & { buf: DevicePtr; root: number }): Promise<void>;
  /** recv is written on the root only. */
  reduce(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; root: number; avgOver?: number }): Promise<void>;
  /** recv: size × count, rank k's send at k × count (in place when send is recv + rank × count). */
  allgather(a: EngineCall & { send: DevicePtr; recv: DevicePtr }): Promise<void>;
  /** send: size × count; recv: count, the reduction of block `rank`. */
  reduceScatter(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; avgOver?: number }): Promise<void>;
  /** Block k of send (count elements) to rank k, block j of recv from rank j (grouped sends and receives). */
  alltoall(a: EngineCall & { send: DevicePtr; recv: DevicePtr }): Promise<void>;
  /** Every rank has reached it. */
  barrier(a?: { timeoutMs?: number }): Promise<void>;
  /** Called once with the error that broke the engine (a peer lost or aborted, NCCL's asynchronous error). */
  onError(listener: (err: Error) => void): void;
  /** Stops the engine on every rank: the peers' calls fail with `reason`. Idempotent. */
  abort(reason: Error): void;
  /** Closes it once the calls are done (after an abort: frees what is left). */
  close(): Promise<void>;
}

/** SMCUDA_INTERNODE, or the `internode` option: the engine between nodes; default NCCL on the native driver, the socket twin on the simulated one. */
export function engineKindOf(given: string | undefined, driverKind: 'native' | 'sim'): EngineKind {
  if (given === undefined) return driverKind === 'sim' ? 'sockets' : 'nccl';
  if (!(ENGINE_KINDS as readonly string[]).includes(given))
    throw new ConfigError(`SMCUDA_INTERNODE (or the internode option) must be ${ENGINE_KINDS.join(' or ')}, got ${JSON.stringify(given)}: fix or unset it`);
  return given as EngineKind;
}
