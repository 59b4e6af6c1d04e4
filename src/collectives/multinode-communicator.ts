/**
 * (Over 500 lines as one concept: each collective's composition, and the
 * checks, queueing and abort they share; joining is in multinode-join.ts.)
 *
 * A communicator whose ranks span nodes: smcuda inside each node (a
 * Communicator of the node's ranks, met through the node's own rendezvous
 * directory), an inter-node engine between them (NCCL, or the socket twin
 * on the simulated driver: internode-engine.ts) joining the ranks of every
 * node that share a local rank. Communicator.fromEnv() returns one where
 * SMCUDA_NODE (or `smcuda run --nodes`) places the ranks on several nodes;
 * it has the Communicator's collective calls with the same arguments, so a
 * program written for one node runs unchanged.
 *
 * Each collective is composed of the node's calls and the engine's, every
 * node cutting the data the same way (pieces(): a count that does not
 * divide by the local size gives the first ranks one element more); the
 * compositions are in docs/multinode.md. Every call is checked here before
 * anything runs (a bad argument throws on this rank and aborts every rank,
 * as on one node); calls that differ between nodes fail in the engine's
 * call check, those that differ inside a node in the node's.
 *
 * Failure: the node's communicator aborting (a local rank lost, a mismatch,
 * a timeout) aborts the engine, whose peers abort their nodes; the engine
 * failing (a rank of another node lost, its abort, NCCL's asynchronous
 * error) aborts the node's communicator. Every rank's calls then reject with
 * CommunicatorAbortedError within the timeouts, never a wrong answer.
 */
import { rmdirSync } from 'node:fs';
import { EventEmitter } from 'node:events';
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { DeviceAllocation } from '../cuda/device-allocation.js';
import { offBeforeExit, onBeforeExit } from '../exit-hooks.js';
import type { Env } from '../env.js';
import { ArgumentRangeError, ArgumentTypeError, CallMismatchError, ClosedError, CommunicatorAbortedError, SmcudaError } from '../errors.js';
import { errorCode } from './error-code.js';
import { checkDtypeOp, DTYPE_BYTES, FLOAT_DTYPES, isDType, isReduceOp, reduceArg, type DType, type ReduceOp } from '../kernels/dtypes.js';
import { allocationRanges } from '../paths/allocation-ranges.js';
import type { StreamMarks } from '../gpu/stream-marks.js';
import type { Transport } from '../transport.js';
import { bufferArg, type BufferScope } from './buffer-arg.js';
import type { AllgatherArgs, AllreduceArgs, AlltoallArgs, BroadcastArgs, CallOptions, ReduceArgs, ReduceScatterArgs } from './collective-args.js';
import { Communicator, type CollectiveOp, type CommunicatorEvents } from './communicator.js';
import type { EngineKind, EngineOp, InterNodeEngine } from './internode-engine.js';
import { joinAcrossNodes, type MultiNodeOptions } from './multinode-join.js';
import type { NodeLayout } from './node-layout.js';
import { countsHash } from './call-print.js';
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

/** The calls across nodes: every collective (split and newGroup stay on one node: `comm.local`). */
export type MultiNodeOp = Exclude<CollectiveOp, 'split' | 'new-group'>;

export interface MultiNodeResult {
  op: MultiNodeOp;
  /** Always 'hierarchical': the node's calls and the engine's (each node call's own algorithm is in `local.stats()`). */
  algorithm: 'hierarchical';
  /** Bytes of this rank's input. */
  bytes: number;
  /** Host wall time of the call, µs. */
  us: number;
}

export type { MultiNodeOptions } from './multinode-join.js';

/** How a count is cut among the ranks of a node: the first count % L ranks get one element more. */
export function pieces(count: number, parts: number): { counts: number[]; displs: number[] } {
  const base = Math.floor(count / parts);
  const extra = count % parts;
  const counts = [...Array(parts).keys()].map((i) => base + (i < extra ? 1 : 0));
  const displs = counts.map((_, i) => i * base + Math.min(i, extra));
  return { counts, displs };
}

export class MultiNodeCommunicator extends EventEmitter<Pick<CommunicatorEvents, 'abort'>> {
  readonly rank: number;
  readonly size: number;
  /** This rank's node index and the number of nodes; its index on the node and the ranks per node. */
  readonly node: number;
  readonly nodes: number;
  readonly localRank: number;
  readonly localSize: number;
  /** The node's communicator (smcuda) and the engine between nodes. */
  readonly local: Communicator;
  readonly engine: InterNodeEngine;
  private readonly marks: StreamMarks;
  private readonly scope: BufferScope;
  private abortError: CommunicatorAbortedError | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  /** Scratch of calls that failed: freed at close, once the node's communicator drained. */
  private readonly leftover = new Set<DevicePtr>();
  private calls = 0;

  private constructor(
    local: Communicator,
    engine: InterNodeEngine,
    layout: NodeLayout,
    marks: StreamMarks,
    /** The node's rendezvous folder: removed by the last rank of the node to close (rmdir of an empty folder only). */
    private readonly nodeDir: string,
  ) {
    super();
    this.local = local;
    this.engine = engine;
    this.node = layout.node;
    this.nodes = layout.nodes;
    this.localRank = layout.localRank;
    this.localSize = layout.localSize;
    this.rank = layout.node * layout.localSize + layout.localRank;
    this.size = layout.nodes * layout.localSize;
    this.marks = marks;
    this.scope = { driver: local.driver, device: local.driver.currentDevice(), known: allocationRanges(local.driver) };
    local.on('abort', (err) => this.aborted(err, 'local'));
    engine.onError((err) => this.aborted(err, 'engine'));
    // A job that forgets close() still says goodbye between nodes: an exit without one is a lost rank to the others.
    onBeforeExit(this.closeAtExit);
  }

  private readonly closeAtExit = (): void => {
    this.close().catch(() => {});
  };

  get driver(): CudaDriver {
    return this.local.driver;
  }

  get transport(): Transport {
    return this.local.transport;
  }

  /**
   * Joins a job across nodes from the environment (multinode-join.ts):
   * the hierarchy's communicator, or the node's plain Communicator where
   * every rank is on one node.
   */
  static async fromEnv(options: MultiNodeOptions = {}, env?: Env): Promise<MultiNodeCommunicator | Communicator> {
    const j = await joinAcrossNodes(options, env);
    if (j instanceof Communicator) return j;
    const c = new MultiNodeCommunicator(j.local, j.engine, j.layout, j.marks, j.dir);
    const early = j.aborted();
    if (early) c.aborted(early, 'local');
    return c;
  }

  // ---- the collectives -----------------------------------------------------------

  /** recv[i] = op over every rank's send[i]: the node reduce-scatters, the engine allreduces each piece, the node allgathers. */
  allreduce(a: AllreduceArgs): Promise<MultiNodeResult> {
    return this.run('allreduce', a, (es) => {
      const { intra, inter, avgOver } = this.ops(a.op, a.dtype);
      const send = this.buf('send', a.send, a.count * es, a.dtype);
      const recv = a.recv === undefined ? send : this.buf('recv', a.recv, a.count * es, a.dtype);
      const { counts, mine, count: myCount } = this.piece(recv, a.count, es);
      return {
        bytes: a.count * es,
        steps: async (stream) => {
          await this.local.reduceScatterv({ send, recv: mine, counts, dtype: a.dtype, ...intra(a.factor), stream, ...this.limit(a) });
          await this.engine.allreduce({ send: mine, recv: mine, count: myCount, dtype: a.dtype, op: inter, ...avgOver, stream, ...this.limit(a) });
          await this.local.allgatherv({ send: mine, recv, counts, dtype: a.dtype, stream, ...this.limit(a) });
        },
      };
    });
  }

  /** Every rank's recv = root's send: root's node broadcasts, the engine broadcasts each piece from root's node, the other nodes allgather. */
  broadcast(a: BroadcastArgs): Promise<MultiNodeResult> {
    return this.run('broadcast', a, (es) => {
      this.checkRoot(a.root);
      const recv = this.buf('recv', a.recv, a.count * es, a.dtype);
      const isRoot = a.root === this.rank;
      const send = isRoot && a.send !== undefined ? this.buf('send', a.send, a.count * es, a.dtype) : recv;
      const rootNode = Math.floor(a.root / this.localSize);
      const { counts, mine, count: myCount } = this.piece(recv, a.count, es);
      return {
        bytes: a.count * es,
        steps: async (stream) => {
          if (this.node === rootNode)
            await this.local.broadcast({ send, recv, count: a.count, dtype: a.dtype, root: a.root % this.localSize, stream, ...this.limit(a) });
          await this.engine.broadcast({ buf: mine, count: myCount, dtype: a.dtype, root: rootNode, stream, ...this.limit(a) });
          if (this.node !== rootNode) await this.local.allgatherv({ send: mine, recv, counts, dtype: a.dtype, stream, ...this.limit(a) });
        },
      };
    });
  }

  /** root's recv = op over every rank's send: the node reduce-scatters, the engine reduces each piece to root's node, which allgathers. */
  reduce(a: ReduceArgs): Promise<MultiNodeResult> {
    return this.run('reduce', a, (es, scratch) => {
      this.checkRoot(a.root);
      const { intra, inter, avgOver } = this.ops(a.op, a.dtype);
      const send = this.buf('send', a.send, a.count * es, a.dtype);
      const isRoot = a.root === this.rank;
      const out = isRoot ? (a.recv === undefined ? send : this.buf('recv', a.recv, a.count * es, a.dtype)) : scratch(a.count * es);
      const rootNode = Math.floor(a.root / this.localSize);
      const { counts, mine, count: myCount } = this.piece(out, a.count, es);
      return {
        bytes: a.count * es,
        steps: async (stream) => {
          await this.local.reduceScatterv({ send, recv: mine, counts, dtype: a.dtype, ...intra(a.factor), stream, ...this.limit(a) });
          await this.engine.reduce({ send: mine, recv: mine, count: myCount, dtype: a.dtype, op: inter, root: rootNode, ...avgOver, stream, ...this.limit(a) });
          if (this.node === rootNode) await this.local.allgatherv({ send: mine, recv: out, counts, dtype: a.dtype, stream, ...this.limit(a) });
        },
      };
    });
  }

  /** recv = every rank's send in rank order: the node allgathers into its block, the engine allgathers the nodes' blocks. */
  allgather(a: AllgatherArgs): Promise<MultiNodeResult> {
    return this.run('allgather', a, (es) => {
      const recv = this.buf('recv', a.recv, this.size * a.count * es, a.dtype);
      const send = this.buf('send', a.send, a.count * es, a.dtype);
      const block = recv + BigInt(this.node * this.localSize * a.count * es);
      return {
        bytes: a.count * es,
        steps: async (stream) => {
          await this.local.allgather({ send, recv: block, count: a.count, dtype: a.dtype, stream, ...this.limit(a) });
          await this.engine.allgather({ send: block, recv, count: this.localSize * a.count, dtype: a.dtype, stream, ...this.limit(a) });
        },
      };
    });
  }

  /**
   * recv = op over every rank's block `rank` of send: the blocks are laid
   * out by local rank, the node reduce-scatters them (each local rank gets
   * its blocks of every node), the engine reduce-scatters those by node.
   */
  reduceScatter(a: ReduceScatterArgs): Promise<MultiNodeResult> {
    return this.run('reduce-scatter', a, (es, scratch) => {
      const { intra, inter, avgOver } = this.ops(a.op, a.dtype);
      const block = a.count * es;
      const send = this.buf('send', a.send, this.size * block, a.dtype);
      const recv = this.buf('recv', a.recv, block, a.dtype);
      const byLocal = scratch(this.size * block);
      const mine = scratch(this.nodes * block);
      const L = this.localSize;
      const N = this.nodes;
      return {
        bytes: this.size * block,
        steps: async (stream) => {
          // [local l][node n] = block n·L + l
          this.permute(stream, byLocal, send, block, L, N, (l, n) => n * L + l);
          await this.local.reduceScatter({ send: byLocal, recv: mine, count: N * a.count, dtype: a.dtype, ...intra(a.factor), stream, ...this.limit(a) });
          await this.engine.reduceScatter({ send: mine, recv, count: a.count, dtype: a.dtype, op: inter, ...avgOver, stream, ...this.limit(a) });
        },
      };
    });
  }

  /**
   * Block k of send to rank k: the node exchanges, so that each local rank
   * holds what its node sends to its peers (same local rank) on every node,
   * then the engine exchanges between nodes.
   */
  alltoall(a: AlltoallArgs): Promise<MultiNodeResult> {
    return this.run('alltoall', a, (es, scratch) => {
      const block = a.count * es;
      const send = this.buf('send', a.send, this.size * block, a.dtype);
      const recv = a.recv === undefined ? send : this.buf('recv', a.recv, this.size * block, a.dtype);
      const byLocal = scratch(this.size * block);
      const fromLocal = scratch(this.size * block);
      const byNode = scratch(this.size * block);
      return {
        bytes: this.size * block,
        steps: (stream) => this.alltoallSteps(stream, send, recv, a.count, a.dtype, es, a, { byLocal, fromLocal, byNode }),
      };
    });
  }

  /**
   * Rank k's recv gets, at recvDispls[j], sendCounts[k] elements of rank
   * j's send at its sendDispls[k]: every block padded to the longest of the
   * job (an allreduce of each rank's longest, by max), exchanged as
   * alltoall's, and copied out. First the counts themselves go the same
   * way, and each rank compares what its senders send it with its
   * recvCounts: a pair that does not agree fails on every rank
   * (SMCUDA_CALL_MISMATCH), never a short or long block.
   */
  alltoallv(a: AlltoallvArgs): Promise<MultiNodeResult> {
    return this.run('alltoallv', { ...a, count: 0 }, (es, scratch) => {
      const sc = perRankArg('sendCounts', a.sendCounts, this.size);
      const sd = displsArg('sendDispls', a.sendDispls, sc);
      const rc = perRankArg('recvCounts', a.recvCounts, this.size);
      const rd = displsArg('recvDispls', a.recvDispls, rc);
      checkDisjoint('recvDispls', rc, rd);
      const send = this.buf('send', a.send, extentOf('sendDispls', sc, sd, es) * es, a.dtype);
      const recv = this.buf('recv', a.recv, extentOf('recvDispls', rc, rd, es) * es, a.dtype);
      const W = this.size;
      const three = (bytes: number) => ({ byLocal: scratch(bytes), fromLocal: scratch(bytes), byNode: scratch(bytes) });
      return {
        bytes: extentOf('sendDispls', sc, sd, es) * es,
        steps: async (stream) => {
          // The counts, as an alltoall of one u64 each: what every sender sends this rank.
          const counts = scratch(W * 8);
          const told = scratch(W * 8);
          await this.marks.mark(stream);
          this.driver.memcpyHtoD(counts, new BigUint64Array(sc.map(BigInt)));
          await this.alltoallSteps(stream, counts, told, 1, 'u64', 8, a, three(W * 8));
          await this.marks.mark(stream);
          const got = new BigUint64Array(W);
          this.driver.memcpyDtoH(got, told);
          const j = [...got.keys()].find((k) => got[k] !== BigInt(rc[k]!));
          if (j !== undefined)
            throw new CallMismatchError(
              `alltoallv: rank ${j} sends rank ${this.rank} ${got[j]} elements, and rank ${this.rank} expects ${rc[j]} (its recvCounts[${j}]): rank j's sendCounts[k] must equal rank k's recvCounts[j]`,
              this.rank,
              this.calls,
              [this.rank, j],
              ['counts'],
            );
          // The longest block of the job: each rank's longest, by max inside the node and between nodes.
          const longest = scratch(8);
          this.driver.memcpyHtoD(longest, new BigUint64Array([BigInt(Math.max(0, ...sc))]));
          await this.local.allreduce({ send: longest, count: 1, dtype: 'u64', op: 'max', stream, ...this.limit(a) });
          await this.engine.allreduce({ send: longest, recv: longest, count: 1, dtype: 'u64', op: 'max', stream, ...this.limit(a) });
          await this.marks.mark(stream);
          const b = new BigUint64Array(1);
          this.driver.memcpyDtoH(b, longest);
          const B = Number(b[0]);
          if (B === 0) return;
          const padded = scratch(W * B * es);
          for (let k = 0; k < W; k++) if (sc[k]! > 0) this.driver.memcpyAsync(padded + BigInt(k * B * es), send + BigInt(sd[k]! * es), sc[k]! * es, stream);
          const out = scratch(W * B * es);
          await this.alltoallSteps(stream, padded, out, B, a.dtype, es, a, three(W * B * es));
          for (let k = 0; k < W; k++) if (rc[k]! > 0) this.driver.memcpyAsync(recv + BigInt(rd[k]! * es), out + BigInt(k * B * es), rc[k]! * es, stream);
        },
      };
    });
  }

  /** alltoall's steps: blocks of `count` elements from `send` to `recv` (each size × count), through three scratch buffers of that size. */
  private async alltoallSteps(
    stream: StreamHandle,
    send: DevicePtr,
    recv: DevicePtr,
    count: number,
    dtype: DType,
    es: number,
    o: CallOptions,
    tmp: { byLocal: DevicePtr; fromLocal: DevicePtr; byNode: DevicePtr },
  ): Promise<void> {
    const block = count * es;
    const L = this.localSize;
    const N = this.nodes;
    // [destination local l][node n] = block n·L + l
    this.permute(stream, tmp.byLocal, send, block, L, N, (l, n) => n * L + l);
    await this.local.alltoall({ send: tmp.byLocal, recv: tmp.fromLocal, count: N * count, dtype, stream, ...this.limit(o) });
    // fromLocal is [source local l][node n]: to [node n][source local l]
    this.permute(stream, tmp.byNode, tmp.fromLocal, block, N, L, (n, l) => l * N + n);
    await this.engine.alltoall({ send: tmp.byNode, recv, count: L * count, dtype, stream, ...this.limit(o) });
  }

  /** root's recv = every rank's send in rank order: an allgather into scratch off the root (simple, not the least traffic). */
  gather(a: GatherArgs): Promise<MultiNodeResult> {
    return this.run('gather', a, (es, scratch) => {
      this.checkRoot(a.root);
      const send = this.buf('send', a.send, a.count * es, a.dtype);
      const all = this.size * a.count * es;
      if (a.root === this.rank && a.recv === undefined) throw new ArgumentTypeError(`gather's root (rank ${a.root}) needs recv: size × count elements`);
      const recv = a.root === this.rank ? this.buf('recv', a.recv, all, a.dtype) : scratch(all);
      const inner = this.allgatherSteps(send, recv, a.count, a.dtype, es, a);
      return { bytes: a.count * es, steps: inner };
    });
  }

  /** recv = block `rank` of root's send: a broadcast of root's send into scratch, then this rank's block copied out. */
  scatter(a: ScatterArgs): Promise<MultiNodeResult> {
    return this.run('scatter', a, (es, scratch) => {
      this.checkRoot(a.root);
      const block = a.count * es;
      const recv = this.buf('recv', a.recv, block, a.dtype);
      const isRoot = a.root === this.rank;
      if (isRoot && a.send === undefined) throw new ArgumentTypeError(`scatter's root (rank ${a.root}) needs send: size × count elements`);
      const send = isRoot ? this.buf('send', a.send, this.size * block, a.dtype) : 0n;
      const all = scratch(this.size * block);
      const rootNode = Math.floor(a.root / this.localSize);
      const { counts, mine, count: myCount } = this.piece(all, this.size * a.count, es);
      return {
        bytes: block,
        steps: async (stream) => {
          if (this.node === rootNode)
            await this.local.broadcast({
              ...(isRoot ? { send } : {}),
              recv: all,
              count: this.size * a.count,
              dtype: a.dtype,
              root: a.root % this.localSize,
              stream,
              ...this.limit(a),
            });
          await this.engine.broadcast({ buf: mine, count: myCount, dtype: a.dtype, root: rootNode, stream, ...this.limit(a) });
          if (this.node !== rootNode) await this.local.allgatherv({ send: mine, recv: all, counts, dtype: a.dtype, stream, ...this.limit(a) });
          if (block > 0) this.driver.memcpyAsync(recv, all + BigInt(this.rank * block), block, stream);
          await this.marks.mark(stream);
        },
      };
    });
  }

  /**
   * Every rank's recv gets rank k's send (counts[k] elements) at displs[k]:
   * the node allgathers its ranks' blocks, packed, into its run of scratch
   * (each run as long as the longest node's), the engine allgathers the
   * runs, and each block is copied to its place. The counts are compared
   * inside the node and, hashed, between nodes before anything moves.
   */
  allgatherv(a: AllgathervArgs): Promise<MultiNodeResult> {
    return this.run('allgatherv', { ...a, count: 0 }, (es, scratch) => {
      const counts = perRankArg('counts', a.counts, this.size);
      const displs = displsArg('displs', a.displs, counts);
      checkDisjoint('displs', counts, displs);
      const send = this.buf('send', a.send, counts[this.rank]! * es, a.dtype);
      const recv = this.buf('recv', a.recv, extentOf('displs', counts, displs, es) * es, a.dtype);
      const L = this.localSize;
      const nodeCounts = [...Array(this.nodes).keys()].map((n) => counts.slice(n * L, n * L + L).reduce((x, y) => x + y, 0));
      const run = Math.max(...nodeCounts);
      const all = scratch(this.nodes * run * es);
      const mine = all + BigInt(this.node * run * es);
      const hash = countsHash(counts);
      return {
        bytes: counts[this.rank]! * es,
        steps: async (stream) => {
          await this.agreeLocally(hash, stream, scratch);
          await this.local.allgatherv({ send, recv: mine, counts: counts.slice(this.node * L, this.node * L + L), dtype: a.dtype, stream, ...this.limit(a) });
          await this.engine.allgather({ send: mine, recv: all, count: run, dtype: a.dtype, stream, check: hash, ...this.limit(a) });
          for (let r = 0, at = 0; r < this.size; r++) {
            if (r % L === 0) at = Math.floor(r / L) * run;
            if (counts[r]! > 0) this.driver.memcpyAsync(recv + BigInt(displs[r]! * es), all + BigInt(at * es), counts[r]! * es, stream);
            at += counts[r]!;
          }
        },
      };
    });
  }

  /**
   * recv (counts[rank] elements) = op over every rank's block `rank` of
   * send: the blocks are padded to the longest and laid out by local rank,
   * then reduced as reduceScatter's are, and this rank's part copied out.
   * The counts are compared inside the node and, hashed, between nodes.
   */
  reduceScatterv(a: ReduceScattervArgs): Promise<MultiNodeResult> {
    return this.run('reduce-scatterv', { ...a, count: 0 }, (es, scratch) => {
      const { intra, inter, avgOver } = this.ops(a.op, a.dtype);
      const counts = perRankArg('counts', a.counts, this.size);
      const displs = displsArg('displs', a.displs, counts);
      const send = this.buf('send', a.send, extentOf('displs', counts, displs, es) * es, a.dtype);
      const recv = this.buf('recv', a.recv, counts[this.rank]! * es, a.dtype);
      const B = Math.max(...counts);
      const L = this.localSize;
      const N = this.nodes;
      const byLocal = scratch(this.size * B * es);
      const mine = scratch(N * B * es);
      const out = scratch(B * es);
      const hash = countsHash(counts);
      return {
        bytes: extentOf('displs', counts, displs, es) * es,
        steps: async (stream) => {
          await this.agreeLocally(hash, stream, scratch);
          // [local l][node n] = rank n·L + l's block, padded with zeros to B.
          if (B > 0) this.driver.memsetD8Async(byLocal, 0, this.size * B * es, stream);
          for (let l = 0; l < L; l++)
            for (let n = 0; n < N; n++) {
              const r = n * L + l;
              if (counts[r]! > 0) this.driver.memcpyAsync(byLocal + BigInt((l * N + n) * B * es), send + BigInt(displs[r]! * es), counts[r]! * es, stream);
            }
          await this.local.reduceScatter({ send: byLocal, recv: mine, count: N * B, dtype: a.dtype, ...intra(a.factor), stream, ...this.limit(a) });
          await this.engine.reduceScatter({ send: mine, recv: out, count: B, dtype: a.dtype, op: inter, ...avgOver, stream, check: hash, ...this.limit(a) });
          if (counts[this.rank]! > 0) this.driver.memcpyAsync(recv, out, counts[this.rank]! * es, stream);
        },
      };
    });
  }

  /** Every rank has reached it: the node's barrier, the engine's, the node's again. */
  barrier(options: CallOptions = {}): Promise<MultiNodeResult> {
    return this.run('barrier', { ...options, count: 0, dtype: 'u8' }, () => ({
      bytes: 0,
      steps: async () => {
        await this.local.barrier(this.limit(options));
        await this.engine.barrier(this.limit(options));
        await this.local.barrier(this.limit(options));
      },
    }));
  }

  /** Device memory of `bytes` on this communicator's device, freed at close (the node's communicator's alloc). */
  alloc(bytes: number): DeviceAllocation {
    return this.local.alloc(bytes);
  }

  stats(): {
    rank: number;
    size: number;
    node: number;
    nodes: number;
    engine: EngineKind;
    calls: number;
    aborted?: string;
    local: ReturnType<Communicator['stats']>;
  } {
    return {
      rank: this.rank,
      size: this.size,
      node: this.node,
      nodes: this.nodes,
      engine: this.engine.kind,
      calls: this.calls,
      ...(this.abortError ? { aborted: this.abortError.message } : {}),
      local: this.local.stats(),
    };
  }

  /** Fails every pending call of every rank, on every node, with `reason`. */
  abort(reason: Error = new SmcudaError('SMCUDA_ABORTED', 'aborted by the application')): void {
    this.aborted(reason, 'here');
  }

  /** Closes the engine and the node's communicator (which closes the Transport it made). Later calls reject with SMCUDA_CLOSED. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      offBeforeExit(this.closeAtExit);
      await this.queue.catch(() => {});
      await this.engine.close();
      await this.local.close();
      this.marks.destroy();
      for (const p of this.leftover) this.driver.memFree(p);
      this.leftover.clear();
      try {
        rmdirSync(this.nodeDir);
      } catch {
        // another rank of the node still has its socket there, or it is gone already
      }
    })();
    return this.closing;
  }

  // ---- how a call runs -------------------------------------------------------------

  /**
   * Fails (CallMismatchError, on every rank of the node) unless every rank of
   * the node passed the same `hash`: an allreduce of [hash, MAX − hash] by
   * max is [hash, MAX − hash] only where none differs. What the node's own
   * call checks cannot see (counts of other nodes' ranks) must agree too.
   */
  private async agreeLocally(hash: number, stream: StreamHandle, scratch: (bytes: number) => DevicePtr): Promise<void> {
    if (this.localSize === 1) return;
    const words = scratch(16);
    const mine = new BigUint64Array([BigInt(hash), BigInt(Number.MAX_SAFE_INTEGER - hash)]);
    await this.marks.mark(stream);
    this.driver.memcpyHtoD(words, mine);
    await this.local.allreduce({ send: words, count: 2, dtype: 'u64', op: 'max', stream });
    await this.marks.mark(stream);
    const got = new BigUint64Array(2);
    this.driver.memcpyDtoH(got, words);
    if (got[0] !== mine[0] || got[1] !== mine[1])
      throw new CallMismatchError(
        `the ranks of node ${this.node} passed different counts per rank to the same call: every rank of every node must pass the same counts`,
        this.rank,
        this.calls,
        [this.rank],
        ['counts'],
      );
  }

  private allgatherSteps(send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, es: number, o: CallOptions): (stream: StreamHandle) => Promise<void> {
    const block = recv + BigInt(this.node * this.localSize * count * es);
    return async (stream) => {
      await this.local.allgather({ send, recv: block, count, dtype, stream, ...this.limit(o) });
      await this.engine.allgather({ send: block, recv, count: this.localSize * count, dtype, stream, ...this.limit(o) });
    };
  }

  /** dst[i][j] = src block index(i, j), i < I, j < J, blocks of `block` bytes, on the stream. */
  private permute(stream: StreamHandle, dst: DevicePtr, src: DevicePtr, block: number, I: number, J: number, index: (i: number, j: number) => number): void {
    if (block === 0) return;
    for (let i = 0; i < I; i++)
      for (let j = 0; j < J; j++) this.driver.memcpyAsync(dst + BigInt((i * J + j) * block), src + BigInt(index(i, j) * block), block, stream);
  }

  private limit(o: CallOptions): { timeoutMs?: number } {
    return o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {};
  }

  /**
   * The reduction inside a node and between nodes. premul scales inside the
   * node and sums between; avg sums everywhere and divides once by the world
   * where the engine can (the socket twin), else (NCCL, floats) averages at
   * both levels, the same as every node holds as many ranks.
   */
  private ops(op: ReduceOp, dtype: DType): { intra: (factor?: number) => { op: ReduceOp; factor?: number }; inter: EngineOp; avgOver: { avgOver?: number } } {
    if (op === 'premul') return { intra: (factor) => ({ op, ...(factor !== undefined ? { factor } : {}) }), inter: 'sum', avgOver: {} };
    if (op === 'avg') {
      if (this.engine.exactAvg) return { intra: () => ({ op: 'sum' }), inter: 'sum', avgOver: { avgOver: this.size } };
      if (!FLOAT_DTYPES.includes(dtype))
        throw new ArgumentTypeError(`op 'avg' of ${dtype} across nodes over NCCL would truncate twice: use 'sum' and divide, or a floating-point dtype`);
      return { intra: () => ({ op: 'avg' }), inter: 'avg', avgOver: {} };
    }
    if (!this.engine.supports(op, dtype))
      throw new ArgumentTypeError(
        `op '${op}' of ${dtype} is not reduced by the ${this.engine.kind} engine between nodes: NCCL has no bitwise reductions; use sum, prod, min or max`,
      );
    return { intra: () => ({ op }), inter: op, avgOver: {} };
  }

  private checkRoot(root: unknown): void {
    if (typeof root !== 'number' || !Number.isInteger(root)) throw new ArgumentTypeError(`root must be an integer rank, got ${typeof root}`);
    if (root < 0 || root >= this.size) throw new ArgumentRangeError(`root must be a rank from 0 to ${this.size - 1}, got ${root}`);
  }

  /** This rank's piece of the `count` elements at `buf` as its node cuts them (pieces()): where, how many, and every rank's counts. */
  private piece(buf: DevicePtr, count: number, es: number): { counts: number[]; mine: DevicePtr; count: number } {
    const { counts, displs } = pieces(count, this.localSize);
    return { counts, mine: buf + BigInt(displs[this.localRank]! * es), count: counts[this.localRank]! };
  }

  private buf(field: string, arg: unknown, bytes: number, dtype: DType): DevicePtr {
    return bufferArg(this.scope, field, arg, bytes, dtype);
  }

  /**
   * One call: its checks here (a bad argument throws on this rank and
   * aborts every rank), then its steps in call order, the scratch they use
   * freed once the stream passed them.
   */
  private run(
    op: MultiNodeOp,
    a: CallOptions & { count: number; dtype: DType; op?: ReduceOp; factor?: number },
    plan: (es: number, scratch: (bytes: number) => DevicePtr) => { bytes: number; steps: (stream: StreamHandle) => Promise<void> },
  ): Promise<MultiNodeResult> {
    if (this.closed) return Promise.reject(new ClosedError(`${op}: the communicator was closed`));
    if (this.abortError) return Promise.reject(this.abortError);
    const made: DevicePtr[] = [];
    let planned: ReturnType<typeof plan>;
    try {
      if (a === null || typeof a !== 'object') throw new ArgumentTypeError(`${op} takes an object of arguments`);
      if (!isDType(a.dtype)) throw new ArgumentTypeError(`dtype must be one of the element types (f32, f16, bf16, …), got ${JSON.stringify(a.dtype)}`);
      if (typeof a.count !== 'number' || !Number.isSafeInteger(a.count) || a.count < 0)
        throw new ArgumentRangeError(`count must be a non-negative integer number of elements, got ${String(a.count)}`);
      if (a.op !== undefined || op === 'allreduce' || op === 'reduce' || op === 'reduce-scatter') {
        if (!isReduceOp(a.op))
          throw new ArgumentTypeError(`op must be a reduction (sum, avg, min, max, prod, premul, band, bor, bxor), got ${JSON.stringify(a.op)}`);
        checkDtypeOp(a.dtype, a.op);
        reduceArg(a.op, a.factor);
      }
      const stream = a.stream ?? 0n;
      if (typeof stream !== 'bigint') throw new ArgumentTypeError(`stream must be a bigint stream handle, got ${typeof stream}`);
      // The host sequences the steps (and the socket engine copies through it): a capture would record half a call.
      if (this.driver.gpuDrivenStatus().graphs && this.driver.streamIsCapturing(stream))
        throw new SmcudaError(
          'SMCUDA_CAPTURE_UNSUPPORTED',
          `${op} across nodes cannot be captured in a graph: the host sequences its steps between the node and the engine. Call it outside the capture (the node's own communicator, comm.local, captures its calls)`,
        );
      planned = plan(DTYPE_BYTES[a.dtype], (bytes) => {
        const p = this.driver.memAlloc(Math.max(bytes, 1));
        made.push(p);
        return p;
      });
    } catch (err) {
      for (const p of made) this.driver.memFree(p);
      this.aborted(err instanceof Error ? err : new Error(String(err)), 'here');
      return Promise.reject(err);
    }
    const stream = a.stream ?? 0n;
    const started = performance.now();
    const go = async (): Promise<MultiNodeResult> => {
      if (this.abortError) throw this.abortError;
      try {
        await planned.steps(stream);
      } catch (err) {
        // The node's or the engine's failure aborted everything; its scratch waits for close (the GPU may still use it).
        for (const p of made) this.leftover.add(p);
        const e = err instanceof Error ? err : new Error(String(err));
        this.aborted(e, 'here');
        throw this.abortError ?? e;
      }
      await this.marks.mark(stream);
      for (const p of made) this.driver.memFree(p);
      this.calls++;
      return { op, algorithm: 'hierarchical', bytes: planned.bytes, us: (performance.now() - started) * 1000 };
    };
    const p = this.queue.then(go, go);
    this.queue = p.catch(() => {});
    return p;
  }

  /**
   * The first failure, from this rank, its node or another node: the node's
   * communicator and the engine are aborted with it (each tells its peers),
   * and it becomes every later call's error. Local ranks in an error of
   * the node's communicator are named by their rank in the job.
   */
  private aborted(err: Error, from: 'local' | 'engine' | 'here'): void {
    // A close is no failure: what the engine and the node report while closing is theirs to settle.
    if (this.abortError || (this.closed && from !== 'here')) return;
    this.abortError = this.asJobError(err, from);
    this.engine.abort(this.abortError);
    // The node's ranks learn it as this rank's abort (their ranks are local ones); the message names the origin.
    this.local.abort(
      from === 'local'
        ? this.abortError
        : new CommunicatorAbortedError(this.abortError.message, this.localRank, this.abortError.causeCode, { cause: this.abortError }),
    );
    this.emit('abort', this.abortError);
  }

  private asJobError(err: Error, from: 'local' | 'engine' | 'here'): CommunicatorAbortedError {
    const global = (local: number) => this.node * this.localSize + local;
    if (from === 'local' && err instanceof CallMismatchError)
      return new CallMismatchError(`on node ${this.node}: ${err.message}`, global(err.failedRank), err.seq, err.ranks.map(global), err.fields, { cause: err });
    if (from === 'local' && err instanceof CommunicatorAbortedError)
      return new CommunicatorAbortedError(
        `on node ${this.node} (local rank ${err.failedRank} is rank ${global(err.failedRank)}): ${err.message}`,
        global(err.failedRank),
        err.causeCode,
        {
          cause: err,
          ...(err.failedPid !== undefined ? { failedPid: err.failedPid } : {}),
          code: err.code,
        },
      );
    if (err instanceof CommunicatorAbortedError) return err;
    const code = errorCode(err);
    return new CommunicatorAbortedError(`rank ${this.rank} (node ${this.node}, pid ${process.pid}) failed: ${err.message}`, this.rank, code, {
      cause: err,
      failedPid: process.pid,
    });
  }
}
