/**
 * VMM, chunked VMM and pool memory between two processes on a real GPU, at
 * the size the issue measures (256 MiB): the parent exports, the descriptors
 * cross a Unix socket (SCM_RIGHTS), the child (fixtures/fd-peer.mjs, native
 * driver) imports and pulls every byte into its own memory with
 * cuMemcpyAsync, and a SHA-256 of what arrived is compared. Then everything
 * is undone on both sides and counted. The smaller cases of the same kinds
 * run in the contract suite (driver-contract.gpu.test.ts).
 *
 * Where no GPU is usable every case is reported as skipped, with the reason.
 * Needs compiled code: `npx tsc -p .` first.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CudaDriver, DevicePtr, VmmExport } from '../../src/cuda/driver.js';
import { patternBytes } from '../helpers/bytes.js';
import { FdPeer } from '../helpers/fd-peer.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();
const MiB = 1024 * 1024;
const SIZE = 256 * MiB;
const NONE = { reservations: 0, mappings: 0, pools: 0, importedPools: 0, importedPointers: 0 };

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

describe.skipIf(Boolean(probe.skip))(`fd-shared memory between two processes, 256 MiB${probe.skip ? ` (skipped: ${probe.skip})` : ''}`, () => {
  let d: CudaDriver;
  let peer: FdPeer;
  let data: Uint8Array;
  beforeAll(async () => {
    data = patternBytes(SIZE, 2026);
    d = probe.make!();
    d.init();
    d.setDevice(0);
    peer = await FdPeer.start({ kind: 'native' });
    await peer.call('openDriver');
  }, 60_000);
  afterAll(async () => {
    await peer?.stop();
    d?.close();
  });

  async function importVmm(ex: VmmExport): Promise<{ ptr: bigint; size: number }> {
    const ids = [];
    for (const c of ex.chunks) {
      try {
        const got = await peer.pass(c.fd, { offset: c.offset, size: c.size });
        ids.push({ id: got.id, offset: c.offset, size: c.size });
      } finally {
        d.closeFd(c.fd);
      }
    }
    const im = await peer.call('importVmm', { chunks: ids, device: 0 });
    return { ptr: BigInt(im.ptr as string), size: im.size as number };
  }

  async function expectArrives(at: DevicePtr, expected: Uint8Array): Promise<void> {
    const r = await peer.call('sha', { ptr: at.toString(), length: expected.byteLength });
    expect(r.sha256).toBe(sha(expected));
  }

  it('vmm: one chunk', async () => {
    const v = d.vmmAlloc(SIZE);
    try {
      d.memcpyHtoD(v.ptr, data);
      d.streamSynchronize(0n);
      const ex = d.vmmExport(v.ptr, SIZE);
      const im = await importVmm(ex);
      await expectArrives(im.ptr + (v.ptr - ex.base), data);
      await peer.call('releaseVmm', { ptr: im.ptr.toString() });
      expect(await peer.call('resources')).toMatchObject(NONE);
    } finally {
      d.vmmFree(v.ptr);
    }
  }, 120_000);

  it('vmm-chunked: a message from the middle of the first of 8 chunks to the middle of the last', async () => {
    const v = d.vmmAlloc(SIZE, { chunks: 8 });
    try {
      d.memcpyHtoD(v.ptr, data);
      d.streamSynchronize(0n);
      const start = v.chunkSize / 2;
      const length = v.size - v.chunkSize;
      const ex = d.vmmExport(v.ptr + BigInt(start), length);
      expect(ex.chunks.length).toBe(8);
      const im = await importVmm(ex);
      await expectArrives(im.ptr + BigInt(start), data.subarray(start, start + length));
      await peer.call('releaseVmm', { ptr: im.ptr.toString() });
      expect(await peer.call('resources')).toMatchObject(NONE);
    } finally {
      d.vmmFree(v.ptr);
    }
  }, 120_000);

  it('pool: the pool once, the allocation by its export data', async () => {
    const pool = d.memPoolCreate();
    const stream = d.streamCreate();
    const p = d.memAllocFromPoolAsync(SIZE, pool, stream);
    try {
      d.streamSynchronize(stream);
      d.memcpyHtoD(p, data);
      d.streamSynchronize(0n);
      const fd = d.memPoolExport(pool);
      let got;
      try {
        got = await peer.pass(fd, { pool: true });
      } finally {
        d.closeFd(fd);
      }
      const ip = await peer.call('importPool', { id: got.id, device: 0 });
      const ptr = await peer.call('importPointer', { pool: ip.pool, data: Buffer.from(d.memPoolExportPointer(p)).toString('hex') });
      await expectArrives(BigInt(ptr.ptr as string), data);
      await peer.call('releasePointer', { ptr: ptr.ptr });
      await peer.call('releasePool', { pool: ip.pool });
      expect(await peer.call('resources')).toMatchObject(NONE);
    } finally {
      d.memFreeAsync(p, stream);
      d.streamSynchronize(stream);
      d.streamDestroy(stream);
      d.memPoolDestroy(pool);
    }
    expect(d.fdMemoryResources()).toEqual(NONE);
  }, 120_000);
});
