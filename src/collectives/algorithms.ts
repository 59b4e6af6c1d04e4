/**
 * The collectives, step by step, on one rank. Every call first copies the
 * caller's input into this rank's registered scratch (region A), so caller
 * buffers need no registration and in-place calls are safe; then, by
 * algorithm:
 *
 *   one-shot     every rank reads every peer's A through its mapping and
 *                reduces (or copies) in one kernel (or copy) per piece. An
 *                allreduce with device steps is one kernel a piece
 *                (reduce.cu's smcuda_oneshot) that stores the input into a
 *                landing slot of every rank's D and reduces its own slots
 *                once every peer signalled: local reads, one signal;
 *   one-shot-ll  allreduce only, with device steps: one kernel a piece
 *                (reduce.cu's smcuda_lloneshot) that stores the input into
 *                every peer's LL landing slot (F) with its flag beside each
 *                4 bytes of data, and reduces each line once every peer's
 *                carries the flag: one cross-GPU step, no signal of its own;
 *   two-shot     rank r reduces its 1/N of the piece (reduce-scatter), then
 *                every rank gets every reduced part (allgather). With device
 *                steps, one kernel a call (reduce.cu's smcuda_twoshot) that
 *                stores every part into its owner's A and every reduced part
 *                into every peer's B: each byte crosses between GPUs as a
 *                store, with no copy into own scratch first. Through the
 *                host, rank r reduces its part from every peer's A into its
 *                B, then every rank copies each peer's part from the peer's B;
 *   ce-pipeline  (ce-pipeline.ts) the copy engines move every byte between
 *                ranks, straight from the caller's input into peers' landing
 *                slots and from their partial results into the caller's
 *                output, while the SMs reduce local memory, chunk by chunk;
 *   staged       no mapping (IPC is BAD between some ranks): pieces travel
 *                as endpoint messages (which stage through host memory) into
 *                landing slots, then the same kernel reduces them;
 *   local        one rank: a copy (or nothing, in place).
 *
 * Data larger than a region goes in pieces, each bracketed by steps: "my A
 * holds the piece" before peers read it, "done reading" before anyone
 * overwrites it. A step is a device-side signal (device-sync.ts: one
 * stream memory-operation batch, no host involvement) where the scratch is
 * mapped and the driver has stream memory operations; then the mapped
 * algorithms queue a whole call at once, synchronously (no await on that
 * path, so a call made while a stream is capturing is captured whole).
 * Elsewhere a step waits for the stream and exchanges host control frames
 * (RankSync). The staged algorithm always goes through the host.
 */
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import { ArgumentRangeError, PeerLostError } from '../errors.js';
import { DTYPE_BYTES, twoshotChunk, twoshotPart, type DType, type ReduceArg } from '../kernels/dtypes.js';
import type { RankSync } from './control.js';
import type { CePipeline } from './ce-pipeline.js';
import type { DeviceSync } from './device-sync.js';
import type { ReduceKernels } from './reduce-kernels.js';
import type { Scratch } from './scratch.js';

export type Algorithm = 'local' | 'one-shot' | 'one-shot-ll' | 'two-shot' | 'ce-pipeline' | 'staged';

/** What one call runs with. */
export interface CallContext {
  driver: CudaDriver;
  rank: number;
  size: number;
  seq: number;
  stream: StreamHandle;
  scratch: Scratch;
  sync: RankSync;
  /** Device-side steps; undefined: steps through the host (RankSync). */
  device: DeviceSync | undefined;
  /** The call is being captured into the caller's graph. */
  capturing: boolean;
  /** The copy-engine pipeline (needs device steps; undefined without them). */
  pipeline: CePipeline | undefined;
  /** The call's steps (made by the communicator, which pads them to an even count at the end). */
  steps: Steps;
  kernels: ReduceKernels;
  endpoint(rank: number): Endpoint;
  /** The tag the staged pieces travel on (the communicator's own: group-tags.ts). */
  dataTag: number;
  /** Resolves once `stream` reaches the work queued on it so far. */
  streamDone(): Promise<void>;
  /**
   * Receives rank k's staged piece (on dataTag) into `into` (the scratch, or
   * the caller's buffer): tracked, so the communicator frees its scratch only
   * once no copy into it is in flight.
   */
  stagedRecv(k: number, into: DevicePtr, bytes: number): Promise<void>;
  /** Bytes copied from caller buffers into scratch (for stats). */
  copied(bytes: number): void;
}

const B = (n: number): bigint => BigInt(n);

/**
 * The elements of one piece: at most `max`, checked once per call. Callers
 * loop `for (let a = 0, per = pieceLength(max); a < count; a += per)`, the
 * piece at `a` being min(per, count - a) long (a generator of [a, len] pairs
 * cost a generator and an array per piece on every call, visible in a CPU
 * profile of 8 B allreduces on the simulator).
 */
function pieceLength(max: number): number {
  if (max < 1) throw new ArgumentRangeError('the scratch region is too small for one element per rank: raise scratchBytes');
  return max;
}

/** The steps of one call, on the device or through the host. */
export class Steps {
  /** Steps queued so far in this call. */
  count = 0;
  constructor(private readonly c: Omit<CallContext, 'steps'>) {}
  /** Whether steps go through the host (then `host()`, awaited), else `device()`. */
  get onHost(): boolean {
    return this.c.device === undefined;
  }
  /** Queues a device step on the call's stream (device-sync.ts: step j has parity j % 2). */
  device(): void {
    this.c.device!.step(this.c.stream, this.count++ % 2);
  }
  /** Waits for this rank's stream, then for every other rank to reach the same step (host frames). */
  async host(): Promise<void> {
    await this.c.streamDone();
    const step = this.count++;
    const others = othersOf(this.c);
    this.c.sync.signal(others, this.c.seq, step);
    await this.c.sync.wait(others, this.c.seq, step);
  }
  /** Device steps: one more where the call ran an odd number, so every call starts at parity 0. */
  finish(): void {
    if (!this.onHost && this.count % 2 === 1) this.device();
  }
}

function copy(c: CallContext, dst: DevicePtr, src: DevicePtr, bytes: number): void {
  if (bytes > 0 && dst !== src) c.driver.memcpyAsync(dst, src, bytes, c.stream);
}

/** Copies `len` elements at element `a` of each of `blocks` blocks (`stride` elements apart) into A, block after block. */
function toScratch(c: CallContext, src: DevicePtr, es: number, a: number, len: number, blocks: number, stride: number): void {
  const A = c.scratch.inputOf(c.rank)!;
  for (let j = 0; j < blocks; j++) copy(c, A + B(j * len * es), src + B((j * stride + a) * es), len * es);
  c.copied(blocks * len * es);
}

/**
 * A reduction on one rank: a copy, except premul, whose factor scales the
 * input (the reduction kernel over a table of one input, piece by piece
 * through the scratch).
 */
function local(c: CallContext, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, op: ReduceArg): void {
  const es = DTYPE_BYTES[dtype];
  if (typeof op === 'string') {
    copy(c, recv, send, count * es);
    return;
  }
  const s = c.scratch;
  for (let a = 0, per = pieceLength(Math.floor(s.bytes / es)); a < count; a += per) {
    const len = Math.min(per, count - a);
    toScratch(c, send, es, a, len, 1, 0);
    c.kernels.reduce(op, dtype, recv + B(a * es), s.inputTable, 1, 0, len, c.stream);
  }
}

/** The part of a piece of `len` elements that rank k reduces in two-shot and the pipeline. */
export function part(len: number, size: number, k: number): [lo: number, hi: number] {
  const chunk = Math.ceil(len / size);
  const lo = Math.min(len, k * chunk);
  return [lo, Math.min(len, lo + chunk)];
}

/** A peer's endpoint failed under a staged transfer: the failure is that rank's, not this one's. */
export class RankLostError extends PeerLostError {
  constructor(
    readonly rank: number,
    cause: Error,
  ) {
    super(`rank ${rank} was lost: ${cause.message}`, { cause });
  }
}

/** Sends `bytes` at `src` to every listed rank and receives each one's into `into(k)`, all at once. */
async function exchange(
  c: CallContext,
  sendTo: number[],
  src: (k: number) => DevicePtr,
  recvFrom: number[],
  into: (k: number) => DevicePtr,
  bytes: number,
): Promise<void> {
  const blame = (k: number) => (err: Error) => {
    throw c.endpoint(k).closed ? new RankLostError(k, err) : err;
  };
  await Promise.all([
    ...sendTo.map((k) =>
      c
        .endpoint(k)
        .send({ ptr: src(k), length: bytes }, { tag: c.dataTag })
        .catch(blame(k)),
    ),
    ...recvFrom.map((k) => c.stagedRecv(k, into(k), bytes).catch(blame(k))),
  ]);
}

function othersOf(c: Pick<CallContext, 'size' | 'rank'>): number[] {
  return [...Array(c.size).keys()].filter((k) => k !== c.rank);
}

export async function allreduce(c: CallContext, alg: Algorithm, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, op: ReduceArg): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const s = c.scratch;
  const N = c.size;
  const steps = c.steps;
  if (alg === 'local') return local(c, send, recv, count, dtype, op);
  if (alg === 'one-shot-ll' && !steps.onHost) {
    // A piece a launch (reduce.cu's smcuda_lloneshot), pieces of at most the LL slots' data bytes.
    for (let a = 0, per = pieceLength(Math.floor(s.llMaxBytes / es)); a < count; a += per) {
      const len = Math.min(per, count - a);
      const at = a === 0 ? 0n : B(a * es);
      c.kernels.oneshot(
        'one-shot-ll',
        op,
        dtype,
        recv + at,
        send + at,
        s.inputTable,
        s.llFlagOffset,
        c.rank,
        N,
        len,
        s.llLandOffset,
        s.llSlotBytes,
        c.stream,
        c.capturing,
      );
    }
    return;
  }
  if (alg === 'one-shot' || alg === 'one-shot-ll') {
    if (!steps.onHost) {
      // A piece a launch: the stores into every rank's landing slot, the signal and the reduction in one
      // kernel (reduce.cu's smcuda_oneshot). The same piece as copy + step + reduce + step, four driver
      // calls, cost the host about three times one launch (measured on an H100).
      for (let a = 0, per = pieceLength(Math.floor(s.oneShotSlotBytes / es)); a < count; a += per) {
        const len = Math.min(per, count - a);
        const at = a === 0 ? 0n : B(a * es); // most calls are one piece: no bigint made for it
        c.kernels.oneshot(
          'one-shot',
          op,
          dtype,
          recv + at,
          send + at,
          s.inputTable,
          s.oneShotFlagOffset,
          c.rank,
          N,
          len,
          s.oneShotLandOffset,
          s.oneShotSlotBytes,
          c.stream,
          c.capturing,
        );
        c.copied(len * es);
      }
      return;
    }
    for (let a = 0, per = pieceLength(Math.floor(s.bytes / es)); a < count; a += per) {
      const len = Math.min(per, count - a);
      toScratch(c, send, es, a, len, 1, 0);
      if (steps.onHost) await steps.host();
      else steps.device();
      c.kernels.reduce(op, dtype, recv + B(a * es), s.inputTable, N, 0, len, c.stream);
      if (steps.onHost) await steps.host();
      else steps.device();
    }
    return;
  }
  if (alg === 'ce-pipeline') {
    // The kernel reads this rank's part of the caller's input directly (checked by the communicator, as every buffer of a call).
    c.pipeline!.allreduce(c.stream, send, recv, count, dtype, op, c.capturing);
    return;
  }
  if (alg === 'two-shot' && !steps.onHost) {
    // One launch, whatever the size (the kernel goes piece by piece); it reads the caller's input directly.
    const partMax = pieceLength(s.twoShotPartBytes / es);
    c.kernels.twoshot(op, dtype, recv, send, s.inputTable, s.kernelFlagOffset, c.rank, N, count, s.bytes, partMax, c.stream, c.capturing);
    // The price of an unregistered output: peers' parts of the result land in B and are copied out.
    for (let a = 0; a < count; a += partMax * N) {
      const len = Math.min(partMax * N, count - a);
      c.copied((len - twoshotPart(len, twoshotChunk(dtype, len, N), c.rank).len) * es);
    }
    return;
  }
  if (alg === 'two-shot') {
    for (let a = 0, per = pieceLength(Math.floor(s.bytes / es)); a < count; a += per) {
      const len = Math.min(per, count - a);
      toScratch(c, send, es, a, len, 1, 0);
      if (steps.onHost) await steps.host();
      else steps.device();
      const [lo, hi] = part(len, N, c.rank);
      c.kernels.reduce(op, dtype, s.partialOf(c.rank)! + B(lo * es), s.inputTable, N, lo, hi - lo, c.stream);
      if (steps.onHost) await steps.host();
      else steps.device();
      for (let k = 0; k < N; k++) {
        const [klo, khi] = part(len, N, k);
        copy(c, recv + B((a + klo) * es), s.partialOf(k)! + B(klo * es), (khi - klo) * es);
      }
      if (steps.onHost) await steps.host();
      else steps.device();
    }
    return;
  }
  // staged
  const others = othersOf(c);
  for (let a = 0, per = pieceLength(Math.floor(s.slotBytes / es)); a < count; a += per) {
    const len = Math.min(per, count - a);
    toScratch(c, send, es, a, len, 1, 0);
    copy(c, s.landing(c.rank), s.inputOf(c.rank)!, len * es);
    await c.streamDone();
    await exchange(
      c,
      others,
      () => s.inputOf(c.rank)!,
      others,
      (k) => s.landing(k),
      len * es,
    );
    c.kernels.reduce(op, dtype, recv + B(a * es), s.landingTable, N, 0, len, c.stream);
    await c.streamDone();
  }
}

export async function broadcast(c: CallContext, alg: Algorithm, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, root: number): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const s = c.scratch;
  const isRoot = c.rank === root;
  if (isRoot) copy(c, recv, send, count * es);
  if (alg === 'local') return;
  const steps = c.steps;
  for (let a = 0, per = pieceLength(Math.floor(s.bytes / es)); a < count; a += per) {
    const len = Math.min(per, count - a);
    if (isRoot) toScratch(c, send, es, a, len, 1, 0);
    if (alg === 'staged') {
      await c.streamDone();
      if (isRoot)
        await exchange(
          c,
          othersOf(c),
          () => s.inputOf(root)!,
          [],
          () => 0n,
          len * es,
        );
      else
        await exchange(
          c,
          [],
          () => 0n,
          [root],
          () => recv + B(a * es),
          len * es,
        );
      continue;
    }
    if (steps.onHost) await steps.host();
    else steps.device();
    if (!isRoot) copy(c, recv + B(a * es), s.inputOf(root)!, len * es);
    if (steps.onHost) await steps.host();
    else steps.device();
  }
}

export async function reduce(
  c: CallContext,
  alg: Algorithm,
  send: DevicePtr,
  recv: DevicePtr,
  count: number,
  dtype: DType,
  op: ReduceArg,
  root: number,
): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const s = c.scratch;
  const isRoot = c.rank === root;
  if (alg === 'local') return local(c, send, recv, count, dtype, op);
  if (alg === 'staged') {
    for (let a = 0, per = pieceLength(Math.floor(s.slotBytes / es)); a < count; a += per) {
      const len = Math.min(per, count - a);
      toScratch(c, send, es, a, len, 1, 0);
      if (isRoot) copy(c, s.landing(root), s.inputOf(root)!, len * es);
      await c.streamDone();
      if (isRoot) {
        await exchange(
          c,
          [],
          () => 0n,
          othersOf(c),
          (k) => s.landing(k),
          len * es,
        );
        c.kernels.reduce(op, dtype, recv + B(a * es), s.landingTable, c.size, 0, len, c.stream);
        await c.streamDone();
      } else {
        await exchange(
          c,
          [root],
          () => s.inputOf(c.rank)!,
          [],
          () => 0n,
          len * es,
        );
      }
    }
    return;
  }
  const steps = c.steps;
  for (let a = 0, per = pieceLength(Math.floor(s.bytes / es)); a < count; a += per) {
    const len = Math.min(per, count - a);
    toScratch(c, send, es, a, len, 1, 0);
    if (steps.onHost) await steps.host();
    else steps.device();
    if (isRoot) c.kernels.reduce(op, dtype, recv + B(a * es), s.inputTable, c.size, 0, len, c.stream);
    if (steps.onHost) await steps.host();
    else steps.device();
  }
}

export async function allgather(c: CallContext, alg: Algorithm, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const s = c.scratch;
  const N = c.size;
  if (alg === 'local') {
    copy(c, recv, send, count * es);
    return;
  }
  const steps = c.steps;
  const at = (k: number, a: number) => recv + B((k * count + a) * es);
  for (let a = 0, per = pieceLength(Math.floor(s.bytes / es)); a < count; a += per) {
    const len = Math.min(per, count - a);
    toScratch(c, send, es, a, len, 1, 0);
    if (alg === 'staged') {
      copy(c, at(c.rank, a), s.inputOf(c.rank)!, len * es);
      await c.streamDone();
      await exchange(
        c,
        othersOf(c),
        () => s.inputOf(c.rank)!,
        othersOf(c),
        (k) => at(k, a),
        len * es,
      );
      continue;
    }
    if (steps.onHost) await steps.host();
    else steps.device();
    for (let k = 0; k < N; k++) copy(c, at(k, a), s.inputOf(k)!, len * es);
    if (steps.onHost) await steps.host();
    else steps.device();
  }
}

export async function reduceScatter(
  c: CallContext,
  alg: Algorithm,
  send: DevicePtr,
  recv: DevicePtr,
  count: number,
  dtype: DType,
  op: ReduceArg,
): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const s = c.scratch;
  const N = c.size;
  if (alg === 'local') return local(c, send, recv, count, dtype, op);
  const steps = c.steps;
  const A = s.inputOf(c.rank)!;
  if (alg === 'staged') {
    const max = Math.floor(Math.min(s.bytes / N, s.slotBytes) / es);
    for (let a = 0, per = pieceLength(max); a < count; a += per) {
      const len = Math.min(per, count - a);
      toScratch(c, send, es, a, len, N, count);
      copy(c, s.landing(c.rank), A + B(c.rank * len * es), len * es);
      await c.streamDone();
      const others = othersOf(c);
      await exchange(
        c,
        others,
        (k) => A + B(k * len * es),
        others,
        (k) => s.landing(k),
        len * es,
      );
      c.kernels.reduce(op, dtype, recv + B(a * es), s.landingTable, N, 0, len, c.stream);
      await c.streamDone();
    }
    return;
  }
  for (let a = 0, per = pieceLength(Math.floor(s.bytes / (N * es))); a < count; a += per) {
    const len = Math.min(per, count - a);
    toScratch(c, send, es, a, len, N, count);
    if (steps.onHost) await steps.host();
    else steps.device();
    c.kernels.reduce(op, dtype, recv + B(a * es), s.inputTable, N, c.rank * len, len, c.stream);
    if (steps.onHost) await steps.host();
    else steps.device();
  }
}

export async function alltoall(c: CallContext, alg: Algorithm, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const s = c.scratch;
  const N = c.size;
  if (alg === 'local') {
    copy(c, recv, send, count * es);
    return;
  }
  const steps = c.steps;
  const A = s.inputOf(c.rank)!;
  const at = (k: number, a: number) => recv + B((k * count + a) * es);
  for (let a = 0, per = pieceLength(Math.floor(s.bytes / (N * es))); a < count; a += per) {
    const len = Math.min(per, count - a);
    toScratch(c, send, es, a, len, N, count);
    if (alg === 'staged') {
      copy(c, at(c.rank, a), A + B(c.rank * len * es), len * es);
      await c.streamDone();
      const others = othersOf(c);
      await exchange(
        c,
        others,
        (k) => A + B(k * len * es),
        others,
        (k) => at(k, a),
        len * es,
      );
      continue;
    }
    if (steps.onHost) await steps.host();
    else steps.device();
    for (let k = 0; k < N; k++) copy(c, at(k, a), s.inputOf(k)! + B(c.rank * len * es), len * es);
    if (steps.onHost) await steps.host();
    else steps.device();
  }
}
