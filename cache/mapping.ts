/**
 * The two objects the handle pool deals in:
 *
 *  - `PoolEntry`: one opened remote allocation (one successful
 *    cuIpcOpenMemHandle, vmmImport or memPoolImportPointer: its `kind` says
 *    which, and so how it is undone), reference counted by the copies using it. It is
 *    *resident* while the pool can hand it out; once evicted, found stale,
 *    invalidated or the pool closed, it is *detached*: never handed out
 *    again, and closed as soon as its last user releases it.
 *  - `Lease`: what one acquisition returns (the public `Mapping`). Its
 *    `release()` gives back exactly one reference, however often it is called.
 */
import type { DevicePtr, PoolHandle } from '../src/cuda/driver.js';
import type { PeerPool } from './peer-pools.js';

/**
 * How a remote allocation was mapped here, and so how it is undone:
 *  - 'legacy-ipc': cuIpcOpenMemHandle, undone by cuIpcCloseMemHandle;
 *  - 'vmm': vmmImport of the chunks' descriptors, undone by vmmRelease
 *    (unmap, release, free the reservation);
 *  - 'pool': memPoolImportPointer from an imported peer pool, undone by
 *    memPoolReleasePointer; the pool import is shared (see PeerPoolRef).
 */
export type MappingKind = 'legacy-ipc' | 'vmm' | 'pool';

export const MAPPING_KINDS: readonly MappingKind[] = ['legacy-ipc', 'vmm', 'pool'];

/** What a receiver knows about a remote allocation, taken from an RGET frame. */
export interface MappingRequest {
  /** UUID of the device the allocation lives on (never an ordinal). */
  deviceUuid: string;
  /** Base address of the allocation in the owner's address space. */
  base: bigint;
  /** Length of the whole allocation in bytes. */
  size: number;
  /** The owner's CUipcMemHandle (64 bytes). */
  handle: Uint8Array;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation; changes on free + realloc. */
  bufferId: bigint;
}

/**
 * The peer's pool a 'pool' allocation comes from. The pool is imported once
 * (memPoolImport of the descriptor the peer sent once) and shared by every
 * pointer of it; the handle pool releases it (memPoolRelease) once it was
 * dropped (`dropPeerPool`, or the handle pool closed) and its last pointer
 * mapping is gone.
 */
export interface PeerPoolRef {
  /** Names the peer's pool within this handle pool, e.g. `${peer}:${pool id}`. */
  key: string;
  /** Imports the pool; called only when no import of `key` is held (or being made). */
  open(): PoolHandle | PromiseLike<PoolHandle>;
}

/**
 * What a data path knows of a remote allocation of any kind, and how to map
 * it. The pool calls `open` only on a miss (again after an eviction, when the
 * previous attempt failed for lack of resources), and `dispose` exactly once
 * per `acquireImport`, as soon as it will call `open` no more: after a hit,
 * after joining an open in flight, after its own open succeeded or finally
 * failed. That is where the data path closes the descriptors it received.
 */
export interface ImportRequest {
  kind: MappingKind;
  /** UUID of the device the allocation lives on. */
  deviceUuid: string;
  /** The owner's address of what `open` maps (for 'vmm': the export's base): the cache key with the device. */
  base: bigint;
  /** Bytes from `base` that `open` maps. */
  size: number;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID of the owner's allocation; changes on free + realloc. */
  bufferId: bigint;
  /**
   * Bytes that name the allocation beside its address (legacy: the IPC
   * handle; pool: the 64-byte export data), compared on every hit like the
   * buffer id. Optional: none compares as empty.
   */
  identity?: Uint8Array;
  /** 'pool' only: the peer pool the allocation is in. */
  peerPool?: PeerPoolRef;
  /**
   * Maps the allocation here; returns the local address of `base`. For
   * 'pool' it gets the imported pool. May throw CudaError (a resource error
   * makes the pool evict and call it again) or return a Promise.
   */
  open(pool?: PoolHandle): DevicePtr | PromiseLike<DevicePtr>;
  /** Releases what `open` needed (descriptors); see above for when it is called. */
  dispose?(): void;
}

/** An opened remote allocation, held by one acquisition until `release()`. */
export interface Mapping {
  /** How it was mapped. */
  readonly kind: MappingKind;
  /** Local address of the remote allocation's base. The caller adds its offset after checking offset + length ≤ size. */
  readonly ptr: DevicePtr;
  /** Length of the remote allocation in bytes. */
  readonly size: number;
  /** Gives this acquisition's reference back. Idempotent: a second call does nothing. */
  release(): void;
}

/**
 * Why an entry left the pool; carried to events and to the close that follows. 'released': a 'pool'
 * mapping's last user let go of it (HandlePool.releaseEntry says why it is not kept).
 */
export type DetachReason = 'evicted' | 'stale' | 'invalidated' | 'closed' | 'released';

export class PoolEntry {
  /** Users currently holding this mapping (unreleased leases). */
  refs = 0;
  /** In the pool's index and LRU, so it can be handed out. */
  resident = true;
  /** Set just before the entry is removed from the LRU, read by its dispose hook. */
  detachReason: DetachReason = 'evicted';
  /** The driver close was done (exactly once). */
  closed = false;
  /** The entry's end in the owner's address space (base + size), for overlap checks. */
  readonly end: bigint;

  /** 'pool': the imported peer pool this pointer holds a use of. */
  peerPool: PeerPool | undefined;

  constructor(
    /** `${deviceUuid}:${base hex}`: the LRU key, built once per open, never per lookup. */
    readonly key: string,
    readonly kind: MappingKind,
    readonly deviceUuid: string,
    readonly base: bigint,
    readonly size: number,
    /** The identity bytes (legacy: the IPC handle), a private copy: the request's may sit in a frame buffer that gets reused. */
    readonly handle: Uint8Array,
    readonly bufferId: bigint,
    readonly ptr: DevicePtr,
  ) {
    this.end = base + BigInt(size);
    this.#words = (handle.byteLength & 3) === 0 ? new Uint32Array(handle.buffer, handle.byteOffset, handle.byteLength >>> 2) : new Uint32Array(0);
  }

  /** The handle as 32-bit words, for the hot-path comparison. */
  readonly #words: Uint32Array;

  /** True when this entry is the allocation the request names. Hot path. */
  matches(kind: MappingKind, bufferId: bigint, size: number, h: Uint8Array): boolean {
    if (this.bufferId !== bufferId || this.size !== size || this.kind !== kind) return false;
    // 16 word compares through a view beat 64 byte compares even counting the view (measured);
    // an unaligned handle (rare: frame decoders hand out aligned views) takes the byte loop.
    if (h.byteLength !== this.handle.byteLength || (h.byteOffset & 3) !== 0 || (h.byteLength & 3) !== 0) return sameBytes(this.handle, h);
    const w = this.#words;
    const v = new Uint32Array(h.buffer, h.byteOffset, w.length);
    for (let i = 0; i < w.length; i++) if (w[i] !== v[i]) return false;
    return true;
  }

  /** Same device and the address ranges [base, end) intersect. */
  overlaps(deviceUuid: string, base: bigint, end: bigint): boolean {
    return this.deviceUuid === deviceUuid && this.base < end && base < this.end;
  }
}

/** Whoever can take a reference back: the pool. Kept minimal so a lease is cheap. */
export interface EntryOwner {
  releaseEntry(entry: PoolEntry): void;
}

/** One acquisition of a `PoolEntry`; the `Mapping` callers see. */
export class Lease implements Mapping {
  readonly kind: MappingKind;
  readonly ptr: DevicePtr;
  readonly size: number;
  #entry: PoolEntry | undefined;
  #owner: EntryOwner;

  /** The caller has already counted this lease in `entry.refs`. */
  constructor(entry: PoolEntry, owner: EntryOwner) {
    this.kind = entry.kind;
    this.ptr = entry.ptr;
    this.size = entry.size;
    this.#entry = entry;
    this.#owner = owner;
  }

  release(): void {
    const entry = this.#entry;
    if (entry === undefined) return;
    this.#entry = undefined;
    this.#owner.releaseEntry(entry);
  }
}

/** Byte-wise equality; a plain loop is the fastest for 64 bytes (no native call, no views). */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  const n = a.length;
  if (b.length !== n) return false;
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return false;
  return true;
}
