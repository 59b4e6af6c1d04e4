/**
 * Every mapping's real extent is checked when it enters the handle pool, for
 * every kind (issue 23 finding 9; cache/extent.ts): a peer that claims more
 * bytes than its allocation holds — in its IPC probe, an RGET, or a pool or
 * VMM offer — gets no mapping of that size into the pool, so no later copy
 * (a cache hit skips every other check) can run outside the real allocation.
 * Two simulated driver instances in one process stand for owner and receiver.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HandlePool, type ImportRequest } from '../../../cache/index.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ExportedProbe, verifyPeerProbe } from '../../../src/ipc-probe.js';
import { IPC_HANDLE_BYTES } from '../../../src/wire/frames.js';

const MiB = 1024 * 1024;
const GPU = 'GPU-5170a11e-0000-4000-8000-000000000000';

function driver(): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env: {} });
  d.init();
  d.setDevice(0);
  return d;
}

let owner: SimulatedCudaDriver;
let receiver: SimulatedCudaDriver;
let pool: HandlePool;
beforeEach(() => {
  owner = driver();
  receiver = driver();
  pool = new HandlePool(receiver);
});
afterEach(() => {
  pool.close();
  receiver.close();
  owner.close();
});

const nothingKept = () => expect(pool.stats()).toMatchObject({ residentEntries: 0, openMappings: 0, extentRefusals: 1 });

describe('the real extent is checked when a mapping enters the pool', () => {
  it('an IPC probe that overstates its size is refused and not cached; the honest probe is', async () => {
    const probe = ExportedProbe.create(owner, { synchronize: (s) => owner.streamSynchronize(s) });
    try {
      const lying = probe.bytes.slice();
      const v = new DataView(lying.buffer);
      const real = v.getBigUint64(IPC_HANDLE_BYTES + 8, true);
      v.setBigUint64(IPC_HANDLE_BYTES + 8, real * 1024n, true);
      await expect(verifyPeerProbe(receiver, pool, lying, GPU)).rejects.toThrow(/maps \d+ bytes, not the \d+ the peer claims/);
      nothingKept();
      // A later RGET naming the overstated size finds nothing to hit.
      const base = v.getBigUint64(IPC_HANDLE_BYTES, true);
      const bufferId = v.getBigUint64(IPC_HANDLE_BYTES + 16, true);
      expect(pool.lookup({ deviceUuid: GPU, base, size: Number(real * 1024n), handle: lying.subarray(0, IPC_HANDLE_BYTES), bufferId })).toBeUndefined();
      await verifyPeerProbe(receiver, pool, probe.bytes, GPU);
      expect(pool.entries().map((e) => e.size)).toEqual([Number(real)]);
    } finally {
      probe.free();
    }
  });

  it('legacy IPC: an acquire claiming more than the allocation fails with SMCUDA_BAD_EXTENT; the mapping is closed', async () => {
    const p = owner.memAlloc(MiB);
    const req = { deviceUuid: GPU, base: p, size: 4 * MiB, handle: owner.ipcGetMemHandle(p), bufferId: owner.bufferId(p) };
    await expect(pool.acquire(req)).rejects.toMatchObject({ code: 'SMCUDA_BAD_EXTENT' });
    nothingKept();
    const m = await pool.acquire({ ...req, size: MiB });
    expect(m.size).toBe(MiB);
    m.release();
  });

  it('pool pointers: an import claiming more than the allocation is refused, the pointer released', async () => {
    const s = owner.streamCreate();
    const peerPool = owner.memPoolCreate();
    const x = owner.memAllocFromPoolAsync(MiB, peerPool, s);
    const y = owner.memAllocFromPoolAsync(2 * MiB, peerPool, s); // right after x in the pool
    owner.streamSynchronize(s);
    const poolFd = owner.memPoolExport(peerPool);
    const request = (ptr: bigint, size: number): ImportRequest => {
      const data = owner.memPoolExportPointer(ptr);
      return {
        kind: 'pool',
        deviceUuid: GPU,
        base: ptr,
        size,
        bufferId: owner.memoryKind(ptr).bufferId,
        identity: data,
        peerPool: { key: 'peer/pool-1', open: () => receiver.memPoolImport(poolFd, { device: 0 }) },
        open: (imported) => receiver.memPoolImportPointer(imported!, data),
      };
    };
    try {
      const my = await pool.acquireImport(request(y, 2 * MiB)); // y imported, so memory follows x's import
      await expect(pool.acquireImport(request(x, 3 * MiB))).rejects.toMatchObject({ code: 'SMCUDA_BAD_EXTENT' });
      expect(pool.stats()).toMatchObject({ residentEntries: 1, extentRefusals: 1 });
      expect(receiver.fdMemoryResources()).toMatchObject({ importedPointers: 1 });
      my.release();
      const mx = await pool.acquireImport(request(x, MiB));
      expect(mx.size).toBe(MiB);
      mx.release();
    } finally {
      pool.close();
      owner.closeFd(poolFd);
    }
  });

  it('VMM imports: a request naming more bytes than the chunks mapped is refused, the import undone', async () => {
    const v = owner.vmmAlloc(2 * MiB, { chunks: 1 });
    const ex = owner.vmmExport(v.ptr, v.size);
    const req: ImportRequest = {
      kind: 'vmm',
      deviceUuid: GPU,
      base: ex.base,
      size: ex.size + 4 * MiB,
      bufferId: owner.memoryKind(v.ptr).bufferId,
      open: () => receiver.vmmImport(ex.chunks, { device: 0 }).ptr,
      dispose: () => {
        for (const c of ex.chunks) owner.closeFd(c.fd);
      },
    };
    await expect(pool.acquireImport(req)).rejects.toMatchObject({ code: 'SMCUDA_BAD_EXTENT' });
    nothingKept();
    expect(receiver.fdMemoryResources()).toMatchObject({ reservations: 0, mappings: 0 });
  });
});
