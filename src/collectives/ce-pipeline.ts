/**
 * The copy-engine pipeline: an allreduce of large buffers in which every
 * byte that crosses between GPUs is moved by the copy engines
 * (cuMemcpyAsync) and the SMs reduce local memory only, chunk after chunk,
 * the copies of one chunk running beside the reduction of another. The
 * other algorithms have the SMs load peers' memory through the mappings,
 * which carry less than the copy engines between two GPUs (bench/results-history.md,
 * session 5, 'Copy-engine copies between the two GPUs').
 *
 * Every copy between GPUs is a push (a write into the peer's scratch):
 * measured on 2 × H200 with both GPUs copying at once (32 MiB copies), one
 * or two push streams and one pull stream moved about the same, and a push
 * beside a pull markedly less (same session). The peers' scratch is mapped here; their callers' buffers
 * are not, so a rank copies its own landed results out itself (locally,
 * several times faster than between GPUs).
 *
 * A call goes in chunks of at most size × partBytes bytes (scratch.ts),
 * chunk c in slot x = c % PIPELINE_SLOTS, each cut in `size` parts (part k
 * is rank k's to reduce: algorithms.ts's `part`). On rank r, for chunk c:
 *
 *   push    (push stream) for every peer k: copy part k of r's input into
 *           k's landing part [x][r] (region C); signal k `landed`.
 *   reduce  (the caller's stream) once every peer's part r landed here:
 *           part r of the output = op over the ranks, in rank order, of r's
 *           own input part and the landing parts [x][k] (one kernel,
 *           reduce.cu's reduce_part); signal every peer `landingFree`.
 *   share   (share stream, after the reduction: an event) copy that output
 *           part into every peer's reduced landing part [x][r] (region B);
 *           signal k `reduced`.
 *   out     (out stream) once peer k's reduced part landed here: copy it
 *           into part k of r's output; signal k `reducedFree`.
 *
 * A signal is a flag in the receiver's flag block (device-sync.ts), written
 * 1 by a stream memory operation queued after the work it announces, and
 * waited for (>= 1) and reset to 0 by the receiver's stream before the work
 * that needs it:
 *
 *   landed[x][k]       k's input part r is in r's landing part [x][k]
 *   landingFree[x][k]  k reduced what r pushed into k's slot x: r may push again
 *   reduced[x][k]      k's reduced part is in r's reduced landing part [x][k]
 *   reducedFree[x][k]  k copied out what r pushed there: r may push again
 *
 * landingFree and reducedFree start at 1 (scratch.ts): the first use of a
 * slot waits for nothing, and a call leaves them at 1 again once the peers'
 * streams ran it. So every call starts from the same state, eager or a
 * graph replay (whose values are baked in), whatever ran before it. No flag
 * is written twice before its reset: its next write needs, through the
 * other signals, the wait that resets it (r pushes chunk c+S into k's slot
 * only after landingFree from k's reduce of c, which k queued after
 * resetting landed for c; the others likewise).
 *
 * The hard case is in place (recv = send): r's out stream writes output
 * part k, which r's push stream read as input part k. The out stream waits
 * for `reduced` from k, which k signals after its reduce, which waited for
 * `landed`, which r's push stream wrote after its copy: the read is done
 * before the write. The reduction writes part r, which no copy reads as
 * input, and each element after reading it.
 *
 * Streams. Each step on a stream costs the GPU several microseconds
 * before the next can start, whatever its size (2 × H200, one stream, each
 * copy, kernel or cross-GPU signal): one chunk's steps in a row (two 8 MiB
 * pushes, two local copies, two signals) took about twice what its bytes
 * need (bench/results-history.md, session 5, 'One chunk by hand'). So a call of several chunks forks three streams
 * of its own from the caller's (an event) — push, share, out — keeps the
 * reductions on the caller's, and joins them back at the end, and the
 * steps of different chunks overlap. A call of one chunk queues every step
 * on the caller's stream in turn (nothing to overlap; a fork and join cost
 * ten driver calls). Under capture, a call joins and forks again every
 * PIPELINE_SLOTS chunks: then no step of a round waits for a later chunk's
 * step on another stream, so the graph completes in any order its branches
 * may run in (the simulated driver replays them one after the other).
 *
 * Needs device steps (stream memory operations on mapped flags): without
 * them the communicator runs two-shot instead.
 */
import type { CudaDriver, DevicePtr, EventHandle, StreamHandle, StreamMemOp } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { ArgumentRangeError } from '../errors.js';
import { DTYPE_BYTES, type DType, type ReduceArg } from '../kernels/dtypes.js';
import { part } from './algorithms.js';
import { PIPELINE_SLOTS, pipelineSlotOffset, queueMemOps, type PipelineSignal } from './device-sync.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';
import type { ReduceKernels } from './reduce-kernels.js';
import type { Scratch } from './scratch.js';

/** The streams of one call's steps (all the caller's for a call of one chunk). */
interface Lanes {
  push: StreamHandle;
  reduce: StreamHandle;
  share: StreamHandle;
  out: StreamHandle;
}

export class CePipeline {
  private readonly rank: number;
  private readonly size: number;
  private readonly others: number[];
  /** The streams and events of calls of several chunks, made on first use of one. */
  private own: { push: StreamHandle; share: StreamHandle; out: StreamHandle; fork: EventHandle; reduced: EventHandle; joins: EventHandle[] } | undefined;

  private readonly driver: CudaDriver;

  constructor(
    /** The transport's GPU runtime: the call's own streams' ordering events are its. */
    private readonly gpu: GpuRuntime,
    private readonly scratch: Scratch,
    private readonly kernels: ReduceKernels,
  ) {
    this.driver = gpu.driver;
    this.rank = scratch.rank;
    this.size = scratch.size;
    this.others = [...Array(this.size).keys()].filter((k) => k !== this.rank);
  }

  /** Elements of one chunk at most, for elements of `es` bytes. */
  chunkElements(es: number): number {
    return this.size * Math.floor(this.scratch.partBytes / es);
  }

  /** Queues a whole allreduce on `stream` (its steps on the device: nothing to await). */
  allreduce(stream: StreamHandle, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, op: ReduceArg, capturing: boolean): void {
    const es = DTYPE_BYTES[dtype];
    const per = this.chunkElements(es);
    if (per < this.size) throw new ArgumentRangeError('the scratch region is too small for one element per rank: raise scratchBytes');
    const chunks = Math.ceil(count / per);
    if (chunks === 0) return;
    let lanes: Lanes = { push: stream, reduce: stream, share: stream, out: stream };
    const round = chunks === 1 ? 1 : capturing ? PIPELINE_SLOTS : chunks;
    for (let c = 0; c < chunks; c++) {
      if (chunks > 1 && c % round === 0) lanes = this.fork(stream);
      const x = c % PIPELINE_SLOTS;
      const a = c * per;
      const len = Math.min(per, count - a);
      this.push(lanes.push, x, send, a, len, es);
      this.reduce(lanes, x, send, recv, a, len, dtype, op);
      this.out(lanes.out, x, recv, a, len, es);
      if (chunks > 1 && ((c + 1) % round === 0 || c === chunks - 1)) this.join(lanes);
    }
  }

  private push(stream: StreamHandle, x: number, send: DevicePtr, a: number, len: number, es: number): void {
    queueMemOps(this.driver, stream, this.waits('landingFree', x));
    const s = this.scratch;
    for (const k of this.others) {
      const [lo, hi] = part(len, this.size, k);
      if (hi > lo) this.driver.memcpyAsync(s.partLanding(k, x, this.rank)!, send + BigInt((a + lo) * es), (hi - lo) * es, stream);
    }
    this.signal(stream, 'landed', x);
  }

  /** The reduction on the caller's stream; the copies of its result to the peers on the share stream, after it. */
  private reduce(lanes: Lanes, x: number, send: DevicePtr, recv: DevicePtr, a: number, len: number, dtype: DType, op: ReduceArg): void {
    const s = this.scratch;
    const es = DTYPE_BYTES[dtype];
    const [lo, hi] = part(len, this.size, this.rank);
    const at = BigInt((a + lo) * es);
    const mine = recv + at;
    queueMemOps(this.driver, lanes.reduce, this.waits('landed', x));
    this.kernels.reducePart(op, dtype, mine, send + at, s.partTable(x), this.rank, this.size, hi - lo, lanes.reduce);
    this.signal(lanes.reduce, 'landingFree', x);
    if (lanes.share !== lanes.reduce) {
      this.gpu.order(this.own!.reduced, lanes.reduce, [lanes.share]);
    }
    queueMemOps(this.driver, lanes.share, this.waits('reducedFree', x));
    if (hi > lo) for (const k of this.others) this.driver.memcpyAsync(s.reducedLanding(k, x, this.rank)!, mine, (hi - lo) * es, lanes.share);
    this.signal(lanes.share, 'reduced', x);
  }

  private out(stream: StreamHandle, x: number, recv: DevicePtr, a: number, len: number, es: number): void {
    queueMemOps(this.driver, stream, this.waits('reduced', x));
    const s = this.scratch;
    for (const k of this.others) {
      const [lo, hi] = part(len, this.size, k);
      if (hi > lo) this.driver.memcpyAsync(recv + BigInt((a + lo) * es), s.reducedLanding(this.rank, x, k)!, (hi - lo) * es, stream);
    }
    this.signal(stream, 'reducedFree', x);
  }

  /** Waits (then resets) for `signal` of slot x from every peer, in this rank's own block. */
  private waits(signal: PipelineSignal, x: number): StreamMemOp[] {
    const own = this.scratch.flagsOf(this.rank)!;
    const slots = this.others.map((k) => own + BigInt(pipelineSlotOffset(this.size, signal, x, k)));
    return [
      ...slots.map((addr): StreamMemOp => ({ op: 'wait64', addr, value: 1n, condition: 'geq' })),
      ...slots.map((addr): StreamMemOp => ({ op: 'write64', addr, value: 0n })),
    ];
  }

  /**
   * Writes `signal` of slot x, from this rank, into every peer's block, on
   * `stream` after its work so far. A batch of its own, not held for the
   * stream's next wait: then every signal is queued before any later wait of
   * this call, and the order the call was queued in is an order it can run
   * in, as a graph's branches run in the simulator. (Held back, calls of
   * 8 MiB chunks hung on 2 × H200; the cause was not established.)
   */
  private signal(stream: StreamHandle, signal: PipelineSignal, x: number): void {
    const at = pipelineSlotOffset(this.size, signal, x, this.rank);
    queueMemOps(
      this.driver,
      stream,
      this.others.map((k): StreamMemOp => ({ op: 'write64', addr: this.scratch.flagsOf(k)! + BigInt(at), value: 1n })),
    );
  }

  /** The call's own streams, after the caller's stream's work so far. */
  private fork(stream: StreamHandle): Lanes {
    const o = (this.own ??= this.make());
    this.gpu.order(o.fork, stream, [o.push, o.share, o.out]);
    return { push: o.push, reduce: stream, share: o.share, out: o.out };
  }

  /** The caller's stream waits for everything queued on the call's own streams. */
  private join(lanes: Lanes): void {
    const o = this.own!;
    [lanes.push, lanes.share, lanes.out].forEach((s, i) => this.gpu.order(o.joins[i]!, s, [lanes.reduce]));
  }

  private make(): NonNullable<CePipeline['own']> {
    const streams: StreamHandle[] = [];
    const events: EventHandle[] = [];
    try {
      for (let i = 0; i < 3; i++) streams.push(this.gpu.ownStream());
      for (let i = 0; i < 5; i++) events.push(this.gpu.orderingEvent());
    } catch (err) {
      for (const e of events.reverse()) this.gpu.retireEvent(e);
      for (const s of streams.reverse()) this.gpu.giveStream(s);
      throw err;
    }
    const [push, share, out] = streams as [StreamHandle, StreamHandle, StreamHandle];
    const [fork, reduced, ...joins] = events as [EventHandle, EventHandle, ...EventHandle[]];
    return { push, share, out, fork, reduced, joins };
  }

  /** Frees the streams and events (once the calls that used them are done: the communicator's release). */
  close(): void {
    const o = this.own;
    if (!o) return;
    this.own = undefined;
    try {
      for (const e of [...o.joins].reverse()) this.gpu.retireEvent(e);
      this.gpu.retireEvent(o.reduced);
      this.gpu.retireEvent(o.fork);
      for (const st of [o.out, o.share, o.push]) this.gpu.giveStream(st);
    } catch (err) {
      debug('communicator rank %d: closing the pipeline streams: %s', this.rank, (err as Error).message);
    }
  }
}
