/**
 * The sender's side of RGET: what a peer needs to map a local allocation
 * (base, size, buffer id, IPC handle, device UUID). Looking it up takes three
 * driver calls (cuMemGetAddressRange, cuPointerGetAttributes,
 * cuIpcGetMemHandle); re-sending from the same buffer is the common case, so
 * the answer is kept per pointer and revalidated with one call (bufferId: one
 * attribute, ~1 µs less than cuPointerGetAttributes' three): the buffer id
 * changes when the allocation is freed and another takes its address, and a
 * changed id means the entry is rebuilt, never reused.
 *
 * Bounded (the most recently used `limit` pointers), since senders may walk
 * through many offsets of one allocation.
 */
import type { CudaDriver, DevicePtr, MemoryKind, PoolHandle } from './cuda/driver.js';

const NO_HANDLE = new Uint8Array(0);

export interface ExportInfo {
  base: DevicePtr;
  size: number;
  bufferId: bigint;
  /** 'legacy-ipc': the IPC handle; other kinds have none (empty). */
  handle: Uint8Array;
  device: number;
  /**
   * How the allocation can be shared (driver.memoryKind, classified once per
   * entry): legacy-ipc → RGET; vmm / pool → RGET_FD (paths/fd-rget.ts);
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

/** Which allocation holds `ptr`: its base, size, buffer id and device (two driver calls). */
export function describeAllocation(driver: CudaDriver, ptr: DevicePtr): Pick<ExportInfo, 'base' | 'size' | 'bufferId' | 'device'> {
  const attrs = driver.pointerAttributes(ptr);
  const range = driver.memGetAddressRange(ptr);
  return { base: range.base, size: range.size, bufferId: attrs.bufferId, device: attrs.device };
}

export class ExportTable {
  private readonly byPtr = new Map<DevicePtr, ExportInfo>();

  constructor(
    private readonly driver: CudaDriver,
    private readonly limit = 256,
  ) {}

  lookup(ptr: DevicePtr): ExportInfo {
    const known = this.byPtr.get(ptr);
    if (known && known.bufferId === this.driver.bufferId(ptr)) {
      // Map order is insertion order: re-insert to keep the most recent last.
      this.byPtr.delete(ptr);
      this.byPtr.set(ptr, known);
      return known;
    }
    const attrs = this.driver.pointerAttributes(ptr);
    const range = this.driver.memGetAddressRange(ptr);
    // cuIpcGetMemHandle refuses VMM and pool memory (CUDA_ERROR_INVALID_VALUE):
    // ask for a handle only where the allocation has one.
    const kind = this.driver.memoryKind(ptr);
    const info: ExportInfo = {
      base: range.base,
      size: range.size,
      bufferId: attrs.bufferId,
      device: attrs.device,
      handle: kind.kind === 'legacy-ipc' ? this.driver.ipcGetMemHandle(range.base) : NO_HANDLE,
      kind: kind.kind,
    };
    if (kind.reason !== undefined) info.reason = kind.reason;
    if (kind.pool !== undefined) info.pool = kind.pool;
    this.byPtr.delete(ptr);
    this.byPtr.set(ptr, info);
    if (this.byPtr.size > this.limit) this.byPtr.delete(this.byPtr.keys().next().value!);
    return info;
  }

  /** Forgets every pointer inside the allocation at `base` (it is being freed). */
  forget(base: DevicePtr): void {
    for (const [ptr, info] of this.byPtr) if (info.base === base) this.byPtr.delete(ptr);
  }
}
