/**
 * Simulated VMM and stream-ordered pool memory, made of REAL descriptors, so
 * that exporting, passing (SCM_RIGHTS) and importing them is tested for real
 * between processes.
 *
 *  - A VMM chunk (cuMemCreate) is a memfd named `smcuda-vmm:<device uuid>`,
 *    of exactly the chunk's size. Exporting it opens the same file again
 *    (/proc/self/fd/N), as cuMemExportToShareableHandle hands out a new
 *    descriptor.
 *  - A pool is one memfd named `smcuda-pool:<uuid>:<pool id>`; allocations
 *    are 2 MiB-aligned extents of it (the file grows as they are made).
 *    Export data (64 bytes) names the pool id, offset, size and buffer id.
 *  - A "device range" is a host range (hostReserve, PROT_NONE) at a device
 *    address; chunks are mapped into it with MAP_FIXED (hostMapFd), so a
 *    range of several chunks is one contiguous view, exactly as cuMemMap
 *    makes it on the GPU. A view is only ever made of mapped bytes.
 *
 * An importer learns what a descriptor is from the file itself: its name
 * (readlink of /proc/self/fd/N: which device) and its size (fstat). A
 * descriptor that is not the promised memory is refused as the real driver
 * would: not a descriptor of ours → CUDA_ERROR_INVALID_VALUE; another
 * device → CUDA_ERROR_INVALID_DEVICE; another size → CUDA_ERROR_INVALID_VALUE.
 *
 * Device addresses live in their own spaces (devices 64 + n of the address
 * layout), apart from cuMemAlloc memory, so SimMemory never sees them.
 * Simplifications: pool allocation is immediate (not stream-ordered), and
 * fd-shared memory does not count against the device's totalMemory.
 */
import { readlinkSync, openSync, closeSync } from 'node:fs';
import type { AddressRange, DevicePtr, FdChunk, FdMemoryResources, PoolHandle } from '../driver.js';
import type { NativeFdPassing, NativeHostMapping, NativeShm } from '../native-addon.js';
import { ADDRESS_BASE, AddressSpace, DEVICE_SPAN, RANGE_ALIGN } from './address-space.js';
import { cudaError, type CudaErrorName } from './result-codes.js';
import { hex, SIM_MAX_MAPPING_BYTES } from './memory.js';

/** Address-space index of device n's fd-shared memory: 64 + n (SimMemory uses 0..n). */
const FD_SPACE_OFFSET = 64;
/** cuMemGetAllocationGranularity of the simulator, and the pools' alignment. */
export const SIM_GRANULARITY = Number(RANGE_ALIGN);

/** The physical segments an own pool's file is made of: cuMemGetAddressRange of pool memory names one (rangeOf). */
export const POOL_SEGMENT = 2 * SIM_GRANULARITY;
const EXPORT_MAGIC = 0x4c50_4d53; // 'SMPL'

export type FdRangeKind = 'vmm' | 'pool' | 'vmm-import' | 'pool-import';

export interface FdRange {
  readonly kind: FdRangeKind;
  readonly base: DevicePtr;
  readonly size: number;
  readonly device: number;
  readonly bufferId: bigint;
  /** The host addresses behind the range (hostReserve). */
  readonly host: ArrayBuffer;
  /** Mapped chunks, ascending; own VMM chunks keep their memfd (to export it again). */
  readonly chunks: Array<{ offset: number; size: number; fd?: number }>;
  /** 'pool': its pool and extent. */
  readonly pool?: SimPool;
  readonly poolOffset?: number;
}

export interface SimPool {
  readonly handle: PoolHandle;
  /** Random 64-bit id: export data names the pool by it. */
  readonly id: bigint;
  readonly device: number;
  readonly fd: number;
  readonly imported: boolean;
  readonly maxSize: number;
  /** Allocated extents by offset (own pools). */
  readonly extents: Map<number, number>;
  /** Pointers imported through this pool (imported pools). */
  readonly pointers: Set<DevicePtr>;
  fileSize: number;
  /** Exported to a shareable handle at least once (cuMemPoolExportPointer refuses its pointers before). */
  exported?: boolean;
}

/** The addon's sealed-segment calls: VMM chunks are sealed, and an import checks the seals. */
export type SealCalls = Pick<NativeShm, 'sealedCreate' | 'sealedMap' | 'shmClose'>;

export interface FdMemoryOwner {
  native: NativeFdPassing & NativeHostMapping;
  /**
   * With them, a VMM chunk is made sealed against shrinking and growing (as
   * device memory cannot be truncated), and an import maps a chunk only if
   * it is so sealed and of the promised size: a peer truncating its chunk
   * cannot SIGBUS the importer. Without them (a fake addon), chunks are plain
   * memfds.
   */
  seals?: SealCalls;
  /** UUIDs of the devices this process sees, by ordinal. */
  devices: ReadonlyArray<{ uuid: string }>;
  newBufferId(): bigint;
  /** The injected import failure to deliver now, if any. */
  importFailure(): CudaErrorName | undefined;
}

export class SimFdMemory {
  private readonly spaces: AddressSpace<FdRange>[];
  private readonly pools = new Map<PoolHandle, SimPool>();
  private nextPool = 0x9000n;
  /**
   * Handles of destroyed pools, the most recent last: the next pool made gets
   * one back, as the driver's allocator reuses a freed CUmemoryPool's address
   * (a handle names a pool only while it lives).
   */
  private readonly freedPools: PoolHandle[] = [];

  constructor(private readonly owner: FdMemoryOwner) {
    this.spaces = owner.devices.map((_, i) => new AddressSpace<FdRange>(FD_SPACE_OFFSET + i));
  }

  // -- lookup ---------------------------------------------------------------------

  find(ptr: DevicePtr): FdRange | undefined {
    if (ptr < ADDRESS_BASE) return undefined;
    const device = Number((ptr - ADDRESS_BASE) / DEVICE_SPAN) - FD_SPACE_OFFSET;
    return this.spaces[device]?.find(ptr)?.value;
  }

  /** The mapped bytes [ptr, ptr+bytes) as a view, or CUDA_ERROR_INVALID_VALUE from `call`. */
  view(call: string, ptr: DevicePtr, bytes: number): { alloc: FdRange; bytes: Uint8Array } {
    const r = this.find(ptr);
    if (!r) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not in any range of this process`);
    const offset = Number(ptr - r.base);
    if (offset + bytes > r.size) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${bytes} bytes at offset ${offset} overrun the ${r.size}-byte range at ${hex(r.base)}`);
    }
    // Only mapped bytes may be viewed: unmapped host pages would fault.
    let covered = offset;
    for (const c of r.chunks) {
      if (c.offset <= covered && covered < c.offset + c.size) covered = c.offset + c.size;
      if (covered >= offset + bytes) break;
    }
    if (covered < offset + bytes) {
      throw cudaError(call, 'CUDA_ERROR_ILLEGAL_ADDRESS', `bytes ${covered}..${offset + bytes} of the range at ${hex(r.base)} are not mapped`);
    }
    return { alloc: r, bytes: new Uint8Array(r.host, offset, bytes) };
  }

  /**
   * What cuMemGetAddressRange answers: the chunk holding `ptr` (own VMM), the
   * pool segment holding it (an own pool's allocation, see POOL_SEGMENT), or
   * the whole range.
   */
  rangeOf(ptr: DevicePtr): AddressRange | undefined {
    const r = this.find(ptr);
    if (!r) return undefined;
    const off = Number(ptr - r.base);
    if (r.kind === 'pool') {
      // A pool is VMM underneath: the driver names the physical segment of the
      // pool's file that holds the pointer (clipped to this allocation), not
      // the allocation. Past its first segment, that base is not where the
      // allocation starts, and cuMemPoolExportPointer refuses it.
      const at = r.poolOffset! + off;
      const segStart = Math.max(r.poolOffset!, at - (at % POOL_SEGMENT));
      const segEnd = Math.min(r.poolOffset! + r.size, at - (at % POOL_SEGMENT) + POOL_SEGMENT);
      return { base: r.base + BigInt(segStart - r.poolOffset!), size: segEnd - segStart };
    }
    const c = r.chunks.find((x) => x.offset <= off && off < x.offset + x.size);
    return c ? { base: r.base + BigInt(c.offset), size: c.size } : { base: r.base, size: r.size };
  }

  pool(handle: PoolHandle, call: string, imported: boolean): SimPool {
    const p = this.pools.get(handle);
    if (!p || p.imported !== imported) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${hex(handle)} is not ${imported ? 'an imported' : 'a'} pool of this driver (destroyed?)`);
    }
    return p;
  }

  // -- VMM ----------------------------------------------------------------------------

  /** cuMemCreate × count + reserve + map + setAccess. */
  vmmAlloc(device: number, chunkSize: number, count: number): FdRange {
    const uuid = this.owner.devices[device]!.uuid;
    checkMappable('cuMemCreate', chunkSize * count);
    const fds: number[] = [];
    try {
      for (let k = 0; k < count; k++) fds.push(this.vmmChunk(`smcuda-vmm:${uuid}`, chunkSize));
      return this.mapRange(
        'cuMemMap',
        'vmm',
        device,
        chunkSize * count,
        fds.map((fd, k) => ({ offset: k * chunkSize, size: chunkSize, fd, keep: true })),
      );
    } catch (err) {
      for (const fd of fds) this.closeQuietly(fd);
      throw err;
    }
  }

  /** A new descriptor for each chunk [ptr, ptr+bytes) touches. */
  vmmExport(ptr: DevicePtr, bytes: number): { base: DevicePtr; size: number; chunks: FdChunk[] } {
    const r = this.find(ptr);
    if (r?.kind !== 'vmm') {
      throw cudaError('cuMemRetainAllocationHandle', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not VMM memory made by this process`);
    }
    const start = Number(ptr - r.base);
    const end = Math.min(r.size, start + Math.max(1, bytes));
    if (start + Math.max(1, bytes) > r.size) {
      throw cudaError('cuMemRetainAllocationHandle', 'CUDA_ERROR_INVALID_VALUE', `${bytes} bytes at ${hex(ptr)} run past the range's end`);
    }
    const touched = r.chunks.filter((c) => c.offset < end && start < c.offset + c.size);
    const first = touched[0]!.offset;
    const out: FdChunk[] = [];
    try {
      for (const c of touched) out.push({ fd: this.reopen('cuMemExportToShareableHandle', c.fd!), offset: c.offset - first, size: c.size });
    } catch (err) {
      for (const c of out) this.closeQuietly(c.fd);
      throw err;
    }
    const last = touched[touched.length - 1]!;
    return { base: r.base + BigInt(first), size: last.offset + last.size - first, chunks: out };
  }

  /** Import + reserve + map + setAccess, all or nothing. `expectDevice`: the ordinal promised. */
  vmmImport(device: number, chunks: readonly FdChunk[], expectDevice: number | undefined): FdRange {
    const call = 'cuMemImportFromShareableHandle';
    const fault = this.owner.importFailure();
    if (fault) throw cudaError(call, fault, 'injected by the simulator');
    const last = chunks[chunks.length - 1]!;
    checkMappable(call, last.offset + last.size);
    for (const [k, c] of chunks.entries()) {
      const { uuid } = this.identify(call, c.fd, 'vmm');
      this.checkDevice(call, uuid, expectDevice, `chunk ${k}`);
      const size = this.owner.native.fdSize(c.fd);
      if (size !== c.size) {
        throw cudaError('cuMemMap', 'CUDA_ERROR_INVALID_VALUE', `chunk ${k}'s descriptor holds ${size} bytes, the exporter promised ${c.size}`);
      }
      this.checkSealed(call, c.fd, c.size, k);
    }
    return this.mapRange(
      'cuMemMap',
      'vmm-import',
      device,
      last.offset + last.size,
      chunks.map((c) => ({ offset: c.offset, size: c.size, fd: c.fd, keep: false })),
    );
  }

  /** Unmaps and frees an own VMM range or a VMM import; closes own chunks' memfds. */
  unmap(r: FdRange): void {
    this.spaces[r.device]!.release(r.base);
    for (const c of r.chunks) if (c.fd !== undefined) this.closeQuietly(c.fd);
    this.owner.native.hostRelease(r.host);
  }

  // -- pools ----------------------------------------------------------------------------

  poolCreate(device: number, maxSize: number): SimPool {
    const id = randomU64();
    const uuid = this.owner.devices[device]!.uuid;
    const fd = this.memfd('cuMemPoolCreate', `smcuda-pool:${uuid}:${id.toString(16)}`, 0);
    const pool: SimPool = {
      handle: this.freedPools.pop() ?? this.nextPool++,
      id,
      device,
      fd,
      imported: false,
      maxSize,
      extents: new Map(),
      pointers: new Set(),
      fileSize: 0,
    };
    this.pools.set(pool.handle, pool);
    return pool;
  }

  poolDestroy(pool: SimPool): void {
    if (pool.extents.size > 0) {
      throw cudaError('cuMemPoolDestroy', 'CUDA_ERROR_INVALID_VALUE', `the pool still has ${pool.extents.size} allocation(s): free them first`);
    }
    this.pools.delete(pool.handle);
    this.freedPools.push(pool.handle);
    this.closeQuietly(pool.fd);
  }

  poolAlloc(pool: SimPool, bytes: number): FdRange {
    const call = 'cuMemAllocFromPoolAsync';
    const size = Math.max(1, Math.ceil(bytes / SIM_GRANULARITY)) * SIM_GRANULARITY;
    checkMappable(call, size);
    // First fit among the extents, by offset.
    let at = 0;
    for (const [off, len] of [...pool.extents].sort((a, b) => a[0] - b[0])) {
      if (off - at >= size) break;
      at = off + len;
    }
    if (pool.maxSize > 0 && at + size > pool.maxSize) {
      throw cudaError(call, 'CUDA_ERROR_OUT_OF_MEMORY', `the pool's maxSize (${pool.maxSize} bytes) is reached`);
    }
    if (at + size > pool.fileSize) {
      this.owner.native.fdResize(pool.fd, at + size);
      pool.fileSize = at + size;
    }
    const r = this.mapRange(call, 'pool', pool.device, bytes, [{ offset: 0, size: bytes, fd: pool.fd, fdOffset: at, keep: false }], { pool, poolOffset: at });
    pool.extents.set(at, size);
    return r;
  }

  poolFree(r: FdRange): void {
    r.pool!.extents.delete(r.poolOffset!);
    this.spaces[r.device]!.release(r.base);
    this.owner.native.hostRelease(r.host);
  }

  poolExport(pool: SimPool): number {
    const fd = this.reopen('cuMemPoolExportToShareableHandle', pool.fd);
    pool.exported = true;
    return fd;
  }

  exportPointer(r: FdRange): Uint8Array {
    // As the driver (seen on H100, CUDA 13): a pointer of a pool that was
    // never exported to a shareable handle is refused with INVALID_VALUE.
    if (r.pool!.exported !== true) {
      throw cudaError('cuMemPoolExportPointer', 'CUDA_ERROR_INVALID_VALUE', 'its pool was never exported (cuMemPoolExportToShareableHandle first)');
    }
    const data = new Uint8Array(64);
    const v = new DataView(data.buffer);
    v.setUint32(0, EXPORT_MAGIC, true);
    v.setBigUint64(8, r.pool!.id, true);
    v.setBigUint64(16, BigInt(r.poolOffset!), true);
    v.setBigUint64(24, BigInt(r.size), true);
    v.setBigUint64(32, r.bufferId, true);
    return data;
  }

  poolImport(fd: number, expectDevice: number | undefined): SimPool {
    const call = 'cuMemPoolImportFromShareableHandle';
    const fault = this.owner.importFailure();
    if (fault) throw cudaError(call, fault, 'injected by the simulator');
    const { uuid, id } = this.identify(call, fd, 'pool');
    this.checkDevice(call, uuid, expectDevice, 'the pool');
    const device = this.owner.devices.findIndex((d) => d.uuid === uuid);
    const own = this.reopen(call, fd); // the driver keeps its own reference
    const pool: SimPool = {
      handle: this.freedPools.pop() ?? this.nextPool++,
      id: id!,
      device,
      fd: own,
      imported: true,
      maxSize: 0,
      extents: new Map(),
      pointers: new Set(),
      fileSize: 0,
    };
    this.pools.set(pool.handle, pool);
    return pool;
  }

  importPointer(pool: SimPool, device: number, data: Uint8Array): FdRange {
    const call = 'cuMemPoolImportPointer';
    const fault = this.owner.importFailure();
    if (fault) throw cudaError(call, fault, 'injected by the simulator');
    const v = new DataView(data.buffer, data.byteOffset, data.byteLength);
    if (v.getUint32(0, true) !== EXPORT_MAGIC) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', 'not export data from memPoolExportPointer');
    if (v.getBigUint64(8, true) !== pool.id) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', 'the export data names another pool');
    const offset = Number(v.getBigUint64(16, true));
    const size = Number(v.getBigUint64(24, true));
    checkMappable(call, size);
    const fileSize = this.owner.native.fdSize(pool.fd);
    if (size === 0 || offset + size > fileSize) {
      throw cudaError(
        call,
        'CUDA_ERROR_INVALID_VALUE',
        `the allocation (${size} bytes at ${offset}) is not in the pool (${fileSize} bytes): freed, or not this pool's`,
      );
    }
    const r = this.mapRange(call, 'pool-import', device, size, [{ offset: 0, size, fd: pool.fd, fdOffset: offset, keep: false }], { pool, poolOffset: offset });
    pool.pointers.add(r.base);
    return r;
  }

  releasePointer(r: FdRange): void {
    r.pool!.pointers.delete(r.base);
    this.spaces[r.device]!.release(r.base);
    this.owner.native.hostRelease(r.host);
  }

  poolRelease(pool: SimPool): void {
    if (pool.pointers.size > 0) {
      throw cudaError(
        'cuMemPoolDestroy',
        'CUDA_ERROR_INVALID_VALUE',
        `${pool.pointers.size} pointer(s) imported through this pool are still open: release them first`,
      );
    }
    this.pools.delete(pool.handle);
    this.freedPools.push(pool.handle);
    this.closeQuietly(pool.fd);
  }

  // -- accounting -------------------------------------------------------------------------

  resources(): FdMemoryResources {
    let reservations = 0;
    let mappings = 0;
    let importedPointers = 0;
    for (const s of this.spaces) {
      for (const r of s.values()) {
        if (r.kind === 'vmm' || r.kind === 'vmm-import') {
          reservations++;
          mappings += r.chunks.length;
        } else if (r.kind === 'pool-import') {
          importedPointers++;
        }
      }
    }
    let pools = 0;
    let importedPools = 0;
    for (const p of this.pools.values()) p.imported ? importedPools++ : pools++;
    return { reservations, mappings, pools, importedPools, importedPointers };
  }

  /** Unmaps everything and closes every descriptor held. */
  closeAll(): void {
    for (const s of this.spaces) {
      for (const r of s.values()) {
        s.release(r.base);
        for (const c of r.chunks) if (c.fd !== undefined) this.closeQuietly(c.fd);
        try {
          this.owner.native.hostRelease(r.host);
        } catch {
          // released already
        }
      }
    }
    for (const p of this.pools.values()) this.closeQuietly(p.fd);
    this.pools.clear();
  }

  // -- helpers ------------------------------------------------------------------------------

  /**
   * Reserves `size` bytes at a device address and maps the chunks; all or
   * nothing. `keep` chunks keep their fd in the range (own VMM memory).
   */
  private mapRange(
    call: string,
    kind: FdRangeKind,
    device: number,
    size: number,
    chunks: Array<{ offset: number; size: number; fd: number; fdOffset?: number; keep: boolean }>,
    extra: { pool?: SimPool; poolOffset?: number } = {},
  ): FdRange {
    const native = this.owner.native;
    const hostSize = Math.ceil(size / SIM_GRANULARITY) * SIM_GRANULARITY;
    checkMappable(call, hostSize);
    const host = native.hostReserve(hostSize);
    const placeholder = {} as FdRange;
    const slot = this.spaces[device]!.reserve(size, placeholder);
    if (!slot) {
      native.hostRelease(host);
      throw cudaError(call, 'CUDA_ERROR_OUT_OF_MEMORY', 'simulated address space exhausted');
    }
    const mapped: FdRange['chunks'] = [];
    try {
      for (const c of chunks) {
        native.hostMapFd(host, c.offset, Math.ceil(c.size / 4096) * 4096, c.fd, c.fdOffset ?? 0);
        mapped.push(c.keep ? { offset: c.offset, size: c.size, fd: c.fd } : { offset: c.offset, size: c.size });
      }
    } catch (err) {
      this.spaces[device]!.release(slot.base);
      native.hostRelease(host);
      throw cudaError(call, 'CUDA_ERROR_OUT_OF_MEMORY', `mapping failed: ${(err as Error).message}`);
    }
    const r: FdRange = { kind, base: slot.base, size, device, bufferId: this.owner.newBufferId(), host, chunks: mapped, ...extra };
    slot.value = r;
    return r;
  }

  /** What a received descriptor is, from its memfd name; CUDA_ERROR_INVALID_VALUE when not ours. */
  private identify(call: string, fd: number, kind: 'vmm' | 'pool'): { uuid: string; id?: bigint } {
    let link: string;
    try {
      link = readlinkSync(`/proc/self/fd/${fd}`);
    } catch (err) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `descriptor ${fd} is not open: ${(err as Error).message}`);
    }
    const m =
      kind === 'vmm'
        ? /^\/memfd:smcuda-vmm:(GPU-[0-9a-f-]+) \(deleted\)$/.exec(link)
        : /^\/memfd:smcuda-pool:(GPU-[0-9a-f-]+):([0-9a-f]+) \(deleted\)$/.exec(link);
    if (!m)
      throw cudaError(
        call,
        'CUDA_ERROR_INVALID_VALUE',
        `descriptor ${fd} (${link}) is not ${kind === 'vmm' ? 'a VMM allocation' : 'a memory pool'} exported by the simulator`,
      );
    return kind === 'vmm' ? { uuid: m[1]! } : { uuid: m[1]!, id: BigInt(`0x${m[2]!}`) };
  }

  private checkDevice(call: string, uuid: string, expectDevice: number | undefined, what: string): void {
    const device = this.owner.devices.findIndex((d) => d.uuid === uuid);
    if (device < 0) throw cudaError(call, 'CUDA_ERROR_INVALID_DEVICE', `${what} is memory of ${uuid}, which this process does not see`);
    if (expectDevice !== undefined && device !== expectDevice) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_DEVICE', `${what} is memory of device ${device} (${uuid}), the exporter promised device ${expectDevice}`);
    }
  }

  /** A VMM chunk's memfd: sealed against shrinking and growing where the addon can (see FdMemoryOwner.seals). */
  private vmmChunk(name: string, bytes: number): number {
    const seals = this.owner.seals;
    if (seals === undefined) return this.memfd('cuMemCreate', name, bytes);
    let made: { fd: number; buffer: ArrayBuffer };
    try {
      made = seals.sealedCreate(name, bytes);
    } catch (err) {
      throw cudaError('cuMemCreate', 'CUDA_ERROR_OUT_OF_MEMORY', `memfd_create failed: ${(err as Error).message}`);
    }
    seals.shmClose(made.buffer); // only the descriptor is kept: ranges map it where they need it
    return made.fd;
  }

  /**
   * An imported chunk must be sealed against shrinking and growing, and be
   * `size` bytes: otherwise its exporter could truncate it under our mapping
   * (SIGBUS at the next touch). Checked, where the addon can, before mapping.
   */
  private checkSealed(call: string, fd: number, size: number, k: number): void {
    const seals = this.owner.seals;
    if (seals === undefined) return;
    let probe: ArrayBuffer;
    try {
      probe = seals.sealedMap(fd, size);
    } catch (err) {
      throw cudaError(
        call,
        'CUDA_ERROR_INVALID_VALUE',
        `chunk ${k} is refused, not mapped: ${(err as Error).message} (its exporter could truncate it under the mapping)`,
      );
    }
    seals.shmClose(probe);
  }

  private memfd(call: string, name: string, bytes: number): number {
    try {
      return this.owner.native.memfdCreate(name, bytes);
    } catch (err) {
      throw cudaError(call, 'CUDA_ERROR_OUT_OF_MEMORY', `memfd_create failed: ${(err as Error).message}`);
    }
  }

  /** A new descriptor for the same file, as the driver's export calls give. */
  private reopen(call: string, fd: number): number {
    try {
      return openSync(`/proc/self/fd/${fd}`, 'r+');
    } catch (err) {
      throw cudaError(call, 'CUDA_ERROR_OPERATING_SYSTEM', `cannot make a descriptor: ${(err as Error).message}`);
    }
  }

  private closeQuietly(fd: number): void {
    try {
      closeSync(fd);
    } catch {
      // closed already
    }
  }
}

/** Refuses a range the simulator cannot map as one ArrayBuffer (CUDA_ERROR_OUT_OF_MEMORY, as the driver for memory it cannot give). */
function checkMappable(call: string, bytes: number): void {
  if (!(bytes <= SIM_MAX_MAPPING_BYTES)) {
    throw cudaError(
      call,
      'CUDA_ERROR_OUT_OF_MEMORY',
      `${bytes} bytes: the simulated driver maps at most ${SIM_MAX_MAPPING_BYTES} bytes as one range (one host ArrayBuffer); use less, or the native driver`,
    );
  }
}

function randomU64(): bigint {
  const hi = BigInt((Math.random() * 0x1_0000_0000) >>> 0);
  const lo = BigInt((Math.random() * 0x1_0000_0000) >>> 0);
  return (hi << 32n) | lo || 1n;
}
