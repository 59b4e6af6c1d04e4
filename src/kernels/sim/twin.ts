import type { KernelArg, LaunchConfig } from '../../cuda/driver.js';

/** What a kernel's TypeScript twin may touch: the simulated device memory, by pointer (own or mapped). */
export interface TwinMemory {
  /** The bytes [ptr, ptr+bytes); throws where they are not device memory of this process. */
  view(ptr: bigint, bytes: number): Uint8Array;
}

/**
 * A kernel as the simulated driver runs it: the same arguments, in the same
 * order and types, as the PTX entry of the same name; the whole grid at once.
 */
export type KernelTwin = (memory: TwinMemory, args: readonly KernelArg[], config: LaunchConfig) => void;

/** The n device pointers of a kernel's pointer table (every rank's A, or the inputs of a reduction), read as the kernel's loads would. */
export function tableOf(memory: TwinMemory, table: bigint, n: number): bigint[] {
  const t = memory.view(table, 8 * n);
  const tv = new DataView(t.buffer, t.byteOffset, t.byteLength);
  const ptrs: bigint[] = [];
  for (let k = 0; k < n; k++) ptrs.push(tv.getBigUint64(8 * k, true));
  return ptrs;
}
