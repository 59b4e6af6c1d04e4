/**
 * The inter-node engine over NCCL (internode-engine.ts): one NcclComm per
 * group of ranks that share a local rank, its unique id made by the group's
 * node 0 and handed over through the job's TCP store. NCCL's asynchronous
 * error, polled by NcclComm.watch, is the engine's error: the hierarchy
 * aborts its communicator with it, so a lost remote node fails every rank
 * as a lost local rank does.
 *
 * Before each call the group's ranks allgather a ten-word print of it
 * (kind, count, dtype, op, root, a hash of counts per rank) through NCCL and compare them on the host:
 * a mismatch fails on every rank before NCCL sees mismatched buffers. That
 * costs a small collective and a host wait per call: correctness first.
 * Only where NCCL loads (a GPU machine); CI tests the socket twin.
 */
import type { DevicePtr, StreamHandle } from '../cuda/driver.js';
import { CallMismatchError, CommunicatorAbortedError } from '../errors.js';
import { errorCode } from './error-code.js';
import { DTYPES, FLOAT_DTYPES, REDUCE_OPS, type DType } from '../kernels/dtypes.js';
import { loadNccl, type Nccl, type NcclComm } from '../nccl/nccl.js';
import type { EngineCall, EngineOp, EngineOptions, InterNodeEngine } from './internode-engine.js';

const KINDS = ['allreduce', 'broadcast', 'reduce', 'allgather', 'reduce-scatter', 'alltoall', 'barrier'] as const;
const PRINT_WORDS = 10;
const PRINT_BYTES = PRINT_WORDS * 4;

export class NcclEngine implements InterNodeEngine {
  readonly kind = 'nccl' as const;
  readonly exactAvg = false;
  readonly rank: number;
  readonly size: number;
  private broken: Error | undefined;
  private readonly listeners: Array<(err: Error) => void> = [];
  private readonly stopWatch: () => void;
  private readonly prints: DevicePtr;
  private queue: Promise<unknown> = Promise.resolve();
  private seq = 0;

  private constructor(
    private readonly o: EngineOptions,
    private readonly comm: NcclComm,
  ) {
    this.rank = o.rank;
    this.size = o.size;
    this.prints = o.driver.memAlloc(PRINT_BYTES * (o.size + 1));
    this.stopWatch = comm.watch((err) => this.fail(this.asAbort(err)));
  }

  /** Loads NCCL (NcclUnavailableError, with what to install, where it is missing) and joins the group's communicator. */
  static async open(o: EngineOptions): Promise<NcclEngine> {
    const nccl: Nccl = loadNccl();
    const key = `internode/${o.group}/nccl-id`;
    if (o.rank === 0) await o.store.set(key, nccl.uniqueId());
    const id = await o.store.get(key, { timeoutMs: o.setupMs });
    const comm = await nccl.initRank({ size: o.size, rank: o.rank, id, timeoutMs: o.setupMs });
    return new NcclEngine(o, comm);
  }

  private fail(err: Error): void {
    if (this.broken) return;
    this.broken = err;
    for (const f of this.listeners) f(err);
  }

  onError(listener: (err: Error) => void): void {
    if (this.broken) listener(this.broken);
    else this.listeners.push(listener);
  }

  supports(op: EngineOp, dtype: DType): boolean {
    if (op === 'band' || op === 'bor' || op === 'bxor') return false;
    // NCCL's avg divides by its own ranks, and truncating twice is not an integer average.
    if (op === 'avg') return FLOAT_DTYPES.includes(dtype);
    return !dtype.startsWith('f8') || op !== 'prod';
  }

  abort(reason: Error): void {
    this.fail(reason);
    this.stopWatch();
    this.comm.abort();
  }

  async close(): Promise<void> {
    await this.queue.catch(() => {});
    this.stopWatch();
    if (this.broken) this.comm.abort();
    else this.comm.destroy();
    this.o.driver.memFree(this.prints);
  }

  /** Checks the call against every rank's (an allgather of prints), then queues it and waits for the stream to pass it. */
  private run(
    kind: (typeof KINDS)[number],
    a: { count: number; dtype: DType; op?: EngineOp; root?: number; check?: number; timeoutMs?: number },
    stream: StreamHandle,
    queue: (r: number) => number,
  ): Promise<void> {
    const limitMs = a.timeoutMs ?? this.o.timeoutMs;
    const go = async () => {
      if (this.broken) throw this.broken;
      const seq = this.seq++;
      const mine = new Uint32Array(PRINT_WORDS);
      mine.set([
        seq >>> 0,
        KINDS.indexOf(kind),
        a.count >>> 0,
        Math.floor(a.count / 2 ** 32),
        DTYPES.indexOf(a.dtype),
        a.op ? REDUCE_OPS.indexOf(a.op) + 1 : 0,
        a.root ?? 0xffffffff,
        0x736d6375,
        (a.check ?? 0) >>> 0,
        Math.floor((a.check ?? 0) / 2 ** 32),
      ]);
      const at = this.prints + BigInt(this.size * PRINT_BYTES);
      this.o.driver.memcpyHtoD(at, mine);
      await this.comm.whenReady('ncclAllGather', this.comm.allGather({ send: at, recv: this.prints, count: PRINT_BYTES, dtype: 'u8', stream }), limitMs);
      await this.o.reached(stream);
      const all = new Uint32Array(PRINT_WORDS * this.size);
      this.o.driver.memcpyDtoH(all, this.prints);
      for (let k = 0; k < this.size; k++) {
        const theirs = all.subarray(k * PRINT_WORDS, (k + 1) * PRINT_WORDS);
        const names = ['seq', 'collective', 'count', 'count', 'dtype', 'op', 'root', 'protocol', 'counts', 'counts'];
        const fields = [...new Set(names.filter((_, i) => theirs[i] !== mine[i]))];
        if (fields.length > 0) {
          const me = this.o.globalRank(this.rank);
          const other = this.o.globalRank(k);
          throw new CallMismatchError(
            `call ${seq} between nodes differs in ${fields.join(', ')}: rank ${me} (node ${this.rank}) and rank ${other} (node ${k}) made different calls. Every rank must make the same calls with the same counts, dtypes, ops and roots`,
            me,
            seq,
            [me, other],
            fields,
          );
        }
      }
      await this.comm.whenReady(`NCCL ${kind}`, queue(0), limitMs);
      await this.o.reached(stream);
      if (this.broken) throw this.broken;
    };
    const p = this.queue.then(go, go);
    this.queue = p.catch(() => {});
    return p.catch((err: unknown) => {
      this.abort(this.asAbort(err));
      throw this.broken;
    });
  }

  /** A failed call as the engine's error: NCCL's (an NcclError: a remote rank lost, a network error) with its code as the cause. */
  private asAbort(err: unknown): CommunicatorAbortedError {
    if (err instanceof CommunicatorAbortedError) return err;
    const e = err instanceof Error ? err : new Error(String(err));
    const code = errorCode(e);
    return new CommunicatorAbortedError(
      `NCCL between nodes failed (${code}): ${e.message}. A rank of another node was lost or its network failed`,
      this.o.globalRank(this.o.rank),
      code,
      { cause: e },
    );
  }

  allreduce(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp }): Promise<void> {
    return this.run('allreduce', a, a.stream, () => this.comm.allReduce({ ...a }));
  }

  broadcast(a: EngineCall & { buf: DevicePtr; root: number }): Promise<void> {
    return this.run('broadcast', a, a.stream, () =>
      this.comm.broadcast({ send: a.buf, recv: a.buf, count: a.count, dtype: a.dtype, root: a.root, stream: a.stream }),
    );
  }

  reduce(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; root: number }): Promise<void> {
    return this.run('reduce', a, a.stream, () => this.comm.reduce({ ...a }));
  }

  allgather(a: EngineCall & { send: DevicePtr; recv: DevicePtr }): Promise<void> {
    return this.run('allgather', a, a.stream, () => this.comm.allGather({ ...a }));
  }

  reduceScatter(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp }): Promise<void> {
    return this.run('reduce-scatter', a, a.stream, () => this.comm.reduceScatter({ ...a }));
  }

  alltoall(a: EngineCall & { send: DevicePtr; recv: DevicePtr }): Promise<void> {
    return this.run('alltoall', a, a.stream, () => this.comm.allToAll({ ...a }));
  }

  barrier(a: { timeoutMs?: number } = {}): Promise<void> {
    return this.run('barrier', { count: 0, dtype: 'u8', ...a }, 0n, () => 0);
  }
}
