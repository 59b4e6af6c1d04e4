/**
 * Device-side step signals: how the ranks of a communicator wait for each
 * other between the steps of a collective without the host. A step is one
 * stream memory-operation batch on the call's stream, so a whole call is
 * queued at once, runs with no host round trip, and can be captured in a
 * CUDA graph.
 *
 * Each rank's scratch allocation ends with a flag block every peer has
 * mapped (scratch.ts): two sets (parity 0 and 1) of N 64-bit slots. Slot
 * [p][k] in rank r's block is "rank k reached a step of parity p". A step
 * of parity p on rank r is:
 *
 *   write 1 into slot [p][r] of every peer's block   (through the mapping)
 *   wait until own slot [p][k] >= 1, for every peer k
 *   write 0 into own slot [p][k], for every peer k   (the local reset)
 *
 * Why fixed values and a reset, not counters. A counter ("wait >= n") needs
 * n to grow every step, but a graph bakes its values in: a replay would wait
 * for the same n and pass at once on a stale flag. With 1 and a reset the
 * values are the same every time, so eager calls and graph replays
 * interleave freely with no host work between them (as NCCL's copy-engine
 * collectives do under capture, and flags.ts for persistent transfers).
 *
 * Why two parities. Rank r may pass step s and write its signal for step
 * s+1 into k's block before k has even reset its slot from step s (k only
 * signalled s; its wait and reset come later in its stream): with a single
 * set, k's reset would erase that signal, and both would wait forever.
 * Consecutive steps therefore alternate between the two sets. The slot of
 * parity p is written again by r only at step s+2, after r passed step s+1,
 * which needs k's signal for s+1, which k's stream queues after its reset
 * for step s: no write can meet a pending reset.
 *
 * This needs consecutive executed steps to alternate, also across calls and
 * graph replays, whose parities are baked in. So every call runs an even
 * number of steps (padded by one where its algorithm has an odd count), and
 * step j of a call has parity j % 2: each call starts with parity 0 and ends
 * with 1, whatever ran before it, eagerly or in a replay.
 *
 * Failures. A rank that dies or gets stuck never signals; its peers' streams
 * would wait forever. When the communicator aborts (the host control plane
 * tells every rank the first cause, or a call passes its timeout), each rank
 * poisons its own block: POISON (2^62) satisfies every `>= 1` wait. Each
 * passed wait resets its slot, so the poison is written again every tick
 * until the streams of the calls in flight are drained (the watchdog in
 * communicator.ts); nothing is left waiting on the device, and the calls
 * fail with the original cause.
 */
/*
 * The two-shot allreduce kernel (reduce.cu's smcuda_twoshot) steps the same
 * way inside the kernel, per block, on slots of its own after these
 * (kernelSlotsOffset): block b waits only for block b of its peers. Its
 * slots follow the same rules (1 and a reset, parity 0 then 1 in every
 * piece), so its launches and graph replays mix with these steps freely,
 * and poison() covers them too. So does it cover the copy-engine
 * pipeline's slots after those (ce-pipeline.ts: the same 1 and a reset,
 * per chunk slot).
 *
 * The one-shot kernel (smcuda_oneshot) signals with a count instead, in an
 * area of its own after the pipeline's (oneshotAreaOffset): a rank's launch
 * count lives in its own device memory, read by the kernel when it runs, so
 * graph replays count like eager launches and no reset is needed; that is
 * what lets one signal per call replace two steps (reduce.cu says why it is
 * safe). poison() covers its flags: POISON passes every `>= count` wait.
 *
 * The LL one-shot kernel (smcuda_lloneshot) has an area after the
 * one-shot's (llAreaOffset): its launch count, as the one-shot's, and a
 * poison word. Its flags travel inside the data, in landing slots of their
 * own (scratch.ts, region F), so no slot here says "arrived"; a wait of its
 * ends when the line's flag is this launch's or the poison word is not 0,
 * which poison() writes.
 *
 * Point to point's flags come last (p2p-slots.ts, p2p-channel.ts): 1 and a
 * reset, per slot and peer, covered by poison() as well.
 */
import type { CudaDriver, DevicePtr, StreamHandle, StreamMemOp } from '../cuda/driver.js';
import { debug } from '../debug.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';
import { POISON } from '../persistent/flags.js';
import { MAX_BATCH_MEM_OPS } from '../cuda/validate-gpu-driven.js';
import { LL_AREA_BYTES, LL_POISON_WORD, ONESHOT_MAX_BLOCKS, blockStepSlotOffset, oneshotAreaBytes, oneshotFlagOffset } from '../kernels/dtypes.js';
import { P2P_SLOTS, p2pFlagBytes, p2pFlagOffset } from './p2p-slots.js';

/** Bytes of the step slots: two parities × size slots × 8 bytes, 256-aligned. */
function stepSlotsBytes(size: number): number {
  return Math.ceil((2 * size * 8) / 256) * 256;
}

/** Where the two-shot kernel's step slots start in a flag block: after the step slots. */
export function kernelSlotsOffset(size: number): number {
  return stepSlotsBytes(size);
}

/** Where the copy-engine pipeline's slots start in a flag block: after the two-shot kernel's. */
function pipelineSlotsOffset(size: number): number {
  return stepSlotsBytes(size) + 2 * size * ONESHOT_MAX_BLOCKS * 8;
}

/** Slots of the copy-engine pipeline's landing parts: chunk c uses slot c % PIPELINE_SLOTS. */
export const PIPELINE_SLOTS = 2;

/** The copy-engine pipeline's signals (ce-pipeline.ts says who writes and who waits for each). */
export type PipelineSignal = 'landed' | 'landingFree' | 'reduced' | 'reducedFree';
const SIGNALS: readonly PipelineSignal[] = ['landed', 'landingFree', 'reduced', 'reducedFree'];
/** The signals that start at 1 ("free") in a new flag block. */
export const PIPELINE_FREE_SIGNALS: readonly PipelineSignal[] = ['landingFree', 'reducedFree'];

/** The offset in a flag block of the pipeline's `signal` for slot `x` from rank `src`. */
export function pipelineSlotOffset(size: number, signal: PipelineSignal, x: number, src: number): number {
  return pipelineSlotsOffset(size) + ((SIGNALS.indexOf(signal) * PIPELINE_SLOTS + x) * size + src) * 8;
}

/** Where the one-shot kernel's flag area starts in a flag block: after the pipeline's slots, 256-aligned. */
export function oneshotAreaOffset(size: number): number {
  return Math.ceil((pipelineSlotsOffset(size) + SIGNALS.length * PIPELINE_SLOTS * size * 8) / 256) * 256;
}

/** Where the LL one-shot kernel's area starts in a flag block: after the one-shot kernel's, 256-aligned. */
export function llAreaOffset(size: number): number {
  return Math.ceil((oneshotAreaOffset(size) + oneshotAreaBytes(size)) / 256) * 256;
}

/** Where the point-to-point flags start in a flag block (p2p-slots.ts): after the LL one-shot kernel's area, 256-aligned. */
export function p2pAreaOffset(size: number): number {
  return Math.ceil((llAreaOffset(size) + LL_AREA_BYTES) / 256) * 256;
}

/**
 * Bytes of a rank's flag block for `size` ranks: the step slots, then the
 * two-shot kernel's, two parities × size × ONESHOT_MAX_BLOCKS slots
 * (blockStepSlotOffset): the same protocol, per block of the kernel; then the
 * copy-engine pipeline's, four signals × PIPELINE_SLOTS × size; then the
 * one-shot kernel's area, its launch count and a flag per rank and block;
 * then the LL one-shot's area; then the point-to-point flags, two signals × P2P_SLOTS × size.
 */
export function flagBlockBytes(size: number): number {
  return p2pAreaOffset(size) + p2pFlagBytes(size);
}

/** Queues `ops` on `stream` in order, in as few batches as the driver takes (MAX_BATCH_MEM_OPS each). */
export function queueMemOps(driver: CudaDriver, stream: StreamHandle, ops: readonly StreamMemOp[]): void {
  if (ops.length <= MAX_BATCH_MEM_OPS) {
    if (ops.length > 0) driver.streamBatchMemOp(stream, ops);
    return;
  }
  for (let i = 0; i < ops.length; i += MAX_BATCH_MEM_OPS) driver.streamBatchMemOp(stream, ops.slice(i, i + MAX_BATCH_MEM_OPS));
}

export class DeviceSync {
  private readonly others: number[];
  private readonly driver: CudaDriver;
  /** Poison writes queued and not passed yet: the next is written only once the last one ran (a stuck stream would otherwise pile them up). */
  private poisonsInFlight = 0;
  /** close()'s waits for the last poison write to pass. */
  private readonly poisonsPassed: Array<() => void> = [];

  constructor(
    /** The transport's GPU runtime: the poison's stream, and the point that says its writes ran. */
    private readonly gpu: GpuRuntime,
    readonly rank: number,
    readonly size: number,
    /** Rank k's flag block as mapped here (own for k = rank). */
    private readonly blockOf: (k: number) => DevicePtr,
  ) {
    this.driver = gpu.driver;
    this.others = [...Array(size).keys()].filter((k) => k !== rank);
  }

  private slot(block: DevicePtr, parity: number, k: number): DevicePtr {
    return block + BigInt((parity * this.size + k) * 8);
  }

  /** The batches of a step of parity 0 and 1: the same every time (built on first use). */
  private built: [StreamMemOp[], StreamMemOp[]] | undefined;

  /** The operations of one step of `parity` on this rank (one batch). */
  stepOps(parity: number): StreamMemOp[] {
    this.built ??= [this.build(0), this.build(1)];
    return this.built[parity]!;
  }

  private build(parity: number): StreamMemOp[] {
    const own = this.blockOf(this.rank);
    const ops: StreamMemOp[] = [];
    for (const k of this.others) ops.push({ op: 'write64', addr: this.slot(this.blockOf(k), parity, this.rank), value: 1n });
    for (const k of this.others) ops.push({ op: 'wait64', addr: this.slot(own, parity, k), value: 1n, condition: 'geq' });
    for (const k of this.others) ops.push({ op: 'write64', addr: this.slot(own, parity, k), value: 0n });
    return ops;
  }

  /** Queues one step on `stream` (one batch up to 86 peers, then several in order): it passes once every peer's stream reached the same step. */
  step(stream: StreamHandle, parity: number): void {
    if (this.others.length === 0) return;
    queueMemOps(this.driver, stream, this.stepOps(parity));
  }

  /** Writes POISON into every slot of this rank's own block (the steps', the kernels', the LL kernel's poison word, the pipeline's and point to point's), on a private stream (never behind a stuck one). */
  poison(): void {
    try {
      if (this.poisonsInFlight > 0) return;
      const own = this.blockOf(this.rank);
      const ops: StreamMemOp[] = [];
      for (let p = 0; p < 2; p++) for (const k of this.others) ops.push({ op: 'write64', addr: this.slot(own, p, k), value: POISON });
      const kernel = own + BigInt(kernelSlotsOffset(this.size));
      for (let p = 0; p < 2; p++) {
        for (const k of this.others)
          for (let b = 0; b < ONESHOT_MAX_BLOCKS; b++)
            ops.push({ op: 'write64', addr: kernel + BigInt(blockStepSlotOffset(this.size, p, k, b)), value: POISON });
      }
      const area = own + BigInt(oneshotAreaOffset(this.size));
      for (const k of this.others)
        for (let b = 0; b < ONESHOT_MAX_BLOCKS; b++) ops.push({ op: 'write64', addr: area + BigInt(oneshotFlagOffset(k, b)), value: POISON });
      if (this.others.length > 0) ops.push({ op: 'write64', addr: own + BigInt(llAreaOffset(this.size) + LL_POISON_WORD), value: POISON });
      for (const sig of SIGNALS) {
        for (let x = 0; x < PIPELINE_SLOTS; x++)
          for (const k of this.others) ops.push({ op: 'write64', addr: own + BigInt(pipelineSlotOffset(this.size, sig, x, k)), value: POISON });
      }
      const p2p = own + BigInt(p2pAreaOffset(this.size));
      for (const sig of ['full', 'free'] as const) {
        for (let x = 0; x < P2P_SLOTS; x++)
          for (const k of this.others) ops.push({ op: 'write64', addr: p2p + BigInt(p2pFlagOffset(this.size, sig, x, k)), value: POISON });
      }
      if (ops.length === 0) return;
      const stream = this.gpu.stream('poison');
      queueMemOps(this.driver, stream, ops);
      this.poisonsInFlight++;
      this.gpu.mark(stream, () => {
        if (--this.poisonsInFlight === 0) for (const w of this.poisonsPassed.splice(0)) w();
      });
    } catch (err) {
      debug('communicator rank %d: poisoning the flags failed: %s', this.rank, (err as Error).message);
    }
  }

  /** Resolves once the last poison write has run: the flag blocks it writes into may be freed then. */
  close(): Promise<void> {
    if (this.poisonsInFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.poisonsPassed.push(resolve));
  }
}
