/**
 * A simulated virtual address space: one per device, 2^40 bytes starting at
 * 0x7f00_0000_0000 + (device << 40), ranges aligned to 2 MiB as the real
 * driver's allocations are.
 *
 * Ranges are kept in an array sorted by base: lookup of the range holding a
 * pointer is a binary search; a new range takes the lowest free gap (first
 * fit), so freeing and allocating the same size again returns the same
 * address — exactly the case that makes IPC handle caches go stale.
 */
export const ADDRESS_BASE = 0x7f00_0000_0000n;
export const DEVICE_SPAN = 1n << 40n;
export const RANGE_ALIGN = 2n * 1024n * 1024n;

export interface Range<T> {
  base: bigint;
  /** Bytes the caller asked for. */
  size: number;
  /** Bytes reserved (size rounded up to the alignment; at least one unit). */
  reserved: bigint;
  value: T;
}

export class AddressSpace<T> {
  private readonly ranges: Range<T>[] = [];
  readonly start: bigint;
  readonly end: bigint;

  constructor(device: number) {
    this.start = ADDRESS_BASE + BigInt(device) * DEVICE_SPAN;
    this.end = this.start + DEVICE_SPAN;
  }

  get count(): number {
    return this.ranges.length;
  }

  /** Reserves `size` bytes at the lowest free aligned address; undefined when the space is full. */
  reserve(size: number, value: T): Range<T> | undefined {
    const units = BigInt(Math.max(1, Math.ceil(size / Number(RANGE_ALIGN))));
    const reserved = units * RANGE_ALIGN;
    let at = this.start;
    let i = 0;
    for (; i < this.ranges.length; i++) {
      const r = this.ranges[i]!;
      if (r.base - at >= reserved) break;
      at = r.base + r.reserved;
    }
    if (this.end - at < reserved) return undefined;
    const range: Range<T> = { base: at, size, reserved, value };
    this.ranges.splice(i, 0, range);
    return range;
  }

  /** Removes the range starting exactly at `base`; returns it, or undefined. */
  release(base: bigint): Range<T> | undefined {
    const i = this.indexOf(base);
    if (i < 0 || this.ranges[i]!.base !== base) return undefined;
    return this.ranges.splice(i, 1)[0];
  }

  /** The range holding `ptr` within its requested size (an interior pointer is fine). */
  find(ptr: bigint): Range<T> | undefined {
    const i = this.indexOf(ptr);
    if (i < 0) return undefined;
    const r = this.ranges[i]!;
    // A zero-size range never holds anything, not even its base.
    return ptr - r.base < BigInt(r.size) ? r : undefined;
  }

  values(): T[] {
    return this.ranges.map((r) => r.value);
  }

  /** Index of the last range whose base <= ptr, or -1. */
  private indexOf(ptr: bigint): number {
    let lo = 0;
    let hi = this.ranges.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (this.ranges[mid]!.base <= ptr) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  }
}
