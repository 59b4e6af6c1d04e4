/**
 * HandlePool with the descriptor kinds (vmm, pool) beside legacy IPC:
 *  - over the simulated driver's fd memory, two driver instances in one
 *    process standing for owner and receiver (the descriptors are real
 *    memfds): the bytes read through a cached mapping are the owner's, a
 *    chunked VMM range maps contiguously, a peer pool is imported once and
 *    shared, and everything (reservations, mappings, imported pools and
 *    pointers, descriptors) goes back to its start;
 *  - over the fake driver: dispose exactly once, evict-and-retry calling the
 *    opener again, kind changes at one address are stale, dropPeerPool with
 *    a pointer in use, requests a pool cannot undo are refused.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HandlePool, type HandlePoolEvent, type ImportRequest, type Mapping } from '../../../cache/index.js';
import type { FdChunk } from '../../../src/cuda/driver.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { CudaError } from '../../../src/errors.js';
import { patternBytes } from '../../helpers/bytes.js';
import { FakeIpcDriver } from '../../helpers/fake-ipc-driver.js';
import { openFds } from '../../helpers/fd-peer.js';

const MiB = 1024 * 1024;
const GPU = 'GPU-00000000-0000-0000-0000-000000000000';
const NOTHING = { reservations: 0, mappings: 0, pools: 0, importedPools: 0, importedPointers: 0 };

function driver(): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env: {} });
  d.init();
  d.setDevice(0);
  return d;
}

function read(d: SimulatedCudaDriver, ptr: bigint, length: number): Uint8Array {
  const out = new Uint8Array(length);
  d.memcpyDtoH(out, ptr);
  return out;
}

describe('HandlePool over the simulated fd memory', () => {
  let fdsAtStart = 0;
  let owner: SimulatedCudaDriver;
  let receiver: SimulatedCudaDriver;
  beforeEach(() => {
    fdsAtStart = openFds();
    owner = driver();
    receiver = driver();
  });
  afterEach(() => {
    receiver.close();
    owner.close();
    expect(openFds()).toBe(fdsAtStart);
  });

  it('vmm: a message spanning chunks maps them contiguously; a hit reuses it; invalidate undoes it', async () => {
    const v = owner.vmmAlloc(4 * MiB, { chunks: 4 });
    const data = patternBytes(v.size, 7);
    owner.memcpyHtoD(v.ptr, data);
    // A message from the middle of chunk 1 to the middle of chunk 2.
    const msg = { ptr: v.ptr + BigInt(v.chunkSize + v.chunkSize / 2), bytes: v.chunkSize };
    const ex = owner.vmmExport(msg.ptr, msg.bytes);
    expect(ex.chunks.length).toBe(2);
    const pool = new HandlePool(receiver);
    const kind = owner.memoryKind(msg.ptr);
    let opens = 0;
    let disposed = 0;
    const request = (chunks: FdChunk[] | undefined): ImportRequest => ({
      kind: 'vmm',
      deviceUuid: GPU,
      base: ex.base,
      size: ex.size,
      bufferId: kind.bufferId,
      open: () => {
        opens++;
        if (chunks === undefined) throw new Error('no descriptors: must have been a hit');
        return receiver.vmmImport(chunks, { device: 0 }).ptr;
      },
      dispose: () => {
        disposed++;
        for (const c of chunks ?? []) owner.closeFd(c.fd); // the receiver's copies, in a real pair
      },
    });
    const m = await pool.acquireImport(request(ex.chunks));
    expect(m.kind).toBe('vmm');
    expect([opens, disposed]).toEqual([1, 1]);
    const at = m.ptr + (msg.ptr - ex.base);
    expect(Buffer.compare(read(receiver, at, msg.bytes), data.subarray(v.chunkSize + v.chunkSize / 2, 2 * v.chunkSize + v.chunkSize / 2))).toBe(0);
    m.release();
    const hit = pool.lookupImport(request(undefined));
    expect(hit?.ptr).toBe(m.ptr);
    hit!.release();
    (await pool.acquireImport(request(undefined))).release();
    expect([opens, disposed]).toEqual([1, 2]);
    expect(receiver.fdMemoryResources()).toMatchObject({ reservations: 1, mappings: 2 });
    expect(pool.stats()).toMatchObject({ openMappings: 1, byKind: { vmm: { opens: 1, openMappings: 1, mappedBytes: ex.size } } });
    expect(pool.invalidate(GPU, ex.base, kind.bufferId)).toBe(true);
    expect(receiver.fdMemoryResources()).toEqual(NOTHING);
    expect(pool.stats()).toMatchObject({ openMappings: 0, closes: 1 });
    owner.vmmFree(v.ptr);
  });

  it('pool: the peer pool is imported once for all its pointers and released after drop and the last pointer', async () => {
    const s = owner.streamCreate();
    const peerPool = owner.memPoolCreate();
    const x = owner.memAllocFromPoolAsync(MiB, peerPool, s);
    const y = owner.memAllocFromPoolAsync(2 * MiB, peerPool, s);
    owner.streamSynchronize(s);
    const dx = patternBytes(MiB, 1);
    const dy = patternBytes(2 * MiB, 2);
    owner.memcpyHtoD(x, dx);
    owner.memcpyHtoD(y, dy);
    const poolFd = owner.memPoolExport(peerPool);
    let poolOpens = 0;
    const pool = new HandlePool(receiver);
    const request = (ptr: bigint, size: number): ImportRequest => {
      const data = owner.memPoolExportPointer(ptr);
      return {
        kind: 'pool',
        deviceUuid: GPU,
        base: ptr,
        size,
        bufferId: owner.memoryKind(ptr).bufferId,
        identity: data,
        peerPool: {
          key: 'peer-1/pool-1',
          open: () => {
            poolOpens++;
            return receiver.memPoolImport(poolFd, { device: 0 });
          },
        },
        open: (imported) => receiver.memPoolImportPointer(imported!, data),
      };
    };
    const [mx, my] = await Promise.all([pool.acquireImport(request(x, MiB)), pool.acquireImport(request(y, 2 * MiB))]);
    owner.closeFd(poolFd);
    expect(poolOpens).toBe(1);
    expect(Buffer.compare(read(receiver, mx.ptr, MiB), dx)).toBe(0);
    expect(Buffer.compare(read(receiver, my.ptr, 2 * MiB), dy)).toBe(0);
    expect(receiver.fdMemoryResources()).toMatchObject({ importedPools: 1, importedPointers: 2 });
    mx.release();
    // The pointer goes with its last lease (CUDA: every importer frees an imported pointer before the
    // exporter frees the allocation), but the pool stays imported: its descriptor came once.
    expect(receiver.fdMemoryResources()).toMatchObject({ importedPools: 1, importedPointers: 1 });
    expect(pool.invalidate(GPU, x)).toBe(false);
    expect(pool.stats()).toMatchObject({ importedPools: 1, poolImports: 1, poolReleases: 0 });
    // x again: its pointer imported afresh from the pool held, no second pool import.
    const again = await pool.acquireImport(request(x, MiB));
    expect(poolOpens).toBe(1);
    expect(Buffer.compare(read(receiver, again.ptr, MiB), dx)).toBe(0);
    // A lease taken while one is held is a hit on the same import.
    const hit = pool.lookupImport(request(x, MiB));
    expect(hit?.ptr).toBe(again.ptr);
    hit!.release();
    expect(receiver.fdMemoryResources()).toMatchObject({ importedPools: 1, importedPointers: 2 });
    again.release();
    expect(receiver.fdMemoryResources()).toMatchObject({ importedPools: 1, importedPointers: 1 });
    // The owner drops the pool while y is still being copied from: nothing is undone under the copy.
    expect(pool.dropPeerPool('peer-1/pool-1')).toBe(true);
    expect(receiver.fdMemoryResources()).toMatchObject({ importedPools: 1, importedPointers: 1 });
    expect(Buffer.compare(read(receiver, my.ptr, 2 * MiB), dy)).toBe(0);
    my.release();
    expect(receiver.fdMemoryResources()).toEqual(NOTHING);
    expect(pool.stats()).toMatchObject({ importedPools: 0, poolReleases: 1, openMappings: 0, closeFailures: 0 });
    owner.memFreeAsync(x, s);
    owner.memFreeAsync(y, s);
    owner.streamSynchronize(s);
    owner.memPoolDestroy(peerPool);
    owner.streamDestroy(s);
  });

  it('close() undoes every kind, in use ones on release, the pool import after its pointers', async () => {
    const v = owner.vmmAlloc(MiB);
    const ex = owner.vmmExport(v.ptr, MiB);
    const legacy = owner.memAlloc(MiB);
    const peerPool = owner.memPoolCreate();
    const p = owner.memAllocFromPoolAsync(MiB, peerPool, 0n);
    const poolFd = owner.memPoolExport(peerPool);
    const data = owner.memPoolExportPointer(p);
    const pool = new HandlePool(receiver);
    const mv = await pool.acquireImport({
      kind: 'vmm',
      deviceUuid: GPU,
      base: ex.base,
      size: ex.size,
      bufferId: 1n,
      open: () => receiver.vmmImport(ex.chunks).ptr,
      dispose: () => ex.chunks.forEach((c) => owner.closeFd(c.fd)),
    });
    const ml = await pool.acquire({ deviceUuid: GPU, base: legacy, size: MiB, handle: owner.ipcGetMemHandle(legacy), bufferId: owner.bufferId(legacy) });
    const mp = await pool.acquireImport({
      kind: 'pool',
      deviceUuid: GPU,
      base: p,
      size: MiB,
      bufferId: 2n,
      identity: data,
      peerPool: { key: 'k', open: () => receiver.memPoolImport(poolFd) },
      open: (h) => receiver.memPoolImportPointer(h!, data),
      dispose: () => owner.closeFd(poolFd),
    });
    expect(pool.stats()).toMatchObject({ openMappings: 3, byKind: { 'legacy-ipc': { openMappings: 1 }, vmm: { openMappings: 1 }, pool: { openMappings: 1 } } });
    mv.release();
    pool.close();
    expect(receiver.fdMemoryResources()).toEqual({ ...NOTHING, importedPools: 1, importedPointers: 1 });
    mp.release();
    ml.release();
    expect(receiver.fdMemoryResources()).toEqual(NOTHING);
    expect(pool.stats()).toMatchObject({ openMappings: 0, mappedBytes: 0, importedPools: 0, closeFailures: 0 });
    await expect(pool.acquireImport({ kind: 'vmm', deviceUuid: GPU, base: ex.base, size: ex.size, bufferId: 1n, open: () => 0n })).rejects.toMatchObject({
      code: 'SMCUDA_CLOSED',
    });
    owner.memFreeAsync(p, 0n);
    owner.streamSynchronize(0n);
    owner.memPoolDestroy(peerPool);
    owner.vmmFree(v.ptr);
    owner.memFree(legacy);
  });
});

describe('HandlePool with the fake driver: import requests', () => {
  const X = 0x7000_0000_0000n;

  it('disposes each request exactly once: own open, joined open, hit, failure, refusal', async () => {
    const fake = new FakeIpcDriver();
    const pool = new HandlePool(fake);
    const a = fake.allocate(GPU, X, MiB, 'vmm');
    const counts = [0, 0, 0, 0].map(() => ({ count: 0 }));
    fake.pauseOpens();
    const first = pool.acquireImport(fake.importRequest(a, counts[0]));
    const joined = pool.acquireImport(fake.importRequest(a, counts[1]));
    await Promise.resolve();
    // The open owns its descriptors until it is done; the joiner's are not needed: closed at once.
    expect(counts.map((c) => c.count)).toEqual([0, 1, 0, 0]);
    fake.resumeOpens();
    const [m1, m2] = await Promise.all([first, joined]);
    expect(m1.ptr).toBe(m2.ptr);
    const hit = await pool.acquireImport(fake.importRequest(a, counts[2]));
    expect(counts.map((c) => c.count)).toEqual([1, 1, 1, 0]);
    for (const m of [m1, m2, hit]) m.release();
    const b = fake.allocate(GPU, X + 0x1_0000_0000n, MiB, 'vmm');
    fake.failNextOpen('CUDA_ERROR_INVALID_HANDLE');
    await expect(pool.acquireImport(fake.importRequest(b, counts[3]))).rejects.toThrow(CudaError);
    expect(counts[3]!.count).toBe(1);
    const bad = { count: 0 };
    await expect(pool.acquireImport({ ...fake.importRequest(b, bad), size: -1 })).rejects.toThrow(RangeError);
    expect(bad.count).toBe(1);
    expect(pool.stats()).toMatchObject({ opens: 1, openFailures: 1, misses: 3, hits: 1 });
  });

  it('a resource error evicts an idle mapping of any kind and calls the opener again', async () => {
    const fake = new FakeIpcDriver();
    const pool = new HandlePool(fake);
    const idle = fake.allocate(GPU, X, MiB, 'legacy-ipc');
    (await pool.acquire(fake.request(idle))).release();
    const b = fake.allocate(GPU, X + 0x1_0000_0000n, MiB, 'pool', 'peer-pool');
    fake.failNextOpen('CUDA_ERROR_OUT_OF_MEMORY');
    let opens = 0;
    const req = fake.importRequest(b);
    const m = await pool.acquireImport({ ...req, open: (h) => (opens++, req.open(h)) });
    expect(opens).toBe(2);
    expect(fake.isMapped(m.ptr)).toBe(true);
    expect(pool.entries().map((e) => e.kind)).toEqual(['pool']);
    expect(pool.stats()).toMatchObject({ evictions: 1, openFailures: 1, byKind: { pool: { opens: 1, openFailures: 1 }, 'legacy-ipc': { closes: 1 } } });
    m.release();
  });

  it("the same address of another kind is stale: the old mapping is undone with its own kind's call", async () => {
    const fake = new FakeIpcDriver();
    const pool = new HandlePool(fake);
    const a = fake.allocate(GPU, X, MiB, 'legacy-ipc');
    const ma = await pool.acquire(fake.request(a));
    fake.free(a);
    const b = fake.allocate(GPU, X, MiB, 'vmm');
    // Even with the same buffer id and size, a vmm request never gets the legacy mapping.
    expect(pool.lookupImport({ ...fake.importRequest(b), bufferId: a.bufferId, kind: 'legacy-ipc' })).toBeUndefined();
    const mb = await pool.acquireImport(fake.importRequest(b));
    expect(fake.allocAt(mb.ptr)).toBe(b);
    expect(fake.isMapped(ma.ptr)).toBe(true); // still in use: undone on release
    ma.release();
    mb.release();
    pool.close();
    expect(fake.badCloses).toEqual([]);
    expect(fake.mappedCount).toBe(0);
    expect(pool.stats()).toMatchObject({ stale: 1, closes: 2, openMappings: 0 });
  });

  it('refuses fd kinds when its driver cannot undo them, and malformed requests, before opening', async () => {
    const fake = new FakeIpcDriver();
    const ipcOnly = new HandlePool({ ipcOpenMemHandle: (h) => fake.ipcOpenMemHandle(h), ipcCloseMemHandle: (p) => fake.ipcCloseMemHandle(p) });
    const v = fake.allocate(GPU, X, MiB, 'vmm');
    await expect(ipcOnly.acquireImport(fake.importRequest(v))).rejects.toThrow(/cannot undo a 'vmm' mapping \(no vmmRelease\)/);
    const pool = new HandlePool(fake);
    const p = fake.allocate(GPU, X + 0x1_0000_0000n, MiB, 'pool');
    const { peerPool, ...noPeerPool } = fake.importRequest(p);
    void peerPool;
    await expect(pool.acquireImport(noPeerPool)).rejects.toThrow(/needs peerPool/);
    await expect(pool.acquireImport({ ...fake.importRequest(v), peerPool: { key: 'k', open: () => 1n } })).rejects.toThrow(/for 'pool' requests only/);
    await expect(pool.acquireImport({ ...fake.importRequest(v), kind: 'nope' as 'vmm' })).rejects.toThrow(TypeError);
    expect(fake.openCalls).toBe(0);
  });

  it('dropPeerPool during a pointer import: the waiter gets its mapping, the pool keeps nothing, both undone on release', async () => {
    const fake = new FakeIpcDriver();
    const pool = new HandlePool(fake);
    const p = fake.allocate(GPU, X, MiB, 'pool', 'pp');
    fake.pauseOpens();
    const pending = pool.acquireImport(fake.importRequest(p));
    await new Promise((r) => setTimeout(r, 0)); // the pool import is done, the pointer import waits
    expect(fake.importedPools).toBe(1);
    expect(pool.dropPeerPool('pp')).toBe(true);
    fake.resumeOpens();
    const m = await pending;
    expect(fake.allocAt(m.ptr)).toBe(p);
    expect(pool.stats()).toMatchObject({ residentEntries: 0, openMappings: 1, importedPools: 1, invalidations: 1 });
    expect(pool.lookupImport(fake.importRequest(p))).toBeUndefined();
    m.release();
    expect([fake.mappedCount, fake.importedPools, fake.badPoolReleases.length]).toEqual([0, 0, 0]);
    expect(pool.stats()).toMatchObject({ openMappings: 0, importedPools: 0, poolReleases: 1 });
  });

  it('trace events carry the mapping kind as mappingKind (a trace record has its own `kind`)', async () => {
    const fake = new FakeIpcDriver();
    const events: HandlePoolEvent[] = [];
    const pool = new HandlePool(fake, { onEvent: (e) => events.push(e) });
    (await pool.acquireImport(fake.importRequest(fake.allocate(GPU, X, MiB, 'vmm')))).release();
    pool.close();
    expect(events.map((e) => [e.type, e.mappingKind])).toEqual([
      ['miss', 'vmm'],
      ['open', 'vmm'],
      ['close', 'vmm'],
    ]);
    expect(events.every((e) => !('kind' in e))).toBe(true);
  });

  it('a pool import that fails is forgotten: the next request imports again', async () => {
    const fake = new FakeIpcDriver();
    const pool = new HandlePool(fake);
    const p = fake.allocate(GPU, X, MiB, 'pool', 'pp');
    const req = fake.importRequest(p);
    let tries = 0;
    const failing: ImportRequest = {
      ...req,
      peerPool: {
        key: 'pp',
        open: () => {
          if (tries++ === 0) throw new CudaError('cuMemPoolImportFromShareableHandle', 'CUDA_ERROR_INVALID_VALUE', 1);
          return fake.memPoolImport('pp');
        },
      },
    };
    await expect(pool.acquireImport(failing)).rejects.toMatchObject({ code: 'CUDA_ERROR_INVALID_VALUE' });
    expect(pool.stats()).toMatchObject({ importedPools: 0, openFailures: 1, byKind: { pool: { openFailures: 1 } } });
    const m: Mapping = await pool.acquireImport(failing);
    expect([tries, pool.stats().importedPools, fake.importedPools]).toEqual([2, 1, 1]);
    m.release();
    pool.close();
    expect(fake.importedPools).toBe(0);
  });
});
