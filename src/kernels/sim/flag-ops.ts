/**
 * The simulator's side of flag-ops.ptx.ts: smcuda_flag_ops(n, waits, a0, v0, …)
 * is the same list of write64 / wait64 >= value as a memory-operation batch,
 * so the simulated driver queues it as one (a twin cannot wait for another
 * process: the stream does); its 8-byte copies (copy64: to `addr` from
 * `src`) as copies between the batches.
 */
import type { DevicePtr, KernelArg, LaunchConfig, StreamMemOp } from '../../cuda/driver.js';
import { FLAG_OPS_ENTRY } from '../flag-ops.ptx.js';
import { LLONESHOT_TWINS } from './lloneshot.js';
import { ONESHOT_TWINS } from './oneshot.js';
import type { RunOp, UntilOp } from './block-step.js';
import { TWOSHOT_TWINS } from './twoshot.js';
import type { TwinMemory } from './twin.js';

/** The flag kernel's own operation: 8 bytes from `src` to `addr`. */
export interface Copy64Op {
  op: 'copy64';
  addr: DevicePtr;
  src: DevicePtr;
}

export type FlagOp = StreamMemOp | Copy64Op;

export function flagOpsAsMemOps(args: readonly KernelArg[]): FlagOp[] {
  const n = args[0]!.value as number;
  const waits = args[1]!.value as bigint;
  const copies = args[2]!.value as bigint;
  const ops: FlagOp[] = [];
  for (let k = 0; k < n; k++) {
    const addr = args[4 + 2 * k]!.value as bigint;
    const value = args[5 + 2 * k]!.value as bigint;
    const bit = 1n << BigInt(k);
    ops.push(
      waits & bit ? { op: 'wait64', addr, value, condition: 'geq' } : copies & bit ? { op: 'copy64', addr, src: value } : { op: 'write64', addr, value },
    );
  }
  return ops;
}

/** What a kernel that waits for other processes is queued as on the simulator, in order. */
export type SteppedOp = FlagOp | RunOp | UntilOp;

/** Kernels the simulated driver runs as memory-operation batches (and 8-byte copies, and pieces of work run in between), by entry name. */
export const MEMOP_TWINS: Readonly<Record<string, (args: readonly KernelArg[], config: LaunchConfig, memory: TwinMemory) => SteppedOp[]>> = {
  [FLAG_OPS_ENTRY]: flagOpsAsMemOps,
  ...ONESHOT_TWINS,
  ...LLONESHOT_TWINS,
  ...TWOSHOT_TWINS,
};
