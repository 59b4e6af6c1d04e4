/**
 * The device buffers this process has checked against their allocation,
 * kept by the allocation's buffer id: what makes a per-call bounds check
 * cost one pointer attribute instead of an address-range query.
 *
 * Two hot paths check a caller's device buffer before the GPU touches it: a
 * receive's `into` (a copy past its allocation would write into whatever
 * follows), and the one-shot allreduce's input, which its kernel reads
 * directly (a bad pointer would fault on the device, which loses the
 * context, where the copy it replaced failed at once). cuMemGetAddressRange
 * per call was the 8 B ping-pong's whole regression (H200) against the bench
 * before it was added. Here each check asks the buffer id
 * (cuPointerGetAttribute, a cheaper call; it throws for a pointer that is no live
 * device memory of this process, a freed one included) and compares with
 * the allocation's range, asked once per allocation. A freed allocation's
 * id is never given again, so a kept range cannot be stale. Ranges made of
 * several mappings (a VMM range of chunks) are walked every time
 * (checkStagedSource) and not kept. Bounded: training loops and ping-pongs
 * reuse a few buffers.
 */
import type { CudaDriver, DevicePtr } from '../cuda/driver.js';
import { checkStagedSource } from './staging-ring.js';

const ENTRIES = 32;

export class AllocationRanges {
  /** [base, end) and device of single-range allocations checked, by buffer id, oldest first. */
  private readonly byId = new Map<bigint, { base: DevicePtr; end: DevicePtr; device: number | undefined }>();

  constructor(private readonly driver: CudaDriver) {}

  /**
   * Throws unless [ptr, ptr + length) lies in live device memory of this
   * process: the driver's error for a pointer it does not know,
   * ArgumentRangeError (naming `name`) for one that runs past its allocation.
   * Returns the allocation's device, asked once per allocation (undefined for
   * a range of several mappings, or where the driver does not say): a
   * receive's copy into it may then be made by the copy kernel (GpuWork).
   */
  check(buf: { ptr: DevicePtr; length: number }, name = 'buffer'): number | undefined {
    if (buf.length === 0) return undefined;
    const id = this.driver.bufferId(buf.ptr);
    const end = buf.ptr + BigInt(buf.length);
    const known = this.byId.get(id);
    if (known !== undefined && buf.ptr >= known.base && end <= known.end) return known.device;
    const first = checkStagedSource(this.driver, buf, name);
    const firstEnd = first.base + BigInt(first.size);
    if (end > firstEnd) return undefined; // several mappings: walked again next time
    if (this.byId.size === ENTRIES) this.byId.delete(this.byId.keys().next().value!);
    let device: number | undefined;
    try {
      device = this.driver.pointerAttributes(buf.ptr).device;
    } catch {
      device = undefined;
    }
    this.byId.set(id, { base: first.base, end: firstEnd, device });
    return device;
  }
}

const perDriver = new WeakMap<CudaDriver, AllocationRanges>();

/** The checked ranges of `driver`'s process (one table per driver object). */
export function allocationRanges(driver: CudaDriver): AllocationRanges {
  let r = perDriver.get(driver);
  if (r === undefined) perDriver.set(driver, (r = new AllocationRanges(driver)));
  return r;
}
