/**
 * The simulator's side of reduce.cu's smcuda_oneshot_<dtype>: a kernel that
 * waits for other processes cannot run as one TypeScript function (a twin
 * runs the whole grid at once), so the simulated driver queues it as the
 * stream operations it amounts to, in order: the copy of `in` into this
 * rank's A, the step of parity 0 on every block's slots (write every peer's,
 * wait for and reset its own, as device-sync.ts's step), the reduction (the
 * reduce twins' core), the step of parity 1. The slots are the kernel's, one
 * set per block of the launch's grid, so the flag block holds on the
 * simulator what it holds on a GPU.
 */
import type { DevicePtr, KernelArg, LaunchConfig, StreamMemOp } from '../../cuda/driver.js';
import { DTYPE_BYTES, DTYPES, ONESHOT_MAX_BLOCKS as MAX_BLOCKS, oneshotEntry, oneshotSlotOffset, opOf, type DType } from '../dtypes.js';
import { reduceInto } from './reduce.js';
import { tableOf, type TwinMemory } from './twin.js';
import { ArgumentRangeError } from '../../errors.js';

/** A piece of a kernel run when its stream reaches it, touching these pointers' allocations. */
export interface RunOp {
  op: 'run';
  touches: DevicePtr[];
  run(memory: TwinMemory): void;
}

/** reduce.cu's block_step of parity p for block b: write every peer's slot, then wait for and reset each own slot. */
export function blockStep(bufs: readonly bigint[], flagOffset: bigint, rank: number, b: number, p: number): StreamMemOp[] {
  const n = bufs.length;
  const slot = (k: number, src: number) => bufs[k]! + flagOffset + BigInt(oneshotSlotOffset(n, p, src, b));
  const ops: StreamMemOp[] = [];
  for (let k = 0; k < n; k++) if (k !== rank) ops.push({ op: 'write64', addr: slot(k, rank), value: 1n });
  for (let k = 0; k < n; k++) {
    if (k === rank) continue;
    ops.push({ op: 'wait64', addr: slot(rank, k), value: 1n, condition: 'geq' });
    ops.push({ op: 'write64', addr: slot(rank, k), value: 0n });
  }
  return ops;
}

function oneshotOps(dtype: DType) {
  const es = DTYPE_BYTES[dtype];
  return (args: readonly KernelArg[], config: LaunchConfig, memory: TwinMemory): Array<StreamMemOp | RunOp> => {
    const out = args[0]!.value as bigint;
    const input = args[1]!.value as bigint;
    const table = args[2]!.value as bigint;
    const flagOffset = args[3]!.value as bigint;
    const rank = args[4]!.value as number;
    const n = args[5]!.value as number;
    const count = Number(args[6]!.value as bigint);
    const op = opOf(args[7]!.value as number, oneshotEntry(dtype));
    const blocks = config.grid[0] ?? 1;
    if (blocks > MAX_BLOCKS) throw new ArgumentRangeError(`${oneshotEntry(dtype)}: a grid of ${blocks} blocks, at most ${MAX_BLOCKS}`);
    const bufs = tableOf(memory, table, n);
    const mine = bufs[rank]!;
    const bytes = count * es;
    // Every block's step, block after block: one of the orders a GPU may run them in (the ranks in the same one).
    const step = (p: number) => Array.from({ length: blocks }, (_, b) => blockStep(bufs, flagOffset, rank, b, p)).flat();
    return [
      { op: 'run', touches: [input, mine], run: (m) => (input === mine ? undefined : m.view(mine, bytes).set(m.view(input, bytes))) },
      ...step(0),
      { op: 'run', touches: [out, ...bufs], run: (m) => reduceInto(op, dtype, m.view(out, bytes), bufs.map((p) => m.view(p, bytes)), count) },
      ...step(1),
    ];
  };
}

/** Every one-shot entry of reduce.cu, by name. */
export const ONESHOT_TWINS = Object.fromEntries(DTYPES.map((d) => [oneshotEntry(d), oneshotOps(d)] as const));

