/**
 * HandlePool: the per-endpoint pool of opened remote CUDA IPC handles.
 *
 * A receiver doing RGET asks the pool for a mapping of the sender's
 * allocation; the pool opens the IPC handle once and hands the same mapping
 * out again while it stays valid. docs/cache.md walks through the design;
 * the short version:
 *
 *  - Keyed by (device UUID, base). An entry answers a request only if the
 *    handle bytes, buffer id and size also match; otherwise it is stale
 *    (the owner freed and reallocated at that address) and is dropped.
 *  - Recency comes from lru-cache. Eviction is ours: lru-cache's own `max`
 *    would evict the least recently used entry even while a copy uses it,
 *    and its `dispose` cannot veto. So lru-cache is configured with no
 *    effective bound, and `#enforceBounds` walks it from the LRU end,
 *    skipping entries in use.
 *  - Every way out of the pool (eviction, staleness, invalidation, close)
 *    goes through lru-cache's `dispose`: an unused entry is closed there, an
 *    entry in use is closed when its last user releases it.
 *  - An open refused for lack of resources evicts and retries; concurrent
 *    misses on one allocation share one open.
 */
import { LRUCache } from 'lru-cache';
import type { DevicePtr } from '../src/cuda/driver.js';
import { assertHandle, assertIpcHandle, assertPtr, assertSize } from '../src/cuda/validate.js';
import { ClosedError, CudaError } from '../src/errors.js';
import type { HandlePoolEvent, HandlePoolEventListener } from './events.js';
import { type DetachReason, type EntryOwner, Lease, type Mapping, type MappingRequest, PoolEntry, sameBytes } from './mapping.js';
import { type HandlePoolOptions, resolveBounds } from './options.js';
import { type HandlePoolStats, PoolCounters } from './stats.js';

/**
 * The IPC part of the CUDA driver that the pool needs. `Pick<CudaDriver,
 * 'ipcOpenMemHandle' | 'ipcCloseMemHandle'>` fits; the opener may also be
 * asynchronous.
 */
export interface IpcDriver {
  ipcOpenMemHandle(handle: Uint8Array): DevicePtr | PromiseLike<DevicePtr>;
  ipcCloseMemHandle(ptr: DevicePtr): void;
}

/** One resident mapping, as `entries()` describes it. */
export interface ResidentEntryInfo {
  deviceUuid: string;
  base: bigint;
  size: number;
  bufferId: bigint;
  /** Local pointer of the mapping. */
  ptr: DevicePtr;
  /** Unreleased acquisitions. */
  users: number;
}

/** Open failures that mean "out of some resource": evicting may help, so the pool evicts and retries. */
export const RETRYABLE_OPEN_ERRORS: ReadonlySet<string> = new Set([
  'CUDA_ERROR_ALREADY_MAPPED',
  'CUDA_ERROR_OUT_OF_MEMORY',
  'CUDA_ERROR_TOO_MANY_PEERS',
]);

/** One open in flight; concurrent misses on the same allocation join it. */
interface PendingOpen {
  readonly deviceUuid: string;
  readonly base: bigint;
  readonly end: bigint;
  readonly size: number;
  readonly handle: Uint8Array;
  readonly bufferId: bigint;
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

  readonly #driver: IpcDriver;
  readonly #onEvent: HandlePoolEventListener | undefined;
  readonly #now: () => number;
  readonly #counters = new PoolCounters();
  /** Recency of resident entries, keyed by PoolEntry.key. Never evicts by itself (see header). */
  readonly #lru: LRUCache<string, PoolEntry>;
  /** Resident entries by device, then base: the hit path looks up here without building a key string. */
  readonly #index = new Map<string, Map<bigint, PoolEntry>>();
  readonly #pending = new Map<string, PendingOpen>();
  /** Detached entries still held by a user: open, never handed out again, closed on last release. */
  readonly #detachedInUse = new Set<PoolEntry>();
  #residentBytes = 0;
  #openMappings = 0;
  #mappedBytes = 0;
  #closed = false;

  constructor(driver: IpcDriver, options: HandlePoolOptions = {}) {
    const bounds = resolveBounds(options);
    this.maxEntries = bounds.maxEntries;
    this.maxBytes = bounds.maxBytes;
    this.#driver = driver;
    this.#onEvent = options.onEvent;
    this.#now = options.now ?? (() => performance.now());
    this.#lru = new LRUCache<string, PoolEntry>({
      // lru-cache insists on a bound; this one is never reached. Ours are in #enforceBounds.
      maxSize: Number.MAX_SAFE_INTEGER,
      sizeCalculation: () => 1,
      dispose: (entry) => this.#onLeave(entry),
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
    const entry = this.#index.get(req.deviceUuid)?.get(req.base);
    if (entry === undefined) return undefined;
    if (entry.matches(req)) {
      entry.refs++;
      this.#lru.get(entry.key); // touch: most recently used
      this.#counters.hits++;
      if (this.#onEvent !== undefined) this.#trace('hit', entry);
      return new Lease(entry, this);
    }
    this.#detach(entry, 'stale');
    return undefined;
  }

  /** A mapping of the requested allocation: from the pool, or opened (and kept) now. */
  async acquire(req: MappingRequest): Promise<Mapping> {
    for (;;) {
      if (this.#closed) throw new ClosedError('handle pool is closed (its endpoint closed or lost its peer); open a new endpoint');
      const hit = this.lookup(req);
      if (hit !== undefined) return hit;
      checkRequest(req);
      const key = keyOf(req.deviceUuid, req.base);
      const pending = this.#pending.get(key);
      if (pending !== undefined && !pendingMatches(pending, req)) {
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
      } else {
        open = this.#startOpen(key, req);
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
      opens: c.opens,
      closes: c.closes,
      openMappings: this.#openMappings,
      mappedBytes: this.#mappedBytes,
      residentEntries: this.#lru.size,
      residentBytes: this.#residentBytes,
      idleEntries: idle,
      totalOpenMs: c.totalOpenMs,
      lastOpenMs: c.lastOpenMs,
    };
  }

  /** The resident mappings, least recently used first: for diagnostics and tests (allocates; not for the hot path). */
  entries(): ResidentEntryInfo[] {
    const out: ResidentEntryInfo[] = [];
    for (const e of this.#lru.rvalues()) {
      if (e !== undefined) out.push({ deviceUuid: e.deviceUuid, base: e.base, size: e.size, bufferId: e.bufferId, ptr: e.ptr, users: e.refs });
    }
    return out;
  }

  /** @internal Called by a Lease; use `Mapping.release()`. */
  releaseEntry(entry: PoolEntry): void {
    if (--entry.refs !== 0) return;
    if (!entry.resident) {
      this.#detachedInUse.delete(entry);
      this.#close(entry);
    } else if (this.#overBounds()) {
      this.#enforceBounds();
    }
  }

  // -- opening -----------------------------------------------------------------

  #startOpen(key: string, req: MappingRequest): PendingOpen {
    const pending: PendingOpen = {
      deviceUuid: req.deviceUuid,
      base: req.base,
      end: req.base + BigInt(req.size),
      size: req.size,
      handle: Uint8Array.from(req.handle),
      bufferId: req.bufferId,
      waiters: 1,
      dropped: false,
      promise: undefined as unknown as Promise<PoolEntry>,
    };
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
        try {
          ptr = await this.#driver.ipcOpenMemHandle(p.handle);
        } catch (err) {
          const ms = this.#now() - t0;
          this.#counters.openFailures++;
          this.#counters.recordOpenTime(ms);
          if (this.#onEvent !== undefined) this.#trace('open-failed', p, { code: codeOf(err), ms });
          if (this.#closed) throw new ClosedError('handle pool closed while opening an IPC handle');
          if (!this.#makeRoomToRetry(p, err)) throw err;
          continue;
        }
        const ms = this.#now() - t0;
        this.#counters.opens++;
        this.#counters.recordOpenTime(ms);
        this.#openMappings++;
        this.#mappedBytes += p.size;
        const entry = new PoolEntry(key, p.deviceUuid, p.base, p.size, p.handle, p.bufferId, ptr);
        if (this.#onEvent !== undefined) this.#trace('open', entry, { ms });
        if (this.#closed) {
          entry.resident = false;
          entry.detachReason = 'closed';
          this.#close(entry);
          throw new ClosedError('handle pool closed while opening an IPC handle');
        }
        entry.refs = p.waiters;
        if (p.dropped) {
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
    if (byBase !== undefined) {
      const overlapping = [...byBase.values()].filter((e) => e.overlaps(p.deviceUuid, p.base, p.end));
      let closedOne = false;
      for (const entry of overlapping) {
        if (entry.refs === 0) closedOne = true;
        this.#detach(entry, 'evicted', 'overlap');
      }
      if (closedOne) return true;
    }
    if (err.code === 'CUDA_ERROR_ALREADY_MAPPED') {
      for (const entry of this.#detachedInUse) if (entry.overlaps(p.deviceUuid, p.base, p.end)) return false;
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

  /** lru-cache dispose: the entry left the LRU. Close it now if unused, else on last release. */
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
    let code: string | undefined;
    try {
      this.#driver.ipcCloseMemHandle(entry.ptr);
    } catch (err) {
      // Nothing a caller could do: the mapping is forgotten either way.
      this.#counters.closeFailures++;
      code = codeOf(err);
    }
    if (this.#onEvent !== undefined) this.#trace('close', entry, { reason: entry.detachReason, code });
  }

  // -- tracing -----------------------------------------------------------------

  #trace(
    type: HandlePoolEvent['type'],
    src: { deviceUuid: string; base: bigint; size: number; bufferId: bigint; ptr?: bigint },
    extra?: Pick<HandlePoolEvent, 'reason' | 'code' | 'ms'>,
  ): void {
    const event: HandlePoolEvent = { type, deviceUuid: src.deviceUuid, base: src.base, size: src.size, bufferId: src.bufferId };
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

function pendingMatches(p: PendingOpen, req: MappingRequest): boolean {
  return p.bufferId === req.bufferId && p.size === req.size && sameBytes(p.handle, req.handle);
}

function codeOf(err: unknown): string | undefined {
  return err instanceof CudaError ? err.code : undefined;
}

/** Checked on the miss path only: a malformed request can never hit. */
function checkRequest(req: MappingRequest): void {
  if (typeof req.deviceUuid !== 'string' || req.deviceUuid.length === 0) {
    throw new TypeError(`deviceUuid must be a non-empty string, got ${typeof req.deviceUuid}`);
  }
  assertPtr('base', req.base);
  assertSize('size', req.size);
  assertIpcHandle('handle', req.handle);
  assertHandle('bufferId', req.bufferId);
}
