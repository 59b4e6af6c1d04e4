/**
 * A Communicator: the N ranks of one job on one machine, and the
 * collectives among them on device buffers. (Over 500 lines as one concept:
 * the public calls, their checks, their queueing and timeouts, and the
 * abort and close that end them work on the same state; the steps, marks,
 * flags, scratch and control frames are in their own files.)
 *
 * Calls are made by every rank in the same order (as with NCCL and MPI) and
 * run one at a time per communicator, in call order. Each call's steps are
 * queued on the caller's stream (default: the legacy default stream, so
 * work queued there before the call is done first, as for a send); the
 * returned promise resolves once that stream has reached the call's last
 * step, with the algorithm that ran. Ranks synchronise between steps on
 * the device where they can (device-sync.ts: then a call is queued whole
 * before it returns, and can be captured in a graph), else with host
 * control frames (control.ts, behind RankSync).
 *
 * Failure: an error in a call (a bad argument included), a lost or closed
 * rank, calls that differ between ranks (call-check.ts), or a timeout aborts
 * the communicator on every rank (ABORT frames carry the first cause, its
 * rank and pid): every pending and later call rejects with
 * CommunicatorAbortedError, device waits are released by poisoning the
 * flags, and the communicator frees what it holds once the GPU is done with
 * it. Never a hang, never a wrong answer.
 *
 * What close() owns: the scratch, the kernels and events it made, the
 * buffers comm.alloc() made, and, for create()/fromEnv(), the Transport it
 * made and the driver that Transport opened (pass `driver` to keep your
 * own: then memory from it stays yours). It never closes a driver or
 * endpoints the caller passed in.
 */
import { EventEmitter } from 'node:events';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { assertHandle, assertSize } from '../cuda/validate.js';
import type { DeviceAllocation } from '../cuda/device-allocation.js';
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import { CallState, PendingCall, type CallShared } from './pending-call.js';
import { debug, debugEnabled } from '../debug.js';
import type { Endpoint } from '../endpoint.js';
import {
  ArgumentRangeError,
  ArgumentTypeError,
  CallMismatchError,
  ClosedError,
  CommunicatorAbortedError,
  CommunicatorTimeoutError,
  ConfigError,
  SmcudaError,
} from '../errors.js';
import { errorCode } from './error-code.js';
import { checkDtypeOp, DTYPE_BYTES, DTYPES, isDType, isReduceOp, REDUCE_OPS, reduceArg, type DType, type ReduceOp } from '../kernels/dtypes.js';
import type { Transport } from '../transport.js';
import * as algo from './algorithms.js';
import { RankLostError, type Algorithm, type CallContext } from './algorithms.js';
import { CePipeline } from './ce-pipeline.js';
import { ControlPlane } from './control.js';
import { DeviceSync } from './device-sync.js';
import type { StreamMarks } from '../gpu/stream-marks.js';
import { allocationRanges } from '../paths/allocation-ranges.js';
import { ReduceKernels } from './reduce-kernels.js';
import { checkRankSize, joinMesh, type RendezvousOptions } from './rendezvous.js';
import { Scratch } from './scratch.js';
import { sweepDeadSegments } from '../segment-owner.js';
import { envCommunicator, envMultiNode, envTracePath, type Env } from '../env.js';
import type { MultiNodeCommunicator } from './multinode-communicator.js';
import { FileTracer } from '../trace.js';
import { offBeforeExit, onBeforeExit } from '../exit-hooks.js';
import { refuseUnknownKeys } from '../option-keys.js';
import { packageVersion } from '../version.js';
import { WIRE_VERSION } from '../wire/frames.js';
import { bufferArg, type BufferScope } from './buffer-arg.js';
import type { AllgatherArgs, AllreduceArgs, AlltoallArgs, BroadcastArgs, CallOptions, ReduceArgs, ReduceScatterArgs } from './collective-args.js';
import { CallCheck, mismatchMessage, type Mismatch } from './call-check.js';
import { alltoallvShare, countsHash, countsWords, printWord0, printWord2 } from './call-print.js';
import * as gs from './gather-scatter.js';
import * as uneven from './uneven.js';
import {
  checkDisjoint,
  displsArg,
  extentOf,
  perRankArg,
  type AllgathervArgs,
  type AlltoallvArgs,
  type GatherArgs,
  type ReduceScattervArgs,
  type ScatterArgs,
} from './uneven-args.js';
import { MessagePrintBoard } from './message-print-board.js';
import { sharePrintTable, type SharedPrintTable } from './print-table.js';
import { FlightRecorder, flightDirFor, flightUs, type FlightEntry } from './flight-recorder.js';
import { P2PFlightRecorder, type P2PFlightEntry } from './p2p-flight.js';
import { checkAgreement, parseHello, type RankHello } from './setup-agreement.js';
import { checkPeer, PointToPoint, p2pTagOf, type P2PArgs, type P2PKind, type P2PResult, type P2PStats } from './p2p.js';
import { agreeGroupId, claimTags, proposeGroupId, tagsFree, tagsOf, type CommTags, type Proposal, type ReleaseTags } from './group-tags.js';
import { disagreement, groupOf, groupRanks, parseSplitValue, splitValue, type SplitArgs, type SplitValue } from './groups.js';

export type { Algorithm };
export type { SplitArgs };
export type { AllgathervArgs, AlltoallvArgs, GatherArgs, PerRank, ReduceScattervArgs, ScatterArgs } from './uneven-args.js';
export type CollectiveOp =
  | 'allreduce'
  | 'broadcast'
  | 'reduce'
  | 'allgather'
  | 'reduce-scatter'
  | 'alltoall'
  | 'barrier'
  | 'split'
  | 'new-group'
  | 'gather'
  | 'scatter'
  | 'allgatherv'
  | 'reduce-scatterv'
  | 'alltoallv';

export interface CommunicatorOptions {
  /** Default time limit of each call, ms (default 60000); a call past it aborts the communicator. */
  timeoutMs?: number;
  /** Bytes of each of the five scratch regions per rank (default 4 MiB; the fifth is point to point's): larger calls go in pieces (the copy-engine pipeline's chunks are half a region, the one-shot's pieces 1/(2N) of one). */
  scratchBytes?: number;
  /** allreduce: one-shot up to this many bytes (default 2 MiB / N: 1 MiB for 2 ranks, 512 KiB for 4, 256 KiB for 8)… */
  oneShotMaxBytes?: number;
  /** …two-shot up to this many (default: every size), the copy-engine pipeline above. */
  twoShotMaxBytes?: number;
  /** Force an algorithm for every call (tests, benchmarks); 'staged' works everywhere, the others need mapped scratch ('ce-pipeline' also stream memory operations: else two-shot runs; 'one-shot-ll' too: else one-shot). */
  algorithm?: Exclude<Algorithm, 'local'>;
  /** Append a 'collective' record per completed call to this JSON-lines trace (default: $SMCUDA_TRACE, as the transport's); on an abort, the flight records go beside it (`<trace>.flight/`). */
  trace?: string;
  /** Calls the flight recorder keeps (default 1000): see flightRecords() and docs/debugging.md. */
  flightRecords?: number;
}

export type {
  AllgatherArgs,
  AllreduceArgs,
  AlltoallArgs,
  BroadcastArgs,
  BufferArg,
  CallOptions,
  ReduceArgs,
  ReduceScatterArgs,
} from './collective-args.js';

export interface CollectiveResult {
  op: CollectiveOp;
  algorithm: Algorithm;
  /** Bytes of this rank's input. */
  bytes: number;
  /** Host wall time of the call, µs. */
  us: number;
}

export interface CommunicatorStats {
  rank: number;
  size: number;
  /** 0 for a world; a group's id (split, newGroup), which names the tags it reserves on the endpoints (docs/collectives.md, Groups). */
  group: number;
  /** Whether every rank mapped every peer's scratch (else every call is staged) and why not. */
  mapped: boolean;
  stagedReason?: string;
  /** How ranks wait for each other between steps: 'device' (stream memory operations on mapped flags, no host) or 'host' (control frames). */
  steps: 'device' | 'host';
  calls: number;
  /** Where the ranks compare their calls (call-check.ts): a table of shared memory, or control messages where they share none. */
  callCheck: 'table' | 'messages';
  byOp: Partial<Record<CollectiveOp, number>>;
  byAlgorithm: Partial<Record<Algorithm, number>>;
  /** Bytes copied from caller buffers into registered scratch (the price of unregistered buffers). */
  scratchCopyBytes: number;
  scratchBytes: number;
  /** The PTX modules' load time, ms, summed: one module per dtype called (the first load of each JIT-compiles). */
  moduleLoadMs: number;
  last?: CollectiveResult & { dtype?: DType; count?: number };
  /** Sends and receives completed (point to point: not in `calls`). */
  p2p: P2PStats;
  aborted?: string;
}

export interface CommunicatorEvents {
  /** A call completed: for traces. */
  collective: [result: CollectiveResult & { dtype?: DType; count?: number }];
  /** The communicator aborted (every rank gets it). */
  abort: [error: CommunicatorAbortedError];
}

/** How a communicator sits among those sharing its endpoints: its tags, and for a group its parent. */
interface GroupLink {
  tags: CommTags;
  /** Gives the tags back (claimTags). */
  releaseTags: ReleaseTags;
  parent?: Communicator;
  /** Each group rank's rank in the parent. */
  parentRanks?: readonly number[];
}

/** The keys of CommunicatorOptions (unknown keys are refused: a misspelt `timeoutMs` would otherwise be ignored). */
const COMMUNICATOR_KEYS = ['timeoutMs', 'scratchBytes', 'oneShotMaxBytes', 'twoShotMaxBytes', 'algorithm', 'trace', 'flightRecords'] as const;
const RENDEZVOUS_KEYS = ['rank', 'size', 'dir', 'token', 'device', 'localRank', 'driver', 'joinTimeoutMs'] as const;
const FROM_ENDPOINTS_KEYS = ['transport', 'rank', 'size', 'endpoints'] as const;

export interface FromEndpointsOptions extends CommunicatorOptions {
  transport: Transport;
  rank: number;
  size: number;
  /** An open endpoint to every other rank, by rank (this rank's own index is skipped). */
  endpoints: ReadonlyMap<number, Endpoint> | readonly (Endpoint | undefined)[];
}

const MiB = 1024 * 1024;
/** A call's time limit unless `timeoutMs` says otherwise (also how long a new communicator waits for a closed one's last reads on its endpoints). */
const DEFAULT_TIMEOUT_MS = 60_000;
/** How long an abort waits for the device to leave the calls in flight (poisoned) before it fails them anyway (a stream held by the caller's own work). */
const ABORT_DRAIN_MS = 10_000;
/** How often an aborted communicator rewrites the poison into its flags while calls are in flight (each passed wait resets its flag: a call in pieces needs a poison per step). */
const POISON_TICK_MS = 1;
/** How long close() lets the calls in flight finish before it aborts them (docs/collectives.md). */
export const CLOSE_DRAIN_MS = 2000;
/** How long an aborted rank waits for its live peers to unmap its scratch before it frees it. */
const UNMAP_WAIT_MS = 2000;
/** How often release reports calls still on the device while it waits for them (poisoned, they leave). */
const DRAIN_REPORT_MS = 10_000;
/** A call in flight this long is compared with the other ranks' calls again (a mismatch that stalls the GPUs is reported then, not at the timeout). */
const STALL_CHECK_MS = 100;
/** The longest delay setTimeout takes. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Allreduces of at most this many bytes take the LL one-shot (one-shot-ll) unless a call says otherwise,
 * by world size, where it was measured faster than the one-shot (docs/benchmarks.md, the LL one-shot:
 * 2 ranks, 8 B to 64 KiB, eager and in a graph). Other world sizes keep the one-shot until measured.
 * Never above the scratch's LL slots (Scratch.llMaxBytes) or the one-shot's bound.
 */
const LL_AUTO_MAX_BYTES: Readonly<Partial<Record<number, number>>> = { 2: 64 * 1024 };

/** The calls that run on the host only (never on the device path, never captured). */
const HOST_OPS: ReadonlySet<CollectiveOp> = new Set(['barrier', 'split', 'new-group']);

/** The algorithms a call or a communicator may force. */
export const FORCED_ALGORITHMS = ['one-shot', 'one-shot-ll', 'two-shot', 'ce-pipeline', 'staged'] as const;
export type ForcedAlgorithm = (typeof FORCED_ALGORITHMS)[number];

export function isForcedAlgorithm(x: unknown): x is ForcedAlgorithm {
  return typeof x === 'string' && (FORCED_ALGORITHMS as readonly string[]).includes(x);
}

/** What an `algorithm` option must be, in words: 'one-shot, one-shot-ll, two-shot, ce-pipeline or staged'. */
const FORCED_ALGORITHMS_WORDS = `${FORCED_ALGORITHMS.slice(0, -1).join(', ')} or ${FORCED_ALGORITHMS.at(-1)}`;

/**
 * `p`, keeping the process alive until it settles: a close or an abort's
 * clean-up waits on the transport's and the driver's own work (idle
 * transports do not hold the process, progress/keep-alive.ts), and must
 * finish even where the application awaits nothing more.
 */
function holdingProcess<T>(p: Promise<T>): Promise<T> {
  const hold = setInterval(() => undefined, 1 << 30);
  const done = () => clearInterval(hold);
  p.then(done, done);
  return p;
}

function positive(name: string, v: unknown, dflt: number, min = 1): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min) throw new ConfigError(`${name} must be a number ≥ ${min}, got ${String(v)}`);
  return v;
}

export class Communicator extends EventEmitter<CommunicatorEvents> {
  readonly rank: number;
  readonly size: number;
  readonly transport: Transport;
  readonly driver: CudaDriver;
  /** A group's ranks in its parent (group rank k is parent rank parentRanks[k]); undefined for a world. */
  readonly parentRanks: readonly number[] | undefined;
  private readonly control: ControlPlane;
  /** Sends and receives (p2p.ts). */
  private readonly p2p: PointToPoint;
  private readonly link: GroupLink;
  /** The groups split from this communicator and not closed yet (an abort aborts them, close closes them first). */
  private readonly children = new Set<Communicator>();
  /** The options this communicator was given: its groups start from them. */
  private readonly given: CommunicatorOptions;
  private readonly endpoints: Map<number, Endpoint>;
  private scratch!: Scratch;
  private readonly kernels: ReduceKernels;
  private readonly timeoutMs: number;
  private readonly scratchBytes: number;
  private readonly oneShotMax: number;
  private readonly twoShotMax: number;
  private readonly forced: CommunicatorOptions['algorithm'];
  private seq = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private abortError: CommunicatorAbortedError | undefined;
  private readonly abortWaiters = new Set<(err: Error) => void>();
  private closed = false;
  private released: Promise<void> | undefined;
  /** Set on abort: the linger, then the release (close() waits for it rather than closing early). */
  private aborting: Promise<void> | undefined;
  /** Device-side steps (device-sync.ts); undefined where the scratch is not mapped or the driver has no 64-bit stream memory operations. */
  private device: DeviceSync | undefined;
  /** The copy-engine pipeline (with device steps only). */
  private pipeline: CePipeline | undefined;
  /** Calls on the host path not yet queued (a device-path call made meanwhile waits its turn). */
  private hostPending = 0;
  /** Where the calls are on their streams (ordering across streams, completion, what closing waits for). */
  private readonly marks: StreamMarks;
  /** What the driver can do (asked once: every call checks it). */
  private gpuDrivenCache: ReturnType<CudaDriver['gpuDrivenStatus']> | undefined;
  private get gpuDriven(): ReturnType<CudaDriver['gpuDrivenStatus']> {
    return (this.gpuDrivenCache ??= this.driver.gpuDrivenStatus());
  }
  /** Staged receives into this communicator's memory not settled yet (stagedRecv), and what cancels them at release. */
  private readonly stagedRecvs = new Set<Promise<void>>();
  private readonly stagedAbort = new AbortController();
  /** After an abort: rewrites the poison into this rank's flags until the calls in flight drained. */
  private poisonTimer: NodeJS.Timeout | undefined;
  private readonly counters: Omit<CommunicatorStats, 'p2p'>;
  private readonly tracer: FileTracer | undefined;
  /**
   * Calls not settled yet, in call order, from `unsettledHead` (the watchdog
   * checks their deadlines; an abort or close fails them). Calls settle in
   * call order, so settled ones leave from the front: an array rather than a
   * Set, whose add and delete showed in a CPU profile of back-to-back calls
   * (bench/results-history.md, the collectives' host cost).
   */
  private readonly unsettled: PendingCall[] = [];
  private unsettledHead = 0;
  private unsettledCount = 0;
  /** The one timer of the calls' timeouts, and the deadline it is armed for. */
  private watchdog: NodeJS.Timeout | undefined;
  private watchdogAt = Infinity;
  /** The last completed call (stats().last). */
  private lastCall: PendingCall | undefined;
  /** What every call's context shares (made once the scratch is open). */
  private shared: CallShared | undefined;
  /** Every call compared with the other ranks' (call-check.ts). */
  private check: CallCheck;
  /** Where prints go by message (ranks that share no memory); the shared table where they do (print-table.ts). */
  private readonly prints: MessagePrintBoard;
  private table: SharedPrintTable | undefined;
  /** This rank's last calls (flight-recorder.ts): dumped on an abort where tracing is configured, summarised in its error. */
  private readonly flight: FlightRecorder;
  /** Its last sends and receives (p2p-flight.ts), dumped with them. */
  private readonly p2pFlight: P2PFlightRecorder;
  private readonly tracePath: string | undefined;
  /** Peers that closed their communicator, with the last call each made. */
  private readonly departed = new Map<number, number>();
  /** A call or a send/receive was captured in a graph: replays the host never sees may wait on any peer. */
  private captured = false;
  /** Completed calls waiting for a peer's print of them (message boards only), in call order. */
  private readonly awaitingPrints: PendingCall[] = [];
  /** Told when no call is left in flight (close() waits for that). */
  private settledWaiters: Array<() => void> = [];
  private closing: Promise<void> | undefined;
  /**
   * Kernels read the caller's input and write its output directly: a bad pointer, or a buffer shorter than
   * the call, must fail the call (and abort the communicator with the driver's error), never fault the GPU.
   */
  private readonly known: ReturnType<typeof allocationRanges>;
  /** Where the calls' buffers must lie (bufferArg): this process's memory on this communicator's device. */
  private readonly buffers: BufferScope;
  /** The buffers alloc() made: close() frees those still live. */
  private readonly allocations = new Set<DeviceAllocation>();

  private constructor(
    transport: Transport,
    rank: number,
    size: number,
    endpoints: Map<number, Endpoint>,
    opts: CommunicatorOptions,
    private readonly owned: { socket: string; dir: string } | undefined,
    link: GroupLink,
  ) {
    super();
    this.transport = transport;
    this.link = link;
    this.parentRanks = link.parentRanks;
    this.given = Object.fromEntries(COMMUNICATOR_KEYS.filter((k) => opts[k] !== undefined).map((k) => [k, opts[k]]));
    this.driver = transport.driver;
    this.rank = rank;
    this.size = size;
    this.endpoints = endpoints;
    this.timeoutMs = positive('timeoutMs', opts.timeoutMs, DEFAULT_TIMEOUT_MS);
    this.scratchBytes = Math.ceil(positive('scratchBytes', opts.scratchBytes, 4 * MiB, 256 * size) / 256) * 256;
    // Measured (docs/benchmarks.md, the allreduce table): with 2 ranks one-shot and the two-shot kernel meet
    // at 1 MiB and two-shot wins above; each rank's one-shot sends (N - 1) × the bytes, so with more ranks the
    // crossover comes sooner (4 and 8 ranks: bench/results-history.md, session 7). Hence 2 MiB / N. The
    // pipeline (ce-pipeline.ts) was never the fastest; it runs where a caller asks for it.
    this.oneShotMax = positive('oneShotMaxBytes', opts.oneShotMaxBytes, Math.floor((2 * MiB) / Math.max(2, size)), 0);
    this.twoShotMax = positive('twoShotMaxBytes', opts.twoShotMaxBytes, Number.MAX_SAFE_INTEGER, 0);
    if (opts.algorithm !== undefined && !isForcedAlgorithm(opts.algorithm))
      throw new ConfigError(`algorithm must be ${FORCED_ALGORITHMS_WORDS}, got ${String(opts.algorithm)}`);
    this.forced = opts.algorithm;
    this.kernels = new ReduceKernels(transport.gpu);
    this.known = allocationRanges(this.driver);
    this.buffers = { driver: this.driver, device: this.driver.currentDevice(), known: this.known };
    this.marks = transport.gpu.streamMarks();
    const tracePath = opts.trace ?? envTracePath();
    this.tracePath = tracePath;
    this.tracer = tracePath ? new FileTracer(tracePath, transport.id) : undefined;
    this.flight = new FlightRecorder(opts.flightRecords !== undefined ? { capacity: opts.flightRecords } : {});
    this.p2pFlight = new P2PFlightRecorder(this.flight.capacity);
    // Made before the control plane: a peer's first print may arrive before this rank's set-up is done.
    this.p2p = new PointToPoint({
      flight: this.p2pFlight,
      rank,
      size,
      driver: this.driver,
      scratch: () => this.scratch,
      deviceSteps: () => this.device !== undefined,
      marks: () => this.marks,
      sendPrint: (peer, print) => this.control.sendP2P(peer, print),
      endpoint: (k) => this.endpoints.get(k)!,
      dataTag: () => p2pTagOf(link.tags.group),
      capturing: (stream) => this.capturing(stream),
      abortError: () => this.abortError,
      closed: () => this.closed,
      abort: (err) => this.control.abort(this.wrap(err), true),
      queueFree: () => this.hostPending === 0,
      inCallOrder: (work) => this.inCallOrder(work),
    });
    this.control = new ControlPlane(
      rank,
      size,
      endpoints,
      {
        onAbort: (err) => this.onAbort(err),
        onDeparted: (peer, last) => this.onDeparted(peer, last),
        onPrints: (peer, first, words) => this.onPrints(peer, first, words),
        onP2P: (peer, print) => this.p2p.onPrint(peer, print),
      },
      link.tags.control,
    );
    this.prints = new MessagePrintBoard((first, words) => this.control.sendPrints(first, words));
    this.check = new CallCheck(rank, size, this.prints);
    this.counters = {
      rank,
      size,
      group: link.tags.group,
      mapped: true,
      steps: 'host',
      calls: 0,
      callCheck: 'messages',
      byOp: {},
      byAlgorithm: {},
      scratchCopyBytes: 0,
      scratchBytes: this.scratchBytes,
      moduleLoadMs: 0,
    };
  }

  /** Joins the job through a rendezvous directory: makes this rank's Transport and the full mesh (see rendezvous.ts). */
  static async create(options: RendezvousOptions & CommunicatorOptions): Promise<Communicator> {
    refuseUnknownKeys('Communicator.create options', options, [...RENDEZVOUS_KEYS, ...COMMUNICATOR_KEYS]);
    const mesh = await joinMesh(options);
    try {
      return await Communicator.start(mesh.transport, options.rank, options.size, mesh.endpoints, options, { socket: mesh.socket, dir: options.dir });
    } catch (err) {
      await mesh.transport.close();
      rmSync(mesh.socket, { force: true });
      throw err;
    }
  }

  /**
   * As torchrun's env://: RANK, WORLD_SIZE, SMCUDA_RENDEZVOUS (a directory), optional SMCUDA_TOKEN and LOCAL_RANK (the device: LOCAL_RANK % devices).
   * With SMCUDA_NODE (or `node`), a job across nodes: a MultiNodeCommunicator, with the same collective calls (docs/multinode.md).
   */
  static async fromEnv(
    options: Partial<RendezvousOptions> & CommunicatorOptions & { node?: string; internode?: 'nccl' | 'sockets' } = {},
    env?: Env,
  ): Promise<Communicator | MultiNodeCommunicator> {
    refuseUnknownKeys('Communicator.fromEnv options', options, [...RENDEZVOUS_KEYS, ...COMMUNICATOR_KEYS, 'node', 'internode']);
    // Loaded only for a job across nodes: the TCP store and NCCL stay out of a one-node import.
    if (options.node !== undefined || envMultiNode(env).node !== undefined)
      return (await import('./multinode-communicator.js')).MultiNodeCommunicator.fromEnv(options, env);
    const e = envCommunicator(env);
    const rank = options.rank ?? e.rank;
    const size = options.size ?? e.size;
    const dir = options.dir ?? e.rendezvous;
    if (rank === undefined || size === undefined) throw new ConfigError('RANK and WORLD_SIZE must be set (as torchrun sets them), or rank and size given');
    if (!dir) throw new ConfigError('SMCUDA_RENDEZVOUS must name the rendezvous directory (shared by every rank)');
    const localRank = options.localRank ?? e.localRank;
    const token = options.token ?? e.token;
    return Communicator.create({ ...options, rank, size, dir, ...(token !== undefined ? { token } : {}), ...(localRank !== undefined ? { localRank } : {}) });
  }

  /** Over endpoints the application already has (it keeps owning them and their transport). */
  static async fromEndpoints(options: FromEndpointsOptions): Promise<Communicator> {
    refuseUnknownKeys('Communicator.fromEndpoints options', options, [...FROM_ENDPOINTS_KEYS, ...COMMUNICATOR_KEYS]);
    checkRankSize(options.rank, options.size);
    const eps = new Map<number, Endpoint>();
    const given = options.endpoints;
    const entries: Array<[number, Endpoint | undefined]> =
      given instanceof Map ? [...given.entries()] : [...(given as readonly (Endpoint | undefined)[]).entries()];
    for (const [k, ep] of entries) if (k !== options.rank && ep) eps.set(k, ep);
    for (let k = 0; k < options.size; k++) {
      if (k !== options.rank && !eps.has(k)) throw new ConfigError(`endpoints has no endpoint to rank ${k}`);
    }
    return Communicator.start(options.transport, options.rank, options.size, eps, options, undefined);
  }

  private static async start(
    transport: Transport,
    rank: number,
    size: number,
    endpoints: Map<number, Endpoint>,
    opts: CommunicatorOptions,
    owned: { socket: string; dir: string } | undefined,
    group: { tags: CommTags; parent?: Communicator; parentRanks?: readonly number[] } = { tags: tagsOf(0) },
  ): Promise<Communicator> {
    // Refused before anything is sent: a second communicator on the same tags would take this one's messages.
    // One closed just before (fromEndpoints again) is waited for while it reads its peers' last messages.
    await tagsFree(endpoints.values(), group.tags.group, positive('timeoutMs', opts.timeoutMs, DEFAULT_TIMEOUT_MS));
    const releaseTags = claimTags(endpoints.values(), group.tags.group);
    let c: Communicator;
    try {
      c = new Communicator(transport, rank, size, endpoints, opts, owned, { ...group, releaseTags });
    } catch (err) {
      releaseTags();
      throw err;
    }
    group.parent?.children.add(c);
    c.control.start();
    try {
      // Every endpoint must lead to the rank it is filed under, in a job of the same size.
      const info = c.driver.deviceInfo(c.driver.currentDevice());
      const gpu = info.uuid;
      const sms = info.multiprocessors;
      // A group compares its calls by message: an endpoint's descriptor channel carries one call table, its world's.
      const table = size > 1 && group.parent === undefined && [...endpoints.values()].every((ep) => ep.sharesMemory);
      const me: RankHello = {
        rank,
        size,
        gpu,
        sms,
        pid: process.pid,
        scratchBytes: c.scratchBytes,
        oneShotMax: c.oneShotMax,
        twoShotMax: c.twoShotMax,
        algorithm: c.forced ?? '',
        version: packageVersion(),
        wire: WIRE_VERSION,
        table,
      };
      const raw = await c.withTimeout(c.control.exchange('hello', me), c.timeoutMs, 'set-up');
      const hello = new Map<number, RankHello>();
      for (const [k, v] of raw) hello.set(k, parseHello(k, v));
      checkAgreement(me, hello);
      if (table && [...hello.values()].every((h) => h.table)) await c.withTimeout(c.sharePrints(), c.timeoutMs, 'set-up');
      // Ranks on one GPU share its SMs: the kernels that wait for peers size their grids to fit beside
      // each other (reduce-kernels.ts), by the most ranks on any GPU, so that every rank launches the same grid.
      const perGpu = new Map<string, number>();
      for (const g of [gpu, ...[...hello.values()].map((h) => h.gpu)]) perGpu.set(g, (perGpu.get(g) ?? 0) + 1);
      c.kernels.ranksPerGpu = Math.max(...perGpu.values());
      // And by the fewest multiprocessors of any rank's GPU, for the same reason.
      c.kernels.multiprocessors = Math.min(sms, ...[...hello.values()].map((h) => (Number.isSafeInteger(h.sms) && h.sms > 0 ? h.sms : sms)));
      c.scratch = await c.withTimeout(Scratch.open(c.driver, c.control, rank, size, c.scratchBytes), c.timeoutMs, 'set-up');
    } catch (err) {
      c.control.finish();
      c.tracer?.close();
      c.detach();
      throw err;
    }
    c.counters.mapped = c.scratch.mapped;
    if (c.scratch.reason) c.counters.stagedReason = c.scratch.reason;
    c.shared = {
      driver: c.driver,
      rank,
      size,
      scratch: c.scratch,
      sync: c.control,
      kernels: c.kernels,
      pipeline: undefined,
      endpoint: (k: number) => c.endpoints.get(k)!,
      dataTag: group.tags.data,
      streamDone: (stream: StreamHandle) => c.marks.mark(stream),
      stagedRecv: (k: number, into: DevicePtr, bytes: number) => c.stagedRecv(k, into, bytes),
      copied: (n: number) => (c.counters.scratchCopyBytes += n),
    };
    if (c.scratch.mapped && size > 1) {
      const g = c.driver.gpuDrivenStatus();
      if (g.streamMemOps && g.memOps64) c.device = new DeviceSync(c.transport.gpu, rank, size, (k) => c.scratch.flagsOf(k)!);
      if (c.device) {
        c.counters.steps = 'device';
        c.shared.pipeline = c.pipeline = new CePipeline(c.transport.gpu, c.scratch, c.kernels);
      }
    }
    // A job that forgets close() still says BYE when its work is done (its groups close with it): a process
    // that just exited would be a lost rank to peers whose host has not yet seen their last call complete.
    if (!group.parent) onBeforeExit(c.closeAtExit);
    return c;
  }

  /** close() when the process would exit with this communicator open (exit-hooks.ts). */
  private readonly closeAtExit = (): void => {
    this.close().catch((err: unknown) => debug('communicator rank %d: the close at exit failed: %s', this.rank, (err as Error).message));
  };

  // ------------------------------------------------------------------ the collectives

  /**
   * Moves the call prints into a table of shared memory (print-table.ts) if
   * every rank mapped it; else they stay on control messages, on every rank.
   */
  private async sharePrints(): Promise<void> {
    let table: SharedPrintTable | undefined;
    try {
      table = await sharePrintTable(this.rank, this.size, this.endpoints);
    } catch (err) {
      debug('communicator rank %d: no shared call table (%s): call prints go by message', this.rank, (err as Error).message);
    }
    const all = await this.control.exchange('table', table !== undefined);
    if (table === undefined || [...all.values()].some((ok) => ok !== true)) {
      table?.close();
      return;
    }
    this.table = table;
    this.check = new CallCheck(this.rank, this.size, table, table.window);
    this.counters.callCheck = 'table';
  }

  /** recv[i] = op over every rank's send[i]; in place when recv is send (or absent). */
  allreduce(a: AllreduceArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.checkCall(a, a.op);
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = a.recv === undefined || a.recv === a.send ? send : bufferArg(this.buffers, 'recv', a.recv, bytes, a.dtype);
      this.checkOverlap(send, bytes, recv, bytes, 0);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call(
      'allreduce',
      a,
      bytes,
      this.chooseAllreduce(a.algorithm, bytes),
      printWord0('allreduce', a.dtype, a.op, recv === send, undefined),
      (c, alg) => algo.allreduce(c, alg, send, recv, a.count, a.dtype, reduceArg(a.op, a.factor)),
    );
  }

  /** Every rank's recv gets root's send (count elements); root's send defaults to its recv. */
  broadcast(a: BroadcastArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.checkCall(a);
      this.checkRoot(a.root);
      const sendBytes = a.root === this.rank ? bytes : 0;
      recv = bufferArg(this.buffers, 'recv', a.recv, bytes, a.dtype);
      send = a.send === undefined || a.send === a.recv ? recv : bufferArg(this.buffers, 'send', a.send, sendBytes, a.dtype);
      this.checkOverlap(send, sendBytes, recv, bytes, 0);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call('broadcast', a, bytes, this.chooseCopy(a.algorithm), printWord0('broadcast', a.dtype, undefined, send === recv, a.root), (c, alg) =>
      algo.broadcast(c, alg, send, recv, a.count, a.dtype, a.root),
    );
  }

  /** root's recv[i] = op over every rank's send[i]; other ranks' recv is not written (pass any, e.g. send). */
  reduce(a: ReduceArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.checkCall(a, a.op);
      this.checkRoot(a.root);
      const recvBytes = a.root === this.rank ? bytes : 0;
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = a.recv === undefined || a.recv === a.send ? send : bufferArg(this.buffers, 'recv', a.recv, recvBytes, a.dtype);
      this.checkOverlap(send, bytes, recv, recvBytes, 0);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call('reduce', a, bytes, this.chooseCopy(a.algorithm), printWord0('reduce', a.dtype, a.op, recv === send, a.root), (c, alg) =>
      algo.reduce(c, alg, send, recv, a.count, a.dtype, reduceArg(a.op, a.factor), a.root),
    );
  }

  /** recv (size × count elements) gets rank k's send at k × count; in place when send is recv + rank × count elements. */
  allgather(a: AllgatherArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.checkCall(a);
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = bufferArg(this.buffers, 'recv', a.recv, bytes * this.size, a.dtype);
      this.checkOverlap(send, bytes, recv, bytes * this.size, this.rank * bytes);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call(
      'allgather',
      a,
      bytes,
      this.chooseCopy(a.algorithm),
      printWord0('allgather', a.dtype, undefined, send === recv + BigInt(this.rank * bytes), undefined),
      (c, alg) => algo.allgather(c, alg, send, recv, a.count, a.dtype),
    );
  }

  /** recv (count elements) = op over every rank's block `rank` of send (size × count elements). */
  reduceScatter(a: ReduceScatterArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      const block = this.checkCall(a, a.op);
      bytes = this.size * block;
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = bufferArg(this.buffers, 'recv', a.recv, block, a.dtype);
      this.checkOverlap(send, bytes, recv, block, -this.rank * block);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call(
      'reduce-scatter',
      a,
      bytes,
      this.chooseCopy(a.algorithm),
      printWord0('reduce-scatter', a.dtype, a.op, recv === send + BigInt(bytes / this.size) * BigInt(this.rank), undefined),
      (c, alg) => algo.reduceScatter(c, alg, send, recv, a.count, a.dtype, reduceArg(a.op, a.factor)),
    );
  }

  /** Block k of send (count elements each, size blocks) goes to rank k, into its block `rank` of recv; in place allowed. */
  alltoall(a: AlltoallArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.size * this.checkCall(a);
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = a.recv === undefined || a.recv === a.send ? send : bufferArg(this.buffers, 'recv', a.recv, bytes, a.dtype);
      this.checkOverlap(send, bytes, recv, bytes, 0);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call('alltoall', a, bytes, this.chooseCopy(a.algorithm), printWord0('alltoall', a.dtype, undefined, recv === send, undefined), (c, alg) =>
      algo.alltoall(c, alg, send, recv, a.count, a.dtype),
    );
  }

  /** The root's recv (size × count elements) gets rank k's send at k × count; in place at the root when send is recv + root × count elements. */
  gather(a: GatherArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.checkCall(a);
      this.checkRoot(a.root);
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = send; // not written off the root
      if (a.root === this.rank) {
        if (a.recv === undefined) throw new ArgumentTypeError(`gather's root (rank ${a.root}) needs recv: size × count elements`);
        recv = bufferArg(this.buffers, 'recv', a.recv, bytes * this.size, a.dtype);
        this.checkOverlap(send, bytes, recv, bytes * this.size, this.rank * bytes);
      }
    } catch (err) {
      throw this.refuse(err);
    }
    const inPlace = a.root === this.rank && send === recv + BigInt(this.rank * bytes);
    return this.call(
      'gather',
      a,
      bytes,
      this.chooseCopy(a.algorithm),
      printWord0('gather', a.dtype, undefined, inPlace, a.root),
      this.agreedWhenStaged((c, alg) => gs.gather(c, alg, send, recv, a.count, a.dtype, a.root)),
    );
  }

  /** Every rank's recv (count elements) gets block `rank` of the root's send (size × count elements); in place at the root when recv is send + root × count elements. */
  scatter(a: ScatterArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    try {
      bytes = this.checkCall(a);
      this.checkRoot(a.root);
      recv = bufferArg(this.buffers, 'recv', a.recv, bytes, a.dtype);
      send = recv; // not read off the root
      if (a.root === this.rank) {
        if (a.send === undefined) throw new ArgumentTypeError(`scatter's root (rank ${a.root}) needs send: size × count elements`);
        send = bufferArg(this.buffers, 'send', a.send, bytes * this.size, a.dtype);
        this.checkOverlap(send, bytes * this.size, recv, bytes, -this.rank * bytes);
      }
    } catch (err) {
      throw this.refuse(err);
    }
    const inPlace = a.root === this.rank && recv === send + BigInt(this.rank * bytes);
    return this.call(
      'scatter',
      a,
      bytes,
      this.chooseCopy(a.algorithm),
      printWord0('scatter', a.dtype, undefined, inPlace, a.root),
      this.agreedWhenStaged((c, alg) => gs.scatter(c, alg, send, recv, a.count, a.dtype, a.root)),
    );
  }

  /**
   * Every rank's recv gets rank k's send (counts[k] elements) at element
   * displs[k] (default: packed). `counts` must be the same on every rank
   * (they are compared: SMCUDA_CALL_MISMATCH); `displs` are each rank's own.
   * In place when send is recv + displs[rank] elements.
   */
  allgatherv(a: AllgathervArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    let counts: number[] = [];
    let displs: number[] = [];
    let at = 0;
    try {
      const es = this.checkCall({ ...a, count: 1 });
      counts = perRankArg('counts', a.counts, this.size);
      displs = displsArg('displs', a.displs, counts);
      checkDisjoint('displs', counts, displs);
      bytes = counts[this.rank]! * es;
      const recvBytes = extentOf('displs', counts, displs, es) * es;
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = bufferArg(this.buffers, 'recv', a.recv, recvBytes, a.dtype);
      at = displs[this.rank]! * es;
      this.checkOverlap(send, bytes, recv, recvBytes, at);
    } catch (err) {
      throw this.refuse(err);
    }
    const inPlace = send === recv + BigInt(at);
    return this.call(
      'allgatherv',
      { ...a, count: counts[this.rank]! },
      bytes,
      this.chooseCopy(a.algorithm),
      printWord0('allgatherv', a.dtype, undefined, inPlace, undefined),
      this.agreedWhenStaged((c, alg) => uneven.allgatherv(c, alg, send, recv, counts, displs, a.dtype)),
      countsWords(countsHash(counts), undefined),
    );
  }

  /**
   * recv (counts[rank] elements) = op over every rank's block `rank` of
   * send, block k being counts[k] elements at element displs[k] (default:
   * packed). `counts` (and premul's factor) must be the same on every rank;
   * `displs` are each rank's own. In place when recv is send + displs[rank]
   * elements.
   */
  reduceScatterv(a: ReduceScattervArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    let counts: number[] = [];
    let displs: number[] = [];
    let at = 0;
    try {
      const es = this.checkCall({ ...a, count: 1 }, a.op);
      counts = perRankArg('counts', a.counts, this.size);
      displs = displsArg('displs', a.displs, counts);
      bytes = extentOf('displs', counts, displs, es) * es;
      const recvBytes = counts[this.rank]! * es;
      at = displs[this.rank]! * es;
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = bufferArg(this.buffers, 'recv', a.recv, recvBytes, a.dtype);
      this.checkOverlap(send, bytes, recv, recvBytes, -at);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call(
      'reduce-scatterv',
      { ...a, count: counts[this.rank]! },
      bytes,
      this.chooseCopy(a.algorithm),
      printWord0('reduce-scatterv', a.dtype, a.op, recv === send + BigInt(at), undefined),
      this.agreedWhenStaged((c, alg) => uneven.reduceScatterv(c, alg, send, recv, counts, displs, a.dtype, reduceArg(a.op, a.factor))),
      countsWords(countsHash(counts), a.factor),
    );
  }

  /**
   * Rank k's recv gets, at element recvDispls[j], sendCounts[k] elements of
   * rank j's send at its sendDispls[k] (displacements default to packed).
   * Each rank passes its own counts: rank j's sendCounts[k] must equal rank
   * k's recvCounts[j], else the call fails on every rank with
   * SMCUDA_CALL_MISMATCH. Never in place: recv must not overlap send.
   */
  alltoallv(a: AlltoallvArgs): Promise<CollectiveResult> {
    let bytes = 0;
    let send = 0n;
    let recv = 0n;
    let sc: number[] = [];
    let sd: number[] = [];
    let rc: number[] = [];
    let rd: number[] = [];
    try {
      const es = this.checkCall({ ...a, count: 1 });
      sc = perRankArg('sendCounts', a.sendCounts, this.size);
      sd = displsArg('sendDispls', a.sendDispls, sc);
      rc = perRankArg('recvCounts', a.recvCounts, this.size);
      rd = displsArg('recvDispls', a.recvDispls, rc);
      if (sc[this.rank] !== rc[this.rank])
        throw new ArgumentRangeError(
          `sendCounts[${this.rank}] (${sc[this.rank]}) must equal recvCounts[${this.rank}] (${rc[this.rank]}): what rank ${this.rank} sends itself is what it receives from itself`,
        );
      checkDisjoint('recvDispls', rc, rd);
      bytes = extentOf('sendDispls', sc, sd, es) * es;
      const recvBytes = extentOf('recvDispls', rc, rd, es) * es;
      send = bufferArg(this.buffers, 'send', a.send, bytes, a.dtype);
      recv = bufferArg(this.buffers, 'recv', a.recv, recvBytes, a.dtype);
      // Not in place: a block may be read after another rank's landed over it.
      if (bytes > 0 && recvBytes > 0 && send < recv + BigInt(recvBytes) && recv < send + BigInt(bytes))
        throw new ArgumentRangeError(
          `alltoallv's send (0x${send.toString(16)}+${bytes}) and recv (0x${recv.toString(16)}+${recvBytes}) overlap: alltoallv is never in place, pass two buffers apart`,
        );
    } catch (err) {
      throw this.refuse(err);
    }
    const alg = this.chooseCopy(a.algorithm);
    return this.call(
      'alltoallv',
      { ...a, count: sc.reduce((x, y) => x + y, 0) },
      bytes,
      // Pairs hand pieces over on device flags, or as messages where the ranks have no device steps.
      alg === 'one-shot' && this.device === undefined ? 'staged' : alg,
      printWord0('alltoallv', a.dtype, undefined, false, undefined),
      this.agreedWhenStaged((c, alg) => uneven.alltoallv(c, alg, send, recv, sc, sd, rc, rd, a.dtype)),
      countsWords(alltoallvShare(this.rank, sc, rc), undefined),
    );
  }

  /**
   * `run`, which staged first waits until every rank's print of the call is
   * in and agrees (agreed): a staged piece goes as a message the moment its
   * pair is ready, and two ranks must not move a piece of a call a third
   * rank's print shows to differ (alltoallv's counts show only once every
   * print is in). Elsewhere `run` starts at once: the device path queues a
   * call whole before it returns.
   */
  private agreedWhenStaged(run: (c: CallContext, alg: Algorithm) => Promise<void>): (c: CallContext, alg: Algorithm) => Promise<void> {
    return async (c, alg) => {
      if (alg === 'staged') await this.agreed(c.seq);
      return run(c, alg);
    };
  }

  /** Resolves once every rank's print of call `seq` is in and agrees with this rank's; rejects with the mismatch (or the abort). */
  private agreed(seq: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const poll = (): void => {
        if (this.abortError) return reject(this.abortError);
        const v = this.check.verify(seq);
        if (v === true) return resolve();
        if (v !== false) {
          this.mismatch(v);
          return reject(this.abortError ?? new CallMismatchError(mismatchMessage(v), this.rank, v.seq, v.ranks, v.fields));
        }
        setTimeout(poll, 1);
      };
      poll();
    });
  }

  /** Resolves once every rank called barrier (and the stream reached it). */
  barrier(options: CallOptions = {}): Promise<CollectiveResult> {
    try {
      this.checkOptions(options);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.call(
      'barrier',
      options,
      0,
      this.size === 1 ? 'local' : 'one-shot',
      printWord0('barrier', undefined, undefined, false, undefined),
      async (c) => {
        await c.streamDone();
        const others = [...Array(this.size).keys()].filter((k) => k !== this.rank);
        c.sync.signal(others, c.seq, 0);
        await c.sync.wait(others, c.seq, 0);
      },
    );
  }

  /**
   * Splits this communicator into groups (MPI_Comm_split, ncclCommSplit): a
   * call every rank makes, in call order like the collectives. Ranks that
   * pass the same `color` form a group, ordered by `key` (default 0), then
   * by their rank here; a rank whose color is undefined or negative
   * (NCCL_SPLIT_NOCOLOR, MPI_UNDEFINED) joins none and gets undefined. A
   * group shares this communicator's transport, endpoints and driver (no new
   * connection) on two tags of its own (docs/collectives.md, Groups), and has
   * its own calls, call check and scratch: it runs beside this communicator
   * and its other groups. `options` are the group's (default: this
   * communicator's). Resolves once the group is set up on every member.
   */
  split(args: SplitArgs, options: CommunicatorOptions = {}): Promise<Communicator | undefined> {
    try {
      splitValue(args, 1);
      this.checkGroupOptions(options);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.makeGroup('split', (g) => splitValue(args, g), options);
  }

  /**
   * The group of `ranks` (torch.distributed's new_group): a call every rank
   * makes with the same list, members or not; a member's rank in the group
   * is its place in the list sorted, and a rank not in it gets undefined.
   * Otherwise as split().
   */
  newGroup(ranks: readonly number[], options: CommunicatorOptions = {}): Promise<Communicator | undefined> {
    let list: number[];
    try {
      list = groupRanks(ranks, this.size);
      this.checkGroupOptions(options);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.makeGroup('new-group', (g) => ({ r: list, g }), options);
  }

  /** A group's options, checked on this rank before the call (its set-up would refuse them on every member, later). */
  private checkGroupOptions(options: CommunicatorOptions): void {
    if (typeof options !== 'object' || options === null) throw new ArgumentTypeError(`a group's options must be an object, got ${String(options)}`);
    refuseUnknownKeys("a group's options", options, COMMUNICATOR_KEYS);
    const o = { ...this.given, ...options };
    positive('timeoutMs', o.timeoutMs, 1);
    // The group's size is not known yet: its set-up checks scratchBytes against it (256 bytes a rank).
    positive('scratchBytes', o.scratchBytes, 256, 256);
    positive('oneShotMaxBytes', o.oneShotMaxBytes, 0, 0);
    positive('twoShotMaxBytes', o.twoShotMaxBytes, 0, 0);
    if (o.flightRecords !== undefined) new FlightRecorder({ capacity: o.flightRecords });
    if (o.algorithm !== undefined && !isForcedAlgorithm(o.algorithm))
      throw new ConfigError(`algorithm must be ${FORCED_ALGORITHMS_WORDS}, got ${String(o.algorithm)}`);
  }

  /**
   * split and newGroup: the parent's call exchanges every rank's value (and
   * its proposal for the group's id, group-tags.ts); then each member sets up
   * its group over the parent's endpoints to the other members.
   */
  private makeGroup(op: 'split' | 'new-group', value: (proposal: number) => SplitValue, options: CommunicatorOptions): Promise<Communicator | undefined> {
    let proposal: Proposal | undefined;
    let seq = 0;
    const values = new Map<number, SplitValue>();
    const made = this.call(op, {}, 0, this.size === 1 ? 'local' : 'one-shot', printWord0(op, undefined, undefined, false, undefined), async (c) => {
      seq = c.seq;
      const p = await proposeGroupId(this.transport);
      proposal = p;
      try {
        const mine = value(p.value);
        const raw = await this.control.exchange(`group:${c.seq}`, mine);
        values.set(this.rank, mine);
        for (const [k, v] of raw) {
          try {
            values.set(k, parseSplitValue(k, v, this.size));
          } catch (err) {
            // The peer broke the protocol: named as the failed rank, as control.ts names one.
            const pid = this.endpoints.get(k)?.peerPid;
            const e = new CommunicatorAbortedError(
              `rank ${k}${pid !== undefined ? ` (pid ${pid})` : ''} failed: ${(err as Error).message}`,
              k,
              'SMCUDA_PROTOCOL',
              {
                cause: err,
                failedPid: pid,
              },
            );
            this.control.abort(e, true);
            throw this.abortError ?? e;
          }
        }
      } catch (err) {
        p.settle(undefined);
        throw err;
      }
    });
    return made.then(
      async (result) => {
        try {
          const differ = disagreement(this.rank, values);
          if (differ) {
            // Every rank has every value: each finds a difference and fails alike.
            const err = new CallMismatchError(
              `${op} #${seq} differs between ranks: rank ${differ.rank}'s ${differ.field === 'ranks' ? 'list of ranks' : 'call'} is not rank ${this.rank}'s; every rank must make the same group calls with the same ranks`,
              this.rank,
              seq,
              [this.rank, differ.rank],
              [differ.field],
              { failedPid: process.pid },
            );
            this.control.abort(err, true);
            throw this.abortError ?? err;
          }
          const g = groupOf(this.rank, values);
          if (!g) return undefined;
          const id = agreeGroupId(g.proposals);
          proposal!.settle(id);
          if (this.abortError) throw this.abortError;
          if (this.closed) throw new CommunicatorAbortedError('the communicator is closed', this.rank, 'SMCUDA_CLOSED');
          const eps = new Map<number, Endpoint>();
          g.members.forEach((r, k) => {
            if (r !== this.rank) eps.set(k, this.endpoints.get(r)!);
          });
          debug('communicator rank %d: %s #%d: group %d of ranks %s (%d µs)', this.rank, op, seq, id, g.members.join(','), result.us);
          return await Communicator.start(this.transport, g.members.indexOf(this.rank), g.members.length, eps, { ...this.given, ...options }, undefined, {
            tags: tagsOf(id),
            parent: this,
            parentRanks: g.members,
          });
        } finally {
          proposal?.settle(undefined);
        }
      },
      (err: unknown) => {
        proposal?.settle(undefined);
        throw err;
      },
    );
  }

  // ------------------------------------------------------------------ point to point (p2p.ts)

  /**
   * Sends `count` elements of `buf` to rank `peer`, in stream order with
   * this rank's other calls. This rank's n-th send to `peer` is `peer`'s
   * n-th recv from this rank (their counts and dtypes must agree). Resolves
   * once the stream has run it and the peer made its matching recv.
   */
  send(a: P2PArgs): Promise<P2PResult> {
    return this.p2pCall('send', a);
  }

  /** Receives `count` elements from rank `peer` into `buf`, in stream order (as send). */
  recv(a: P2PArgs): Promise<P2PResult> {
    return this.p2pCall('recv', a);
  }

  /**
   * Runs `fn`, which makes sends and receives (synchronously), and queues
   * them together when it returns, as ncclGroupStart/End: a pipeline
   * stage's send to one neighbour and receive from the other never
   * deadlock, whatever the sizes. Resolves with their results in call order.
   */
  batch(fn: () => unknown): Promise<P2PResult[]> {
    return this.p2p.batch(fn);
  }

  private p2pCall(kind: P2PKind, a: P2PArgs): Promise<P2PResult> {
    let bytes = 0;
    let buf = 0n;
    try {
      bytes = this.checkCall(a);
      checkPeer(this.rank, this.size, a.peer);
      buf = bufferArg(this.buffers, 'buf', a.buf, bytes, a.dtype);
    } catch (err) {
      throw this.refuse(err);
    }
    return this.p2p.call(kind, a.peer, buf, a.count, a.dtype, bytes, a.stream ?? 0n, a.timeoutMs ?? this.timeoutMs);
  }

  /** Runs `work` once the calls made before it are queued, and holds the calls after it until `work` is done (point to point's host path). */
  private inCallOrder(work: () => void | Promise<void>): Promise<void> {
    this.hostPending++;
    let queued!: () => void;
    const next = new Promise<void>((resolve) => (queued = resolve));
    const previous = this.queue;
    this.queue = next;
    return previous.then(async () => {
      try {
        await work();
      } finally {
        this.hostPending--;
        queued();
      }
    });
  }

  /**
   * Resolves once every call made so far is queued on its stream. A call on
   * the device path is queued before it returns; one on the host path (staged,
   * barrier) later, step by step.
   */
  queued(): Promise<void> {
    return this.hostPending === 0 ? Promise.resolve() : this.queue.then(() => undefined);
  }

  /** The algorithm an allreduce of `bytes` (without `algorithm`) takes on this communicator. */
  algorithmFor(bytes: number, _dtype?: DType): Algorithm {
    return this.chooseAllreduce(undefined, bytes);
  }

  /** This rank's last calls, oldest first (the flight recorder: what was queued, started, finished or failed, and when). */
  flightRecords(): FlightEntry[] {
    return this.flight.entries();
  }

  /** This rank's last sends and receives, oldest first (made, its peer's matching call known here, finished or failed, and when). */
  p2pFlightRecords(): P2PFlightEntry[] {
    return this.p2pFlight.entries();
  }

  /**
   * `bytes` of device memory on this communicator's device, as a buffer that
   * knows its length, device and liveness (`{ ptr, length, device }`): every
   * call takes it where a pointer goes, and checks its extent with no driver
   * query. The communicator owns it: close() frees it once the
   * communicator's calls have left the GPU; `buf.free()` frees it sooner.
   * An abort does not free it (the data in it stays yours until close()).
   */
  alloc(bytes: number): DeviceAllocation {
    assertSize('bytes', bytes);
    if (this.closed)
      throw new ClosedError('the communicator is closed: allocate before close(), or with comm.driver.memAllocBuffer (memory that is yours to free)');
    const d = this.driver;
    const dev = this.buffers.device;
    const current = d.currentDevice();
    if (current !== dev) d.setDevice(dev);
    let buf: DeviceAllocation;
    try {
      buf = d.memAllocBuffer(bytes);
    } finally {
      if (current !== dev && current >= 0) d.setDevice(current);
    }
    if (this.allocations.size >= 64) for (const a of this.allocations) if (a.freed) this.allocations.delete(a);
    this.allocations.add(buf);
    return buf;
  }

  /** The endpoint to `rank` (for the application's own messages beside the collectives; tags 0xfffffff0 and 0xfffffff1 are a world's, and every tag from 0xf0000000 up is reserved for groups); a group's is its parent's endpoint to that rank. */
  endpoint(rank: number): Endpoint {
    const ep = this.endpoints.get(rank);
    if (!ep) throw new ArgumentRangeError(`no endpoint to rank ${rank}: ranks are 0 to ${this.size - 1}, and this is rank ${this.rank}`);
    return ep;
  }

  stats(): CommunicatorStats {
    return {
      ...this.counters,
      byOp: { ...this.counters.byOp },
      byAlgorithm: { ...this.counters.byAlgorithm },
      moduleLoadMs: this.kernels.loadMs,
      p2p: this.p2p.stats(),
      ...(this.lastCall ? { last: this.lastCall.record() } : {}),
      ...(this.abortError ? { aborted: this.abortError.message } : {}),
    };
  }

  /**
   * The parent aborted: so does this group, on every member (told too: a
   * member's parent may hear of it later than its group's peers poison
   * their flags). A parent's rank outside the group is named by this rank.
   */
  private parentAborted(err: CommunicatorAbortedError): void {
    if (this.abortError) return;
    const parentRanks = this.parentRanks ?? [];
    const member = parentRanks.indexOf(err.failedRank);
    const failed = member >= 0 ? member : this.rank;
    this.control.abort(
      new CommunicatorAbortedError(`the parent communicator aborted: ${err.message}`, failed, err.causeCode, { cause: err, failedPid: err.failedPid }),
      true,
    );
  }

  /** Gives back this communicator's tags and leaves its parent's groups (once it is released, or its set-up failed). */
  /** `drain`: the control plane's last reads (control.ts finish): the tags stay claimed until they end. */
  private detach(drain?: Promise<void>): void {
    this.link.releaseTags(drain);
    this.link.parent?.children.delete(this);
  }

  /** Fails every pending call of every rank with `reason` (as a rank's failure does). */
  abort(reason: Error = new SmcudaError('SMCUDA_ABORTED', 'aborted by the application')): void {
    this.control.abort(this.wrap(reason), true);
  }

  /**
   * Closes this rank's side. Calls in flight get CLOSE_DRAIN_MS to finish
   * (then they and every rank's matching calls are aborted, SMCUDA_CLOSED);
   * the peers are told (BYE with the last call made here: a peer's call after
   * it fails at once with SMCUDA_PEER_CLOSED); once the GPU is done with the
   * communicator's work, its scratch, kernels and events are freed, and the
   * buffers alloc() made, and the Transport it made (create(), fromEnv()) is
   * closed with the driver that Transport opened. A driver or endpoints the
   * caller passed in stay open. Later calls reject with SMCUDA_CLOSED.
   */
  close(): Promise<void> {
    this.closing ??= holdingProcess(this.closeNow());
    return this.closing;
  }

  private async closeNow(): Promise<void> {
    this.closed = true;
    offBeforeExit(this.closeAtExit);
    // Groups first: they use this communicator's endpoints (and, for a world of create(), its transport).
    await Promise.all([...this.children].map((c) => c.close()));
    if (this.unsettledCount > 0 && !this.abortError && !(await this.allSettled(CLOSE_DRAIN_MS))) {
      const first = this.unsettled.slice(this.unsettledHead).find((p) => !p.settled);
      const what = first ? `call #${first.seq} (${first.op})` : 'a call';
      this.control.abort(
        new CommunicatorAbortedError(
          `rank ${this.rank} (pid ${process.pid}) closed its communicator with ${what} still in flight after ${CLOSE_DRAIN_MS} ms`,
          this.rank,
          'SMCUDA_CLOSED',
          { failedPid: process.pid },
        ),
        true,
      );
    }
    if (this.p2p.inFlight > 0 && !this.abortError && !(await this.p2p.allSettled(CLOSE_DRAIN_MS))) {
      this.control.abort(
        new CommunicatorAbortedError(
          `rank ${this.rank} (pid ${process.pid}) closed its communicator with ${this.p2p.firstInFlight() ?? 'a send or receive'} still in flight after ${CLOSE_DRAIN_MS} ms`,
          this.rank,
          'SMCUDA_CLOSED',
          { failedPid: process.pid },
        ),
        true,
      );
    }
    this.control.stop(this.seq);
    const closed = new CommunicatorAbortedError('the communicator was closed', this.rank, 'SMCUDA_CLOSED');
    for (const w of this.abortWaiters) w(closed);
    this.abortWaiters.clear();
    if (!this.abortError) {
      this.failAll(closed);
      this.p2p.failAll(closed);
    }
    await this.aborting;
    await this.release();
    // After an abort the release ran before close(): alloc()'s buffers are freed now (none if the driver closed with the transport).
    this.freeAllocations();
  }

  /** Frees the buffers alloc() made that are still live (after the communicator's calls left the GPU). */
  private freeAllocations(): void {
    for (const a of this.allocations) {
      try {
        a.free();
      } catch (err) {
        debug('communicator rank %d: freeing a buffer of alloc() failed: %s', this.rank, (err as Error).message);
      }
    }
    this.allocations.clear();
  }

  /** Resolves true once no call is in flight, false after `ms`. */
  private allSettled(ms: number): Promise<boolean> {
    if (this.unsettledCount === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.settledWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  // ------------------------------------------------------------------ internals

  private chooseAllreduce(forced: CallOptions['algorithm'], bytes: number): Algorithm {
    if (this.size === 1) return 'local';
    const want = forced ?? this.forced;
    if (!this.scratch.mapped) return 'staged';
    // The LL kernel is a one-shot: never above the one-shot's own bound either.
    const llMax = Math.min(LL_AUTO_MAX_BYTES[this.size] ?? 0, this.scratch.llMaxBytes, this.oneShotMax);
    const alg =
      want ?? (llMax > 0 && bytes <= llMax ? 'one-shot-ll' : bytes <= this.oneShotMax ? 'one-shot' : bytes <= this.twoShotMax ? 'two-shot' : 'ce-pipeline');
    // The pipeline's steps are device steps only (ce-pipeline.ts); so is the LL kernel (as the one-shot's, it runs where they do).
    if (alg === 'one-shot-ll' && this.device === undefined) return 'one-shot';
    return alg === 'ce-pipeline' && !this.pipeline ? 'two-shot' : alg;
  }

  /** The non-allreduce collectives: copies (and one kernel) through the mappings, or staged. */
  private chooseCopy(forced: CallOptions['algorithm']): Algorithm {
    if (this.size === 1) return 'local';
    if (!this.scratch.mapped) return 'staged';
    return (forced ?? this.forced) === 'staged' ? 'staged' : 'one-shot';
  }

  /** Checks a call's dtype, op, count and options; returns the bytes of `count` elements. */
  private checkCall(a: { count: number; dtype: DType; factor?: number } & CallOptions, op?: ReduceOp): number {
    if (op !== undefined && this.size > 1 && !this.gpuDriven.modules) {
      throw new SmcudaError(
        'SMCUDA_NO_KERNELS',
        `this ${this.driver.kind} driver cannot load the reduction kernels (${this.gpuDriven.reason ?? 'modules not supported'}); broadcast, allgather and alltoall still work: update smcuda's native addon`,
      );
    }
    if (!isDType(a.dtype)) throw new ArgumentTypeError(`dtype must be one of ${DTYPES.join(', ')}, got ${String(a.dtype)}`);
    if (op !== undefined && !isReduceOp(op)) throw new ArgumentTypeError(`op must be one of ${REDUCE_OPS.join(', ')}, got ${String(op)}`);
    if (op !== undefined) {
      checkDtypeOp(a.dtype, op);
      reduceArg(op, (a as { factor?: unknown }).factor);
    }
    if (typeof a.count !== 'number' || !Number.isSafeInteger(a.count) || a.count < 0)
      throw new ArgumentRangeError(`count must be a non-negative integer, got ${String(a.count)}`);
    this.checkOptions(a);
    return a.count * DTYPE_BYTES[a.dtype];
  }

  private checkOptions(a: CallOptions): void {
    if (a.stream !== undefined) assertHandle('stream', a.stream);
    if (a.timeoutMs !== undefined) positive('timeoutMs', a.timeoutMs, 0);
    if (a.algorithm !== undefined && !isForcedAlgorithm(a.algorithm))
      throw new ArgumentTypeError(`algorithm must be ${FORCED_ALGORITHMS_WORDS}, got ${String(a.algorithm)}`);
  }

  /**
   * A call's two buffers (each checked by bufferArg for the bytes the call
   * reads or writes there; 0: not touched on this rank) are either apart or
   * in place (`b + inPlaceAt` is `a`: allgather's send inside its recv,
   * reduce-scatter's recv inside its send): a partial overlap would let the
   * call overwrite input it has not read yet.
   */
  private checkOverlap(a: DevicePtr, aBytes: number, b: DevicePtr, bBytes: number, inPlaceAt: number): void {
    if (aBytes === 0 || bBytes === 0) return;
    const aEnd = a + BigInt(aBytes);
    const bEnd = b + BigInt(bBytes);
    if (a < bEnd && b < aEnd && a !== b + BigInt(inPlaceAt)) {
      throw new ArgumentRangeError(
        `the call's buffers overlap without being in place (0x${a.toString(16)}+${aBytes} and 0x${b.toString(16)}+${bBytes}): pass the same buffer for an in-place call, or two that do not overlap`,
      );
    }
  }

  /** A bad call on this rank fails every rank (their matching call would wait for it): aborts, and returns `err` to throw. */
  private refuse(err: unknown): unknown {
    if (!this.closed && !this.abortError) this.control.abort(this.wrap(err as Error), true);
    return err;
  }

  private checkRoot(root: unknown): void {
    if (typeof root !== 'number' || !Number.isInteger(root) || root < 0 || root >= this.size)
      throw new ArgumentRangeError(`root must be a rank from 0 to ${this.size - 1}, got ${String(root)}`);
  }

  /**
   * Queues one call. On the device path (mapped scratch, stream memory
   * operations, not staged, not barrier) the whole call is queued on its
   * stream before this returns — calls follow each other in stream order
   * with no host round trip, and a call made while its stream is capturing
   * is captured whole — and the promise resolves once the stream has run it.
   * Otherwise (the host path) it starts once the calls before it are
   * queued, and its steps wait for the host. Either way a call on another
   * stream than the previous one first waits (cuStreamWaitEvent) for the
   * previous call's work, so calls run in call order, and each runs under
   * its timeout (the watchdog) and fails with the communicator's abort.
   *
   * The device path is the hot one (a training step makes its calls back to
   * back): per call it makes one PendingCall, one promise, one CallState and
   * its Steps, one stream mark and one call print, and no timer (a
   * setTimeout, an abort waiter, closures, an object spread and three promise
   * chains per call were most of its host cost: bench/results-history.md).
   */
  private call(
    op: CollectiveOp,
    o: CallOptions & { dtype?: DType; count?: number; factor?: number },
    bytes: number,
    algorithm: Algorithm,
    word0: number,
    run: (c: CallContext, alg: Algorithm) => Promise<void>,
    /** Words 1 and 2 of the call's print where they are not the count's (the calls with counts per rank: countsWords). */
    words?: readonly [number, number],
  ): Promise<CollectiveResult> {
    if (this.closed) return Promise.reject(new CommunicatorAbortedError('the communicator is closed', this.rank, 'SMCUDA_CLOSED'));
    if (this.abortError) return Promise.reject(this.abortError);
    if (this.p2p.batching)
      return Promise.reject(
        this.refuse(
          new SmcudaError('SMCUDA_P2P_BATCH', `${op} was called inside batch(): a batch holds sends and receives only; make it before or after the batch`),
        ),
      );
    const seq = ++this.seq;
    const started = performance.now();
    const stream = o.stream ?? 0n;
    this.flight.queued(seq, op, o.dtype, o.count, (o as { root?: number }).root, algorithm, stream, flightUs(started));
    // Published before anything of the call is queued: the later of two ranks making different calls finds it here.
    const count = o.count ?? 0;
    const mismatch = this.check.made(seq, word0, words ? words[0] : count >>> 0, words ? words[1] : printWord2(count, o.factor));
    if (mismatch !== undefined) {
      this.flight.failed(seq);
      this.mismatch(mismatch);
      return Promise.reject(this.abortError);
    }
    if (this.departed.size > 0) {
      for (const [peer, last] of this.departed) {
        if (seq <= last) continue;
        this.flight.failed(seq);
        this.peerClosed(peer, last, seq);
        return Promise.reject(this.abortError);
      }
    }
    const timeoutMs = o.timeoutMs ?? this.timeoutMs;
    const onDevice = !HOST_OPS.has(op) && algorithm !== 'staged' && (this.device !== undefined || algorithm === 'local');
    const capturing = this.capturing(stream);
    if (capturing && !onDevice) {
      this.flight.failed(seq);
      return Promise.reject(
        this.refuse(
          new SmcudaError(
            'SMCUDA_CAPTURE_UNSUPPORTED',
            `${op} by ${algorithm} cannot be captured in a graph: it needs the host between its steps (${this.device === undefined ? (this.counters.stagedReason ?? 'the driver has no stream memory operations') : 'staged or barrier'}); capture any collective but barrier (allreduce … alltoallv) on mapped scratch with device steps`,
          ),
        ),
      );
    }
    if (capturing && this.hostPending > 0) {
      // It would be queued after that call, whenever the host gets there: after the capture ended, outside the graph.
      this.flight.failed(seq);
      return Promise.reject(
        this.refuse(
          new SmcudaError(
            'SMCUDA_CAPTURE_UNSUPPORTED',
            `${op} cannot be captured now: an earlier call that needs the host between its steps (staged or barrier) is still to be queued, and this one would be queued after it, outside the capture; await that call before beginning the capture`,
          ),
        ),
      );
    }
    const p = new PendingCall(this.markReached, op, algorithm, bytes, o.dtype, o.count, seq, started, timeoutMs, stream);
    const promise = new Promise<CollectiveResult>((resolve, reject) => {
      p.resolve = resolve;
      p.reject = reject;
    });
    this.track(p);
    if (onDevice && this.hostPending === 0) {
      try {
        this.enqueue(seq, stream, capturing, true, algorithm, run, p);
      } catch (err) {
        if (p.ran) void p.ran.catch(() => undefined); // the call fails with the first error
        this.failCall(p, err);
        return promise;
      }
      // Queued whole: the call completes once run() resolved (at once: it had nothing to await) and its stream reached its mark.
      p.ran.then(
        () => {
          p.ranOk = true;
          if (p.marked) this.completeCall(p);
        },
        (err: unknown) => this.failCall(p, err),
      );
      // Captured: the call is in the graph, and each launch of it runs it; nothing to wait for here.
      if (capturing) p.marked = true;
      else this.marks.markWith(stream, p);
      return promise;
    }
    this.hostPending++;
    let queued!: () => void;
    const next = new Promise<void>((resolve) => (queued = resolve));
    const previous = this.queue;
    this.queue = next;
    previous
      .then(async () => {
        let done: Promise<void> | undefined;
        try {
          this.enqueue(seq, stream, capturing, onDevice, algorithm, run, p);
          if (onDevice) done = this.marks.mark(stream);
          await p.ran;
          done ??= this.marks.mark(stream);
        } catch (err) {
          // What the call queued before it failed (a copy into the scratch) is on the stream too: the
          // drain waits for this mark before the scratch is freed.
          if (done === undefined) this.markQuietly(stream);
          throw err;
        } finally {
          this.hostPending--;
          queued();
        }
        await done;
      })
      .then(
        () => this.completeCall(p),
        (err: unknown) => this.failCall(p, err),
      );
    // A call that never started (aborted, timed out in the queue) must not hold up the next.
    void promise.catch(() => {
      if (this.queue === next) queued();
    });
    return promise;
  }

  /** Starts a call's work on its stream (the device path: all of it, synchronously). */
  private enqueue(
    seq: number,
    stream: StreamHandle,
    capturing: boolean,
    onDevice: boolean,
    algorithm: Algorithm,
    run: (c: CallContext, alg: Algorithm) => Promise<void>,
    p: PendingCall,
  ): void {
    if (this.abortError) throw this.abortError;
    if (!capturing) this.marks.orderAfterLast(stream);
    const ctx = new CallState(this.shared!, seq, stream, onDevice ? this.device : undefined, capturing);
    p.ran = run(ctx, algorithm);
    // Device path: run() queued everything before returning (no await on that path): pad the steps now, before another call can queue.
    if (onDevice) ctx.steps.finish();
  }

  /** Adds a call to those the watchdog checks. */
  private track(p: PendingCall): void {
    this.unsettled.push(p);
    this.unsettledCount++;
    const at = Math.min(p.deadline, p.started + STALL_CHECK_MS);
    if (this.watchdog !== undefined && this.watchdogAt <= at) {
      this.watchdog.ref();
      return;
    }
    this.armWatchdog(at);
  }

  /** After `settled` was set. */
  private untrack(): void {
    this.unsettledCount--;
    const q = this.unsettled;
    let h = this.unsettledHead;
    while (h < q.length && q[h]!.settled) h++;
    if (h === q.length) {
      q.length = 0;
      h = 0;
    } else if (h >= 1024 && 2 * h >= q.length) {
      q.splice(0, h);
      h = 0;
    }
    this.unsettledHead = h;
    if (this.unsettledCount === 0) {
      // Armed for a deadline that no longer matters: it must not keep the process alive (it re-checks when it fires).
      this.watchdog?.unref();
      for (const w of this.settledWaiters.splice(0)) w();
    }
  }

  /**
   * One timer for every call in flight, armed for the earliest deadline (a
   * timer per call cost a setTimeout, a clearTimeout and two closures a call).
   * Calls are made with the same timeout and in order, so the first armed
   * deadline is usually the earliest: a call only re-arms it when its own is
   * earlier, and the timer, when it fires early (that call completed), re-arms
   * itself for the earliest deadline left.
   */
  private armWatchdog(at: number): void {
    if (this.watchdog !== undefined) clearTimeout(this.watchdog);
    this.watchdogAt = at;
    // setTimeout takes at most 2^31-1 ms (longer is taken as 1 ms): a longer deadline is checked again then.
    this.watchdog = setTimeout(() => this.checkDeadlines(), Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(at - performance.now()))));
  }

  /**
   * The watchdog: a call in flight STALL_CHECK_MS is compared with the other
   * ranks' again (a mismatch that stalled the GPUs fails now, as a
   * mismatch); one past its deadline aborts the communicator, naming the
   * ranks that never made it.
   */
  private checkDeadlines(): void {
    this.watchdog = undefined;
    this.watchdogAt = Infinity;
    if (this.abortError) return;
    const now = performance.now();
    let next = Infinity;
    const q = this.unsettled;
    for (let i = this.unsettledHead; i < q.length; i++) {
      const p = q[i]!;
      if (p.settled) continue;
      if (!p.stallChecked && p.started + STALL_CHECK_MS <= now) {
        p.stallChecked = true;
        const v = this.check.verify(p.seq);
        if (v !== true && v !== false) return this.mismatch(v);
      }
      if (p.deadline <= now) {
        const v = this.check.verify(p.seq);
        if (v !== true && v !== false) return this.mismatch(v);
        const missing = this.check.missing(p.seq);
        const who =
          missing.length > 0
            ? `rank${missing.length === 1 ? '' : 's'} ${missing.join(', ')} never made call #${p.seq}`
            : 'every rank made it: a rank is stuck on its GPU or host';
        const err = new CommunicatorTimeoutError(`rank ${this.rank}: ${p.op} #${p.seq} did not complete within ${p.timeoutMs} ms (${who})`);
        // The abort fails every call in flight, this one first.
        this.failCall(p, err);
        return;
      }
      next = Math.min(next, p.deadline, p.stallChecked ? Infinity : p.started + STALL_CHECK_MS);
    }
    if (next !== Infinity) this.armWatchdog(next);
  }

  /** Two ranks made different calls: every rank's call fails with the mismatch (the first rank to see one tells the others). */
  private mismatch(m: Mismatch): void {
    if (this.abortError) return;
    this.control.abort(new CallMismatchError(mismatchMessage(m), this.rank, m.seq, m.ranks, m.fields, { failedPid: process.pid }), true);
  }

  /** A peer closed after its call `last`, and this rank made call `seq` after it: that call can never complete. */
  private peerClosed(peer: number, last: number, seq: number): void {
    this.abortForClosedPeer(peer, last, `rank ${this.rank} made call #${seq}: every rank must make the same calls before it closes`, true);
  }

  /** Aborts with SMCUDA_PEER_CLOSED: "rank `peer` (pid) closed its communicator after call #`last`, and `why`". */
  private abortForClosedPeer(peer: number, last: number, why: string, tellPeers: boolean): void {
    if (this.abortError) return;
    const pid = this.endpoints.get(peer)?.peerPid;
    const err = new CommunicatorAbortedError(
      `rank ${peer}${pid !== undefined ? ` (pid ${pid})` : ''} closed its communicator after call #${last}, and ${why}`,
      peer,
      'SMCUDA_PEER_CLOSED',
      { failedPid: pid },
    );
    this.control.abort(err, tellPeers);
  }

  /** Whether `stream` is capturing (then the call or send/receive goes into a graph, and this rank has graphs). */
  private capturing(stream: StreamHandle): boolean {
    const yes = this.gpuDriven.graphs && this.driver.streamIsCapturing(stream);
    if (yes) this.captured = true;
    return yes;
  }

  /**
   * A peer said BYE: calls this rank made after its last fail now. A rank
   * with captured calls aborts once its calls in flight (the peer made them
   * too) completed: a replay of its graphs would wait for the departed peer
   * forever, unseen by the host, and only the abort's poison releases it.
   */
  private onDeparted(peer: number, last: number): void {
    this.departed.set(peer, last);
    if (this.closed) return;
    if (this.seq > last) this.peerClosed(peer, last, last + 1);
    else if (this.captured) {
      // Calls up to the peer's last are the peer's too and complete as usual: the abort waits for them.
      void this.allSettled(this.timeoutMs).then(() => {
        if (this.closed) return;
        const why = `rank ${this.rank} has calls captured in CUDA graphs: a replay would wait for it forever, so the communicator is aborted and its device waits released (a replay from now on computes nothing valid: close the communicator, then the graphs)`;
        this.abortForClosedPeer(peer, last, why, false);
      });
    }
    this.p2p.peerDeparted(peer);
  }

  /** A peer's call prints arrived (message boards): compares them, then completes the calls that waited for them. */
  private onPrints(peer: number, first: number, words: number[]): void {
    const seqs = this.prints.arrive(peer, first, words);
    for (const seq of seqs) {
      const m = this.check.compare(peer, seq);
      if (m) return this.mismatch(m);
    }
    this.drainAwaiting();
  }

  /**
   * Completes the calls that waited for a peer's print, in call order, as far
   * as the prints are there. A call with nothing to synchronise on the device
   * (count 0) can complete here before a peer even made it: with the shared
   * table, nothing arrives to say so, so the waiting calls are looked at
   * again on a short timer until they leave.
   */
  private drainAwaiting(): void {
    const q = this.awaitingPrints;
    while (q.length > 0) {
      const p = q[0]!;
      if (p.settled) {
        q.shift();
        continue;
      }
      const v = this.check.verify(p.seq);
      if (v === false) {
        if (this.table !== undefined && this.printPoll === undefined) this.printPoll = setTimeout(this.pollPrints, 1);
        return;
      }
      q.shift();
      if (v !== true) return this.mismatch(v);
      this.settleCompleted(p);
    }
  }

  private printPoll: NodeJS.Timeout | undefined;
  private readonly pollPrints = (): void => {
    this.printPoll = undefined;
    if (!this.abortError) this.drainAwaiting();
  };

  /** A device-path call's mark was reached (or failed with the stream's error). */
  private readonly markReached = (p: PendingCall, err?: Error): void => {
    if (err) return this.failCall(p, err);
    p.marked = true;
    if (p.ranOk) this.completeCall(p);
  };

  /** A call's work is done on this rank: it resolves once every rank is known to have made the same call. */
  private completeCall(p: PendingCall): void {
    if (p.settled) return;
    // After an abort the flags were poisoned: what the call computed is not to be trusted.
    if (this.abortError) return this.failCall(p, this.abortError);
    if (this.awaitingPrints.length > 0) {
      this.awaitingPrints.push(p);
      return;
    }
    const v = this.check.verify(p.seq);
    if (v === false) {
      this.awaitingPrints.push(p);
      this.drainAwaiting();
      return;
    }
    if (v !== true) return this.mismatch(v);
    this.settleCompleted(p);
  }

  private settleCompleted(p: PendingCall): void {
    if (p.settled) return;
    this.check.board.done(p.seq);
    p.settled = true;
    this.untrack();
    const now = performance.now();
    this.flight.finished(p.seq, flightUs(now));
    p.us = Math.round((now - p.started) * 1000);
    const c = this.counters;
    c.calls++;
    c.byOp[p.op] = (c.byOp[p.op] ?? 0) + 1;
    c.byAlgorithm[p.algorithm] = (c.byAlgorithm[p.algorithm] ?? 0) + 1;
    this.lastCall = p;
    if (debugEnabled()) debug('communicator rank %d: %s %s×%d by %s in %d µs', this.rank, p.op, p.dtype ?? '', p.count ?? 0, p.algorithm, p.us);
    try {
      if (this.tracer)
        this.tracer.collective({
          rank: this.rank,
          size: this.size,
          ...(this.link.tags.group > 0 ? { group: this.link.tags.group } : {}),
          seq: p.seq,
          ...p.record(),
        });
      if (this.listenerCount('collective') > 0) this.emit('collective', p.record());
    } catch (err) {
      // A 'collective' listener that throws fails this call with its error (and only this call).
      p.reject(err as Error);
      return;
    }
    p.resolve({ op: p.op, algorithm: p.algorithm, bytes: p.bytes, us: p.us });
  }

  /**
   * Fails a call: its own error aborts the communicator (every rank), and the
   * call fails with the abort once the device has left it (failAllDrained).
   */
  private failCall(p: PendingCall, err: unknown): void {
    if (p.settled) return;
    if (!(err instanceof CommunicatorAbortedError)) {
      const wrapped = this.wrap(err as Error);
      this.control.abort(wrapped, true); // fails p too, through onAbort, unless the control plane had stopped
      if (this.abortError) return;
      err = wrapped;
    }
    this.rejectCall(p, err as Error);
  }

  private rejectCall(p: PendingCall, err: Error): void {
    if (p.settled) return;
    this.flight.failed(p.seq);
    p.settled = true;
    this.untrack();
    p.reject(err);
  }

  /** Fails every call in flight with `err` now. */
  private failAll(err: CommunicatorAbortedError): void {
    const calls = this.unsettled.slice(this.unsettledHead);
    for (const p of calls) this.rejectCall(p, err);
  }

  /**
   * A staged piece received from rank `k` into this communicator's memory
   * (CallContext.stagedRecv): tracked until it settles, so that release()
   * frees the scratch only once no copy into it is in flight, and cancelled
   * there if it never matched.
   */
  private stagedRecv(k: number, into: DevicePtr, bytes: number): Promise<void> {
    const r = this.endpoints
      .get(k)!
      .recv({ tag: this.shared!.dataTag, into: { ptr: into, length: bytes }, signal: this.stagedAbort.signal })
      .then(() => undefined);
    this.stagedRecvs.add(r);
    const drop = () => this.stagedRecvs.delete(r);
    r.then(drop, drop);
    return r;
  }

  /** A mark on `stream` for the drain only (a failed call's work); a stream that takes no mark took no work either. */
  private markQuietly(stream: StreamHandle): void {
    try {
      void this.marks.mark(stream);
    } catch (err) {
      debug('communicator rank %d: no mark after a failed call: %s', this.rank, (err as Error).message);
    }
  }

  /**
   * After an abort: fails every call in flight once the device has left the
   * communicator's calls (the poison released their waits), or after
   * ABORT_DRAIN_MS: what the caller does on the error (free its buffers, queue
   * other work, close) then never waits behind a flag wait. cuMemFree waits
   * for the whole device and blocks this thread, which also rewrites the
   * poison: freeing while a call still waited would never return.
   */
  private async failAllDrained(err: CommunicatorAbortedError): Promise<void> {
    await this.marks.reached(ABORT_DRAIN_MS);
    this.failAll(err);
  }

  /** `work` (the set-up), failing with the communicator's abort, or with a timeout that aborts it. */
  private withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const onAbort = (err: Error) => finish(() => reject(err));
      const timer = setTimeout(() => {
        const err = new CommunicatorTimeoutError(
          `rank ${this.rank}: ${what} did not complete within ${ms} ms (a rank is stuck, or the ranks made different calls)`,
        );
        this.control.abort(this.wrap(err), true);
        finish(() => reject(this.abortError ?? err));
      }, ms);
      const finish = (f: () => void) => {
        clearTimeout(timer);
        this.abortWaiters.delete(onAbort);
        f();
      };
      if (this.abortError) return finish(() => reject(this.abortError));
      this.abortWaiters.add(onAbort);
      work.then(
        (v) => finish(() => resolve(v)),
        (e: Error) => finish(() => reject(e)),
      );
    });
  }

  private wrap(err: Error): CommunicatorAbortedError {
    if (err instanceof CommunicatorAbortedError) return err;
    if (err instanceof RankLostError) {
      const pid = this.endpoints.get(err.rank)?.peerPid;
      return new CommunicatorAbortedError(`rank ${err.rank}${pid !== undefined ? ` (pid ${pid})` : ''} failed: ${err.message}`, err.rank, err.code, {
        cause: err,
        failedPid: pid,
      });
    }
    const code = errorCode(err);
    return new CommunicatorAbortedError(`rank ${this.rank} (pid ${process.pid}) failed: ${err.message}`, this.rank, code, {
      cause: err,
      failedPid: process.pid,
    });
  }

  private onAbort(err: CommunicatorAbortedError): void {
    if (this.abortError) return;
    this.abortError = err;
    debug('communicator rank %d: aborted: %s', this.rank, err.message);
    this.recordAbort(err);
    for (const w of this.abortWaiters) w(err);
    this.abortWaiters.clear();
    for (const child of this.children) child.parentAborted(err);
    // Release this rank's streams from flag waits no peer will ever satisfy now, then fail the calls.
    this.startPoisoning();
    const failed = this.failAllDrained(err);
    this.p2p.aborted(err, failed);
    this.emit('abort', err);
    // Free what this rank holds (after its queued work), and close a transport it made, so nothing is left behind.
    // Not with calls captured in graphs: a replay the host never sees may still write into a peer's scratch
    // through this rank's mapping, so the scratch and the mappings stay, poisoned, until close(), which the
    // caller makes once its replays are done.
    this.aborting = this.captured ? failed.catch(() => undefined) : this.cleanUpAfterAbort(failed);
    void this.aborting.then(() => {
      if (err.causeCode !== 'SMCUDA_PEER_LOST') return;
      // A killed rank cleaned nothing: its socket file and its shared-memory segments (those of dead processes only).
      if (this.owned) for (const f of [`r${err.failedRank}.sock`, `r${err.failedRank}.sock.fd`]) rmSync(join(this.owned.dir, f), { force: true });
      const swept = sweepDeadSegments();
      if (swept.length > 0) debug('communicator rank %d: removed %d segment(s) of the lost rank', this.rank, swept.length);
    });
  }

  /** Puts the flight recorder's summary on this rank's abort error, and dumps its records where tracing is configured. */
  private recordAbort(err: CommunicatorAbortedError): void {
    try {
      err.flight = `${this.flight.summary()}${this.p2pFlight.summary()}`;
      if (this.tracePath)
        // A group's records go in a directory of their own: `smcuda trace DIR` compares the ranks of one communicator.
        err.flightFile = this.flight.dump(
          join(flightDirFor(this.tracePath), ...(this.link.tags.group > 0 ? [`group${this.link.tags.group}`] : [])),
          {
            rank: this.rank,
            size: this.size,
            pid: process.pid,
            cause: err.message,
          },
          this.p2pFlight,
        );
    } catch (e) {
      debug('communicator rank %d: the flight records could not be written: %s', this.rank, (e as Error).message);
    }
  }

  /** The clean-up after an abort, which nobody may await: its failure is logged, never an unhandled rejection. */
  private cleanUpAfterAbort(failed: Promise<void>): Promise<void> {
    return holdingProcess(failed.then(() => this.lingerThenRelease())).catch((e: unknown) => {
      debug('communicator rank %d: the clean-up after the abort failed: %s', this.rank, (e as Error).message);
    });
  }

  /**
   * After an abort, a transport this communicator made stays open until every
   * live peer said UNMAPPED (release() waits for it, bounded): a peer sends it
   * only once it has aborted too, so none sees this rank close before its
   * ABORT (they travel different ways) and reports it lost instead of the
   * real cause.
   */
  private lingerThenRelease(): Promise<void> {
    return this.release();
  }

  private release(): Promise<void> {
    this.released ??= (async () => {
      await this.drain();
      // Staged receives into the scratch: one not matched yet is cancelled, one matched is waited for (its copy lands first).
      this.stagedAbort.abort(new CommunicatorAbortedError('the communicator was released', this.rank, 'SMCUDA_CLOSED'));
      await Promise.allSettled([...this.stagedRecvs]);
      this.stopPoisoning();
      clearTimeout(this.watchdog);
      this.watchdog = undefined;
      clearTimeout(this.printPoll);
      // The last poison written into this rank's flags has run before the scratch that holds them is freed.
      await this.device?.close();
      this.prints.close();
      this.table?.close();
      // Drained: every call's last mark was reached, so nothing queued by this communicator still uses the
      // scratch. (The caller's streams are not synchronised: they may be destroyed by now.)
      this.pipeline?.close();
      this.scratch?.unmapPeers();
      this.control.sendUnmapped();
      // After an abort the peers' poisoned calls may still use this rank's scratch: it is freed once they
      // unmapped it (or are gone). A normal close needs no wait: every call ended with a step after its
      // last access to a peer's memory, and a peer's later call fails at once (BYE).
      if (this.abortError && !(await this.control.allUnmapped(UNMAP_WAIT_MS)))
        debug("communicator rank %d: a peer did not unmap this rank's scratch within %d ms: freeing it", this.rank, UNMAP_WAIT_MS);
      this.detach(this.control.finish(true));
      this.scratch?.release();
      try {
        this.kernels.unload();
        this.marks.destroy();
      } catch (err) {
        debug('communicator rank %d: %s', this.rank, (err as Error).message);
      }
      this.tracer?.close();
      // Closing: alloc()'s buffers go before the driver that made them may close with the transport.
      if (this.closed) this.freeAllocations();
      if (this.owned) {
        await this.transport.close();
        for (const f of [this.owned.socket, `${this.owned.socket}.fd`]) rmSync(f, { force: true });
      }
    })();
    return this.released;
  }

  /**
   * Waits for the calls in flight to leave the device: each either completes
   * or, once the communicator aborted (or, closing, after CLOSE_DRAIN_MS), has
   * its flag waits released by the poison. Memory is freed only after that:
   * never under a stream that may still use it, and never left allocated.
   */
  private async drain(): Promise<void> {
    if (!this.abortError && !(await this.marks.reached(CLOSE_DRAIN_MS))) this.startPoisoning();
    while (!(await this.marks.reached(DRAIN_REPORT_MS))) {
      debug(
        'communicator rank %d: %d call(s) still on the device after %d ms of poisoning: waiting for them before freeing the scratch',
        this.rank,
        this.marks.inFlight,
        DRAIN_REPORT_MS,
      );
    }
  }

  /**
   * Writes the poison into this rank's flags now and every POISON_TICK_MS
   * until released (each passed wait resets its slot), and, while calls of
   * this communicator are still on the device, on every turn of the event
   * loop: a call in pieces passes one step per poison, so its steps leave the
   * device at the pace of the writes, not of a timer.
   */
  private startPoisoning(): void {
    const d = this.device;
    if (!d || this.poisonTimer) return;
    d.poison();
    this.poisonTimer = setInterval(() => d.poison(), POISON_TICK_MS);
    this.poisonTimer.unref();
    const burst = (): void => {
      if (this.poisonTimer === undefined || this.marks.inFlight === 0) return;
      d.poison();
      setImmediate(burst);
    };
    setImmediate(burst);
  }

  private stopPoisoning(): void {
    if (this.poisonTimer) clearInterval(this.poisonTimer);
    this.poisonTimer = undefined;
  }
}
