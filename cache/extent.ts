/**
 * The real extent of a mapping, checked once when it enters the pool: the
 * peer names an allocation's size, and every later copy out of the mapping
 * is bounded by that size, so the pool never takes the peer's word for it.
 * A peer that overstates it (an IPC probe or an RGET claiming more than its
 * allocation) would otherwise make this process copy from outside the
 * mapping — reading other memory, or faulting on the GPU.
 *
 * Per kind, with the driver's own answer (cuMemGetAddressRange):
 *  - legacy IPC: the opened mapping is one allocation: its range must start
 *    at the mapped pointer and hold the claimed size;
 *  - VMM imports and pool pointers: the ranges the driver names from the
 *    mapped pointer on (one per chunk or pool segment) must cover the
 *    claimed size without a gap. (Not the buffer id of the last byte: whether
 *    the driver gives an imported pool allocation one id throughout is not
 *    known here, and a false refusal would send all pool memory by staging.)
 */
import type { AddressRange, DevicePtr } from '../src/cuda/driver.js';
import type { MappingKind } from './mapping.js';

/** What the check asks the driver (CudaDriver has it). */
export interface ExtentDriver {
  memGetAddressRange(ptr: DevicePtr): AddressRange;
}

/** Why the mapping of `kind` at `ptr` does not hold `size` bytes, or undefined when it does. */
export function extentProblem(d: ExtentDriver, kind: MappingKind, ptr: DevicePtr, size: number): string | undefined {
  let first: AddressRange;
  try {
    first = d.memGetAddressRange(ptr);
  } catch (err) {
    return `the driver does not know the mapping (${(err as Error).message})`;
  }
  if (kind === 'legacy-ipc') {
    if (first.base !== ptr) return `the handle maps an allocation at 0x${first.base.toString(16)}, not at the mapped pointer`;
    return first.size < size ? `the handle maps ${first.size} bytes, not the ${size} the peer claims` : undefined;
  }
  if (first.base > ptr) return 'the driver names a range that does not hold the mapped pointer';
  const end = ptr + BigInt(size);
  let covered = first.base + BigInt(first.size);
  while (covered < end) {
    let next: AddressRange;
    try {
      next = d.memGetAddressRange(covered);
    } catch {
      return `only ${covered - ptr} of the ${size} bytes the peer claims are mapped`;
    }
    if (next.base !== covered) return `the mapping has a gap at byte ${covered - ptr}`;
    covered = next.base + BigInt(next.size);
  }
  return undefined;
}
