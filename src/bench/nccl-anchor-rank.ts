/**
 * One rank of the NCCL C-API anchor of the collectives suite (issue 45,
 * item 1; nccl-anchor.ts drives the ranks): NCCL through smcuda's own
 * binding (src/nccl/), no PyTorch in the way. A bench worker of the
 * anchor's own group holds one blocking communicator on its device and,
 * per size and kind of buffer, times allreduce in place three ways:
 *
 *  - isolated: one call, then the host waits for the stream (launch to
 *    completion seen on the host), per call;
 *  - back to back: a run's calls queued in a row, one synchronise, elapsed / calls;
 *  - in a CUDA graph: `graphOps` calls captured once (as nccl-tests -G),
 *    the graph launched `graphLaunches` times a run, elapsed / operations.
 *
 * Buffers are plain (cuMemAlloc, as any caller's) or a window: ncclMemAlloc
 * memory registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC),
 * which lets NCCL 2.27 and later pick its symmetric kernels.
 */
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import { DTYPE_BYTES } from '../kernels/dtypes.js';
import { loadNccl, NCCL_WIN_COLL_SYMMETRIC, type Nccl, type NcclComm } from '../nccl/nccl.js';
import type { Repeat } from './protocol.js';
import { median } from './stats.js';

export type AnchorBuffers = 'plain' | 'window';
export type AnchorDtype = 'f32' | 'bf16';

export interface AnchorTimeRequest extends Repeat {
  bytes: number;
  dtype: AnchorDtype;
  buffers: AnchorBuffers;
  runs: number;
  /** Calls captured in the graph. */
  graphOps: number;
  /** Launches of the graph per run. */
  graphLaunches: number;
  /** One untimed call first, its sum checked on every element. */
  verify: boolean;
}

export interface AnchorRankTiming {
  /** µs per call, one per run: the median of the run's isolated calls. */
  isolatedUs: number[];
  /** µs per call, one per run: the run's calls back to back, elapsed / calls. */
  backToBackUs: number[];
  /** µs per operation, one per run: the run's launches of the graph, elapsed / operations. */
  graphUs: number[];
  /** Why the graph could not be captured or run here (graphUs is then empty). */
  graphError?: string;
  /** null: not checked. */
  verified: boolean | null;
}

/** What rank 0 says of the NCCL it loaded, with the id every rank joins with. */
export interface AnchorHello {
  id: Uint8Array;
  version: string;
  path: string;
  /** Why the window configuration cannot run with this NCCL and addon; undefined: it can. */
  noWindow?: string;
}

/** The µs since `t0` (process.hrtime.bigint()). */
const usSince = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1000;

export class NcclAnchorRank {
  #nccl: Nccl | undefined;
  #comm: NcclComm | undefined;
  #stream: StreamHandle | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly rank: number,
  ) {
    // NVLink multicast (NVLS) off whatever the caller's environment says, as for the PyTorch baseline:
    // set before NCCL's first call, which is when it reads its environment.
    process.env.NCCL_NVLS_ENABLE = '0';
  }

  /** Rank 0: a fresh unique id, NCCL's version and whether windows can be measured. */
  hello(): AnchorHello {
    const nccl = this.#load();
    const noWindow = !nccl.capabilities.windowRegister
      ? `not available in NCCL ${nccl.version.major}.${nccl.version.minor} (ncclCommWindowRegister is 2.27's)`
      : !nccl.capabilities.memAlloc
        ? 'not available: this smcuda addon does not bind ncclMemAlloc (rebuild it: npm run build:native)'
        : undefined;
    return { id: nccl.uniqueId(), version: nccl.version.text, path: nccl.path, ...(noWindow ? { noWindow } : {}) };
  }

  /** Joins the communicator: blocking, as nccl-tests makes them (a non-blocking one may answer a call "in progress"). */
  async open(id: Uint8Array, ranks: number): Promise<null> {
    if (this.#comm) throw new Error(`the NCCL anchor is open already on rank ${this.rank}`);
    this.#comm = await this.#load().initRank({ size: ranks, rank: this.rank, id, config: { blocking: true } });
    this.#stream = this.driver.streamCreate();
    return null;
  }

  time(req: AnchorTimeRequest): AnchorRankTiming {
    const comm = this.#need();
    const buffer = req.buffers === 'window' ? this.#window(comm, req.bytes) : this.#plain(req.bytes);
    try {
      const stream = this.#stream!;
      const allreduce = () =>
        comm.allReduce({ send: buffer.ptr, recv: buffer.ptr, count: req.bytes / DTYPE_BYTES[req.dtype], dtype: req.dtype, op: 'sum', stream });
      const sync = () => this.driver.streamSynchronize(stream);
      const verified = req.verify ? this.#verify(buffer.ptr, req, comm.size, allreduce, sync) : null;
      for (let done = 0; done < req.warmup; done += Math.max(1, req.iters)) {
        for (let i = 0; i < Math.min(req.iters, req.warmup - done); i++) allreduce();
        sync();
      }
      const isolatedUs = isolated(allreduce, sync, req);
      const backToBackUs = backToBack(allreduce, sync, req);
      try {
        return { isolatedUs, backToBackUs, graphUs: inGraph(this.driver, stream, allreduce, sync, req), verified };
      } catch (err) {
        return { isolatedUs, backToBackUs, graphUs: [], graphError: (err as Error).message, verified };
      }
    } finally {
      buffer.release();
    }
  }

  close(): null {
    const comm = this.#comm;
    this.#comm = undefined;
    if (this.#stream !== undefined) this.driver.streamDestroy(this.#stream);
    this.#stream = undefined;
    comm?.destroy();
    return null;
  }

  #load(): Nccl {
    this.#nccl ??= loadNccl();
    return this.#nccl;
  }

  #need(): NcclComm {
    if (!this.#comm) throw new Error(`nccl-anchor-open first (rank ${this.rank})`);
    return this.#comm;
  }

  #plain(bytes: number): { ptr: DevicePtr; release(): void } {
    const ptr = this.driver.memAlloc(bytes);
    return { ptr, release: () => this.driver.memFree(ptr) };
  }

  /** ncclMemAlloc memory registered as a symmetric window (collective: every rank registers the same size at once). */
  #window(comm: NcclComm, bytes: number): { ptr: DevicePtr; release(): void } {
    const nccl = this.#load();
    const ptr = nccl.memAlloc(bytes);
    let win: bigint;
    try {
      win = comm.windowRegister(ptr, bytes, NCCL_WIN_COLL_SYMMETRIC);
    } catch (err) {
      nccl.memFree(ptr);
      throw err;
    }
    return {
      ptr,
      release: () => {
        try {
          comm.windowDeregister(win);
        } finally {
          nccl.memFree(ptr);
        }
      },
    };
  }

  /** Every rank holds ones; after one sum every element is `ranks` (exact in f32 and bf16 up to 256 ranks). */
  #verify(ptr: DevicePtr, req: AnchorTimeRequest, ranks: number, allreduce: () => void, sync: () => void): boolean {
    const count = req.bytes / DTYPE_BYTES[req.dtype];
    this.driver.memcpyHtoD(ptr, filled(req.dtype, count, 1));
    allreduce();
    sync();
    const back = new Uint8Array(req.bytes);
    this.driver.memcpyDtoH(back, ptr);
    const want = filled(req.dtype, count, ranks);
    return back.every((b, i) => b === want[i]);
  }
}

/** `count` elements of `value` in `dtype`, as bytes (bf16: the high half of the f32). */
export function filled(dtype: AnchorDtype, count: number, value: number): Uint8Array {
  const f32 = new Float32Array(count).fill(value);
  if (dtype === 'f32') return new Uint8Array(f32.buffer);
  const high = new Uint16Array(count);
  const words = new Uint32Array(f32.buffer);
  for (let i = 0; i < count; i++) high[i] = words[i]! >>> 16;
  return new Uint8Array(high.buffer);
}

/** Per run, the median of `iters` calls each waited for on the host before the next. */
function isolated(allreduce: () => void, sync: () => void, o: Repeat & { runs: number }): number[] {
  const runs: number[] = [];
  for (let r = 0; r < o.runs; r++) {
    const calls: number[] = [];
    for (let i = 0; i < o.iters; i++) {
      const t0 = process.hrtime.bigint();
      allreduce();
      sync();
      calls.push(usSince(t0));
    }
    runs.push(median(calls));
  }
  return runs;
}

/** Per run, `iters` calls queued back to back and one synchronise: elapsed / iters (as the suite times smcuda). */
function backToBack(allreduce: () => void, sync: () => void, o: Repeat & { runs: number }): number[] {
  const runs: number[] = [];
  for (let r = 0; r < o.runs; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < o.iters; i++) allreduce();
    sync();
    runs.push(usSince(t0) / Math.max(1, o.iters));
  }
  return runs;
}

/**
 * `graphOps` calls captured once; per run `graphLaunches` launches and one synchronise: elapsed / operations.
 * Global capture mode, as nccl-tests and torch.cuda.graph capture NCCL.
 */
function inGraph(d: CudaDriver, stream: StreamHandle, allreduce: () => void, sync: () => void, o: AnchorTimeRequest): number[] {
  d.streamBeginCapture(stream, 'global');
  let graph: bigint | undefined;
  try {
    for (let i = 0; i < o.graphOps; i++) allreduce();
  } finally {
    graph = d.streamEndCapture(stream);
  }
  const exec = d.graphInstantiate(graph);
  try {
    d.graphLaunch(exec, stream); // NCCL's first launch of a graph sets it up: untimed
    sync();
    const runs: number[] = [];
    for (let r = 0; r < o.runs; r++) {
      const t0 = process.hrtime.bigint();
      for (let l = 0; l < o.graphLaunches; l++) d.graphLaunch(exec, stream);
      sync();
      runs.push(usSince(t0) / (o.graphOps * o.graphLaunches));
    }
    return runs;
  } finally {
    d.graphExecDestroy(exec);
    d.graphDestroy(graph);
  }
}
