/**
 * Model-based test of HandlePool: random command sequences run against the
 * pool (over the fake driver) and against a small reference model that says,
 * with plain arrays, what the pool must do. After every step:
 *  - no stale mapping was handed out: every live lease maps (per the fake
 *    driver) exactly the allocation its request named;
 *  - nothing in use was closed: the fake never unmaps a pointer a live lease holds;
 *  - bounds: resident entries are within maxEntries and maxBytes, or every
 *    resident entry is in use (only entries in use may push the pool over;
 *    detached entries still in use are not resident and do not count);
 *  - the pool's counters equal the model's, and its open mappings equal the
 *    driver references the fake holds.
 * At the end, after releasing everything and close(): every open was closed
 * exactly once and nothing is mapped.
 *
 * Mixed kinds: each allocation is legacy-ipc, vmm or pool (a reallocation may
 * change the kind at an address, which makes the old mapping stale). Legacy
 * ones go through `acquire`/`lookup` or `acquireImport`; the others through
 * `acquireImport`/`lookupImport` with the fake's importers. Only legacy
 * mappings obey the overlap rule (ALREADY_MAPPED). A pool mapping is closed
 * with its last lease. Pool mappings share their peer pool's import, which must be released only when dropped and unused:
 * the imported pools equal the model's, the fake never sees a pool released
 * with pointers left, and every acquireImport disposes its request once.
 */
import { isDeepStrictEqual, inspect } from 'node:util';
import { describe, expect } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import { HandlePool, MAPPING_KINDS, RETRYABLE_OPEN_ERRORS, type Mapping, type MappingKind } from '../../../cache/index.js';
import { ClosedError, CudaError } from '../../../src/errors.js';
import { FakeIpcDriver, type RemoteAlloc } from '../../helpers/fake-ipc-driver.js';

const UNIT = 1 << 20;
const X = 0x7000_0000_0000n;
const DEVICES = ['GPU-aaaaaaaa-0000-0000-0000-000000000000', 'GPU-bbbbbbbb-0000-0000-0000-000000000000'];
/** Address slots per device, in UNITs; slot 0 and slot 1 overlap, to exercise ALREADY_MAPPED. */
const LAYOUT = [
  { at: 0, units: 2 },
  { at: 1, units: 1 },
  { at: 4, units: 3 },
];
const SLOTS = DEVICES.flatMap((deviceUuid) => LAYOUT.map(({ at, units }) => ({ deviceUuid, base: X + BigInt(at * UNIT), size: units * UNIT })));
const poolKeyOf = (deviceUuid: string): string => `${deviceUuid}/pool`;
const OPEN_CODES = ['CUDA_ERROR_ALREADY_MAPPED', 'CUDA_ERROR_OUT_OF_MEMORY', 'CUDA_ERROR_TOO_MANY_PEERS', 'CUDA_ERROR_INVALID_VALUE'];

function overlaps(a: RemoteAlloc, b: RemoteAlloc): boolean {
  return (
    a.kind === 'legacy-ipc' && b.kind === 'legacy-ipc' && a.deviceUuid === b.deviceUuid && a.base < b.base + BigInt(b.size) && b.base < a.base + BigInt(a.size)
  );
}

// -- the reference model ----------------------------------------------------------

interface ModelEntry {
  alloc: RemoteAlloc;
  refs: number;
  /** 'pool': the peer pool import it holds. */
  pool?: ModelPool;
}

interface ModelPool {
  key: string;
  dropped: boolean;
}

type Outcome = { kind: 'hit' | 'opened' | 'miss-lookup'; entry?: ModelEntry } | { kind: 'error'; code: string };

class PoolModel {
  /** Peer pools imported: dropped ones stay until their last pointer entry is closed. */
  pools: ModelPool[] = [];
  /** The pool the latest successful open used. */
  private openedFrom: ModelPool | undefined;
  /** Resident entries, least recently used first. */
  resident: ModelEntry[] = [];
  /** Out of the pool but still in use. */
  detached: ModelEntry[] = [];
  /** Mirrors the fake's queue of injected open failures. */
  failures: string[] = [];
  closed = false;
  c = { hits: 0, misses: 0, stale: 0, evictions: 0, invalidations: 0, openFailures: 0, opens: 0, closes: 0 };

  constructor(
    readonly maxEntries: number,
    readonly maxBytes: number,
    readonly overlapRule: boolean,
  ) {}

  get residentBytes(): number {
    return this.resident.reduce((n, e) => n + e.alloc.size, 0);
  }

  lookup(alloc: RemoteAlloc): Outcome {
    const e = this.resident.find((r) => r.alloc.deviceUuid === alloc.deviceUuid && r.alloc.base === alloc.base);
    if (e === undefined) return { kind: 'miss-lookup' };
    if (e.alloc === alloc) {
      e.refs++;
      this.resident.splice(this.resident.indexOf(e), 1);
      this.resident.push(e);
      this.c.hits++;
      return { kind: 'hit', entry: e };
    }
    this.c.stale++;
    this.detach(e);
    return { kind: 'miss-lookup' };
  }

  acquire(alloc: RemoteAlloc): Outcome {
    if (this.closed) return { kind: 'error', code: 'SMCUDA_CLOSED' };
    const looked = this.lookup(alloc);
    if (looked.kind === 'hit') return looked;
    this.c.misses++;
    for (;;) {
      const code = this.driverOpen(alloc);
      if (code === undefined) {
        this.c.opens++;
        const entry: ModelEntry = { alloc, refs: 1 };
        if (this.openedFrom !== undefined) entry.pool = this.openedFrom;
        this.resident.push(entry);
        this.enforceBounds();
        return { kind: 'opened', entry };
      }
      this.c.openFailures++;
      if (!RETRYABLE_OPEN_ERRORS.has(code)) return { kind: 'error', code };
      const overlapping = this.resident.filter((r) => overlaps(r.alloc, alloc));
      const closedOne = overlapping.some((r) => r.refs === 0);
      for (const r of overlapping) this.evict(r);
      if (closedOne) continue;
      if (code === 'CUDA_ERROR_ALREADY_MAPPED' && this.detached.some((d) => overlaps(d.alloc, alloc))) return { kind: 'error', code };
      const victim = this.resident.find((r) => r.refs === 0);
      if (victim === undefined) return { kind: 'error', code };
      this.evict(victim);
    }
  }

  /** A second acquisition of an allocation whose open the first one started: it joins. */
  join(entry: ModelEntry): void {
    this.c.misses++;
    entry.refs++;
  }

  release(entry: ModelEntry): void {
    entry.refs--;
    if (entry.refs !== 0) return;
    const d = this.detached.indexOf(entry);
    if (d >= 0) {
      this.detached.splice(d, 1);
      this.c.closes++;
      this.collectPools();
    } else if (entry.alloc.kind === 'pool') {
      this.detach(entry); // a pool pointer is not kept past its last use: closed now (its peer pool stays imported)
    } else {
      this.enforceBounds();
    }
  }

  invalidate(deviceUuid: string, base: bigint, bufferId: bigint | undefined): boolean {
    const e = this.resident.find((r) => r.alloc.deviceUuid === deviceUuid && r.alloc.base === base);
    if (e === undefined || (bufferId !== undefined && e.alloc.bufferId !== bufferId)) return false;
    this.c.invalidations++;
    this.detach(e);
    return true;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const e of [...this.resident]) this.detach(e);
    for (const p of this.pools) p.dropped = true;
    this.collectPools();
  }

  /** dropPeerPool: its resident pointers are invalidated, the import goes once unused. */
  dropPool(key: string): boolean {
    let dropped = false;
    for (const e of [...this.resident]) {
      if (e.alloc.poolKey === key && e.alloc.kind === 'pool') {
        this.c.invalidations++;
        this.detach(e);
        dropped = true;
      }
    }
    const pool = this.pools.find((p) => p.key === key && !p.dropped);
    if (pool !== undefined) {
      pool.dropped = true;
      dropped = true;
    }
    this.collectPools();
    return dropped;
  }

  /** Dropped pools no open pointer entry uses are released. */
  collectPools(): void {
    const used = new Set([...this.resident, ...this.detached].map((e) => e.pool));
    this.pools = this.pools.filter((p) => !p.dropped || used.has(p));
  }

  openOf(kind: MappingKind): number {
    return [...this.resident, ...this.detached].filter((e) => e.alloc.kind === kind).length;
  }

  /** What the fake driver does on open: undefined for success, else the error code. */
  private driverOpen(alloc: RemoteAlloc): string | undefined {
    // The peer pool is imported first (the fake never refuses it) and kept even if the pointer fails.
    this.openedFrom = undefined;
    if (alloc.kind === 'pool') {
      this.openedFrom = this.pools.find((p) => p.key === alloc.poolKey && !p.dropped);
      if (this.openedFrom === undefined) this.pools.push((this.openedFrom = { key: alloc.poolKey!, dropped: false }));
    }
    const injected = this.failures.shift();
    if (injected !== undefined) return injected;
    const open = [...this.resident, ...this.detached].map((e) => e.alloc);
    if (alloc.kind !== 'legacy-ipc' || open.includes(alloc)) return undefined;
    if (this.overlapRule && open.some((o) => overlaps(o, alloc))) return 'CUDA_ERROR_ALREADY_MAPPED';
    return undefined;
  }

  private enforceBounds(): void {
    let count = this.resident.length;
    let bytes = this.residentBytes;
    for (const e of [...this.resident]) {
      if (count <= this.maxEntries && bytes <= this.maxBytes) break;
      if (e.refs !== 0) continue;
      this.evict(e);
      count--;
      bytes -= e.alloc.size;
    }
  }

  private evict(e: ModelEntry): void {
    this.c.evictions++;
    this.detach(e);
  }

  private detach(e: ModelEntry): void {
    this.resident.splice(this.resident.indexOf(e), 1);
    if (e.refs === 0) this.c.closes++;
    else this.detached.push(e);
    this.collectPools();
  }
}

// -- the system under test and the shared remote state --------------------------------

interface Lease {
  mapping: Mapping;
  alloc: RemoteAlloc;
  entry: ModelEntry;
}

interface Model {
  pool: PoolModel;
  /** The live remote allocation in each slot (same objects as the real side). */
  slots: Array<RemoteAlloc | undefined>;
}

interface Real {
  pool: HandlePool;
  fake: FakeIpcDriver;
  leases: Lease[];
  violations: string[];
}

type Cmd = fc.AsyncCommand<Model, Real>;

function codeOf(err: unknown): string {
  return err instanceof CudaError || err instanceof ClosedError ? err.code : `unexpected ${String(err)}`;
}

/** Compares one pool outcome with the model's prediction and keeps the lease. */
function settle(m: Model, r: Real, alloc: RemoteAlloc, got: Mapping | { error: unknown }, want: Outcome): void {
  if ('error' in got) {
    same(want.kind === 'error' ? want.code : want.kind, codeOf(got.error), 'acquire failed as predicted');
    return;
  }
  same(want.kind === 'hit' || want.kind === 'opened', true, () => `acquire succeeded, but the model says ${inspect(want)}`);
  same(r.fake.allocAt(got.ptr) === alloc && got.size === alloc.size && got.kind === alloc.kind, true, 'the mapping is of the requested allocation');
  r.leases.push({ mapping: got, alloc, entry: (want as { entry: ModelEntry }).entry });
  void m;
}

async function attempt(p: Promise<Mapping>): Promise<Mapping | { error: unknown }> {
  return p.catch((error: unknown) => ({ error }));
}

/**
 * One acquisition the way a data path of the alloc's kind asks: legacy by
 * `acquire` (or, `viaImport`, by acquireImport with the handle as identity),
 * the others by acquireImport. Checks the request was disposed exactly once.
 */
async function acquireAs(r: Real, alloc: RemoteAlloc, viaImport: boolean): Promise<Mapping | { error: unknown }> {
  if (alloc.kind === 'legacy-ipc' && !viaImport) return attempt(r.pool.acquire(r.fake.request(alloc)));
  const disposed = { count: 0 };
  const got = await attempt(r.pool.acquireImport(r.fake.importRequest(alloc, disposed)));
  same(disposed.count, 1, 'acquireImport disposed its request once');
  return got;
}

function lookupAs(r: Real, alloc: RemoteAlloc): Mapping | undefined {
  return alloc.kind === 'legacy-ipc' ? r.pool.lookup(r.fake.request(alloc)) : r.pool.lookupImport(r.fake.importRequest(alloc));
}

class AcquireCmd implements Cmd {
  constructor(
    readonly slot: number,
    readonly lookupFirst: boolean,
    readonly viaImport = false,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.slots[this.slot] !== undefined;
  }
  async run(m: Model, r: Real): Promise<void> {
    const alloc = m.slots[this.slot]!;
    if (this.lookupFirst) {
      const want = m.pool.closed ? ({ kind: 'miss-lookup' } as Outcome) : m.pool.lookup(alloc);
      const got = lookupAs(r, alloc);
      same(got !== undefined, want.kind === 'hit', 'lookup hit as predicted');
      if (got !== undefined) return settle(m, r, alloc, got, want);
    }
    const want = m.pool.acquire(alloc);
    settle(m, r, alloc, await acquireAs(r, alloc, this.viaImport), want);
  }
  toString(): string {
    return `${this.lookupFirst ? 'lookup+' : ''}acquire${this.viaImport ? 'Import' : ''}(${this.slot})`;
  }
}

class AcquireTwiceCmd implements Cmd {
  constructor(readonly slot: number) {}
  check(m: Readonly<Model>): boolean {
    return m.slots[this.slot] !== undefined;
  }
  async run(m: Model, r: Real): Promise<void> {
    const alloc = m.slots[this.slot]!;
    const both = [acquireAs(r, alloc, false), acquireAs(r, alloc, true)];
    const [g1, g2] = await Promise.all(both);
    const w1 = m.pool.acquire(alloc);
    let w2: Outcome;
    if (w1.kind === 'opened') {
      m.pool.join(w1.entry!);
      w2 = w1; // the second joined the first one's open
    } else if (w1.kind === 'error' && w1.code !== 'SMCUDA_CLOSED' && alloc.kind === 'pool') {
      // A pool open awaits the peer pool's import before its pointer, so the
      // second acquisition joins it even when it fails (a legacy or vmm open
      // fails synchronously, before the second one asks).
      m.pool.c.misses++;
      w2 = w1;
    } else {
      w2 = m.pool.acquire(alloc); // a hit, or the first failed before the second asked
    }
    settle(m, r, alloc, g1!, w1);
    settle(m, r, alloc, g2!, w2);
  }
  toString(): string {
    return `acquireTwice(${this.slot})`;
  }
}

class ReleaseCmd implements Cmd {
  constructor(
    readonly index: number,
    readonly twice: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    if (r.leases.length === 0) return;
    const [lease] = r.leases.splice(this.index % r.leases.length, 1);
    lease!.mapping.release();
    if (this.twice) lease!.mapping.release();
    m.pool.release(lease!.entry);
  }
  toString(): string {
    return `release(${this.index}${this.twice ? ', twice' : ''})`;
  }
}

/** The remote side frees what covers the slot and allocates there again (of `kind`): new handle bytes and buffer id. */
class ReallocCmd implements Cmd {
  constructor(
    readonly slot: number,
    readonly kind: MappingKind = 'legacy-ipc',
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const { deviceUuid, base, size } = SLOTS[this.slot]!;
    const fresh = { deviceUuid, base, size, kind: 'legacy-ipc' } as RemoteAlloc; // frees whatever overlaps, of any kind
    m.slots.forEach((a, i) => {
      if (a !== undefined && overlaps({ ...a, kind: 'legacy-ipc' }, fresh)) {
        r.fake.free(a);
        m.slots[i] = undefined;
      }
    });
    m.slots[this.slot] = r.fake.allocate(deviceUuid, base, size, this.kind, poolKeyOf(deviceUuid));
  }
  toString(): string {
    return `realloc(${this.slot}, ${this.kind})`;
  }
}

class InvalidateCmd implements Cmd {
  constructor(
    readonly slot: number,
    readonly mode: 'any' | 'current' | 'other',
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const { deviceUuid, base } = SLOTS[this.slot]!;
    const current = m.slots[this.slot];
    const bufferId = this.mode === 'any' ? undefined : this.mode === 'current' ? (current?.bufferId ?? 1n) : 999_999n;
    same(r.pool.invalidate(deviceUuid, base, bufferId), m.pool.invalidate(deviceUuid, base, bufferId), 'invalidate result');
  }
  toString(): string {
    return `invalidate(${this.slot}, ${this.mode})`;
  }
}

class InjectCmd implements Cmd {
  constructor(
    readonly code: string,
    readonly times: number,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    r.fake.failNextOpen(this.code, this.times);
    for (let i = 0; i < this.times; i++) m.pool.failures.push(this.code);
  }
  toString(): string {
    return `inject(${this.code.replace('CUDA_ERROR_', '')} x${this.times})`;
  }
}

/** The owner destroyed its pool (or the peer went): dropPeerPool. */
class DropPoolCmd implements Cmd {
  constructor(readonly device: number) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const key = poolKeyOf(DEVICES[this.device]!);
    same(r.pool.dropPeerPool(key), m.pool.dropPool(key), 'dropPeerPool result');
  }
  toString(): string {
    return `dropPeerPool(${this.device})`;
  }
}

class CloseCmd implements Cmd {
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    r.pool.close();
    m.pool.close();
  }
  toString(): string {
    return 'close()';
  }
}

/** Fails with both values shown; cheaper than expect() on every step. */
function same(got: unknown, want: unknown, what: string | (() => string)): void {
  if (isDeepStrictEqual(got, want)) return;
  throw new Error(`${typeof what === 'string' ? what : what()}: got ${inspect(got)}, want ${inspect(want)}`);
}

/** Every invariant, checked after each command. */
function checkInvariants(m: Model, r: Real): void {
  same(r.violations, [], 'closed under a user');
  for (const lease of r.leases) same(r.fake.allocAt(lease.mapping.ptr), lease.alloc, 'a live lease maps its own allocation');
  const s = r.pool.stats();
  const withinBounds = s.residentEntries <= r.pool.maxEntries && s.residentBytes <= r.pool.maxBytes;
  same(withinBounds || s.idleEntries === 0, true, () => `bounds (${inspect(s)})`);
  same(s.openMappings, r.fake.openReferences, 'open mappings = driver references');
  same(r.fake.badPoolReleases, [], 'no pool released with pointers left');
  const p = m.pool;
  const { totalOpenMs, lastOpenMs, importedPools, poolImports, poolReleases, byKind, ...counted } = s;
  void totalOpenMs;
  void lastOpenMs;
  same([importedPools, r.fake.importedPools], [p.pools.length, p.pools.length], 'imported peer pools');
  same(poolImports - poolReleases, importedPools, 'pool imports - releases = imported pools');
  same(
    MAPPING_KINDS.map((k) => byKind[k].openMappings),
    MAPPING_KINDS.map((k) => p.openOf(k)),
    'open mappings per kind',
  );
  same(
    counted,
    {
      ...p.c,
      closeFailures: 0,
      extentRefusals: 0,
      openMappings: p.resident.length + p.detached.length,
      mappedBytes: p.residentBytes + p.detached.reduce((n, e) => n + e.alloc.size, 0),
      residentEntries: p.resident.length,
      residentBytes: p.residentBytes,
      idleEntries: p.resident.filter((e) => e.refs === 0).length,
    },
    'stats',
  );
  // Same resident allocations, same users, same recency order.
  same(
    r.pool.entries().map((e) => [e.bufferId, e.kind, e.users]),
    p.resident.map((e) => [e.alloc.bufferId, e.alloc.kind, e.refs]),
    'resident entries, least recently used first',
  );
}

/** Few slots, the first device's more often: repeats (hits, staleness, overlaps) must be common. */
const slot = fc.oneof({ weight: 3, arbitrary: fc.nat(LAYOUT.length - 1) }, { weight: 1, arbitrary: fc.nat(SLOTS.length - 1) });
/** Legacy half the time (the overlap rule needs two), the descriptor kinds the rest. */
const kind = fc.constantFrom<MappingKind>('legacy-ipc', 'legacy-ipc', 'vmm', 'pool');
/** Weighted so that runs are long and interesting: mostly acquisitions and releases; close is rare. */
const command: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 30, arbitrary: fc.tuple(slot, fc.boolean(), fc.boolean()).map(([s, l, i]) => new AcquireCmd(s, l, i)) },
  { weight: 5, arbitrary: slot.map((s) => new AcquireTwiceCmd(s)) },
  { weight: 20, arbitrary: fc.tuple(fc.nat(15), fc.boolean()).map(([i, t]) => new ReleaseCmd(i, t)) },
  { weight: 8, arbitrary: fc.tuple(slot, kind).map(([s, k]) => new ReallocCmd(s, k)) },
  // The overlapping slots, more often: the free / realloc / ALREADY_MAPPED path.
  { weight: 8, arbitrary: fc.tuple(fc.constantFrom(0, 1, LAYOUT.length, LAYOUT.length + 1), kind).map(([s, k]) => new ReallocCmd(s, k)) },
  { weight: 2, arbitrary: fc.nat(DEVICES.length - 1).map((d) => new DropPoolCmd(d)) },
  {
    weight: 5,
    arbitrary: fc.tuple(slot, fc.constantFrom('any' as const, 'current' as const, 'other' as const)).map(([s, mode]) => new InvalidateCmd(s, mode)),
  },
  { weight: 5, arbitrary: fc.tuple(fc.constantFrom(...OPEN_CODES), fc.integer({ min: 1, max: 2 })).map(([c, t]) => new InjectCmd(c, t)) },
  { weight: 1, arbitrary: fc.constant(new CloseCmd()) },
);
const commands = fc.commands([command], { maxCommands: 30, size: 'max' });

const config = fc.record({
  maxEntries: fc.constantFrom(0, 1, 2, 3, 5, Infinity),
  maxBytes: fc.constantFrom(3 * UNIT, 5 * UNIT, 8 * UNIT, Infinity),
  overlapRule: fc.boolean(),
});

describe('HandlePool against its model', () => {
  test.prop([config, commands], { numRuns: 300 })('keeps every invariant under any sequence of commands', async (cfg, cmds) => {
    const violations: string[] = [];
    const leases: Lease[] = [];
    const fake = new FakeIpcDriver({
      alreadyMappedOnOverlap: cfg.overlapRule,
      onUnmap: (ptr) => {
        if (leases.some((l) => l.mapping.ptr === ptr)) violations.push(`unmapped ${ptr.toString(16)} while in use`);
      },
    });
    const pool = new HandlePool(fake, { maxEntries: cfg.maxEntries, maxBytes: cfg.maxBytes });
    const slots: Array<RemoteAlloc | undefined> = SLOTS.map(({ deviceUuid, base, size }, i) =>
      LAYOUT[i % LAYOUT.length]!.at === 1 ? undefined : fake.allocate(deviceUuid, base, size, MAPPING_KINDS[i % MAPPING_KINDS.length], poolKeyOf(deviceUuid)),
    );
    const model: Model = { pool: new PoolModel(cfg.maxEntries, cfg.maxBytes, cfg.overlapRule), slots };
    const real: Real = { pool, fake, leases, violations };

    const checked = [...cmds].map((cmd) => ({
      check: (mm: Readonly<Model>) => cmd.check(mm),
      run: async (mm: Model, rr: Real) => {
        await cmd.run(mm, rr);
        checkInvariants(mm, rr);
      },
      toString: () => cmd.toString(),
    }));
    await fc.asyncModelRun(() => ({ model, real }), checked);

    for (const lease of leases.splice(0)) lease.mapping.release();
    pool.close();
    expect(violations).toEqual([]);
    expect(fake.mappedCount).toBe(0);
    expect(fake.badCloses).toEqual([]);
    for (const [serial, opens] of fake.opensBySerial) expect(fake.closesBySerial.get(serial) ?? 0).toBe(opens);
    expect(pool.stats()).toMatchObject({ openMappings: 0, mappedBytes: 0, residentEntries: 0 });
    expect(pool.stats().closes).toBe(pool.stats().opens);
    expect(fake.importedPools).toBe(0);
    expect(fake.badPoolReleases).toEqual([]);
    expect(pool.stats()).toMatchObject({ importedPools: 0 });
  });
});
