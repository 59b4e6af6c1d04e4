/**
 * One file over 500 lines, as one concept: the pool's bounds, leases,
 * staleness, eviction-and-retry and invalidation act on one LRU and one set
 * of counters; the per-kind undo and the shared pool imports already live
 * beside it (mapping.ts, peer-pools.ts).
 *
 * HandlePool: the per-endpoint pool of mapped remote allocations, of every
 * kind (legacy CUDA IPC handles, VMM chunks and pool pointers imported by
 * descriptor).
 *
 * A receiver doing RGET asks the pool for a mapping of the sender's
 * allocation; the pool opens (imports) it once and hands the same mapping
 * out again while it stays valid. docs/cache.md walks through the design;
 * the short version:
 *
 *  - Keyed by (device UUID, base). An entry answers a request only if the
 *    kind, identity bytes (legacy: the handle), buffer id and size also
 *    match; otherwise it is stale (the owner freed and reallocated at that
 *    address) and is dropped.
 *  - Each entry knows its kind and so its undo (cache/mapping.ts); 'pool'
 *    entries share their peer pool's import (cache/peer-pools.ts).
 *  - Every resident entry, idle or in use, lives in one `LRUCache` (the
 *    lru-cache package): a hit is its `get`, which moves the entry to the
 *    most recent end. Its own bound is set out of reach (`maxSize` of
 *    MAX_SAFE_INTEGER entries), because lru-cache evicts the least recently
 *    used entry with no veto, even while a copy reads from it. The pool's
 *    bounds (entries and bytes) are enforced here: `#enforceBounds` walks
 *    `rvalues()` from the least recent end and evicts only entries no one
 *    holds. (Keeping only idle entries in the LRU would make its own bound
 *    safe, but then every hit takes the entry out and every release puts it
 *    back: a delete and a set per message instead of one `get`.)
 *  - Every way out of the pool (eviction, staleness, invalidation, close)
 *    is a `delete` on the LRU, and its `disposeAfter` hook (`#onLeave`, run
 *    once the entry has left) is the one release: an unused entry is closed
 *    there, an entry in use is closed when its last user releases it.
 *  - An open refused for lack of resources evicts and retries; concurrent
 *    misses on one allocation share one open.
 */
import { LRUCache } from 'lru-cache';
import type { DevicePtr, PoolHandle } from '../src/cuda/driver.js';
import { assertHandle, assertIpcHandle, assertPtr, assertSize } from '../src/cuda/validate.js';
import { ArgumentTypeError, ClosedError, CudaError, ProtocolError } from '../src/errors.js';
import type { HandlePoolEvent, HandlePoolEventListener } from './events.js';
import { type ExtentDriver, extentProblem } from './extent.js';
import {
  type DetachReason,
  type EntryOwner,
  type ImportRequest,
  Lease,
  MAPPING_KINDS,
  type Mapping,
  type MappingKind,
  type MappingRequest,
  type PeerPoolRef,
  PoolEntry,
  sameBytes,
} from './mapping.js';
import { type HandlePoolOptions, resolveBounds } from './options.js';
import { PeerPools, type PeerPool } from './peer-pools.js';
import { type HandlePoolStats, type KindStats, PoolCounters } from './stats.js';

/**
 * The IPC part of the CUDA driver that the pool needs. `Pick<CudaDriver,
 * 'ipcOpenMemHandle' | 'ipcCloseMemHandle'>` fits; the opener may also be
 * asynchronous.
 */
export interface IpcDriver {
  ipcOpenMemHandle(handle: Uint8Array): DevicePtr | PromiseLike<DevicePtr>;
  ipcCloseMemHandle(ptr: DevicePtr): void;
}

/**
 * The undo calls of the descriptor kinds (`CudaDriver` has them). A pool
 * made over an `IpcDriver` alone refuses 'vmm' and 'pool' requests with a
 * TypeError before opening anything.
 */
export interface FdUndoDriver {
  vmmRelease(ptr: DevicePtr): void;
  memPoolReleasePointer(ptr: DevicePtr): void;
  memPoolRelease(pool: PoolHandle): void;
}

/**
 * The driver the pool maps with. With `memGetAddressRange` (CudaDriver has
 * it), every mapping's real extent is checked before it
 * enters the pool (extent.ts); a mapping that does not hold what the peer
 * claims is closed at once and the acquire fails with SMCUDA_BAD_EXTENT.
 */
export type MappingDriver = IpcDriver & Partial<FdUndoDriver> & Partial<ExtentDriver>;

/** One resident mapping, as `entries()` describes it. */
export interface ResidentEntryInfo {
  kind: MappingKind;
  deviceUuid: string;
  base: bigint;
  size: number;
  bufferId: bigint;
  /** Local pointer of the mapping. */
  ptr: DevicePtr;
  /** Unreleased acquisitions. */
  users: number;
  /** 'pool': the peer pool's key. */
  peerPool?: string;
}

/** Open failures that mean "out of some resource": evicting may help, so the pool evicts and retries. */
export const RETRYABLE_OPEN_ERRORS: ReadonlySet<string> = new Set(['CUDA_ERROR_ALREADY_MAPPED', 'CUDA_ERROR_OUT_OF_MEMORY', 'CUDA_ERROR_TOO_MANY_PEERS']);

/** One open in flight; concurrent misses on the same allocation join it. */
interface PendingOpen {
  readonly kind: MappingKind;
  readonly deviceUuid: string;
  readonly base: bigint;
  readonly end: bigint;
  readonly size: number;
  /** Identity bytes (legacy: the IPC handle), a private copy. */
  readonly handle: Uint8Array;
  readonly bufferId: bigint;
  readonly open: (pool?: PoolHandle) => DevicePtr | PromiseLike<DevicePtr>;
  readonly peerPool: PeerPoolRef | undefined;
  readonly dispose: (() => void) | undefined;
  /** Acquisitions waiting for this open; the entry starts with this many references. */
  waiters: number;
  /** Invalidated while opening: the entry goes to the waiters but never into the pool. */
  dropped: boolean;
  promise: Promise<PoolEntry>;
}

type EvictWhy = 'entries' | 'bytes' | 'overlap' | 'lru';

export class HandlePool implements EntryOwner {
  readonly maxEntries: number;
  readonly maxBytes: number;

  readonly #driver: MappingDriver;
  readonly #peerPools: PeerPools;
  readonly #onEvent: HandlePoolEventListener | undefined;
  readonly #now: () => number;
  readonly #counters = new PoolCounters();
  /** Every resident entry, keyed by PoolEntry.key, in order of use. Never evicts by itself (see header). */
  readonly #lru: LRUCache<string, PoolEntry>;
  /** Resident entries by device, then base: the hit path looks up here without building a key string. */
  readonly #index = new Map<string, Map<bigint, PoolEntry>>();
  readonly #pending = new Map<string, PendingOpen>();
  /** Detached entries still held by a user: open, never handed out again, closed on last release. */
  readonly #detachedInUse = new Set<PoolEntry>();
  /** Per-kind opens and open mappings; the totals above are their sums. */
  readonly #byKind: Record<MappingKind, KindStats> = {
    'legacy-ipc': newKindStats(),
    vmm: newKindStats(),
    pool: newKindStats(),
  };
  #residentBytes = 0;
  #openMappings = 0;
  #mappedBytes = 0;
  #closed = false;

  constructor(driver: MappingDriver, options: HandlePoolOptions = {}) {
    const bounds = resolveBounds(options);
    this.maxEntries = bounds.maxEntries;
    this.maxBytes = bounds.maxBytes;
    this.#driver = driver;
    this.#onEvent = options.onEvent;
    this.#now = options.now ?? (() => performance.now());
    this.#peerPools = new PeerPools(
      (pool) => this.#driver.memPoolRelease!(pool),
      () => this.#counters.closeFailures++,
    );
    this.#lru = new LRUCache<string, PoolEntry>({
      // lru-cache insists on a bound; one it can never reach leaves every eviction to #enforceBounds.
      maxSize: Number.MAX_SAFE_INTEGER,
      sizeCalculation: ONE,
      disposeAfter: (entry) => this.#onLeave(entry),
    });
  }

  /** True once `close()` was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * The hot path: a valid resident mapping, referenced for the caller, or
   * undefined (nothing resident, or stale: then dropped and counted). Never
   * opens; on undefined call `acquire`.
   */
  lookup(req: MappingRequest): Mapping | undefined {
    return this.#lookup('legacy-ipc', req.deviceUuid, req.base, req.size, req.bufferId, req.handle);
  }

  /** `lookup` for a request of any kind: never opens, never calls `open` or `dispose`. */
  lookupImport(req: ImportRequest): Mapping | undefined {
    return this.#lookup(req.kind, req.deviceUuid, req.base, req.size, req.bufferId, req.identity ?? NO_IDENTITY);
  }

  /** `lookup` by the parts of a request, for a key of any kind (paths/open-remote.ts): nothing allocated on the way to a hit. */
  lookupKey(kind: MappingKind, deviceUuid: string, base: bigint, size: number, bufferId: bigint, identity: Uint8Array): Mapping | undefined {
    return this.#lookup(kind, deviceUuid, base, size, bufferId, identity);
  }

  #lookup(kind: MappingKind, deviceUuid: string, base: bigint, size: number, bufferId: bigint, identity: Uint8Array): Mapping | undefined {
    const entry = this.#index.get(deviceUuid)?.get(base);
    if (entry === undefined) return undefined;
    if (entry.matches(kind, bufferId, size, identity)) {
      entry.refs++;
      this.#lru.get(entry.key, TOUCH); // touch: most recently used
      this.#counters.hits++;
      if (this.#onEvent !== undefined) this.#trace('hit', entry);
      return new Lease(entry, this);
    }
    this.#detach(entry, 'stale');
    return undefined;
  }

  /** A mapping of the requested allocation: from the pool, or opened (and kept) now. */
  acquire(req: MappingRequest): Promise<Mapping> {
    return this.#acquire(
      {
        kind: 'legacy-ipc',
        deviceUuid: req.deviceUuid,
        base: req.base,
        size: req.size,
        bufferId: req.bufferId,
        identity: req.handle,
        open: OPEN_IPC_HANDLE,
      },
      () => checkRequest(req),
    );
  }

  /**
   * A lease on the mapping of a remote allocation of any kind: from the
   * pool, or opened now by `req.open` (and kept). `req.dispose` is called
   * exactly once, whatever happens (see ImportRequest). Failures of `open`
   * reach the caller as they are (after evict-and-retry for resource errors).
   */
  async acquireImport(req: ImportRequest): Promise<Mapping> {
    // Whoever no longer needs the request's descriptors disposes it: this call
    // (hit, join, refusal), or the open it starts (when that open is done).
    let owned = true;
    const release = (): void => {
      if (!owned) return;
      owned = false;
      if (req.dispose !== undefined) disposeSafely(req.dispose);
    };
    try {
      return await this.#acquire(req, () => checkImportRequest(req, this.#driver), {
        opening: () => (owned = false),
        joining: release,
      });
    } finally {
      release();
    }
  }

  /**
   * Drops the imported peer pool `key` because its owner destroyed it or the
   * peer went away: its resident pointer mappings are invalidated, and the
   * pool import is released (memPoolRelease) once the last of them is
   * released. A later request for that key imports the pool afresh.
   * Returns whether anything was dropped.
   */
  dropPeerPool(key: string): boolean {
    let dropped = false;
    for (const entry of [...this.#lru.values()]) {
      if (entry.peerPool?.key === key && !entry.peerPool.dropped) {
        this.#counters.invalidations++;
        if (this.#onEvent !== undefined) this.#trace('invalidate', entry);
        this.#detach(entry, 'invalidated');
        dropped = true;
      }
    }
    for (const [k, p] of this.#pending) {
      if (p.peerPool?.key === key) {
        this.#counters.invalidations++; // as invalidate() counts an open in flight
        if (this.#onEvent !== undefined) this.#trace('invalidate', p);
        p.dropped = true;
        this.#pending.delete(k);
        dropped = true;
      }
    }
    return this.#peerPools.drop(key) || dropped;
  }

  async #acquire(req: ImportRequest, check: () => void, hooks?: { opening(): void; joining(): void }): Promise<Mapping> {
    const identity = req.identity ?? NO_IDENTITY;
    for (;;) {
      if (this.#closed) throw new ClosedError('handle pool is closed (its endpoint closed or lost its peer); open a new endpoint');
      const hit = this.#lookup(req.kind, req.deviceUuid, req.base, req.size, req.bufferId, identity);
      if (hit !== undefined) return hit;
      check();
      const key = keyOf(req.deviceUuid, req.base);
      const pending = this.#pending.get(key);
      if (pending !== undefined && !pendingMatches(pending, req.kind, req.bufferId, req.size, identity)) {
        // Another allocation at this address is being opened: let it settle, then look again
        // (its entry will be stale for this request and be replaced).
        await pending.promise.catch(() => undefined);
        continue;
      }
      this.#counters.misses++;
      if (this.#onEvent !== undefined) this.#trace('miss', req);
      let open: PendingOpen;
      if (pending !== undefined) {
        pending.waiters++;
        open = pending;
        hooks?.joining(); // that open has its own descriptors: ours are not needed
      } else {
        hooks?.opening(); // the open now owns the request's dispose
        open = this.#startOpen(key, req, identity);
      }
      // The entry arrives with one reference per waiter already counted, so no
      // eviction between the open and this continuation can close it.
      return new Lease(await open.promise, this);
    }
  }

  /**
   * Drops the mapping of (deviceUuid, base) — of that buffer id only, if
   * given — because its owner freed it. Unused: closed now; in use: closed
   * on last release. Never handed out again. Returns whether anything was dropped.
   */
  invalidate(deviceUuid: string, base: bigint, bufferId?: bigint): boolean {
    let dropped = false;
    const entry = this.#index.get(deviceUuid)?.get(base);
    if (entry !== undefined && (bufferId === undefined || entry.bufferId === bufferId)) {
      this.#counters.invalidations++;
      if (this.#onEvent !== undefined) this.#trace('invalidate', entry);
      this.#detach(entry, 'invalidated');
      dropped = true;
    }
    const key = keyOf(deviceUuid, base);
    const pending = this.#pending.get(key);
    if (pending !== undefined && (bufferId === undefined || pending.bufferId === bufferId)) {
      this.#counters.invalidations++;
      if (this.#onEvent !== undefined) this.#trace('invalidate', pending);
      pending.dropped = true;
      this.#pending.delete(key);
      dropped = true;
    }
    return dropped;
  }

  /**
   * Closes every mapping (those in use when released) and refuses further
   * acquisitions with ClosedError. Opens in flight are closed when they
   * return. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const entry of [...this.#lru.values()]) this.#detach(entry, 'closed');
    this.#pending.clear();
    this.#peerPools.dropAll();
  }

  stats(): HandlePoolStats {
    let idle = 0;
    for (const entry of this.#lru.values()) if (entry.refs === 0) idle++;
    const c = this.#counters;
    return {
      hits: c.hits,
      misses: c.misses,
      stale: c.stale,
      evictions: c.evictions,
      invalidations: c.invalidations,
      openFailures: c.openFailures,
      closeFailures: c.closeFailures,
      extentRefusals: c.extentRefusals,
      opens: c.opens,
      closes: c.closes,
      openMappings: this.#openMappings,
      mappedBytes: this.#mappedBytes,
      residentEntries: this.#lru.size,
      residentBytes: this.#residentBytes,
      idleEntries: idle,
      totalOpenMs: c.totalOpenMs,
      lastOpenMs: c.lastOpenMs,
      importedPools: this.#peerPools.held,
      poolImports: this.#peerPools.imports,
      poolReleases: this.#peerPools.releases,
      byKind: {
        'legacy-ipc': { ...this.#byKind['legacy-ipc'] },
        vmm: { ...this.#byKind.vmm },
        pool: { ...this.#byKind.pool },
      },
    };
  }

  /** The resident mappings, least recently used first: for diagnostics and tests (allocates; not for the hot path). */
  entries(): ResidentEntryInfo[] {
    const out: ResidentEntryInfo[] = [];
    for (const e of this.#lru.rvalues()) {
      if (e === undefined) continue;
      const info: ResidentEntryInfo = { kind: e.kind, deviceUuid: e.deviceUuid, base: e.base, size: e.size, bufferId: e.bufferId, ptr: e.ptr, users: e.refs };
      if (e.peerPool !== undefined) info.peerPool = e.peerPool.key;
      out.push(info);
    }
    return out;
  }

  /** @internal Called by a Lease; use `Mapping.release()`. */
  releaseEntry(entry: PoolEntry): void {
    if (--entry.refs !== 0) return;
    if (!entry.resident) {
      this.#detachedInUse.delete(entry);
      this.#close(entry);
    } else if (entry.kind === 'pool') {
      // Not kept past its last use. CUDA requires every importer to free an imported pool pointer
      // before the exporter frees the allocation, and the exporter may free it (cuMemFree, cuMemFreeAsync,
      // without telling smcuda) as soon as its send completed, which is when the FIN gets there: the
      // receiver releases first (the FIN leaves in a later microtask: FinBatcher; a peer without FINS gets
      // its FIN just before, in the same synchronous run); a kept import was released only
      // after an INVALIDATE, which the owner sends just before its free, or never. The cost: each message
      // imports its pointer again (2 × H200: 256 MiB messages still ran at 99 % of a raw copy).
      this.#detach(entry, 'released');
    } else if (this.#overBounds()) {
      this.#enforceBounds();
    }
  }

  // -- opening -----------------------------------------------------------------

  #startOpen(key: string, req: ImportRequest, identity: Uint8Array): PendingOpen {
    const pending: PendingOpen = {
      kind: req.kind,
      deviceUuid: req.deviceUuid,
      base: req.base,
      end: req.base + BigInt(req.size),
      size: req.size,
      handle: Uint8Array.from(identity),
      bufferId: req.bufferId,
      open: undefined as unknown as PendingOpen['open'],
      peerPool: req.peerPool,
      dispose: req.dispose,
      waiters: 1,
      dropped: false,
      promise: undefined as unknown as Promise<PoolEntry>,
    };
    // The handle is opened from the private copy: a retry may come after the frame's bytes were reused.
    (pending as { open: PendingOpen['open'] }).open = req.open === OPEN_IPC_HANDLE ? () => this.#driver.ipcOpenMemHandle(pending.handle) : req.open;
    this.#pending.set(key, pending);
    pending.promise = this.#open(key, pending);
    return pending;
  }

  /** Opens, evicting and retrying on resource errors; stops when nothing more can be evicted. */
  async #open(key: string, p: PendingOpen): Promise<PoolEntry> {
    try {
      for (;;) {
        const t0 = this.#now();
        let ptr: DevicePtr;
        let peerPool: PeerPool | undefined;
        try {
          if (p.peerPool !== undefined) {
            peerPool = await this.#peerPools.hold(p.peerPool);
            try {
              ptr = await p.open(peerPool.handle);
            } catch (err) {
              this.#peerPools.unhold(peerPool);
              throw err;
            }
          } else {
            ptr = await p.open();
          }
        } catch (err) {
          const ms = this.#now() - t0;
          this.#counters.openFailures++;
          this.#counters.recordOpenTime(ms);
          const k = this.#byKind[p.kind];
          k.openFailures++;
          k.totalOpenMs += ms;
          k.lastOpenMs = ms;
          if (this.#onEvent !== undefined) this.#trace('open-failed', p, { code: codeOf(err), ms });
          if (this.#closed) throw new ClosedError(`handle pool closed while opening a ${p.kind} mapping`);
          if (!this.#makeRoomToRetry(p, err)) throw err;
          continue;
        }
        const ms = this.#now() - t0;
        this.#counters.opens++;
        this.#counters.recordOpenTime(ms);
        this.#openMappings++;
        this.#mappedBytes += p.size;
        const k = this.#byKind[p.kind];
        k.opens++;
        k.openMappings++;
        k.mappedBytes += p.size;
        k.totalOpenMs += ms;
        k.lastOpenMs = ms;
        const entry = new PoolEntry(key, p.kind, p.deviceUuid, p.base, p.size, p.handle, p.bufferId, ptr);
        entry.peerPool = peerPool;
        if (this.#onEvent !== undefined) this.#trace('open', entry, { ms });
        // The peer's word for the size bounds every later copy: check it once, here, for every kind.
        const d = this.#driver;
        const bad = d.memGetAddressRange !== undefined ? extentProblem(d as ExtentDriver, p.kind, ptr, p.size) : undefined;
        if (bad !== undefined) {
          entry.resident = false;
          entry.detachReason = 'invalidated';
          this.#counters.extentRefusals++;
          this.#close(entry);
          throw new ProtocolError(`${p.kind} mapping of 0x${p.base.toString(16)}: ${bad}`, 'SMCUDA_BAD_EXTENT');
        }
        if (this.#closed) {
          entry.resident = false;
          entry.detachReason = 'closed';
          this.#close(entry);
          throw new ClosedError(`handle pool closed while opening a ${p.kind} mapping`);
        }
        entry.refs = p.waiters;
        if (p.dropped || peerPool?.dropped === true) {
          entry.resident = false;
          entry.detachReason = 'invalidated';
          this.#detachedInUse.add(entry);
          return entry;
        }
        this.#insert(entry);
        if (this.#overBounds()) this.#enforceBounds();
        return entry;
      }
    } finally {
      if (this.#pending.get(key) === p) this.#pending.delete(key);
      if (p.dispose !== undefined) disposeSafely(p.dispose);
    }
  }

  /**
   * After a failed open: evict something that may let a retry succeed.
   * Overlapping entries first (two live allocations cannot overlap, so they
   * are stale), then the least recently used unused entry. False: the error
   * is not a resource error, or nothing evictable is left, or (ALREADY_MAPPED)
   * an overlapping mapping is still in use and no eviction can help.
   */
  #makeRoomToRetry(p: PendingOpen, err: unknown): boolean {
    if (!(err instanceof CudaError) || !RETRYABLE_OPEN_ERRORS.has(err.code)) return false;
    const byBase = this.#index.get(p.deviceUuid);
    // Overlap means staleness for legacy mappings only: descriptor imports of
    // one VMM range may overlap legitimately (each has its own reservation).
    if (byBase !== undefined && p.kind === 'legacy-ipc') {
      const overlapping = [...byBase.values()].filter((e) => e.kind === 'legacy-ipc' && e.overlaps(p.deviceUuid, p.base, p.end));
      let closedOne = false;
      for (const entry of overlapping) {
        if (entry.refs === 0) closedOne = true;
        this.#detach(entry, 'evicted', 'overlap');
      }
      if (closedOne) return true;
    }
    if (err.code === 'CUDA_ERROR_ALREADY_MAPPED' && p.kind === 'legacy-ipc') {
      for (const entry of this.#detachedInUse) if (entry.kind === 'legacy-ipc' && entry.overlaps(p.deviceUuid, p.base, p.end)) return false;
    }
    for (const entry of this.#lru.rvalues()) {
      if (entry !== undefined && entry.refs === 0) {
        this.#detach(entry, 'evicted', 'lru');
        return true;
      }
    }
    return false;
  }

  // -- residency ---------------------------------------------------------------

  #insert(entry: PoolEntry): void {
    let byBase = this.#index.get(entry.deviceUuid);
    if (byBase === undefined) this.#index.set(entry.deviceUuid, (byBase = new Map()));
    const previous = byBase.get(entry.base);
    if (previous !== undefined) this.#detach(previous, 'stale'); // defensive: the pending map prevents this
    byBase.set(entry.base, entry);
    this.#residentBytes += entry.size;
    this.#lru.set(entry.key, entry);
  }

  #overBounds(): boolean {
    return this.#lru.size > this.maxEntries || this.#residentBytes > this.maxBytes;
  }

  /** Evicts unused entries from the LRU end until within bounds; entries in use are skipped. */
  #enforceBounds(): void {
    let count = this.#lru.size;
    let bytes = this.#residentBytes;
    const victims: Array<[PoolEntry, EvictWhy]> = [];
    for (const entry of this.#lru.rvalues()) {
      const overEntries = count > this.maxEntries;
      if (!overEntries && bytes <= this.maxBytes) break;
      if (entry === undefined || entry.refs !== 0) continue;
      victims.push([entry, overEntries ? 'entries' : 'bytes']);
      count--;
      bytes -= entry.size;
    }
    for (const [entry, why] of victims) this.#detach(entry, 'evicted', why);
  }

  /** Takes an entry out of the pool for good; the dispose hook (#onLeave) does the rest. */
  #detach(entry: PoolEntry, reason: DetachReason, why?: EvictWhy): void {
    if (reason === 'stale') {
      this.#counters.stale++;
      if (this.#onEvent !== undefined) this.#trace('stale', entry);
    } else if (reason === 'evicted') {
      this.#counters.evictions++;
      if (this.#onEvent !== undefined) this.#trace('evict', entry, { reason: why });
    }
    entry.detachReason = reason;
    this.#lru.delete(entry.key);
  }

  /** The LRU's disposeAfter: the entry has left it. Close it now if unused, else on last release. */
  #onLeave(entry: PoolEntry): void {
    entry.resident = false;
    this.#residentBytes -= entry.size;
    const byBase = this.#index.get(entry.deviceUuid);
    if (byBase?.get(entry.base) === entry) byBase.delete(entry.base);
    if (entry.refs === 0) this.#close(entry);
    else this.#detachedInUse.add(entry);
  }

  #close(entry: PoolEntry): void {
    if (entry.closed) return;
    entry.closed = true;
    this.#openMappings--;
    this.#mappedBytes -= entry.size;
    this.#counters.closes++;
    const k = this.#byKind[entry.kind];
    k.openMappings--;
    k.mappedBytes -= entry.size;
    k.closes++;
    let code: string | undefined;
    try {
      if (entry.kind === 'legacy-ipc') this.#driver.ipcCloseMemHandle(entry.ptr);
      else if (entry.kind === 'vmm') this.#driver.vmmRelease!(entry.ptr);
      else this.#driver.memPoolReleasePointer!(entry.ptr);
    } catch (err) {
      // Nothing a caller could do: the mapping is forgotten either way.
      this.#counters.closeFailures++;
      code = codeOf(err);
    }
    // The pointer first: the driver refuses to release a pool with imported pointers left.
    if (entry.peerPool !== undefined) this.#peerPools.unhold(entry.peerPool);
    if (this.#onEvent !== undefined) this.#trace('close', entry, { reason: entry.detachReason, code });
  }

  // -- tracing -----------------------------------------------------------------

  #trace(
    type: HandlePoolEvent['type'],
    src: { kind?: MappingKind; deviceUuid: string; base: bigint; size: number; bufferId: bigint; ptr?: bigint },
    extra?: Pick<HandlePoolEvent, 'reason' | 'code' | 'ms'>,
  ): void {
    const event: HandlePoolEvent = {
      type,
      mappingKind: src.kind ?? 'legacy-ipc',
      deviceUuid: src.deviceUuid,
      base: src.base,
      size: src.size,
      bufferId: src.bufferId,
    };
    if (src.ptr !== undefined) event.ptr = src.ptr;
    if (extra?.reason !== undefined) event.reason = extra.reason;
    if (extra?.code !== undefined) event.code = extra.code;
    if (extra?.ms !== undefined) event.ms = extra.ms;
    try {
      this.#onEvent?.(event);
    } catch (err) {
      // A throwing listener must not leave the pool half-updated: report it outside.
      queueMicrotask(() => {
        throw err;
      });
    }
  }
}

function keyOf(deviceUuid: string, base: bigint): string {
  return `${deviceUuid}:${base.toString(16)}`;
}

const NO_IDENTITY = new Uint8Array(0);

/** Each entry counts one against the LRU's unreachable bound. */
const ONE = (): number => 1;
/** `get` options, made once: the default parameter would allocate an object on every hit. */
const TOUCH: LRUCache.GetOptions<string, PoolEntry, unknown> = {};

/** A throwing dispose must not change what the acquisition returns: its error is reported outside. */
function disposeSafely(dispose: () => void): void {
  try {
    dispose();
  } catch (err) {
    queueMicrotask(() => {
      throw err;
    });
  }
}

/** Marks a request from `acquire`: opened with the driver's cuIpcOpenMemHandle on the pending copy of the handle. */
const OPEN_IPC_HANDLE = (): never => {
  throw new Error('internal: OPEN_IPC_HANDLE is a marker, never called');
};

function newKindStats(): KindStats {
  return { opens: 0, openFailures: 0, closes: 0, openMappings: 0, mappedBytes: 0, totalOpenMs: 0, lastOpenMs: 0 };
}

function pendingMatches(p: PendingOpen, kind: MappingKind, bufferId: bigint, size: number, identity: Uint8Array): boolean {
  return p.kind === kind && p.bufferId === bufferId && p.size === size && sameBytes(p.handle, identity);
}

function codeOf(err: unknown): string | undefined {
  return err instanceof CudaError ? err.code : undefined;
}

/** Checked on the miss path only: a malformed request can never hit. */
function checkRequest(req: MappingRequest): void {
  if (typeof req.deviceUuid !== 'string' || req.deviceUuid.length === 0) {
    throw new ArgumentTypeError(`deviceUuid must be a non-empty string, got ${typeof req.deviceUuid}`);
  }
  assertPtr('base', req.base);
  assertSize('size', req.size);
  assertIpcHandle('handle', req.handle);
  assertHandle('bufferId', req.bufferId);
}

const UNDO: Record<Exclude<MappingKind, 'legacy-ipc'>, ReadonlyArray<keyof FdUndoDriver>> = {
  vmm: ['vmmRelease'],
  pool: ['memPoolReleasePointer', 'memPoolRelease'],
};

/** Checked on the miss path only, before anything is opened. */
function checkImportRequest(req: ImportRequest, driver: MappingDriver): void {
  if (!MAPPING_KINDS.includes(req.kind)) throw new ArgumentTypeError(`kind must be one of ${MAPPING_KINDS.join(', ')}, got ${String(req.kind)}`);
  if (typeof req.deviceUuid !== 'string' || req.deviceUuid.length === 0) {
    throw new ArgumentTypeError(`deviceUuid must be a non-empty string, got ${typeof req.deviceUuid}`);
  }
  assertPtr('base', req.base);
  assertSize('size', req.size);
  assertHandle('bufferId', req.bufferId);
  if (req.identity !== undefined && !(req.identity instanceof Uint8Array)) throw new ArgumentTypeError('identity must be a Uint8Array');
  if (typeof req.open !== 'function') throw new ArgumentTypeError('open must be a function that maps the allocation and returns its local pointer');
  if (req.kind === 'pool') {
    if (req.peerPool === undefined || typeof req.peerPool.key !== 'string' || typeof req.peerPool.open !== 'function') {
      throw new ArgumentTypeError("a 'pool' request needs peerPool: { key, open() } naming the peer's pool");
    }
  } else if (req.peerPool !== undefined) {
    throw new ArgumentTypeError(`peerPool is for 'pool' requests only, not '${req.kind}'`);
  }
  if (req.kind !== 'legacy-ipc') {
    const missing = UNDO[req.kind].filter((m) => typeof driver[m] !== 'function');
    if (missing.length > 0) {
      throw new ArgumentTypeError(`this handle pool's driver cannot undo a '${req.kind}' mapping (no ${missing.join(', ')}); give the pool a CudaDriver`);
    }
  }
}
