import { describe, expect, it } from 'vitest';
import { DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, HandlePool, type HandlePoolEvent, type HandlePoolOptions, type MappingRequest } from '../../../cache/index.js';
import { ClosedError, ConfigError, CudaError } from '../../../src/errors.js';
import { FakeIpcDriver, type FakeIpcDriverOptions, type RemoteAlloc } from '../../helpers/fake-ipc-driver.js';

const GPU0 = 'GPU-00000000-0000-0000-0000-000000000000';
const GPU1 = 'GPU-11111111-1111-1111-1111-111111111111';
const MiB = 1 << 20;
const X = 0x7000_0000_0000n;

function setup(options?: HandlePoolOptions, fakeOptions?: FakeIpcDriverOptions) {
  const fake = new FakeIpcDriver(fakeOptions);
  const pool = new HandlePool(fake, options);
  /** Allocations at X, X + 1 GiB, ... so they never overlap. */
  const allocs = (n: number, size = MiB, device = GPU0): RemoteAlloc[] =>
    Array.from({ length: n }, (_, i) => fake.allocate(device, X + BigInt(i) * 0x4000_0000n, size));
  /** Acquire and release at once: leaves the mapping idle in the pool. */
  const touch = async (alloc: RemoteAlloc) => {
    const m = await pool.acquire(fake.request(alloc));
    m.release();
    return m.ptr;
  };
  return { fake, pool, allocs, touch };
}

describe('HandlePool: hits and misses', () => {
  it('opens once and hands the same mapping out again', async () => {
    const { fake, pool, allocs } = setup();
    const [a] = allocs(1);
    expect(pool.lookup(fake.request(a!))).toBeUndefined();
    const m1 = await pool.acquire(fake.request(a!));
    const m2 = pool.lookup(fake.request(a!));
    expect(m2?.ptr).toBe(m1.ptr);
    expect(m1.size).toBe(MiB);
    expect(fake.allocAt(m1.ptr)).toBe(a);
    expect(fake.openCalls).toBe(1);
    const s = pool.stats();
    expect([s.hits, s.misses, s.opens, s.openMappings, s.mappedBytes]).toEqual([1, 1, 1, 1, MiB]);
  });

  it('release is idempotent per acquisition', async () => {
    const { pool, allocs, fake } = setup({ maxEntries: 0 });
    const [a] = allocs(1);
    const m1 = await pool.acquire(fake.request(a!));
    const m2 = pool.lookup(fake.request(a!))!;
    m1.release();
    m1.release(); // must not take m2's reference
    expect(fake.isMapped(m2.ptr)).toBe(true);
    m2.release();
    expect(fake.isMapped(m2.ptr)).toBe(false);
  });

  it('matches handles wherever their bytes sit (aligned or not)', async () => {
    const { pool, allocs, fake } = setup();
    const [a] = allocs(1);
    (await pool.acquire(fake.request(a!))).release();
    for (const offset of [0, 1, 2, 4]) {
      const backing = new Uint8Array(64 + 8);
      backing.set(a!.handle, offset);
      const m = pool.lookup({ ...fake.request(a!), handle: backing.subarray(offset, offset + 64) });
      expect(m?.ptr).toBeDefined();
      m!.release();
    }
    expect(pool.stats()).toMatchObject({ hits: 4, stale: 0 });
  });

  it('checks requests on the miss path', async () => {
    const { pool, allocs, fake } = setup();
    const [a] = allocs(1);
    const bad = { ...fake.request(a!), handle: new Uint8Array(10) };
    expect(pool.lookup(bad)).toBeUndefined();
    await expect(pool.acquire(bad)).rejects.toThrow(RangeError);
    await expect(pool.acquire({ ...fake.request(a!), base: 5 as unknown as bigint })).rejects.toThrow(TypeError);
    expect(fake.openCalls).toBe(0);
  });
});

describe('HandlePool: bounds', () => {
  it('has bounded defaults', () => {
    const pool = new HandlePool(new FakeIpcDriver());
    expect([pool.maxEntries, pool.maxBytes]).toEqual([DEFAULT_MAX_ENTRIES, DEFAULT_MAX_BYTES]);
    expect(DEFAULT_MAX_ENTRIES).toBe(64);
    expect(DEFAULT_MAX_BYTES).toBe(16 * 1024 ** 3);
  });

  it('evicts by count, least recently used first', async () => {
    const { pool, allocs, touch, fake } = setup({ maxEntries: 2 });
    const [a, b, c] = allocs(3);
    const pa = await touch(a!);
    await touch(b!);
    await touch(c!);
    expect(fake.isMapped(pa)).toBe(false);
    expect(pool.lookup(fake.request(a!))).toBeUndefined();
    const s = pool.stats();
    expect([s.evictions, s.residentEntries, s.openMappings, s.closes]).toEqual([1, 2, 2, 1]);
  });

  it('evicts by mapped bytes', async () => {
    const { pool, allocs, touch, fake } = setup({ maxBytes: 3 * MiB });
    const [a, b] = allocs(2, 2 * MiB);
    const pa = await touch(a!);
    const pb = await touch(b!);
    expect(fake.isMapped(pa)).toBe(false);
    expect(fake.isMapped(pb)).toBe(true);
    expect(pool.stats()).toMatchObject({ evictions: 1, residentBytes: 2 * MiB, mappedBytes: 2 * MiB });
  });

  it('follows recency: a hit makes an entry the most recently used', async () => {
    const { pool, allocs, touch, fake } = setup({ maxEntries: 3 });
    const [a, b, c, d] = allocs(4);
    const pa = await touch(a!);
    const pb = await touch(b!);
    await touch(c!);
    pool.lookup(fake.request(a!))!.release();
    await touch(d!);
    expect(fake.isMapped(pb)).toBe(false);
    expect(fake.isMapped(pa)).toBe(true);
  });

  it('never evicts an entry in use, even the least recently used one', async () => {
    const { pool, allocs, touch, fake } = setup({ maxEntries: 2 });
    const [a, b, c] = allocs(3);
    const held = await pool.acquire(fake.request(a!));
    const pb = await touch(b!);
    await touch(c!);
    expect(fake.isMapped(held.ptr)).toBe(true);
    expect(fake.isMapped(pb)).toBe(false);
    expect(pool.lookup(fake.request(a!))?.ptr).toBe(held.ptr);
  });

  it('exceeds the bounds only with entries in use, and evicts on release', async () => {
    const { pool, allocs, fake } = setup({ maxEntries: 1 });
    const [a, b] = allocs(2);
    const ma = await pool.acquire(fake.request(a!));
    const mb = await pool.acquire(fake.request(b!));
    expect(pool.stats()).toMatchObject({ residentEntries: 2, idleEntries: 0, evictions: 0 });
    ma.release();
    expect(fake.isMapped(ma.ptr)).toBe(false);
    expect(pool.stats()).toMatchObject({ residentEntries: 1, evictions: 1 });
    mb.release();
    expect(fake.isMapped(mb.ptr)).toBe(true);
  });

  it('keeps nothing idle with maxEntries 0', async () => {
    const { pool, allocs, touch, fake } = setup({ maxEntries: 0 });
    const pa = await touch(allocs(1)[0]!);
    expect(fake.isMapped(pa)).toBe(false);
    expect(pool.stats().residentEntries).toBe(0);
  });

  it.each([{ unlimited: true }, { maxEntries: Infinity, maxBytes: Infinity }])('is unlimited only when asked: %o', async (options) => {
    const { pool, allocs, touch } = setup(options);
    for (const a of allocs(100, 1024 * MiB)) await touch(a); // 100 GiB, 100 entries
    expect(pool.stats()).toMatchObject({ residentEntries: 100, evictions: 0, openMappings: 100 });
  });

  it('refuses bad or contradictory limits with ConfigError', () => {
    const fake = new FakeIpcDriver();
    for (const options of [{ maxEntries: -1 }, { maxBytes: 1.5 }, { maxEntries: NaN }, { unlimited: true, maxEntries: 10 }]) {
      expect(() => new HandlePool(fake, options)).toThrow(ConfigError);
    }
  });
});

describe('HandlePool: staleness (free and realloc at the same address)', () => {
  it('replaces a stale mapping: closes the old one, opens the new one', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [a] = allocs(1);
    const pa = await touch(a!);
    const b = fake.realloc(a!);
    expect(pool.lookup(fake.request(b))).toBeUndefined();
    expect(fake.isMapped(pa)).toBe(false);
    const mb = await pool.acquire(fake.request(b));
    expect(fake.allocAt(mb.ptr)).toBe(b);
    expect(pool.stats()).toMatchObject({ stale: 1, opens: 2, closes: 1, openMappings: 1 });
  });

  it.each([
    ['a different buffer id', (r: MappingRequest) => ({ ...r, bufferId: r.bufferId + 1n })],
    ['different handle bytes', (r: MappingRequest) => ({ ...r, handle: r.handle.map((b, i) => (i === 63 ? b ^ 1 : b)) })],
    ['a different size', (r: MappingRequest) => ({ ...r, size: r.size * 2 })],
  ])('treats %s alone as stale', async (_what, change) => {
    const { pool, allocs, touch, fake } = setup();
    const [a] = allocs(1);
    const pa = await touch(a!);
    expect(pool.lookup(change(fake.request(a!)))).toBeUndefined();
    expect(pool.stats().stale).toBe(1);
    expect(fake.isMapped(pa)).toBe(false);
  });

  it('keeps a stale mapping in use valid for its user, closes it on release, and serves new requests the new mapping', async () => {
    // A driver that lets the new allocation be mapped while the old one still is.
    const { pool, allocs, fake } = setup({}, { alreadyMappedOnOverlap: false });
    const [a] = allocs(1);
    const ma = await pool.acquire(fake.request(a!));
    const b = fake.realloc(a!);
    const mb = await pool.acquire(fake.request(b));
    expect(mb.ptr).not.toBe(ma.ptr);
    expect(fake.allocAt(mb.ptr)).toBe(b);
    expect(fake.allocAt(ma.ptr)).toBe(a); // still valid for its user
    expect(pool.stats()).toMatchObject({ stale: 1, openMappings: 2, residentEntries: 1 });
    ma.release();
    expect(fake.isMapped(ma.ptr)).toBe(false);
    expect(pool.lookup(fake.request(b))?.ptr).toBe(mb.ptr);
  });

  it('reports ALREADY_MAPPED while the stale mapping is in use, without wrecking the cache, and opens once it is released', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [a, other] = allocs(2);
    const pOther = await touch(other!);
    const ma = await pool.acquire(fake.request(a!));
    const b = fake.realloc(a!);
    const err = await pool.acquire(fake.request(b)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CudaError);
    expect((err as CudaError).code).toBe('CUDA_ERROR_ALREADY_MAPPED');
    expect(fake.isMapped(pOther)).toBe(true); // evicting it could not have helped
    expect(fake.allocAt(ma.ptr)).toBe(a);
    ma.release();
    const mb = await pool.acquire(fake.request(b));
    expect(fake.allocAt(mb.ptr)).toBe(b);
  });
});

describe('HandlePool: failed opens', () => {
  it.each(['CUDA_ERROR_ALREADY_MAPPED', 'CUDA_ERROR_OUT_OF_MEMORY', 'CUDA_ERROR_TOO_MANY_PEERS'])(
    'evicts the least recently used idle entry and retries on %s',
    async (code) => {
      const { pool, allocs, touch, fake } = setup();
      const [old, recent, held, wanted] = allocs(4);
      const pOld = await touch(old!);
      const pRecent = await touch(recent!);
      const mHeld = await pool.acquire(fake.request(held!));
      fake.failNextOpen(code);
      const m = await pool.acquire(fake.request(wanted!));
      expect(fake.allocAt(m.ptr)).toBe(wanted);
      expect(fake.isMapped(pOld)).toBe(false);
      expect(fake.isMapped(pRecent)).toBe(true);
      expect(fake.isMapped(mHeld.ptr)).toBe(true);
      expect(pool.stats()).toMatchObject({ openFailures: 1, evictions: 1, opens: 4 });
    },
  );

  it('evicts an overlapping mapping first when the driver says ALREADY_MAPPED', async () => {
    const { pool, touch, fake } = setup();
    const lru = fake.allocate(GPU0, X + 0x1000_0000n, MiB); // older, not overlapping
    const a = fake.allocate(GPU0, X, 2 * MiB);
    const pLru = await touch(lru);
    const pa = await touch(a);
    fake.free(a);
    const b = fake.allocate(GPU0, X + BigInt(MiB), MiB); // inside A's old range, another base
    const mb = await pool.acquire(fake.request(b));
    expect(fake.allocAt(mb.ptr)).toBe(b);
    expect(fake.isMapped(pa)).toBe(false);
    expect(fake.isMapped(pLru)).toBe(true);
    expect(pool.stats()).toMatchObject({ openFailures: 1, evictions: 1 });
  });

  it('reports other errors at once, evicting nothing and keeping nothing', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [idle, wanted] = allocs(2);
    const pIdle = await touch(idle!);
    fake.failNextOpen('CUDA_ERROR_PEER_ACCESS_UNSUPPORTED');
    await expect(pool.acquire(fake.request(wanted!))).rejects.toMatchObject({ code: 'CUDA_ERROR_PEER_ACCESS_UNSUPPORTED' });
    expect(fake.isMapped(pIdle)).toBe(true);
    expect(pool.stats()).toMatchObject({ openFailures: 1, evictions: 0, residentEntries: 1 });
    const m = await pool.acquire(fake.request(wanted!)); // not remembered as failed
    expect(fake.allocAt(m.ptr)).toBe(wanted);
  });

  it('reports a resource error once nothing more can be evicted', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [i1, i2, held, wanted] = allocs(4);
    await touch(i1!);
    await touch(i2!);
    const mHeld = await pool.acquire(fake.request(held!));
    fake.failNextOpen('CUDA_ERROR_OUT_OF_MEMORY', 100);
    await expect(pool.acquire(fake.request(wanted!))).rejects.toMatchObject({ code: 'CUDA_ERROR_OUT_OF_MEMORY' });
    // Two idle entries evicted, one attempt each plus the first: three attempts, then the error.
    expect(pool.stats()).toMatchObject({ openFailures: 3, evictions: 2, residentEntries: 1 });
    expect(fake.isMapped(mHeld.ptr)).toBe(true);
  });
});

describe('HandlePool: concurrency', () => {
  it('opens once for concurrent misses on the same allocation (synchronous opener)', async () => {
    const { pool, allocs, fake } = setup();
    const [a] = allocs(1);
    const ms = await Promise.all(Array.from({ length: 5 }, () => pool.acquire(fake.request(a!))));
    expect(fake.openCalls).toBe(1);
    expect(new Set(ms.map((m) => m.ptr)).size).toBe(1);
    expect(pool.stats()).toMatchObject({ misses: 5, opens: 1 });
    for (const m of ms) m.release();
    expect(pool.stats()).toMatchObject({ idleEntries: 1, openMappings: 1 });
  });

  it('opens once for concurrent misses with an asynchronous opener, and counts every waiter as a user', async () => {
    const { pool, allocs, fake } = setup({ maxEntries: 0 });
    const [a] = allocs(1);
    fake.pauseOpens();
    const waiting = [pool.acquire(fake.request(a!)), pool.acquire(fake.request(a!)), pool.acquire(fake.request(a!))];
    fake.resumeOpens();
    const ms = await Promise.all(waiting);
    expect(fake.openCalls).toBe(1);
    ms[0]!.release();
    ms[1]!.release();
    expect(fake.isMapped(ms[2]!.ptr)).toBe(true); // maxEntries 0, yet one user left
    ms[2]!.release();
    expect(fake.isMapped(ms[2]!.ptr)).toBe(false);
  });

  it('waits for an open of the old allocation before opening the new one at the same address', async () => {
    const { pool, allocs, fake } = setup({}, { alreadyMappedOnOverlap: false });
    const [a] = allocs(1);
    fake.pauseOpens();
    const pa = pool.acquire(fake.request(a!));
    const b = fake.realloc(a!);
    // The remote freed A after sending it: its open now fails; B's request must still get B.
    const pb = pool.acquire(fake.request(b));
    fake.resumeOpens();
    await expect(pa).rejects.toMatchObject({ code: 'CUDA_ERROR_INVALID_HANDLE' });
    const mb = await pb;
    expect(fake.allocAt(mb.ptr)).toBe(b);
  });
});

describe('HandlePool: invalidation and close', () => {
  it('invalidates an unused mapping: closed now, opened afresh next time', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [a] = allocs(1);
    const pa = await touch(a!);
    expect(pool.invalidate(GPU0, a!.base, a!.bufferId + 1n)).toBe(false); // another buffer id: left alone
    expect(pool.invalidate(GPU0, a!.base, a!.bufferId)).toBe(true);
    expect(fake.isMapped(pa)).toBe(false);
    expect(pool.lookup(fake.request(a!))).toBeUndefined();
    await touch(a!);
    expect(pool.stats()).toMatchObject({ invalidations: 1, opens: 2 });
  });

  it('invalidates a mapping in use: never handed out again, closed on release', async () => {
    const { pool, allocs, fake } = setup();
    const [a] = allocs(1);
    const m = await pool.acquire(fake.request(a!));
    expect(pool.invalidate(GPU0, a!.base)).toBe(true);
    expect(fake.isMapped(m.ptr)).toBe(true);
    expect(pool.lookup(fake.request(a!))).toBeUndefined();
    expect(pool.stats()).toMatchObject({ residentEntries: 0, openMappings: 1 });
    m.release();
    expect(fake.isMapped(m.ptr)).toBe(false);
    expect(pool.stats().openMappings).toBe(0);
  });

  it('invalidates an open in flight: its waiters get it, the pool never keeps it', async () => {
    const { pool, allocs, fake } = setup();
    const [a] = allocs(1);
    fake.pauseOpens();
    const pending = pool.acquire(fake.request(a!));
    expect(pool.invalidate(GPU0, a!.base)).toBe(true);
    fake.resumeOpens();
    const m = await pending;
    expect(fake.allocAt(m.ptr)).toBe(a);
    expect(pool.stats().residentEntries).toBe(0);
    m.release();
    expect(fake.mappedCount).toBe(0);
  });

  it('close closes idle mappings now, mappings in use on release, and refuses further use', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [a, b, c] = allocs(3);
    await touch(a!);
    await touch(b!);
    const mc = await pool.acquire(fake.request(c!));
    pool.close();
    pool.close();
    expect(fake.mappedCount).toBe(1);
    await expect(pool.acquire(fake.request(a!))).rejects.toBeInstanceOf(ClosedError);
    await expect(pool.acquire(fake.request(a!))).rejects.toMatchObject({ code: 'SMCUDA_CLOSED' });
    expect(pool.lookup(fake.request(c!))).toBeUndefined();
    mc.release();
    expect(fake.mappedCount).toBe(0);
    expect(pool.stats()).toMatchObject({ openMappings: 0, mappedBytes: 0, opens: 3, closes: 3 });
    expect(fake.badCloses).toEqual([]);
  });

  it('close during an open in flight closes what the open returns', async () => {
    const { pool, allocs, fake } = setup();
    const [a] = allocs(1);
    fake.pauseOpens();
    const pending = pool.acquire(fake.request(a!));
    pool.close();
    fake.resumeOpens();
    await expect(pending).rejects.toBeInstanceOf(ClosedError);
    expect(fake.mappedCount).toBe(0);
    expect(pool.stats()).toMatchObject({ opens: 1, closes: 1, openMappings: 0 });
  });
});

describe('HandlePool: counters and events', () => {
  it('counts every kind of event and times opens with the given clock', async () => {
    let t = 0;
    const events: HandlePoolEvent[] = [];
    const { pool, allocs, touch, fake } = setup({ maxEntries: 1, now: () => (t += 5), onEvent: (e) => events.push(e) });
    const [a, b] = allocs(2, MiB, GPU1);
    await touch(a!); // miss, open
    await touch(a!); // hit
    const b2 = b!;
    await touch(b2); // miss, open, evict a
    const b3 = fake.realloc(b2);
    pool.lookup(fake.request(b3)); // stale
    fake.failNextOpen('CUDA_ERROR_INVALID_VALUE');
    await pool.acquire(fake.request(b3)).catch(() => undefined); // miss, open failure
    await touch(b3); // miss, open
    pool.invalidate(GPU1, b3.base); // invalidate
    expect(pool.stats()).toEqual({
      hits: 1,
      misses: 4,
      stale: 1,
      evictions: 1,
      invalidations: 1,
      openFailures: 1,
      closeFailures: 0,
      extentRefusals: 0,
      opens: 3,
      closes: 3,
      openMappings: 0,
      mappedBytes: 0,
      residentEntries: 0,
      residentBytes: 0,
      idleEntries: 0,
      totalOpenMs: 20,
      lastOpenMs: 5,
      importedPools: 0,
      poolImports: 0,
      poolReleases: 0,
      byKind: {
        'legacy-ipc': { opens: 3, openFailures: 1, closes: 3, openMappings: 0, mappedBytes: 0, totalOpenMs: 20, lastOpenMs: 5 },
        vmm: { opens: 0, openFailures: 0, closes: 0, openMappings: 0, mappedBytes: 0, totalOpenMs: 0, lastOpenMs: 0 },
        pool: { opens: 0, openFailures: 0, closes: 0, openMappings: 0, mappedBytes: 0, totalOpenMs: 0, lastOpenMs: 0 },
      },
    });
    expect(events.every((e) => e.mappingKind === 'legacy-ipc')).toBe(true);
    expect(events.map((e) => e.type)).toEqual([
      'miss',
      'open',
      'hit',
      'miss',
      'open',
      'evict',
      'close',
      'stale',
      'close',
      'miss',
      'open-failed',
      'miss',
      'open',
      'invalidate',
      'close',
    ]);
    expect(events.find((e) => e.type === 'open-failed')).toMatchObject({ code: 'CUDA_ERROR_INVALID_VALUE', deviceUuid: GPU1 });
    expect(events.find((e) => e.type === 'evict')).toMatchObject({ reason: 'entries', base: a!.base });
    expect(events.filter((e) => e.type === 'close').map((e) => e.reason)).toEqual(['evicted', 'stale', 'invalidated']);
  });

  it('counts a failing close and forgets the mapping anyway', async () => {
    const { pool, allocs, touch, fake } = setup();
    const [a] = allocs(1);
    const pa = await touch(a!);
    fake.ipcCloseMemHandle(pa); // someone else closed it under the pool
    pool.close();
    expect(pool.stats()).toMatchObject({ closeFailures: 1, closes: 1, openMappings: 0 });
  });
});
