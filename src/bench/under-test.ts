/**
 * smcuda's own side of the graph and collectives suites, as two small
 * interfaces, and how a bench worker times them. The suites' baselines run
 * without these; smcuda's figures are listed as skipped (with `missing`)
 * until an implementation is plugged in below:
 *
 *   - COLLECTIVES_UNDER_TEST.factory: per rank, a Communicator (issue 26)
 *     from the rendezvous directory and job token the bench gives, with
 *     `collectiveUnderTest(call)` queueing one allreduce on a stream;
 *   - GRAPH_PINGPONG_UNDER_TEST.factory: per worker, from the bench session's
 *     endpoint, `graphPingPong(...)`: persistent transfers (issue 25) in each
 *     direction captured `transfers` times in a graph and replayed.
 */
import { Communicator, type Algorithm as CommAlgorithm } from '../collectives/communicator.js';
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import type { Algorithm } from './collective-figures.js';
import type { MemOpGraphResult, PingPongRole } from './memop-pingpong.js';
import type { Repeat } from './protocol.js';
import { PersistentPingPong } from './persistent-pingpong.js';
import { GpuRuntime } from '../gpu/gpu-runtime.js';
import { withinMs } from './stuck.js';

export type ReduceOp = 'sum' | 'avg' | 'min' | 'max' | 'prod';
export type Dtype = 'f32' | 'f16' | 'bf16' | 'f64' | 'i32' | 'i64' | 'u8';

export interface CollectiveCall {
  op: 'allreduce';
  reduce: ReduceOp;
  dtype: Dtype;
  /** Elements, not bytes. */
  count: number;
  send: DevicePtr;
  /** Equal to `send` for in place. */
  recv: DevicePtr;
  stream: StreamHandle;
  /** Force an algorithm (the per-algorithm figures); absent: the implementation chooses by size. */
  algorithm?: Algorithm;
}

export interface CollectiveUnderTest {
  /** Enqueues one collective on `call.stream`, stream-ordered as gloo's: inputs read when the stream reaches it, outputs valid at its end. */
  collectiveUnderTest(call: CollectiveCall): void | Promise<void>;
  /** The algorithm an unforced call of `bytes` takes (reported beside the figure). */
  algorithmFor?(bytes: number, dtype: Dtype): string;
  /** Whether calls on the same buffers can be captured in a CUDA graph and replayed. */
  readonly capturable: boolean;
  close(): Promise<void>;
}

export interface CollectiveRankContext {
  driver: CudaDriver;
  rank: number;
  ranks: number;
  device: number;
  /** A private directory (0700) the ranks share, for a directory rendezvous. */
  dir: string;
  /** The job token the ranks share. */
  token: string;
  timeoutMs: number;
}

export interface PingPongUnderTest {
  /**
   * Both sides call it with the same arguments: `size` bytes each way per
   * iteration as persistent transfers, `transfers` iterations captured in
   * one graph, replayed `warmup` + `replays` times on `stream`. The
   * initiator returns the times as MemOpGraphResult does.
   */
  graphPingPong(args: {
    role: PingPongRole;
    size: number;
    transfers: number;
    replays: number;
    warmup: number;
    stream: StreamHandle;
  }): Promise<MemOpGraphResult>;
  close(): Promise<void>;
}

export interface PingPongContext {
  driver: CudaDriver;
  endpoint: Endpoint;
  rank: number;
  device: number;
  /** Who runs the flag operations (persistent transfers' `flags` option); default 'memops'. */
  flags?: 'memops' | 'kernel';
}

/**
 * Scratch per region for the bench's communicators on a GPU: large calls go in fewer, larger pieces than
 * with the 4 MiB default. Allreduce f32, 2 ranks on 2 × H200, two-shot, alternating in one call: the bus
 * bandwidth at 256 MiB and 1 GiB rose from 4 MiB to 32 MiB and again to 64 MiB (bench/results-history.md,
 * session 7, 'Scratch size and the large allreduces'). 4 × 64 MiB a
 * rank. On the simulator (shared memory) the default.
 */
const BENCH_SCRATCH_BYTES = 64 << 20;

/**
 * smcuda's Communicator. A call on mapped scratch is queued whole before
 * allreduce returns (device-side steps), so `collectiveUnderTest` returns at
 * once and calls go back to back on the stream; its promise (completion) is
 * kept only for its error, thrown at the next call. Where calls still wait
 * for the host (staged), it returns the promise of the call being queued.
 */
async function communicatorUnderTest(ctx: CollectiveRankContext): Promise<CollectiveUnderTest> {
  const comm = await Communicator.create({
    rank: ctx.rank,
    size: ctx.ranks,
    dir: ctx.dir,
    token: ctx.token,
    driver: ctx.driver,
    device: ctx.device,
    timeoutMs: ctx.timeoutMs,
    joinTimeoutMs: ctx.timeoutMs,
    ...(ctx.driver.kind === 'native' ? { scratchBytes: BENCH_SCRATCH_BYTES } : {}),
  });
  let failure: Error | undefined;
  const alg = (a: Algorithm | undefined): Exclude<CommAlgorithm, 'local'> | undefined => (a === 'pipeline' ? 'ce-pipeline' : a);
  return {
    capturable: comm.stats().steps === 'device',
    collectiveUnderTest(c) {
      if (failure) throw failure;
      const a = alg(c.algorithm);
      comm
        .allreduce({ send: c.send, recv: c.recv, count: c.count, dtype: c.dtype, op: c.reduce, stream: c.stream, ...(a ? { algorithm: a } : {}) })
        .catch((err: Error) => {
          failure ??= err;
        });
      return comm.queued();
    },
    algorithmFor: (bytes, dtype) => comm.algorithmFor(bytes, dtype),
    close: () => comm.close(),
  };
}

/** The Communicator of issue 26. */
export const COLLECTIVES_UNDER_TEST: { factory?: (ctx: CollectiveRankContext) => Promise<CollectiveUnderTest>; missing: string } = {
  factory: communicatorUnderTest,
  missing: "smcuda's Communicator (issue 26) is not in this build",
};

/** Persistent transfers of issue 25 (persistent-pingpong.ts). */
export const GRAPH_PINGPONG_UNDER_TEST: { factory?: (ctx: PingPongContext) => Promise<PingPongUnderTest>; missing: string } = {
  factory: async (ctx) => new PersistentPingPong(ctx),
  missing: "smcuda's persistent transfers (issue 25) are not in this build",
};

/** One run of a collective: `iters` calls enqueued back to back, then the host waits for the stream (stream time, host-synchronised, as NCCL's figures). */
export interface CollectiveTiming {
  /** µs per call, one sample per run. */
  runsUs: number[];
  /** Host µs per call spent queueing the calls of each run (before the synchronise): where it nears `runsUs`, the host is the limit. */
  enqueueUs?: number[];
  algorithm?: string;
}

/**
 * Times `runs` runs of `repeat.iters` calls of allreduce f32 (sum unless `reduce`) over `bytes`
 * (in place on `buffer`), after `repeat.warmup` calls. Graph mode: the
 * calls of one run are captured once and the graph replayed per run.
 */
export async function timeCollective(
  driver: CudaDriver,
  sut: CollectiveUnderTest,
  buffer: DevicePtr,
  bytes: number,
  o: Repeat & { runs: number; reduce?: ReduceOp; algorithm?: Algorithm; graph?: boolean; timeoutMs: number },
): Promise<CollectiveTiming> {
  const stream = driver.streamCreate();
  const gpu = new GpuRuntime(driver);
  const call: CollectiveCall = {
    op: 'allreduce',
    reduce: o.reduce ?? 'sum',
    dtype: 'f32',
    count: bytes / 4,
    send: buffer,
    recv: buffer,
    stream,
    ...(o.algorithm ? { algorithm: o.algorithm } : {}),
  };
  const sync = (what: string) => withinMs(gpu.completed(stream), o.timeoutMs, what);
  let exec: bigint | undefined;
  let graph: bigint | undefined;
  try {
    // Warm-up in batches of a run's calls, each waited for, as the runs are. The first size's 20,000
    // warm-up calls queued in one batch left the runs after them slow and spread (2 × H200, allreduce
    // 8 B, medians of 5 runs of 1000 calls, two alternations, against batches of 1000).
    for (let done = 0; done < o.warmup; ) {
      const batch = Math.min(o.warmup - done, Math.max(1, o.iters));
      for (let i = 0; i < batch; i++) await sut.collectiveUnderTest(call);
      await sync('allreduce warm-up');
      done += batch;
    }
    if (o.graph) {
      driver.streamBeginCapture(stream);
      try {
        for (let i = 0; i < o.iters; i++) await sut.collectiveUnderTest(call);
      } finally {
        graph = driver.streamEndCapture(stream);
      }
      exec = driver.graphInstantiate(graph);
      driver.graphLaunch(exec, stream);
      await sync('allreduce graph warm-up');
    }
    const runsUs: number[] = [];
    const enqueueUs: number[] = [];
    for (let r = 0; r < o.runs; r++) {
      const t0 = process.hrtime.bigint();
      if (exec !== undefined) driver.graphLaunch(exec, stream);
      else for (let i = 0; i < o.iters; i++) await sut.collectiveUnderTest(call);
      enqueueUs.push(Number(process.hrtime.bigint() - t0) / 1000 / Math.max(1, o.iters));
      await sync(`allreduce run ${r + 1}`);
      runsUs.push(Number(process.hrtime.bigint() - t0) / 1000 / Math.max(1, o.iters));
    }
    const algorithm = o.algorithm ?? sut.algorithmFor?.(bytes, 'f32');
    return { runsUs, enqueueUs, ...(algorithm ? { algorithm } : {}) };
  } finally {
    if (exec !== undefined) driver.graphExecDestroy(exec);
    if (graph !== undefined) driver.graphDestroy(graph);
    gpu.close();
    driver.streamDestroy(stream);
  }
}
