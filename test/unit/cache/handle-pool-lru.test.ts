/**
 * The handle pool on lru-cache: every resident entry lives in one LRUCache
 * whose own bound is out of reach, and the pool evicts only idle entries,
 * least recently used first. Checked here:
 *  - against a model that is just a recency list and reference counts
 *    (fast-check): after every acquire, hit and release, the resident
 *    entries in LRU order with their users, the counters, the bounds
 *    invariant, nothing in use unmapped; at the end every open closed once;
 *  - the LRU never evicts by itself: far more entries in use than the
 *    bounds allow all stay mapped until released;
 *  - a window of buffers in turn, each hit on the least recent entry, keeps
 *    the rotation order and opens nothing after the first round;
 *  - the one release path runs after the entry has left: a listener sees
 *    the pool without it.
 */
import { describe, expect, it } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import { HandlePool, type HandlePoolEvent, type HandlePoolOptions, type Mapping } from '../../../cache/index.js';
import { FakeIpcDriver, type RemoteAlloc } from '../../helpers/fake-ipc-driver.js';

const GPU0 = 'GPU-00000000-0000-0000-0000-000000000000';
const MiB = 1 << 20;
const X = 0x7000_0000_0000n;

function setup(options?: HandlePoolOptions, sizes: number[] = []) {
  const fake = new FakeIpcDriver();
  const pool = new HandlePool(fake, options);
  /** Allocations 1 GiB apart, so they never overlap. */
  const allocs = sizes.map((size, i) => fake.allocate(GPU0, X + BigInt(i) * 0x4000_0000n, size));
  return { fake, pool, allocs };
}

// -- the model ------------------------------------------------------------------

interface Model {
  /** Resident allocation indexes, least recently used first. */
  recency: number[];
  refs: Map<number, number>;
  hits: number;
  misses: number;
  evictions: number;
}

function residentBytes(m: Model, sizes: number[]): number {
  return m.recency.reduce((sum, i) => sum + sizes[i]!, 0);
}

/** The pool's rule: walk from the least recent end, evict idle entries until within both bounds. */
function enforce(m: Model, sizes: number[], maxEntries: number, maxBytes: number): void {
  let count = m.recency.length;
  let bytes = residentBytes(m, sizes);
  const victims: number[] = [];
  for (const i of m.recency) {
    if (count <= maxEntries && bytes <= maxBytes) break;
    if (m.refs.get(i)! !== 0) continue;
    victims.push(i);
    count--;
    bytes -= sizes[i]!;
  }
  for (const v of victims) {
    m.recency.splice(m.recency.indexOf(v), 1);
    m.refs.delete(v);
    m.evictions++;
  }
}

const command = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant('acquire' as const), which: fc.nat(9) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('release' as const), which: fc.nat(99) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('rotate' as const), window: fc.integer({ min: 2, max: 10 }), rounds: fc.integer({ min: 1, max: 3 }) }) },
);

describe('HandlePool on lru-cache: against a recency-list model', () => {
  test.prop(
    [
      fc.array(
        fc.integer({ min: 1, max: 4 }).map((u) => u * MiB),
        { minLength: 10, maxLength: 10 },
      ),
      fc.integer({ min: 0, max: 6 }),
      fc.integer({ min: 1, max: 16 }).map((u) => u * MiB),
      fc.array(command, { minLength: 1, maxLength: 60 }),
    ],
    { numRuns: 200 },
  )('keeps recency, bounds and counters of the model; nothing in use is closed; every open closed once', async (sizes, maxEntries, maxBytes, cmds) => {
    const { fake, pool, allocs } = setup({ maxEntries, maxBytes }, sizes);
    const m: Model = { recency: [], refs: new Map(), hits: 0, misses: 0, evictions: 0 };
    const held: Array<{ i: number; lease: Mapping }> = [];

    const acquire = async (i: number): Promise<void> => {
      const lease = pool.lookup(fake.request(allocs[i]!)) ?? (await pool.acquire(fake.request(allocs[i]!)));
      held.push({ i, lease });
      if (m.refs.has(i)) {
        m.hits++;
        m.recency.splice(m.recency.indexOf(i), 1);
      } else {
        m.misses++;
      }
      m.recency.push(i);
      m.refs.set(i, (m.refs.get(i) ?? 0) + 1);
      enforce(m, sizes, maxEntries, maxBytes);
    };
    const release = (k: number): void => {
      const [{ i, lease }] = held.splice(k, 1) as [{ i: number; lease: Mapping }];
      lease.release();
      m.refs.set(i, m.refs.get(i)! - 1);
      if (m.refs.get(i) === 0) enforce(m, sizes, maxEntries, maxBytes);
    };

    for (const c of cmds) {
      if (c.op === 'acquire') await acquire(c.which);
      else if (c.op === 'release') {
        if (held.length > 0) release(c.which % held.length);
      } else {
        // A stream's window: acquire and release buffers 0..window-1 in turn.
        for (let r = 0; r < c.rounds; r++) {
          for (let i = 0; i < c.window; i++) {
            await acquire(i);
            release(held.length - 1);
          }
        }
      }
      const entries = pool.entries();
      expect(entries.map((e) => allocs.findIndex((a) => a.base === e.base))).toEqual(m.recency);
      expect(entries.map((e) => e.users)).toEqual(m.recency.map((i) => m.refs.get(i)));
      const s = pool.stats();
      expect({ hits: s.hits, misses: s.misses, evictions: s.evictions, opens: s.opens }).toEqual({
        hits: m.hits,
        misses: m.misses,
        evictions: m.evictions,
        opens: m.misses,
      });
      expect(s.closes).toBe(m.evictions);
      expect(s.residentBytes).toBe(residentBytes(m, sizes));
      expect(s.idleEntries).toBe(m.recency.filter((i) => m.refs.get(i) === 0).length);
      // Bounds: within both, or every resident entry in use.
      expect((s.residentEntries <= maxEntries && s.residentBytes <= maxBytes) || s.idleEntries === 0).toBe(true);
      for (const { lease } of held) expect(fake.isMapped(lease.ptr)).toBe(true);
      expect(fake.mappedCount).toBe(s.openMappings);
    }

    for (const { lease } of held.splice(0)) lease.release();
    pool.close();
    const s = pool.stats();
    expect(s.closes).toBe(s.opens);
    expect(fake.mappedCount).toBe(0);
    expect(fake.badCloses).toEqual([]);
  });
});

describe('HandlePool on lru-cache: the LRU never evicts by itself', () => {
  it('keeps 300 mappings in use mapped with maxEntries 2, and evicts down to the 2 most recent on release', async () => {
    const n = 300;
    const { fake, pool, allocs } = setup(
      { maxEntries: 2 },
      Array.from({ length: n }, () => MiB),
    );
    const leases: Mapping[] = [];
    for (const a of allocs) leases.push(await pool.acquire(fake.request(a)));
    expect(pool.stats()).toMatchObject({ residentEntries: n, idleEntries: 0, evictions: 0, openMappings: n });
    for (const l of leases) expect(fake.isMapped(l.ptr)).toBe(true);
    for (const l of leases) l.release();
    expect(pool.stats()).toMatchObject({ residentEntries: 2, evictions: n - 2, closes: n - 2 });
    expect(pool.entries().map((e) => e.base)).toEqual([allocs[n - 2]!.base, allocs[n - 1]!.base]);
    pool.close();
    expect(fake.mappedCount).toBe(0);
  });

  it('with the bounds off, holds every mapping however many', async () => {
    const n = 500;
    const { fake, pool, allocs } = setup(
      { unlimited: true },
      Array.from({ length: n }, () => 2 * MiB),
    );
    for (const a of allocs) (await pool.acquire(fake.request(a))).release();
    expect(pool.stats()).toMatchObject({ residentEntries: n, idleEntries: n, evictions: 0, residentBytes: n * 2 * MiB });
    pool.close();
    expect(fake.mappedCount).toBe(0);
  });
});

describe('HandlePool on lru-cache: a window of buffers in turn', () => {
  it('hits the least recent entry each time, keeps the rotation order and opens nothing after the first round', async () => {
    const w = 8;
    const { fake, pool, allocs } = setup(
      { maxEntries: w },
      Array.from({ length: w + 1 }, () => MiB),
    );
    const reqs = allocs.slice(0, w).map((a) => fake.request(a));
    for (const r of reqs) (await pool.acquire(r)).release();
    for (let k = 0; k < 10 * w + 3; k++) {
      const r = reqs[k % w]!;
      expect(pool.entries()[0]!.base).toBe(r.base); // the next in turn is the least recent
      pool.lookup(r)!.release();
    }
    expect(pool.stats()).toMatchObject({ opens: w, hits: 10 * w + 3, evictions: 0 });
    // Buffer 3 held while the others go round once: it is the least recent, in use, so a ninth buffer evicts buffer 4.
    const held = pool.lookup(reqs[3]!)!;
    for (const i of [4, 5, 6, 7, 0, 1, 2]) pool.lookup(reqs[i]!)!.release();
    expect(pool.entries()[0]).toMatchObject({ base: reqs[3]!.base, users: 1 });
    (await pool.acquire(fake.request(allocs[w]!))).release();
    expect(fake.isMapped(held.ptr)).toBe(true);
    expect(pool.entries().map((e) => allocs.findIndex((a) => a.base === e.base))).toEqual([3, 5, 6, 7, 0, 1, 2, 8]);
    held.release();
    pool.close();
    expect(fake.mappedCount).toBe(0);
  });
});

describe('HandlePool on lru-cache: the one release runs after the entry has left', () => {
  it('a close event sees the pool without the entry, for eviction, staleness, invalidation and close', async () => {
    const seen: Array<{ reason: HandlePoolEvent['reason']; resident: number; listed: boolean }> = [];
    const fake = new FakeIpcDriver();
    const pool: HandlePool = new HandlePool(fake, {
      maxEntries: 2,
      onEvent: (ev) => {
        if (ev.type !== 'close') return;
        seen.push({ reason: ev.reason, resident: pool.stats().residentEntries, listed: pool.entries().some((e) => e.base === ev.base) });
      },
    });
    const allocs: RemoteAlloc[] = [0, 1, 2, 3].map((i) => fake.allocate(GPU0, X + BigInt(i) * 0x4000_0000n, MiB));
    for (const a of allocs.slice(0, 3)) (await pool.acquire(fake.request(a))).release(); // evicts 0
    const fresh = fake.realloc(allocs[1]!);
    expect(pool.lookup(fake.request(fresh))).toBeUndefined(); // 1 is stale
    pool.invalidate(GPU0, allocs[2]!.base); // 2 invalidated
    (await pool.acquire(fake.request(allocs[3]!))).release();
    pool.close(); // 3 closed
    expect(seen).toEqual([
      { reason: 'evicted', resident: 2, listed: false },
      { reason: 'stale', resident: 1, listed: false },
      { reason: 'invalidated', resident: 0, listed: false },
      { reason: 'closed', resident: 0, listed: false },
    ]);
  });
});
