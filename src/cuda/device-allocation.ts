/**
 * Device memory that knows its size: `{ ptr, length, device }` (the shape
 * every call that takes a device buffer accepts) from one cuMemAlloc, and
 * whether it is still live. A call handed one checks its extent with a few
 * comparisons, where a bare pointer costs a driver query to find the
 * allocation it lies in.
 *
 * Liveness is kept here rather than asked of the driver: the driver that
 * made an allocation tells this module when the pointer is freed (by
 * `free()` or by `driver.memFree(ptr)`) and when the driver closes (which
 * frees all of its memory), so a stale object is recognised even after its
 * address was given to a new allocation.
 */
import { ArgumentRangeError, ArgumentTypeError } from '../errors.js';
import type { DevicePtr } from './driver.js';
import { assertSize } from './validate.js';

/** What an allocation and its views share: freed once, seen by all of them. */
interface Liveness {
  freed: boolean;
}

/** The driver calls an allocation needs (memFree): a structural type, so this file does not import the driver contract's values. */
interface Freeing {
  memFree(ptr: DevicePtr): void;
}

/** Live allocations by pointer, per driver object (its memFree and close mark them freed). */
const live = new WeakMap<object, Map<DevicePtr, DeviceAllocation>>();

export class DeviceAllocation {
  /** First byte. */
  readonly ptr: DevicePtr;
  /** Bytes from `ptr`. */
  readonly length: number;
  /** The device it is on, as this process numbers them. */
  readonly device: number;
  /** The allocation a view is into; undefined for the allocation itself. */
  readonly viewOf: DeviceAllocation | undefined;
  readonly #driver: Freeing;
  readonly #liveness: Liveness;

  /** Made by `driver.memAllocBuffer` (or a communicator's `alloc`), never directly. */
  private constructor(driver: Freeing, ptr: DevicePtr, length: number, device: number, liveness: Liveness, viewOf: DeviceAllocation | undefined) {
    this.ptr = ptr;
    this.length = length;
    this.device = device;
    this.viewOf = viewOf;
    this.#driver = driver;
    this.#liveness = liveness;
  }

  /** @internal The drivers' memAllocBuffer: wraps a pointer `driver` just allocated on `device`. */
  static track(driver: Freeing, ptr: DevicePtr, length: number, device: number): DeviceAllocation {
    const a = new DeviceAllocation(driver, ptr, length, device, { freed: false }, undefined);
    let byPtr = live.get(driver);
    if (byPtr === undefined) live.set(driver, (byPtr = new Map()));
    byPtr.set(ptr, a);
    return a;
  }

  /** @internal The drivers' memFree: the allocation at `ptr` (if one was made by memAllocBuffer) is freed. */
  static noteFreed(driver: object, ptr: DevicePtr): void {
    const byPtr = live.get(driver);
    const a = byPtr?.get(ptr);
    if (a === undefined) return;
    a.#liveness.freed = true;
    byPtr!.delete(ptr);
  }

  /** @internal The drivers' close: every allocation the driver made is gone with it. */
  static noteDriverClosed(driver: object): void {
    const byPtr = live.get(driver);
    if (byPtr === undefined) return;
    for (const a of byPtr.values()) a.#liveness.freed = true;
    live.delete(driver);
  }

  /** True once freed (by `free()`, `driver.memFree(ptr)`, the communicator that made it closing, or its driver closing). */
  get freed(): boolean {
    return this.#liveness.freed;
  }

  /** Whether `driver` is the driver object that made it (a call on another driver's memory checks it as a bare pointer). */
  madeBy(driver: object): boolean {
    return this.#driver === driver;
  }

  /**
   * Frees the allocation (cuMemFree, which waits for the device's work on
   * it). Freeing it twice does nothing. A view cannot be freed: free the
   * allocation it is a view of.
   */
  free(): void {
    if (this.viewOf !== undefined)
      throw new ArgumentTypeError(`a view cannot be freed: free the allocation it is a view of (0x${this.viewOf.ptr.toString(16)})`);
    if (this.#liveness.freed) return;
    this.#driver.memFree(this.ptr);
    // A driver that does not report its frees (none of smcuda's) still leaves the object knowing.
    this.#liveness.freed = true;
  }

  /**
   * `length` bytes from `offset` (default: the rest), as a buffer that
   * shares this allocation's liveness: a call may take it with no driver
   * query, and it reads as freed once the allocation is.
   */
  view(offset: number, length: number = this.length - offset): DeviceAllocation {
    assertSize('offset', offset);
    assertSize('length', length);
    if (offset + length > this.length)
      throw new ArgumentRangeError(`view: ${length} bytes at offset ${offset} run past the ${this.length}-byte buffer; pass an offset and length within it`);
    return new DeviceAllocation(this.#driver, this.ptr + BigInt(offset), length, this.device, this.#liveness, this.viewOf ?? this);
  }
}
