/**
 * A call's buffer argument as the device pointer the call uses, checked for
 * the bytes the call reads or writes there: one function for every buffer
 * argument of every Communicator call (send, recv, buf…), so each means the
 * same thing everywhere.
 *
 * A buffer argument is one of:
 *  - a DeviceAllocation of the communicator's driver (`comm.alloc`,
 *    `driver.memAllocBuffer`, or a `view()` of one): it knows its length,
 *    device and whether it was freed, so the check is a few comparisons and
 *    no driver query;
 *  - any other `{ ptr, length, device? }` (memory the application
 *    describes, a DeviceBuffer): the call must fit in `length`, and the
 *    pointer is then checked against its allocation as a bare one is, since
 *    nothing says the memory is live;
 *  - a bare `bigint` pointer: checked against its allocation (one pointer
 *    attribute query per call, allocation-ranges.ts).
 *
 * Kernels read and write caller buffers directly: a call that would run past
 * a buffer, or into freed memory, must fail here, before anything is queued,
 * never fault the GPU.
 */
import { isDeviceBuffer, type DeviceBuffer } from '../buffers.js';
import { DeviceAllocation } from '../cuda/device-allocation.js';
import type { CudaDriver, DevicePtr } from '../cuda/driver.js';
import { assertPtr, assertSize } from '../cuda/validate.js';
import { ArgumentRangeError, ArgumentTypeError, DeviceBufferError } from '../errors.js';
import { DTYPE_BYTES, type DType } from '../kernels/dtypes.js';
import type { AllocationRanges } from '../paths/allocation-ranges.js';

/** What a buffer argument may be: a bare device pointer, or a buffer object that carries its length (and device). */
export type BufferArg = DevicePtr | DeviceBuffer;

/** Where a call's buffers must lie: live memory of `driver`'s process, on `device`. */
export interface BufferScope {
  readonly driver: CudaDriver;
  /** The device the communicator's calls run on. */
  readonly device: number;
  /** The checked allocation ranges of `driver` (allocationRanges(driver)). */
  readonly known: AllocationRanges;
}

/** Low bits that must be 0 in a pointer to elements of each dtype (a mask: no BigInt made per call). */
const ALIGN_MASK = Object.fromEntries(Object.entries(DTYPE_BYTES).map(([d, n]) => [d, BigInt(n - 1)])) as Record<DType, bigint>;

/**
 * The pointer of buffer argument `arg` (named `field` in errors), after
 * checking that the call's `bytes` there (0: not touched on this rank) fit
 * in it, and that it is aligned to `dtype`'s element size (undefined: bytes).
 * Throws ArgumentTypeError (not a pointer or buffer), ArgumentRangeError
 * (misaligned; `bytes` past its length or its allocation), DeviceBufferError
 * (freed, or of another device), or the driver's error for a pointer that
 * is no device memory of this process.
 */
export function bufferArg(scope: BufferScope, field: string, arg: unknown, bytes: number, dtype?: DType): DevicePtr {
  if (typeof arg === 'bigint') {
    assertPtr(field, arg);
    aligned(field, arg, dtype);
    if (bytes > 0) scope.known.check({ ptr: arg, length: bytes }, field);
    return arg;
  }
  if (arg instanceof DeviceAllocation) {
    if (arg.freed)
      throw new DeviceBufferError(
        'SMCUDA_BUFFER_FREED',
        `${field} (0x${arg.ptr.toString(16)}, ${arg.length} bytes) was freed: pass a live buffer (allocate it again, or free it only after its last call)`,
      );
    checkDevice(scope, field, arg.device);
    fits(field, arg.length, bytes);
    aligned(field, arg.ptr, dtype);
    // Another driver object's memory: this driver may not know it (a simulated driver is a process of its own).
    if (bytes > 0 && !arg.madeBy(scope.driver)) scope.known.check({ ptr: arg.ptr, length: bytes }, field);
    return arg.ptr;
  }
  if (isDeviceBuffer(arg)) {
    assertPtr(`${field}.ptr`, arg.ptr);
    assertSize(`${field}.length`, arg.length);
    if (arg.device !== undefined) checkDevice(scope, field, arg.device);
    fits(field, arg.length, bytes);
    aligned(field, arg.ptr, dtype);
    if (bytes > 0) scope.known.check({ ptr: arg.ptr, length: bytes }, field);
    return arg.ptr;
  }
  throw new ArgumentTypeError(
    `${field} must be a bigint device pointer or a device buffer { ptr, length, device } (comm.alloc(bytes) makes one), got ${arg === null ? 'null' : typeof arg}`,
  );
}

function checkDevice(scope: BufferScope, field: string, device: unknown): void {
  if (device === scope.device) return;
  if (typeof device !== 'number') throw new ArgumentTypeError(`${field}.device must be a device index (a number), got ${typeof device}`);
  throw new DeviceBufferError(
    'SMCUDA_BUFFER_DEVICE',
    `${field} is memory of device ${device}, and this communicator runs on device ${scope.device}: allocate it with comm.alloc (or on the communicator's device)`,
  );
}

function fits(field: string, length: number, bytes: number): void {
  if (bytes > length)
    throw new ArgumentRangeError(`${field} is ${length} bytes long, and the call touches ${bytes} bytes of it: pass a longer buffer or a smaller count`);
}

function aligned(field: string, ptr: DevicePtr, dtype: DType | undefined): void {
  if (dtype !== undefined && DTYPE_BYTES[dtype] > 1 && (ptr & ALIGN_MASK[dtype]) !== 0n)
    throw new ArgumentRangeError(
      `${field}: device pointers must be aligned to the element size (${DTYPE_BYTES[dtype]} bytes for ${dtype}), got 0x${ptr.toString(16)}`,
    );
}
