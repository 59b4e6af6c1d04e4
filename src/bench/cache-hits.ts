/**
 * The cache suite's hit patterns: HandlePool lookup + release over many
 * resident mappings, in the orders a receiver sees them, each hit on a
 * different entry (the single-buffer figure hits the most recent one, which
 * the LRU moves nowhere):
 *
 *  - 'window': W buffers in turn, as a stream with a window of W outstanding
 *    sends brings them back: every hit is on the least recently used entry.
 *  - 'random': N buffers in a fixed pseudo-random order, the pool's entry
 *    bound raised to hold them all (the default keeps 64).
 *
 * Each request object is built once, as a frame decoder's would be reused;
 * the order is precomputed, so the loop measures the pool alone. Timed by
 * this process's CPU time (wall time beside it): a microsecond-scale loop on
 * a shared host otherwise measures the other processes.
 */
import { DEFAULT_MAX_ENTRIES, HandlePool, type MappingRequest } from '../../cache/index.js';
import type { CudaDriver } from '../cuda/driver.js';
import { ArgumentRangeError } from '../errors.js';
import type { ExportedBuffer } from './protocol.js';

export type HitPattern = 'window' | 'random';

/** Length of the precomputed order (a power of two: the loop masks its counter). */
const ORDER_LENGTH = 1 << 14;

/** ns per hit, one sample per batch: the pattern's, and the one-buffer hit's on the same pool. */
export interface HitPatternResult {
  /** CPU time of this process per hit: what the pool costs, not counting time the host gave other processes. */
  cpuNs: number[];
  /** Wall time per hit (with a loaded host, also the time this process waited for a CPU). */
  wallNs: number[];
  /** CPU time per hit of `reqs[0]` alone, again and again (the most recent entry: the LRU moves nothing). */
  sameCpuNs: number[];
}

export async function cacheHitPattern(
  driver: CudaDriver,
  buffers: ExportedBuffer[],
  pattern: HitPattern,
  batches: number,
  perBatch: number,
): Promise<HitPatternResult> {
  if (buffers.length < 2 || buffers.length > 0x10000) throw new ArgumentRangeError(`cache-hit-pattern needs 2 to 65536 buffers, got ${buffers.length}`);
  const pool = new HandlePool(driver, { maxEntries: Math.max(DEFAULT_MAX_ENTRIES, buffers.length) });
  const reqs: MappingRequest[] = buffers.map((b) => ({ deviceUuid: b.deviceUuid, base: b.base, size: b.size, handle: b.handle, bufferId: b.bufferId }));
  try {
    for (const r of reqs) (await pool.acquire(r)).release();
    const same = timeHits(pool, reqs, new Uint16Array(ORDER_LENGTH), batches, perBatch);
    const hits = timeHits(pool, reqs, hitOrder(pattern, reqs.length), batches, perBatch);
    const s = pool.stats();
    // Every lookup must have been a hit on a resident entry, or the figure is not a hit's cost.
    if (s.hits !== 2 * (batches + 1) * perBatch || s.opens !== reqs.length || s.evictions !== 0 || s.stale !== 0) {
      throw new Error(
        `cache-hit-pattern ${pattern}: expected only hits over ${reqs.length} resident mappings, got ${JSON.stringify({ hits: s.hits, opens: s.opens, evictions: s.evictions, stale: s.stale })}`,
      );
    }
    return { cpuNs: hits.cpu, wallNs: hits.wall, sameCpuNs: same.cpu };
  } finally {
    pool.close();
  }
}

/** lookup + release of reqs[order[k]] in turn; the first batch warms the JIT and is dropped. */
function timeHits(pool: HandlePool, reqs: MappingRequest[], order: Uint16Array, batches: number, perBatch: number): { cpu: number[]; wall: number[] } {
  const mask = ORDER_LENGTH - 1;
  const cpu: number[] = [];
  const wall: number[] = [];
  let k = 0;
  for (let b = 0; b <= batches; b++) {
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < perBatch; i++) pool.lookup(reqs[order[k++ & mask]!]!)!.release();
    const ns = Number(process.hrtime.bigint() - t0) / perBatch;
    const c = process.cpuUsage(c0);
    if (b > 0) {
      wall.push(ns);
      cpu.push(((c.user + c.system) * 1000) / perBatch);
    }
  }
  return { cpu, wall };
}

/** Indexes into the buffers: round robin, or uniformly random from a fixed seed (mulberry32), the same every run. */
export function hitOrder(pattern: HitPattern, n: number): Uint16Array {
  const order = new Uint16Array(ORDER_LENGTH);
  if (pattern === 'window') {
    for (let i = 0; i < ORDER_LENGTH; i++) order[i] = i % n;
    return order;
  }
  let seed = 0x5eed;
  for (let i = 0; i < ORDER_LENGTH; i++) {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    order[i] = Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * n);
  }
  return order;
}
