/**
 * How a start of persistent transfers goes onto a stream: the items of each
 * transfer's round (flags.ts) in the order startGroup or startSequence asks,
 * adjacent batches merged, then queued as stream memory operations or, for
 * transfers with `flags: 'kernel'`, as launches of the flag kernel
 * (src/kernels/flag-ops.ptx.ts) — with a small round's bytes copied by the
 * kernel itself. Stream operations, copies and kernel launches only: a
 * start can be captured in a CUDA graph.
 */
import type { CudaDriver, DevicePtr, FunctionHandle, KernelArg, LaunchConfig, StreamHandle, StreamMemOp } from '../cuda/driver.js';
import { assertHandle } from '../cuda/validate.js';
import { MAX_BATCH_MEM_OPS } from '../cuda/validate-gpu-driven.js';
import { ArgumentRangeError, ArgumentTypeError } from '../errors.js';
import { FLAG_OPS_ENTRY, FLAG_OPS_MAX, FLAG_OPS_PTX } from '../kernels/flag-ops.ptx.js';
import type { FlagOp } from '../kernels/sim/flag-ops.js';
import { ARRIVE, DONE, READY, STAMP } from './flags.js';
import { type OwnedItem, scheduleStart } from './schedule.js';
import type { PersistentTransfer } from './transfers.js';

/** The flag kernel of each driver, loaded once (the module stays loaded while the driver is open). */
const flagKernels = new WeakMap<CudaDriver, FunctionHandle>();

export function flagKernel(d: CudaDriver): FunctionHandle {
  let fn = flagKernels.get(d);
  if (fn === undefined) {
    const { module } = d.moduleLoadData(FLAG_OPS_PTX);
    fn = d.moduleGetFunction(module, FLAG_OPS_ENTRY);
    flagKernels.set(d, fn);
  }
  return fn;
}

/** The four words of the slot at `slot`. */
export function wordsOf(slot: DevicePtr): DevicePtr[] {
  return [READY, DONE, ARRIVE, STAMP].map((o) => slot + BigInt(o));
}

/**
 * One round of every transfer in `transfers` on one stream: every
 * receiver's READY first, then every sender's start, then every receiver's
 * wait — so a stream (or a graph captured from it) can hold sends and
 * receives between the same ranks, in any order, without waiting on itself.
 * Stream operations and cuMemcpyAsync only: it can be captured.
 */
export function startGroup(stream: StreamHandle, transfers: readonly PersistentTransfer[]): void {
  checkStarts(stream, transfers);
  // READY is a flag, not a counter: two rounds of one transfer announced at once would lose one.
  if (new Set(transfers).size !== transfers.length)
    throw new ArgumentRangeError('startGroup takes each transfer once (use startSequence for several rounds of one transfer)');
  queueStarts(stream, transfers, [
    ...transfers.flatMap((t) => owned(t, 'post')),
    ...transfers.flatMap((t) => owned(t, 'run')),
    ...transfers.flatMap((t) => owned(t, 'wait')),
  ]);
}

/**
 * One round of each transfer in `transfers`, one after the other — the
 * same as calling `start` on each in turn — queued as fewer stream items
 * (adjacent batches merged): for a stage that receives, then sends what it
 * received. Stream operations and cuMemcpyAsync only: it can be captured.
 */
export function startSequence(stream: StreamHandle, transfers: readonly PersistentTransfer[]): void {
  checkStarts(stream, transfers);
  queueStarts(
    stream,
    transfers,
    transfers.flatMap((t) => [...owned(t, 'post'), ...owned(t, 'run'), ...owned(t, 'wait')]),
  );
}

function owned(t: PersistentTransfer, part: 'post' | 'run' | 'wait'): OwnedItem[] {
  return t.items(part).map((item) => ({ owner: t, item }));
}

function checkStarts(stream: StreamHandle, transfers: readonly PersistentTransfer[]): void {
  assertHandle('stream', stream);
  if (!Array.isArray(transfers)) throw new ArgumentTypeError('transfers must be an array of persistent transfers');
  for (const t of transfers) t.check();
}

function queueStarts(stream: StreamHandle, transfers: readonly PersistentTransfer[], owned: OwnedItem[]): void {
  if (transfers.length === 0) return;
  const d = transfers[0]!.driverOf();
  const capturing = d.streamIsCapturing(stream);
  // The kernel where every transfer of the call asked for it (merged batches mix their operations).
  const kernel = transfers.every((t) => t.flagKernel !== undefined) ? transfers[0]!.flagKernel : undefined;
  const local = new Set(transfers.flatMap((t) => wordsOf(t.ownSlot)));
  // Several transfers: the operations a copy waits for moved next to it (schedule.ts); one transfer has nothing to move.
  const items = transfers.some((t) => t !== transfers[0])
    ? scheduleStart(owned, local, new Set(transfers.flatMap((t) => [t.ownSlot + BigInt(ARRIVE), t.ownSlot + BigInt(STAMP)])))
    : owned.map((o) => o.item);
  // With the kernel, a small round's bytes are words of its batch: no copy-engine node between the flags.
  const queued =
    kernel !== undefined
      ? items.map((it): QueuedItem => {
          const w = asWords(it);
          return w ? { kind: 'batch', ops: w } : it;
        })
      : items;
  for (const item of mergeBatches(queued)) {
    if (item.kind === 'copy') d.memcpyAsync(item.dst, item.src, item.length, stream);
    else if (kernel !== undefined) {
      for (let k = 0; k < item.ops.length; k += FLAG_OPS_MAX)
        d.launchKernel(kernel, ONE_THREAD, flagOpsArgs(item.ops.slice(k, k + FLAG_OPS_MAX), local), stream);
    } else d.streamBatchMemOp(stream, item.ops as StreamMemOp[]);
  }
  for (const t of transfers) t.queued(stream, capturing);
}

const ONE_THREAD: LaunchConfig = { grid: [1], block: [1] };

/**
 * smcuda_flag_ops's arguments for up to FLAG_OPS_MAX write64, wait64 (geq)
 * and copy64 operations. A write to a word of `local` (this side's own flag
 * words) is relaxed; any other (a signal through the peer's mapping) is a
 * release, which orders every earlier write and copy of the round before it.
 */
export function flagOpsArgs(ops: readonly FlagOp[], local: ReadonlySet<DevicePtr> = new Set()): KernelArg[] {
  let waits = 0n;
  let copies = 0n;
  let releases = 0n;
  const args: KernelArg[] = [];
  ops.forEach((op, k) => {
    if (op.op === 'copy64') {
      copies |= 1n << BigInt(k);
      args.push({ type: 'u64', value: op.addr }, { type: 'u64', value: op.src });
      return;
    }
    if (op.op === 'wait64' && op.condition === 'geq') waits |= 1n << BigInt(k);
    else if (op.op === 'write64' && !local.has(op.addr)) releases |= 1n << BigInt(k);
    else if (op.op !== 'write64') throw new Error(`the flag kernel runs write64, wait64 (geq) and copy64 only, not ${op.op}`);
    args.push({ type: 'u64', value: op.addr }, { type: 'u64', value: BigInt(op.value) });
  });
  for (let k = ops.length; k < FLAG_OPS_MAX; k++) args.push({ type: 'u64', value: 0n }, { type: 'u64', value: 0n });
  return [{ type: 'u32', value: ops.length }, { type: 'u64', value: waits }, { type: 'u64', value: copies }, { type: 'u64', value: releases }, ...args];
}

/** Rounds of at most this many bytes (whole 8-byte words, aligned) are copied by the flag kernel itself. */
export const KERNEL_COPY_MAX = 64;

/** A copy the flag kernel makes as 8-byte words, or undefined where the copy engine must. */
function asWords(item: QueuedItem): FlagOp[] | undefined {
  if (item.kind !== 'copy' || item.length > KERNEL_COPY_MAX || item.length % 8 !== 0 || item.dst % 8n !== 0n || item.src % 8n !== 0n) return undefined;
  return Array.from({ length: item.length / 8 }, (_, k) => ({ op: 'copy64' as const, addr: item.dst + BigInt(8 * k), src: item.src + BigInt(8 * k) }));
}

/** One stream item of a start: a batch of memory operations, or the copy. */
export type QueuedItem = { kind: 'batch'; ops: readonly FlagOp[] } | { kind: 'copy'; dst: DevicePtr; src: DevicePtr; length: number };

/**
 * Adjacent batches as one batch, in the same order (a batch's operations
 * run in array order, which flags.ts relies on already): the same protocol
 * in fewer stream items, so fewer graph nodes per round. Why it matters:
 * what a graph replay costs the host and the stream grows with its nodes.
 */
export function mergeBatches(items: readonly QueuedItem[]): QueuedItem[] {
  const out: QueuedItem[] = [];
  for (const item of items) {
    const last = out[out.length - 1];
    if (item.kind === 'batch' && last?.kind === 'batch' && last.ops.length + item.ops.length <= MAX_BATCH_MEM_OPS)
      out[out.length - 1] = { kind: 'batch', ops: [...last.ops, ...item.ops] };
    else out.push(item);
  }
  return out;
}
