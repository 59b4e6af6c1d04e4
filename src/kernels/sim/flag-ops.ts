/**
 * The simulator's side of flag-ops.ptx.ts: smcuda_flag_ops(n, waits, a0, v0, …)
 * is the same list of write64 / wait64 >= value as a memory-operation batch,
 * so the simulated driver queues it as one (a twin cannot wait for another
 * process: the stream does).
 */
import type { KernelArg, StreamMemOp } from '../../cuda/driver.js';
import { FLAG_OPS_ENTRY } from '../flag-ops.ptx.js';

export function flagOpsAsMemOps(args: readonly KernelArg[]): StreamMemOp[] {
  const n = args[0]!.value as number;
  const waits = args[1]!.value as number;
  const ops: StreamMemOp[] = [];
  for (let k = 0; k < n; k++) {
    const addr = args[2 + 2 * k]!.value as bigint;
    const value = args[3 + 2 * k]!.value as bigint;
    ops.push(waits & (1 << k) ? { op: 'wait64', addr, value, condition: 'geq' } : { op: 'write64', addr, value });
  }
  return ops;
}

/** Kernels the simulated driver runs as memory-operation batches, by entry name. */
export const MEMOP_TWINS: Readonly<Record<string, (args: readonly KernelArg[]) => StreamMemOp[]>> = {
  [FLAG_OPS_ENTRY]: flagOpsAsMemOps,
};
