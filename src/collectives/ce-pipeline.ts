/**
 * The copy-engine pipeline: an allreduce of large buffers in which every
 * byte that crosses between GPUs is moved by the copy engines
 * (cuMemcpyAsync) and the SMs reduce local memory only, chunk after chunk,
 * the copies of one chunk running beside the reduction of another. The
 * other algorithms have the SMs load peers' memory through the mappings,
 * which reached about 262 GB/s between two H200s where copies move 393
 * (docs/benchmarks.md): the large calls are bound by that.
 *
 * A call goes in chunks of at most size × partBytes bytes (scratch.ts),
 * chunk c in slot x = c % PIPELINE_SLOTS, each cut in `size` parts (part k
 * is rank k's to reduce: algorithms.ts's `part`). On rank r, for chunk c:
 *
 *   push    for every peer k: copy part k of r's input into k's landing
 *           part [x][r] (region C, through the mapping); signal k `landed`.
 *   reduce  once every peer's part r landed here: part r of the output =
 *           op over the ranks, in rank order, of r's own input part and the
 *           landing parts [x][k] (one kernel, reduce.cu's reduce_part),
 *           written into the caller's output and into r's B slot x; signal
 *           every peer `ready` and `landingFree`.
 *   pull    once peer k is ready: copy k's B slot x into part k of r's
 *           output; signal k `partialFree`.
 *
 * A signal is a flag in the receiver's flag block (device-sync.ts), written
 * 1 by a stream memory operation queued after the work it announces, and
 * waited for (>= 1) and reset to 0 by the receiver's stream before the work
 * that needs it:
 *
 *   landed[x][k]       k's part r of the chunk is in r's landing part [x][k]
 *   landingFree[x][k]  k reduced what r pushed into k's slot x: r may push again
 *   ready[x][k]        k's B slot x holds k's reduced part: r may pull it
 *   partialFree[x][k]  k pulled r's B slot x: r may overwrite it
 *
 * landingFree and partialFree start at 1 (scratch.ts): the first use of a
 * slot waits for nothing, and a call leaves them at 1 again once the peers'
 * streams ran it. So every call starts from the same state, eager or a
 * graph replay (whose values are baked in), whatever ran before it. No flag
 * is written twice before its reset: its next write needs, through the
 * other signals, the wait that resets it (r pushes chunk c+S into k's slot
 * only after landingFree from k's reduce of c, which k queued after
 * resetting landed for c; the others likewise).
 *
 * The hard case is in place (recv = send): pull writes r's output part k,
 * which push read as r's input part k. Pull waits for ready from k, which k
 * signals after its reduce, which waited for landed, which r's push stream
 * wrote after its copy: the read is done before the write.
 *
 * Streams. A call of one chunk queues all three steps on the caller's
 * stream in turn (nothing to overlap; a fork and join would cost seven
 * driver calls). A longer call forks two streams of its own (push, pull)
 * from the caller's with an event, keeps the reductions on the caller's, and
 * joins both back at the end. Under capture it joins and forks again every
 * PIPELINE_SLOTS chunks: then no step of a round waits for a later chunk's
 * step on another stream, so the graph completes in any order its branches
 * may run in (the simulated driver replays them one after the other).
 *
 * Needs device steps (stream memory operations on mapped flags): without
 * them the communicator runs two-shot instead.
 */
import type { CudaDriver, DevicePtr, EventHandle, StreamHandle, StreamMemOp } from '../cuda/driver.js';
import { MAX_BATCH_MEM_OPS } from '../cuda/validate-gpu-driven.js';
import { debug } from '../debug.js';
import { ArgumentRangeError } from '../errors.js';
import { DTYPE_BYTES, type DType, type ReduceOp } from '../kernels/dtypes.js';
import { part } from './algorithms.js';
import { PIPELINE_SLOTS, pipelineSlotOffset, type PipelineSignal } from './device-sync.js';
import type { ReduceKernels } from './reduce-kernels.js';
import type { Scratch } from './scratch.js';

/** A stream of the call, and the signals it has yet to write (sent with its next batch: one driver call, not two). */
interface Lane {
  stream: StreamHandle;
  pending: StreamMemOp[];
}

export class CePipeline {
  private readonly rank: number;
  private readonly size: number;
  private readonly others: number[];
  /** The push and pull streams and the fork/join events, made on first use of a call of several chunks. */
  private own: { push: StreamHandle; pull: StreamHandle; fork: EventHandle; pushed: EventHandle; pulled: EventHandle } | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly scratch: Scratch,
    private readonly kernels: ReduceKernels,
  ) {
    this.rank = scratch.rank;
    this.size = scratch.size;
    this.others = [...Array(this.size).keys()].filter((k) => k !== this.rank);
  }

  /** Elements of one chunk at most, for elements of `es` bytes. */
  chunkElements(es: number): number {
    return this.size * Math.floor(this.scratch.partBytes / es);
  }

  /** Queues a whole allreduce on `stream` (its steps on the device: nothing to await). */
  allreduce(stream: StreamHandle, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, op: ReduceOp, capturing: boolean): void {
    const es = DTYPE_BYTES[dtype];
    const per = this.chunkElements(es);
    if (per < this.size) throw new ArgumentRangeError('the scratch region is too small for one element per rank: raise scratchBytes');
    const chunks = Math.ceil(count / per);
    if (chunks === 0) return;
    const reduce: Lane = { stream, pending: [] };
    let push = reduce;
    let pull = reduce;
    const round = chunks === 1 ? 1 : capturing ? PIPELINE_SLOTS : chunks;
    for (let c = 0; c < chunks; c++) {
      if (chunks > 1 && c % round === 0) [push, pull] = this.fork(stream);
      const x = c % PIPELINE_SLOTS;
      const a = c * per;
      const len = Math.min(per, count - a);
      this.push(push, x, send, a, len, es);
      this.reduce(reduce, x, send, recv, a, len, dtype, op);
      this.pull(pull, x, recv, a, len, es);
      if (chunks > 1 && ((c + 1) % round === 0 || c === chunks - 1)) this.join(reduce, push, pull);
    }
    this.flush(reduce, []);
  }

  private push(lane: Lane, x: number, send: DevicePtr, a: number, len: number, es: number): void {
    this.flush(lane, this.waits('landingFree', x));
    const s = this.scratch;
    for (const k of this.others) {
      const [lo, hi] = part(len, this.size, k);
      if (hi > lo) this.driver.memcpyAsync(s.partLanding(k, x, this.rank)!, send + BigInt((a + lo) * es), (hi - lo) * es, lane.stream);
    }
    this.signal(lane, 'landed', x);
  }

  private reduce(lane: Lane, x: number, send: DevicePtr, recv: DevicePtr, a: number, len: number, dtype: DType, op: ReduceOp): void {
    this.flush(lane, this.waits('landed', x, 'partialFree'));
    const s = this.scratch;
    const es = DTYPE_BYTES[dtype];
    const [lo, hi] = part(len, this.size, this.rank);
    const at = BigInt((a + lo) * es);
    this.kernels.reducePart(op, dtype, recv + at, s.partialSlot(this.rank, x)!, send + at, s.partTable(x), this.rank, this.size, hi - lo, lane.stream);
    this.signal(lane, 'landingFree', x);
    this.signal(lane, 'ready', x);
  }

  private pull(lane: Lane, x: number, recv: DevicePtr, a: number, len: number, es: number): void {
    this.flush(lane, this.waits('ready', x));
    const s = this.scratch;
    for (const k of this.others) {
      const [lo, hi] = part(len, this.size, k);
      if (hi > lo) this.driver.memcpyAsync(recv + BigInt((a + lo) * es), s.partialSlot(k, x)!, (hi - lo) * es, lane.stream);
    }
    this.signal(lane, 'partialFree', x);
  }

  /** Waits (then resets) for `signal` of slot x from every peer, in this rank's own block; a second signal's after. */
  private waits(signal: PipelineSignal, x: number, also?: PipelineSignal): StreamMemOp[] {
    const own = this.scratch.flagsOf(this.rank)!;
    const slots: DevicePtr[] = [];
    for (const sig of also ? [signal, also] : [signal]) for (const k of this.others) slots.push(own + BigInt(pipelineSlotOffset(this.size, sig, x, k)));
    return [...slots.map((addr): StreamMemOp => ({ op: 'wait64', addr, value: 1n, condition: 'geq' })), ...slots.map((addr): StreamMemOp => ({ op: 'write64', addr, value: 0n }))];
  }

  /** Adds `signal` of slot x, from this rank, into every peer's block to what `lane` writes next. */
  private signal(lane: Lane, signal: PipelineSignal, x: number): void {
    const at = pipelineSlotOffset(this.size, signal, x, this.rank);
    for (const k of this.others) lane.pending.push({ op: 'write64', addr: this.scratch.flagsOf(k)! + BigInt(at), value: 1n });
  }

  /** Queues the lane's pending signals, then `ops`, in as few batches as the driver takes. */
  private flush(lane: Lane, ops: StreamMemOp[]): void {
    const all = lane.pending.length === 0 ? ops : [...lane.pending, ...ops];
    lane.pending = [];
    for (let i = 0; i < all.length; i += MAX_BATCH_MEM_OPS) this.driver.streamBatchMemOp(lane.stream, all.length <= MAX_BATCH_MEM_OPS ? all : all.slice(i, i + MAX_BATCH_MEM_OPS));
  }

  /** The push and pull streams, after the caller's stream's work so far. */
  private fork(stream: StreamHandle): [Lane, Lane] {
    const o = (this.own ??= this.make());
    this.driver.eventRecord(o.fork, stream);
    this.driver.streamWaitEvent(o.push, o.fork);
    this.driver.streamWaitEvent(o.pull, o.fork);
    return [
      { stream: o.push, pending: [] },
      { stream: o.pull, pending: [] },
    ];
  }

  /**
   * The caller's stream waits for everything queued on the push and pull
   * streams, their signals too. Its own signals go first: the peers' pull
   * streams wait for them, and their callers' streams for those.
   */
  private join(reduce: Lane, push: Lane, pull: Lane): void {
    const o = this.own!;
    const stream = reduce.stream;
    this.flush(reduce, []);
    this.flush(push, []);
    this.flush(pull, []);
    this.driver.eventRecord(o.pushed, push.stream);
    this.driver.eventRecord(o.pulled, pull.stream);
    this.driver.streamWaitEvent(stream, o.pushed);
    this.driver.streamWaitEvent(stream, o.pulled);
  }

  private make(): NonNullable<CePipeline['own']> {
    const d = this.driver;
    const push = d.streamCreate();
    const made: { push: StreamHandle; pull?: StreamHandle; events: EventHandle[] } = { push, events: [] };
    try {
      made.pull = d.streamCreate();
      for (let i = 0; i < 3; i++) made.events.push(d.eventCreate({ disableTiming: true }));
    } catch (err) {
      for (const e of made.events.reverse()) d.eventDestroy(e);
      if (made.pull !== undefined) d.streamDestroy(made.pull);
      d.streamDestroy(push);
      throw err;
    }
    const [fork, pushed, pulled] = made.events as [EventHandle, EventHandle, EventHandle];
    return { push, pull: made.pull, fork, pushed, pulled };
  }

  /** Frees the streams and events (once the calls that used them are done: the communicator's release). */
  close(): void {
    const o = this.own;
    if (!o) return;
    this.own = undefined;
    try {
      for (const e of [o.pulled, o.pushed, o.fork]) this.driver.eventDestroy(e);
      this.driver.streamDestroy(o.pull);
      this.driver.streamDestroy(o.push);
    } catch (err) {
      debug('communicator rank %d: closing the pipeline streams: %s', this.rank, (err as Error).message);
    }
  }
}
