/**
 * Counters of one handle pool. The pool bumps plain number fields (cheap on
 * the hot path); `snapshot()` copies them into a plain object for callers.
 */

/** What `HandlePool.stats()` returns: a plain object, safe to keep or serialise. */
export interface HandlePoolStats {
  /** Requests answered from a valid resident mapping (lookup or acquire). */
  hits: number;
  /**
   * Acquisitions that found no valid mapping and waited for an open (theirs
   * or a concurrent one for the same allocation). A `lookup` that returns
   * undefined is not counted, so lookup-then-acquire counts one miss.
   */
  misses: number;
  /** Resident mappings found stale (handle bytes, buffer id or size differ from the request) and dropped. */
  stale: number;
  /** Resident mappings removed to respect the bounds or to make a failed open succeed. */
  evictions: number;
  /** Mappings dropped by `invalidate`. */
  invalidations: number;
  /** Driver open calls that threw (each attempt, retried or not). */
  openFailures: number;
  /** Driver close calls that threw (the mapping is forgotten anyway). */
  closeFailures: number;
  /** Opened mappings that did not hold the size the peer claimed: closed at once, never pooled (extent.ts). */
  extentRefusals: number;
  /** Successful driver opens. */
  opens: number;
  /** Driver closes (each open is closed exactly once). */
  closes: number;
  /** Mappings open now: resident ones plus detached ones still in use. */
  openMappings: number;
  /** Bytes of all open mappings (same set as `openMappings`). */
  mappedBytes: number;
  /** Mappings the pool can hand out. */
  residentEntries: number;
  /** Bytes of the resident mappings: what the bounds apply to. */
  residentBytes: number;
  /** Resident mappings no one holds: the only ones eviction may close. */
  idleEntries: number;
  /** Time spent in driver open calls, failed ones included, in milliseconds. */
  totalOpenMs: number;
  /** Duration of the latest driver open call, in milliseconds. */
  lastOpenMs: number;
  /** Peer pools imported and not yet released (shared by their 'pool' mappings). */
  importedPools: number;
  /** Peer pool imports made, and released. */
  poolImports: number;
  poolReleases: number;
  /** The opens, closes and open mappings above, per kind. */
  byKind: Record<'legacy-ipc' | 'vmm' | 'pool', KindStats>;
}

/** Per-kind part of HandlePoolStats. */
export interface KindStats {
  opens: number;
  /** Failed opens (a failed peer pool import counts for 'pool'). */
  openFailures: number;
  closes: number;
  openMappings: number;
  mappedBytes: number;
  /** Time in opens of this kind (failed ones included), in milliseconds. */
  totalOpenMs: number;
  lastOpenMs: number;
}

/** The counters the pool increments; the gauges (open/resident/idle) are computed by the pool. */
export class PoolCounters {
  hits = 0;
  misses = 0;
  stale = 0;
  evictions = 0;
  invalidations = 0;
  openFailures = 0;
  closeFailures = 0;
  extentRefusals = 0;
  opens = 0;
  closes = 0;
  totalOpenMs = 0;
  lastOpenMs = 0;

  recordOpenTime(ms: number): void {
    this.totalOpenMs += ms;
    this.lastOpenMs = ms;
  }
}
