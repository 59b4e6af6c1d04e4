/**
 * A bench worker's commands for the graph and collectives suites, and their
 * handler (worker.ts hands these commands here): the raw mem-op ping-pong
 * (memop-pingpong.ts), seed 003's host-staged allreduce
 * (host-staged-allreduce.ts), and smcuda's own side through the interfaces
 * of under-test.ts.
 */
import { mkdirSync } from 'node:fs';
import type { CudaDriver } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import type { Algorithm } from './collective-figures.js';
import { HostStagedAllreduce, seedAverage, seedGradient, type StagedReduce, type StagedRunResult } from './host-staged-allreduce.js';
import { type MemOpGraphResult, MemOpPingPong } from './memop-pingpong.js';
import { type AnchorTimeRequest, NcclAnchorRank } from './nccl-anchor-rank.js';
import type { Repeat } from './protocol.js';
import {
  type CollectiveTiming,
  type CollectiveUnderTest,
  type ReduceOp,
  COLLECTIVES_UNDER_TEST,
  GRAPH_PINGPONG_UNDER_TEST,
  timeCollective,
} from './under-test.js';

export type SuiteCommand =
  // graph suite: rank 1 initiates and times, rank 0 responds
  | { op: 'gpu-driven-status' }
  | { op: 'memop-prepare'; maxSize: number; timeoutMs: number }
  | { op: 'memop-connect'; handle: Uint8Array }
  | ({ op: 'memop-host'; size: number } & Repeat)
  | { op: 'memop-graph'; size: number; transfers: number; replays: number; warmup: number }
  | { op: 'memop-close' }
  | { op: 'sut-pingpong'; session: string; size: number; transfers: number; replays: number; warmup: number; flags?: 'memops' | 'kernel' }
  // collectives suite: every rank runs each call
  | { op: 'staged-create'; ranks: number; maxBytes: number; timeoutMs: number }
  | { op: 'staged-open'; segment: string; ranks: number; maxBytes: number; timeoutMs: number }
  | { op: 'staged-unlink' }
  /** `verify`: first one untimed call averaging seed 003's gradients, checked element by element. */
  | ({ op: 'staged-allreduce'; bytes: number; pinned: boolean; reduce: StagedReduce; verify: boolean } & Repeat)
  | { op: 'staged-close' }
  | { op: 'sut-collective-open'; ranks: number; dir: string; timeoutMs: number }
  | ({ op: 'sut-collective-time'; bytes: number; runs: number; reduce?: ReduceOp; algorithm?: Algorithm; graph?: boolean; timeoutMs: number } & Repeat)
  | { op: 'sut-collective-close' }
  // the collectives suite's NCCL C-API anchor (nccl-anchor.ts), in a group of its own: rank 0 makes the id, every rank joins
  | { op: 'nccl-anchor-hello' }
  | { op: 'nccl-anchor-open'; id: Uint8Array; ranks: number }
  | ({ op: 'nccl-anchor-time' } & AnchorTimeRequest)
  | { op: 'nccl-anchor-close' };

const SUITE_OPS = new Set<string>([
  'gpu-driven-status',
  'memop-prepare',
  'memop-connect',
  'memop-host',
  'memop-graph',
  'memop-close',
  'sut-pingpong',
  'staged-create',
  'staged-open',
  'staged-unlink',
  'staged-allreduce',
  'staged-close',
  'sut-collective-open',
  'sut-collective-time',
  'sut-collective-close',
  'nccl-anchor-hello',
  'nccl-anchor-open',
  'nccl-anchor-time',
  'nccl-anchor-close',
] satisfies SuiteCommand['op'][]);

export function isSuiteCommand(c: { op: string }): c is SuiteCommand {
  return SUITE_OPS.has(c.op);
}

/** A staged allreduce: the timed calls, and (with `verify`) whether an average of seed 003's gradients was right on this rank. */
export interface StagedAllreduceResult extends StagedRunResult {
  /** null: not checked (verify false). */
  verified: boolean | null;
  /** Elements outside seed 003's tolerance (rtol 1e-5, atol 1e-8). */
  mismatches: number;
}

export class SuiteWorker {
  #pingpong: MemOpPingPong | undefined;
  #staged: HostStagedAllreduce | undefined;
  #sut: CollectiveUnderTest | undefined;
  #anchor: NcclAnchorRank | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly cfg: { rank: number; device: number; token: string },
    private readonly endpoint: (session: string) => Promise<Endpoint>,
  ) {}

  private get role() {
    return this.cfg.rank === 1 ? ('initiator' as const) : ('responder' as const);
  }

  async handle(c: SuiteCommand): Promise<unknown> {
    const d = this.driver;
    switch (c.op) {
      case 'gpu-driven-status':
        return d.gpuDrivenStatus();
      case 'memop-prepare': {
        if (this.#pingpong) throw new Error('the mem-op ping-pong is prepared already');
        this.#pingpong = new MemOpPingPong(d, c.maxSize, c.timeoutMs);
        return { handle: this.#pingpong.handle() };
      }
      case 'memop-connect':
        this.#need(this.#pingpong, 'memop-prepare').connect(c.handle);
        return null;
      case 'memop-host':
        return this.#need(this.#pingpong, 'memop-prepare').host(this.role, c.size, c);
      case 'memop-graph':
        return this.#need(this.#pingpong, 'memop-prepare').graph(this.role, c.size, c.transfers, c.replays, c.warmup);
      case 'memop-close':
        this.#pingpong?.close();
        this.#pingpong = undefined;
        return null;
      case 'sut-pingpong':
        return this.#sutPingPong(c);
      case 'staged-create': {
        if (this.#staged) throw new Error('the staged allreduce is set up already');
        this.#staged = HostStagedAllreduce.create(d, c.ranks, c.maxBytes, c.timeoutMs);
        return { segment: this.#staged.segmentName };
      }
      case 'staged-open':
        if (this.#staged) throw new Error('the staged allreduce is set up already');
        this.#staged = HostStagedAllreduce.open(d, c.segment, this.cfg.rank, c.ranks, c.maxBytes, c.timeoutMs);
        return null;
      case 'staged-unlink':
        this.#need(this.#staged, 'staged-create').unlink();
        return null;
      case 'staged-allreduce':
        return this.#stagedAllreduce(this.#need(this.#staged, 'staged-create or staged-open'), c);
      case 'staged-close':
        this.#staged?.close();
        this.#staged = undefined;
        return null;
      case 'sut-collective-open': {
        if (!COLLECTIVES_UNDER_TEST.factory) throw new Error(COLLECTIVES_UNDER_TEST.missing);
        if (this.#sut) throw new Error('the collective under test is open already');
        mkdirSync(c.dir, { recursive: true, mode: 0o700 }); // the rendezvous directory, inside the run's private one
        this.#sut = await COLLECTIVES_UNDER_TEST.factory({
          driver: d,
          rank: this.cfg.rank,
          ranks: c.ranks,
          device: this.cfg.device,
          dir: c.dir,
          token: this.cfg.token,
          timeoutMs: c.timeoutMs,
        });
        return null;
      }
      case 'sut-collective-time':
        return this.#sutCollective(this.#need(this.#sut, 'sut-collective-open'), c);
      case 'sut-collective-close': {
        const s = this.#sut;
        this.#sut = undefined;
        await s?.close();
        return null;
      }
      case 'nccl-anchor-hello':
        return this.#ncclAnchor().hello();
      case 'nccl-anchor-open':
        return this.#ncclAnchor().open(c.id, c.ranks);
      case 'nccl-anchor-time':
        return this.#ncclAnchor().time(c);
      case 'nccl-anchor-close':
        return this.#anchor?.close() ?? null;
    }
  }

  #ncclAnchor(): NcclAnchorRank {
    this.#anchor ??= new NcclAnchorRank(this.driver, this.cfg.rank);
    return this.#anchor;
  }

  async shutdown(): Promise<void> {
    this.#pingpong?.close();
    this.#staged?.close();
    await this.#sut?.close();
    this.#anchor?.close();
  }

  #need<T>(x: T | undefined, first: string): T {
    if (x === undefined) throw new Error(`${first} first (rank ${this.cfg.rank})`);
    return x;
  }

  async #stagedAllreduce(s: HostStagedAllreduce, c: Extract<SuiteCommand, { op: 'staged-allreduce' }>): Promise<StagedAllreduceResult> {
    const d = this.driver;
    const count = c.bytes / 4;
    const dev = d.memAlloc(Math.max(4, c.bytes));
    try {
      let mismatches = 0;
      if (!c.verify)
        d.memsetD8(dev, 0, Math.max(4, c.bytes)); // the values do not change the time of a host f32 sum
      else {
        if (c.bytes > 0) d.memcpyHtoD(dev, new Uint8Array(seedGradient(this.cfg.rank, count).buffer));
        // Seed 003's step, checked as the seed checks it; the timed calls follow on the result.
        await s.run(dev, c.bytes, { pinned: c.pinned, reduce: 'avg', iters: 1, warmup: 0 });
        const back = new Float32Array(count);
        if (c.bytes > 0) d.memcpyDtoH(new Uint8Array(back.buffer), dev);
        for (let i = 0; i < count; i++) {
          const want = seedAverage(s.ranks, i);
          if (!(Math.abs(back[i]! - want) <= 1e-8 + 1e-5 * Math.abs(want))) mismatches++;
        }
      }
      const timed = await s.run(dev, c.bytes, { pinned: c.pinned, reduce: c.reduce, iters: c.iters, warmup: c.warmup });
      return { ...timed, verified: c.verify ? mismatches === 0 : null, mismatches };
    } finally {
      d.memFree(dev);
    }
  }

  async #sutCollective(sut: CollectiveUnderTest, c: Extract<SuiteCommand, { op: 'sut-collective-time' }>): Promise<CollectiveTiming> {
    const d = this.driver;
    const dev = d.memAlloc(Math.max(4, c.bytes));
    try {
      d.memsetD8(dev, 0, Math.max(4, c.bytes));
      return await timeCollective(d, sut, dev, c.bytes, c);
    } finally {
      d.memFree(dev);
    }
  }

  async #sutPingPong(c: Extract<SuiteCommand, { op: 'sut-pingpong' }>): Promise<MemOpGraphResult> {
    if (!GRAPH_PINGPONG_UNDER_TEST.factory) throw new Error(GRAPH_PINGPONG_UNDER_TEST.missing);
    const d = this.driver;
    const sut = await GRAPH_PINGPONG_UNDER_TEST.factory({
      driver: d,
      endpoint: await this.endpoint(c.session),
      rank: this.cfg.rank,
      device: this.cfg.device,
      ...(c.flags ? { flags: c.flags } : {}),
    });
    const stream = d.streamCreate();
    try {
      return await sut.graphPingPong({ role: this.role, size: c.size, transfers: c.transfers, replays: c.replays, warmup: c.warmup, stream });
    } finally {
      d.streamDestroy(stream);
      await sut.close();
    }
  }
}
