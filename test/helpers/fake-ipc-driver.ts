/**
 * A fake of the IPC part of CudaDriver, for the handle pool's tests.
 *
 * It plays both sides: the remote owner (allocate / free, which hand out
 * handle bytes and buffer ids as the real driver does: new ones on every
 * allocation, even at the same address) and the local importer
 * (ipcOpenMemHandle / ipcCloseMemHandle), with the real driver's habits:
 *  - opening a handle that is already open returns the same pointer and
 *    counts a reference; each open needs its own close;
 *  - opening a handle whose range overlaps an open mapping of a different
 *    allocation on the same device fails with CUDA_ERROR_ALREADY_MAPPED
 *    (the free / realloc case Open MPI's rgpusm describes);
 *  - opening the handle of a freed allocation fails with CUDA_ERROR_INVALID_HANDLE;
 *  - closing a pointer that is not open fails with CUDA_ERROR_INVALID_VALUE.
 * Failures can be injected, and opens can be paused to make them asynchronous.
 *
 * It also imports the descriptor kinds, as the handle pool's opener for them
 * would: `importVmm` (a fresh mapping per import, like vmmImport's own
 * reservation; no overlap rule), `memPoolImport` + `memPoolImportPointer`,
 * with the undo calls `vmmRelease`, `memPoolReleasePointer` and
 * `memPoolRelease` (refused while pointers of the pool are imported, as the
 * driver does). Injected open failures apply to vmm and pointer imports too.
 */
import type { ImportRequest, MappingKind, MappingRequest } from '../../cache/mapping.js';
import { CudaError } from '../../src/errors.js';

export const CUDA_RESULTS: Record<string, number> = {
  CUDA_ERROR_INVALID_VALUE: 1,
  CUDA_ERROR_OUT_OF_MEMORY: 2,
  CUDA_ERROR_MAP_FAILED: 205,
  CUDA_ERROR_ALREADY_MAPPED: 208,
  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: 217,
  CUDA_ERROR_INVALID_HANDLE: 400,
  CUDA_ERROR_TOO_MANY_PEERS: 711,
};

export function cudaError(call: string, code: string): CudaError {
  return new CudaError(call, code, CUDA_RESULTS[code] ?? 999);
}

/** An allocation in the "remote" process. */
export interface RemoteAlloc {
  readonly serial: number;
  readonly deviceUuid: string;
  readonly base: bigint;
  readonly size: number;
  readonly handle: Uint8Array;
  readonly bufferId: bigint;
  live: boolean;
  /** How the owner shares it; default 'legacy-ipc'. */
  readonly kind: MappingKind;
  /** 'pool': the owner's pool, as a key. */
  readonly poolKey?: string;
}

interface OpenMapping {
  readonly alloc: RemoteAlloc;
  readonly ptr: bigint;
  refs: number;
  /** How it was mapped: its undo must be the matching call. */
  readonly via: MappingKind;
  /** 'pool': the imported pool handle it came from. */
  readonly pool?: bigint;
}

export interface FakeIpcDriverOptions {
  /** Refuse to open an allocation overlapping an open mapping of another one (default true, as the real driver). */
  alreadyMappedOnOverlap?: boolean;
  /** Called when a mapping really goes away (its last driver reference closed). */
  onUnmap?: (ptr: bigint, alloc: RemoteAlloc) => void;
}

export class FakeIpcDriver {
  readonly alreadyMappedOnOverlap: boolean;
  onUnmap: ((ptr: bigint, alloc: RemoteAlloc) => void) | undefined;
  /** Every ipcOpenMemHandle call, successful or not. */
  openCalls = 0;
  /** Every ipcCloseMemHandle call, successful or not. */
  closeCalls = 0;
  /** Successful opens and closes per allocation serial. */
  readonly opensBySerial = new Map<number, number>();
  readonly closesBySerial = new Map<number, number>();
  /** Pointers closed while not open (a double close). */
  readonly badCloses: bigint[] = [];

  readonly #allocs = new Map<number, RemoteAlloc>();
  readonly #byHandle = new Map<string, RemoteAlloc>();
  readonly #mapped = new Map<number, OpenMapping>(); // by alloc serial
  readonly #byPtr = new Map<bigint, OpenMapping>();
  readonly #failures: string[] = [];
  #serial = 0;
  #nextPtr = 0x7f00_0000_0000n;
  #paused: Array<() => void> | undefined;

  constructor(options: FakeIpcDriverOptions = {}) {
    this.alreadyMappedOnOverlap = options.alreadyMappedOnOverlap ?? true;
    this.onUnmap = options.onUnmap;
  }

  // -- the remote owner ---------------------------------------------------------

  /** Allocates at `base`; an overlapping live allocation must be freed first, as on a real device. */
  allocate(deviceUuid: string, base: bigint, size: number, kind: MappingKind = 'legacy-ipc', poolKey = 'pool-1'): RemoteAlloc {
    for (const other of this.#allocs.values()) {
      if (other.live && other.deviceUuid === deviceUuid && other.base < base + BigInt(size) && base < other.base + BigInt(other.size)) {
        throw new Error(`fake: allocation ${other.serial} still covers ${base.toString(16)}; free it first`);
      }
    }
    const serial = ++this.#serial;
    const handle = new Uint8Array(64);
    // Distinct bytes per allocation, as cuIpcGetMemHandle gives after free + realloc.
    new DataView(handle.buffer).setUint32(0, serial);
    handle.fill(serial & 0xff, 4);
    const alloc: RemoteAlloc = { serial, deviceUuid, base, size, handle, bufferId: BigInt(1000 + serial), live: true, kind };
    if (kind === 'pool') (alloc as { poolKey?: string }).poolKey = poolKey;
    this.#allocs.set(serial, alloc);
    this.#byHandle.set(handleKey(handle), alloc);
    return alloc;
  }

  free(alloc: RemoteAlloc): void {
    alloc.live = false;
  }

  /** Frees `alloc` and allocates again at the same address and size: new handle, new buffer id. */
  realloc(alloc: RemoteAlloc): RemoteAlloc {
    this.free(alloc);
    return this.allocate(alloc.deviceUuid, alloc.base, alloc.size, alloc.kind, alloc.poolKey);
  }

  /** What an RGET frame for `alloc` would carry. */
  request(alloc: RemoteAlloc): MappingRequest {
    return { deviceUuid: alloc.deviceUuid, base: alloc.base, size: alloc.size, handle: Uint8Array.from(alloc.handle), bufferId: alloc.bufferId };
  }

  /**
   * What a data path would hand `acquireImport` for `alloc`, of its own kind:
   * legacy opens the handle, vmm imports, pool imports the pool (once per
   * key, by the pool) and the pointer. `disposed` counts dispose calls.
   */
  importRequest(alloc: RemoteAlloc, disposed?: { count: number }): ImportRequest {
    const req: ImportRequest = {
      kind: alloc.kind,
      deviceUuid: alloc.deviceUuid,
      base: alloc.base,
      size: alloc.size,
      bufferId: alloc.bufferId,
      open: (pool) =>
        alloc.kind === 'legacy-ipc'
          ? this.ipcOpenMemHandle(alloc.handle)
          : alloc.kind === 'vmm'
            ? this.importVmm(alloc)
            : this.memPoolImportPointer(pool!, alloc),
    };
    if (alloc.kind !== 'vmm') req.identity = Uint8Array.from(alloc.handle);
    if (alloc.kind === 'pool') req.peerPool = { key: alloc.poolKey!, open: () => this.memPoolImport(alloc.poolKey!) };
    if (disposed !== undefined) req.dispose = () => disposed.count++;
    return req;
  }

  // -- the local importer -------------------------------------------------------

  ipcOpenMemHandle(handle: Uint8Array): bigint | Promise<bigint> {
    if (this.#paused !== undefined) {
      const paused = this.#paused;
      return new Promise<void>((resolve) => paused.push(resolve)).then(() => this.#open(handle));
    }
    return this.#open(handle);
  }

  ipcCloseMemHandle(ptr: bigint): void {
    this.#undo(ptr, 'legacy-ipc', 'cuIpcCloseMemHandle');
  }

  // -- the descriptor kinds -----------------------------------------------------

  /** Imported pools by handle: their key and imported pointers. */
  readonly #pools = new Map<bigint, { key: string; pointers: number }>();
  #nextPool = 1n;
  /** memPoolRelease calls refused because pointers were left. */
  readonly badPoolReleases: string[] = [];

  /** What vmmImport of the alloc's chunk descriptors would do: a new mapping every time. */
  importVmm(alloc: RemoteAlloc): bigint | Promise<bigint> {
    return this.#maybePaused(() => this.#importFresh(alloc, 'vmm', 'cuMemImportFromShareableHandle'));
  }

  vmmRelease(ptr: bigint): void {
    this.#undo(ptr, 'vmm', 'cuMemUnmap');
  }

  /** memPoolImport of the descriptor of the owner's pool `key`. */
  memPoolImport(key: string): bigint {
    const handle = this.#nextPool++;
    this.#pools.set(handle, { key, pointers: 0 });
    return handle;
  }

  memPoolImportPointer(pool: bigint, alloc: RemoteAlloc): bigint | Promise<bigint> {
    return this.#maybePaused(() => {
      const p = this.#pools.get(pool);
      if (p === undefined || p.key !== alloc.poolKey) throw cudaError('cuMemPoolImportPointer', 'CUDA_ERROR_INVALID_VALUE');
      const ptr = this.#importFresh(alloc, 'pool', 'cuMemPoolImportPointer', pool);
      p.pointers++;
      return ptr;
    });
  }

  memPoolReleasePointer(ptr: bigint): void {
    const m = this.#byPtr.get(ptr);
    this.#undo(ptr, 'pool', 'cuMemPoolReleasePointer');
    if (m !== undefined && m.via === 'pool') this.#pools.get(m.pool!)!.pointers--;
  }

  memPoolRelease(pool: bigint): void {
    const p = this.#pools.get(pool);
    if (p === undefined || p.pointers !== 0) {
      this.badPoolReleases.push(p === undefined ? `unknown pool ${pool}` : `${p.key} with ${p.pointers} pointers`);
      throw cudaError('cuMemPoolDestroy', 'CUDA_ERROR_INVALID_VALUE');
    }
    this.#pools.delete(pool);
  }

  /** Pools imported and not released. */
  get importedPools(): number {
    return this.#pools.size;
  }

  #maybePaused(fn: () => bigint): bigint | Promise<bigint> {
    if (this.#paused !== undefined) {
      const paused = this.#paused;
      return new Promise<void>((resolve) => paused.push(resolve)).then(fn);
    }
    return fn();
  }

  #importFresh(alloc: RemoteAlloc, via: MappingKind, call: string, pool?: bigint): bigint {
    this.openCalls++;
    const injected = this.#failures.shift();
    if (injected !== undefined) throw cudaError(call, injected);
    if (!alloc.live || alloc.kind !== via) throw cudaError(call, 'CUDA_ERROR_INVALID_HANDLE');
    const ptr = this.#nextPtr;
    this.#nextPtr += 0x1_0000_0000n;
    const m: OpenMapping = pool === undefined ? { alloc, ptr, refs: 1, via } : { alloc, ptr, refs: 1, via, pool };
    this.#byPtr.set(ptr, m);
    bump(this.opensBySerial, alloc.serial);
    return ptr;
  }

  #undo(ptr: bigint, via: MappingKind, call: string): void {
    this.closeCalls++;
    const m = this.#byPtr.get(ptr);
    if (m === undefined || m.via !== via) {
      this.badCloses.push(ptr);
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE');
    }
    bump(this.closesBySerial, m.alloc.serial);
    if (--m.refs === 0) {
      if (via === 'legacy-ipc') this.#mapped.delete(m.alloc.serial);
      this.#byPtr.delete(ptr);
      this.onUnmap?.(ptr, m.alloc);
    }
  }

  // -- fault injection and control ---------------------------------------------

  /** The next `times` opens fail with `code` (before any other check). */
  failNextOpen(code: string, times = 1): void {
    for (let i = 0; i < times; i++) this.#failures.push(code);
  }

  get pendingFailures(): number {
    return this.#failures.length;
  }

  /** From now on opens return a Promise that settles on `resumeOpens()`. */
  pauseOpens(): void {
    this.#paused ??= [];
  }

  resumeOpens(): void {
    const waiting = this.#paused ?? [];
    this.#paused = undefined;
    for (const resolve of waiting) resolve();
  }

  // -- introspection ------------------------------------------------------------

  isMapped(ptr: bigint): boolean {
    return this.#byPtr.has(ptr);
  }

  /** The allocation mapped at `ptr`, if open. */
  allocAt(ptr: bigint): RemoteAlloc | undefined {
    return this.#byPtr.get(ptr)?.alloc;
  }

  /** Driver references on the mapping at `ptr` (0 when not open). */
  refsAt(ptr: bigint): number {
    return this.#byPtr.get(ptr)?.refs ?? 0;
  }

  /** Sum of driver references over all open mappings. */
  get openReferences(): number {
    let n = 0;
    for (const m of this.#byPtr.values()) n += m.refs;
    return n;
  }

  get mappedCount(): number {
    return this.#byPtr.size;
  }

  #open(handle: Uint8Array): bigint {
    this.openCalls++;
    const injected = this.#failures.shift();
    if (injected !== undefined) throw cudaError('cuIpcOpenMemHandle', injected);
    const alloc = this.#byHandle.get(handleKey(handle));
    if (alloc === undefined || !alloc.live || alloc.kind !== 'legacy-ipc') throw cudaError('cuIpcOpenMemHandle', 'CUDA_ERROR_INVALID_HANDLE');
    const open = this.#mapped.get(alloc.serial);
    if (open !== undefined) {
      open.refs++;
      bump(this.opensBySerial, alloc.serial);
      return open.ptr;
    }
    if (this.alreadyMappedOnOverlap) {
      const end = alloc.base + BigInt(alloc.size);
      for (const m of this.#mapped.values()) {
        const o = m.alloc;
        if (o.deviceUuid === alloc.deviceUuid && o.base < end && alloc.base < o.base + BigInt(o.size)) {
          throw cudaError('cuIpcOpenMemHandle', 'CUDA_ERROR_ALREADY_MAPPED');
        }
      }
    }
    const ptr = this.#nextPtr;
    this.#nextPtr += 0x1_0000_0000n;
    const m: OpenMapping = { alloc, ptr, refs: 1, via: 'legacy-ipc' };
    this.#mapped.set(alloc.serial, m);
    this.#byPtr.set(ptr, m);
    bump(this.opensBySerial, alloc.serial);
    return ptr;
  }
}

function handleKey(handle: Uint8Array): string {
  return Buffer.from(handle.buffer, handle.byteOffset, handle.byteLength).toString('hex');
}

function bump(map: Map<number, number>, key: number): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}
