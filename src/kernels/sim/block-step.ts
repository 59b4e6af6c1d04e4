/**
 * What the simulator queues a kernel that waits for other processes as,
 * besides memory operations (flag-ops.ts): pieces of work run when the
 * stream reaches them, and waits on a condition over device memory, polled
 * as a stream memory operation's wait is. And reduce.cu's block_step, the
 * per-block step the two-shot kernel takes, as memory operations.
 */
import type { DevicePtr, StreamMemOp } from '../../cuda/driver.js';
import { blockStepSlotOffset } from '../dtypes.js';
import type { TwinMemory } from './twin.js';

/** A piece of a kernel run when its stream reaches it, touching these pointers' allocations. */
export interface RunOp {
  op: 'run';
  touches: DevicePtr[];
  run(memory: TwinMemory): void;
}

/** A wait until `ready` holds, evaluated when the stream reaches it and polled from then on (another process writes what it reads). */
export interface UntilOp {
  op: 'until';
  ready(memory: TwinMemory): boolean;
}

/** reduce.cu's block_step of parity p for block b: write every peer's slot, then wait for and reset each own slot. */
export function blockStep(bufs: readonly bigint[], flagOffset: bigint, rank: number, b: number, p: number): StreamMemOp[] {
  const n = bufs.length;
  const slot = (k: number, src: number) => bufs[k]! + flagOffset + BigInt(blockStepSlotOffset(n, p, src, b));
  const ops: StreamMemOp[] = [];
  for (let k = 0; k < n; k++) if (k !== rank) ops.push({ op: 'write64', addr: slot(k, rank), value: 1n });
  for (let k = 0; k < n; k++) {
    if (k === rank) continue;
    ops.push({ op: 'wait64', addr: slot(rank, k), value: 1n, condition: 'geq' });
    ops.push({ op: 'write64', addr: slot(rank, k), value: 0n });
  }
  return ops;
}

/** The 64-bit word at `ptr`, read as the kernel's acquire load would (atomically). */
export function loadU64(memory: TwinMemory, ptr: DevicePtr): bigint {
  const w = memory.view(ptr, 8);
  return Atomics.load(new BigUint64Array(w.buffer, w.byteOffset, 1), 0);
}

/** Stores the 64-bit word at `ptr` atomically (the kernel's release store). */
export function storeU64(memory: TwinMemory, ptr: DevicePtr, value: bigint): void {
  const w = memory.view(ptr, 8);
  Atomics.store(new BigUint64Array(w.buffer, w.byteOffset, 1), 0, value);
}
