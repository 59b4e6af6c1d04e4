/**
 * The caller buffers a communicator has seen, by allocation: what lets a
 * kernel read a caller's input directly and still refuse a bad pointer as
 * the copy it replaces did. cuMemcpyAsync checks its source when it is
 * queued (CUDA_ERROR_INVALID_VALUE: the call fails, the communicator aborts
 * with that cause, every rank hears it); a kernel given a bad pointer
 * faults on the device instead, which is sticky: the context is lost.
 *
 * So each call asks the driver which allocation the pointer is in (its
 * buffer id, one cuPointerGetAttribute: it throws for a pointer that is not
 * live device memory of this process, a freed one included) and checks the
 * bytes against that allocation's range, asked once per allocation
 * (cuMemGetAddressRange) and kept by buffer id. A freed allocation's id is
 * never given again, so a kept range cannot be stale. Training loops reuse
 * a few buffers: a few entries suffice.
 */
import type { CudaDriver, DevicePtr } from '../cuda/driver.js';
import { ArgumentRangeError } from '../errors.js';

const ENTRIES = 16;

export class KnownBuffers {
  /** [base, end) of allocations seen, by buffer id, oldest first. */
  private readonly ranges = new Map<bigint, { base: DevicePtr; end: DevicePtr }>();

  constructor(private readonly driver: CudaDriver) {}

  /** Throws unless [ptr, ptr + bytes) lies in one live device allocation of this process. */
  check(ptr: DevicePtr, bytes: number): void {
    if (bytes === 0) return;
    const id = this.driver.bufferId(ptr);
    let r = this.ranges.get(id);
    if (r === undefined) {
      const { base, size } = this.driver.memGetAddressRange(ptr);
      r = { base, end: base + BigInt(size) };
      if (this.ranges.size === ENTRIES) this.ranges.delete(this.ranges.keys().next().value!);
      this.ranges.set(id, r);
    }
    if (ptr + BigInt(bytes) > r.end) {
      throw new ArgumentRangeError(`${bytes} bytes at 0x${ptr.toString(16)} run past the end of their allocation (0x${r.base.toString(16)}, ${r.end - r.base} bytes)`);
    }
  }
}
