/**
 * The sender's side of RGET: what a peer needs to map a local allocation
 * (base, size, buffer id, IPC handle, device UUID). Looking it up takes three
 * driver calls (cuMemGetAddressRange, cuPointerGetAttributes,
 * cuIpcGetMemHandle; pool memory a search for its allocation's bounds); re-sending from the same buffer is the common case, so
 * the answer is kept per pointer and revalidated with one call (bufferId: one
 * attribute, cheaper than cuPointerGetAttributes' three): the buffer id
 * changes when the allocation is freed and another takes its address, and a
 * changed id means the entry is rebuilt, never reused.
 *
 * Bounded (the most recently used `limit` pointers), since senders may walk
 * through many offsets of one allocation.
 */
import type { AddressRange, CudaDriver, DevicePtr, MemoryKind, PoolHandle } from './cuda/driver.js';

const NO_HANDLE = new Uint8Array(0);

/**
 * Pool allocations larger than this are not shared by descriptor (their messages are staged): importing a
 * pointer to one killed the importing process. On 2 × H200 (driver 580.159.04) cuMemPoolImportPointer
 * returned into address 0 (SIGSEGV, the stack overwritten after an RM control ioctl) for a single
 * allocation of 5376 MiB and up, on the same GPU and across GPUs; 5248 MiB and below imported, as did
 * three 4 GiB allocations of one pool (memory-across's 1 GiB window of 8 in one allocation hit it).
 */
export const POOL_SHARE_MAX_BYTES = 5 * 2 ** 30;
const POOL_TOO_LARGE =
  'a pool allocation over 5 GiB: importing a pointer to one killed the importing process (driver 580); allocate less at once to send it without staging';

export interface ExportInfo {
  base: DevicePtr;
  size: number;
  bufferId: bigint;
  /** 'legacy-ipc': the IPC handle; other kinds have none (empty). */
  handle: Uint8Array;
  device: number;
  /**
   * How the allocation can be shared (driver.memoryKind, classified once per
   * entry): legacy-ipc → RGET by IPC handle; vmm / pool → RGET of a descriptor key (paths/fd-side.ts);
   * other → staging, `reason` says why.
   */
  kind: MemoryKind;
  reason?: string;
  /** 'pool': the pool the allocation came from. */
  pool?: PoolHandle;
  /**
   * The last RGET sent from this pointer (without an event), for restampRget:
   * it depends only on this entry and the length, and goes when the entry is
   * rebuilt (another buffer id).
   */
  rget?: { length: number; frame: Uint8Array };
}

/** Which allocation holds `ptr`: its base, size, buffer id and device (two driver calls; more for pool memory). */
export function describeAllocation(driver: CudaDriver, ptr: DevicePtr): Pick<ExportInfo, 'base' | 'size' | 'bufferId' | 'device'> {
  const attrs = driver.pointerAttributes(ptr);
  let range = driver.memGetAddressRange(ptr);
  if (driver.memoryKind(ptr).kind === 'pool') range = poolAllocationRange(driver, ptr, attrs.bufferId, range);
  return { base: range.base, size: range.size, bufferId: attrs.bufferId, device: attrs.device };
}

/**
 * The buffer id of the allocation holding `ptr`, or undefined where none
 * does (freed, or never device memory). For probes that expect misses: it
 * asks cuPointerGetAttributes (plural), which succeeds with memory type 0
 * there, where cuPointerGetAttribute reports each miss as a failed API call
 * (compute-sanitizer's memcheck counted them as errors).
 */
export function bufferIdAt(driver: CudaDriver, ptr: DevicePtr): bigint | undefined {
  try {
    return driver.pointerAttributes(ptr).bufferId;
  } catch {
    return undefined;
  }
}

/**
 * The allocation of pool memory that holds `ptr`, from cuMemAllocFromPoolAsync's
 * start to its end. A pool is VMM underneath: cuMemGetAddressRange names the
 * physical segment that holds the pointer (`segment`), which for a pointer
 * past the first segment of a large allocation (a send from an offset) does
 * not start where the allocation does, and cuMemPoolExportPointer refuses any
 * pointer but the allocation's start (CUDA_ERROR_INVALID_VALUE: every message
 * of `bench --suite memory`, which sends slices of one allocation, went by
 * staging). Each allocation has its own buffer id, so its bounds are where
 * the id changes: whole segments are walked while the neighbouring byte has
 * the same id, then the edge inside the last one is found by bisection
 * (about 2 × 31 cuPointerGetAttributes calls, once per exported pointer).
 */
export function poolAllocationRange(driver: CudaDriver, ptr: DevicePtr, bufferId: bigint, segment: AddressRange): AddressRange {
  // Probes outside the allocation are expected misses (bufferIdAt).
  const inside = (p: DevicePtr): boolean => bufferIdAt(driver, p) === bufferId;
  // Start: `lo` is outside (or below the segment), `hi` the lowest byte known inside.
  let seg = segment;
  let hi = ptr < seg.base ? seg.base : ptr;
  while (seg.base > 0n && inside(seg.base - 1n)) {
    hi = seg.base - 1n;
    seg = driver.memGetAddressRange(hi);
  }
  let start: DevicePtr;
  if (inside(seg.base)) start = seg.base;
  else {
    let lo = seg.base;
    while (hi - lo > 1n) {
      const mid = (lo + hi) / 2n;
      if (inside(mid)) hi = mid;
      else lo = mid;
    }
    start = hi;
  }
  // End: the same upwards; `last` is the highest byte known inside.
  seg = segment;
  let last = ptr;
  let segEnd = seg.base + BigInt(seg.size);
  while (inside(segEnd)) {
    last = segEnd;
    seg = driver.memGetAddressRange(segEnd);
    segEnd = seg.base + BigInt(seg.size);
  }
  let end: DevicePtr;
  if (inside(segEnd - 1n)) end = segEnd;
  else {
    let lo = last;
    let out = segEnd - 1n;
    while (out - lo > 1n) {
      const mid = (lo + out) / 2n;
      if (inside(mid)) lo = mid;
      else out = mid;
    }
    end = lo + 1n;
  }
  return { base: start, size: Number(end - start) };
}

export class ExportTable {
  private readonly byPtr = new Map<DevicePtr, ExportInfo>();
  /** The key inserted last into byPtr (the most recent). */
  private newest: DevicePtr | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly limit = 256,
    /** Larger pool allocations are staged (POOL_SHARE_MAX_BYTES; smaller in tests). */
    private readonly poolShareMax = POOL_SHARE_MAX_BYTES,
  ) {}

  lookup(ptr: DevicePtr): ExportInfo {
    const known = this.byPtr.get(ptr);
    if (known && known.bufferId === this.driver.bufferId(ptr)) {
      // Map order is insertion order: re-insert to keep the most recent last
      // (not when it is already: a send loop from one buffer churned the
      // map's table, ~150 B of garbage per send).
      if (this.newest !== ptr) {
        this.byPtr.delete(ptr);
        this.byPtr.set(ptr, known);
        this.newest = ptr;
      }
      return known;
    }
    const attrs = this.driver.pointerAttributes(ptr);
    let range = this.driver.memGetAddressRange(ptr);
    // cuIpcGetMemHandle refuses VMM and pool memory (CUDA_ERROR_INVALID_VALUE):
    // ask for a handle only where the allocation has one.
    const kind = this.driver.memoryKind(ptr);
    // Pool memory is exported by its allocation's start (poolAllocationRange), not the segment the range names.
    if (kind.kind === 'pool') range = poolAllocationRange(this.driver, ptr, attrs.bufferId, range);
    const tooLarge = kind.kind === 'pool' && range.size > this.poolShareMax;
    const info: ExportInfo = {
      base: range.base,
      size: range.size,
      bufferId: attrs.bufferId,
      device: attrs.device,
      handle: kind.kind === 'legacy-ipc' ? this.driver.ipcGetMemHandle(range.base) : NO_HANDLE,
      kind: tooLarge ? 'other' : kind.kind,
    };
    if (tooLarge) info.reason = POOL_TOO_LARGE;
    else if (kind.reason !== undefined) info.reason = kind.reason;
    if (kind.pool !== undefined && !tooLarge) info.pool = kind.pool;
    this.byPtr.delete(ptr);
    this.byPtr.set(ptr, info);
    this.newest = ptr;
    if (this.byPtr.size > this.limit) this.byPtr.delete(this.byPtr.keys().next().value!);
    return info;
  }

  /** Forgets every pointer inside the allocation at `base` (it is being freed). */
  forget(base: DevicePtr): void {
    for (const [ptr, info] of this.byPtr) if (info.base === base) this.byPtr.delete(ptr);
  }
}
