/**
 * The driver contract's cases for memory shared by file descriptor (VMM,
 * chunked VMM, stream-ordered pools): allocate, classify, export, pass the
 * descriptors to a REAL second process over SCM_RIGHTS (fixtures/fd-peer.mjs),
 * import there, verify every byte, undo, and count that nothing leaks
 * (descriptors in /proc/self/fd, reservations, mappings, pools) on both sides.
 * Called from driverContract, so it runs on the simulator here and on the
 * native driver on a GPU machine.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CudaDriver, FdMemoryResources, VmmExport } from '../../src/cuda/driver.js';
import { CudaError } from '../../src/errors.js';
import type { ContractOptions } from './driver-contract.js';
import { patternBytes } from './bytes.js';
import type { WorkerCommandError } from './child.js';
import { FdPeer, openFds } from './fd-peer.js';

const MiB = 1024 * 1024;
const NONE: FdMemoryResources = { reservations: 0, mappings: 0, pools: 0, importedPools: 0, importedPointers: 0 };

function expectCuda(fn: () => unknown, code?: string): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(CudaError);
  if (code) expect((caught as CudaError).code).toBe(code);
}

async function expectPeerCuda(p: Promise<unknown>, code?: string): Promise<void> {
  const err = (await p.then(
    () => undefined,
    (e: unknown) => e,
  )) as WorkerCommandError | undefined;
  expect(err, 'the child should have refused').toBeDefined();
  expect(err!.code).toMatch(code ? new RegExp(`^${code}$`) : /^CUDA_ERROR_/);
}

/** Sends every chunk's descriptor, closes ours, and returns the child's ids for them in order. */
async function passChunks(peer: FdPeer, d: CudaDriver, ex: VmmExport): Promise<Array<{ id: number; offset: number; size: number }>> {
  const out = [];
  for (const [k, c] of ex.chunks.entries()) {
    try {
      const got = await peer.pass(c.fd, { chunk: k, offset: c.offset, size: c.size });
      expect(got.hasFd).toBe(true);
      out.push({ id: got.id as number, offset: c.offset, size: c.size });
    } finally {
      d.closeFd(c.fd);
    }
  }
  return out;
}

export function fdMemoryCases(driver: () => CudaDriver, opts: ContractOptions): void {
  describe('memory shared by file descriptor', () => {
    let d: CudaDriver;
    let fdsAtStart: number;
    beforeAll(() => {
      d = driver();
      fdsAtStart = openFds();
    });

    it('the driver can make and share VMM and pool memory', () => {
      expect(d.status().fdMemory).toBe(true);
    });

    it('memoryKind tells legacy, VMM and pool memory apart; cuIpcGetMemHandle refuses VMM memory', () => {
      const legacy = d.memAlloc(4096);
      const vmm = d.vmmAlloc(4096, { chunks: 2 });
      const pool = d.memPoolCreate();
      const stream = d.streamCreate();
      const p = d.memAllocFromPoolAsync(4096, pool, stream);
      try {
        d.streamSynchronize(stream);
        expect(d.memoryKind(legacy).kind).toBe('legacy-ipc');
        const k = d.memoryKind(vmm.ptr + BigInt(vmm.chunkSize) + 7n);
        expect(k.kind).toBe('vmm');
        expect(k.device).toBe(0);
        expect(k.chunk).toEqual({ base: vmm.ptr + BigInt(vmm.chunkSize), size: vmm.chunkSize });
        const pk = d.memoryKind(p);
        expect(pk.kind).toBe('pool');
        expect(pk.pool).toBe(pool);
        expect(d.bufferId(vmm.ptr)).toBe(d.memoryKind(vmm.ptr).bufferId);
        expectCuda(() => d.ipcGetMemHandle(vmm.ptr));
      } finally {
        d.memFreeAsync(p, stream);
        d.streamSynchronize(stream);
        d.streamDestroy(stream);
        d.memPoolDestroy(pool);
        d.vmmFree(vmm.ptr);
        d.memFree(legacy);
      }
      expect(d.fdMemoryResources()).toEqual(NONE);
    });

    it('vmmAlloc maps its chunks contiguously: bytes across chunk boundaries read back', () => {
      const v = d.vmmAlloc(3 * MiB, { chunks: 3 });
      try {
        expect(v.chunks).toBe(3);
        expect(v.size).toBe(3 * v.chunkSize);
        expect(d.fdMemoryResources()).toMatchObject({ reservations: 1, mappings: 3 });
        const data = patternBytes(v.size, 5);
        d.memcpyHtoD(v.ptr, data);
        const span = new Uint8Array(v.chunkSize + 4096);
        d.memcpyDtoH(span, v.ptr + BigInt(v.chunkSize - 2048));
        expect(Buffer.compare(span, data.subarray(v.chunkSize - 2048, 2 * v.chunkSize + 2048))).toBe(0);
        d.memsetD8(v.ptr + BigInt(2 * v.chunkSize - 10), 0xab, 20);
        const edge = new Uint8Array(20);
        d.memcpyDtoH(edge, v.ptr + BigInt(2 * v.chunkSize - 10));
        expect(edge.every((b) => b === 0xab)).toBe(true);
      } finally {
        d.vmmFree(v.ptr);
      }
      expectCuda(() => d.vmmFree(v.ptr), 'CUDA_ERROR_INVALID_VALUE');
      expect(d.fdMemoryResources()).toEqual(NONE);
    });

    it('vmmExport gives one new descriptor per chunk the span touches, offsets from the first', () => {
      const v = d.vmmAlloc(4 * MiB, { chunks: 4 });
      try {
        d.closeFd(d.vmmExport(v.ptr, 1).chunks[0]!.fd); // a first export may open the driver's own descriptors
        const before = openFds();
        const ex = d.vmmExport(v.ptr + BigInt(v.chunkSize + 100), v.chunkSize);
        expect(ex.base).toBe(v.ptr + BigInt(v.chunkSize));
        expect(ex.chunks.map((c) => [c.offset, c.size])).toEqual([
          [0, v.chunkSize],
          [v.chunkSize, v.chunkSize],
        ]);
        expect(ex.size).toBe(2 * v.chunkSize);
        expect(openFds()).toBe(before + 2);
        for (const c of ex.chunks) d.closeFd(c.fd);
        expect(openFds()).toBe(before);
        const one = d.vmmExport(v.ptr, 1);
        expect(one.chunks.length).toBe(1);
        d.closeFd(one.chunks[0]!.fd);
        const legacy = d.memAlloc(4096);
        try {
          expectCuda(() => d.vmmExport(legacy, 16));
        } finally {
          d.memFree(legacy);
        }
        expect(openFds()).toBe(before);
      } finally {
        d.vmmFree(v.ptr);
      }
    });

    it('refuses bad arguments before the driver sees them', () => {
      expect(() => d.vmmAlloc(-1)).toThrow(RangeError);
      expect(() => d.vmmAlloc(4096, { chunks: 0 })).toThrow(RangeError);
      expect(() => d.vmmAlloc(4096, { chunks: 1.5 })).toThrow(TypeError);
      expect(() => d.vmmImport([])).toThrow(RangeError);
      expect(() => d.vmmImport([{ fd: 3, offset: 4096, size: 4096 }])).toThrow(RangeError);
      expect(() =>
        d.vmmImport([
          { fd: 3, offset: 0, size: 4096 },
          { fd: 4, offset: 8192, size: 4096 },
        ]),
      ).toThrow(RangeError);
      expect(() => d.vmmImport([{ fd: -1, offset: 0, size: 4096 }])).toThrow(RangeError);
      expect(() => d.memPoolImportPointer(1n, new Uint8Array(10))).toThrow(RangeError);
      expect(() => d.memPoolImport('3' as unknown as number)).toThrow(TypeError);
      expect(() => d.closeFd(-1)).toThrow(RangeError);
      expect(() => d.memAllocFromPoolAsync(16, 1 as unknown as bigint, 0n)).toThrow(TypeError);
    });

    describe('with a second process (descriptors over SCM_RIGHTS)', () => {
      let peer: FdPeer;
      let childStart: Record<string, unknown>;
      beforeAll(async () => {
        peer = await FdPeer.start({ kind: opts.kind, env: opts.childEnv });
        await peer.call('openDriver');
        childStart = await peer.call('resources');
      });
      afterAll(async () => {
        await peer?.stop();
        // The real driver keeps descriptors of its own (device files) once used; the simulator none.
        if (opts.kind === 'sim') expect(openFds()).toBe(fdsAtStart);
      });

      /**
       * The child holds nothing of what it imported and (simulator) no extra
       * descriptor. The real driver opens descriptors of its own as it goes
       * (device files), so there only the driver's resources are counted.
       */
      async function childIsClean(): Promise<void> {
        const { fds, ...held } = await peer.call('resources');
        expect(held).toEqual(NONE);
        if (opts.kind === 'sim') expect(fds).toBe(childStart.fds);
      }

      it('vmm: the child imports one chunk and reads every byte (copy and RGET-style memcpyAsync)', async () => {
        const size = MiB + 333;
        const v = d.vmmAlloc(size);
        try {
          const data = patternBytes(size, 11);
          d.memcpyHtoD(v.ptr, data);
          d.streamSynchronize(0n);
          const ex = d.vmmExport(v.ptr, size);
          expect(ex.chunks.length).toBe(1);
          const ids = await passChunks(peer, d, ex);
          const im = await peer.call('importVmm', { chunks: ids, device: 0 });
          const at = (BigInt(im.ptr as string) + (v.ptr - ex.base)).toString();
          expect((await peer.call('read', { ptr: at, length: size })).hex).toBe(Buffer.from(data).toString('hex'));
          expect((await peer.call('copyVia', { ptr: at, length: size })).hex).toBe(Buffer.from(data).toString('hex'));
          expect(await peer.call('resources')).toMatchObject({ reservations: 1, mappings: 1 });
          await peer.call('releaseVmm', { ptr: im.ptr });
          await childIsClean();
        } finally {
          d.vmmFree(v.ptr);
        }
      });

      it('vmm-chunked: a message that spans chunks maps every chunk it touches, contiguously', async () => {
        const v = d.vmmAlloc(4 * MiB, { chunks: 4 });
        try {
          const data = patternBytes(v.size, 23);
          d.memcpyHtoD(v.ptr, data);
          d.streamSynchronize(0n);
          // From 1000 bytes before the end of chunk 0 to 1000 bytes into chunk 2.
          const start = v.chunkSize - 1000;
          const length = v.chunkSize + 2000;
          const ex = d.vmmExport(v.ptr + BigInt(start), length);
          expect(ex.chunks.length).toBe(3);
          expect(ex.base).toBe(v.ptr);
          const ids = await passChunks(peer, d, ex);
          const im = await peer.call('importVmm', { chunks: ids, device: 0 });
          expect(im.size).toBe(3 * v.chunkSize);
          const at = (BigInt(im.ptr as string) + BigInt(start)).toString();
          const want = Buffer.from(data.subarray(start, start + length)).toString('hex');
          expect((await peer.call('read', { ptr: at, length })).hex).toBe(want);
          expect((await peer.call('copyVia', { ptr: at, length })).hex).toBe(want);
          expect(await peer.call('resources')).toMatchObject({ reservations: 1, mappings: 3 });
          await peer.call('releaseVmm', { ptr: im.ptr });
          await childIsClean();
        } finally {
          d.vmmFree(v.ptr);
        }
      });

      it('pool: the pool is exported once, each allocation by its export data', async () => {
        const pool = d.memPoolCreate();
        const stream = d.streamCreate();
        const sizes = [MiB + 5, 3 * 4096];
        const ptrs = sizes.map((n) => d.memAllocFromPoolAsync(n, pool, stream));
        try {
          d.streamSynchronize(stream);
          const datas = sizes.map((n, i) => patternBytes(n, 100 + i));
          ptrs.forEach((p, i) => d.memcpyHtoD(p, datas[i]!));
          d.streamSynchronize(0n);
          const fd = d.memPoolExport(pool);
          let got;
          try {
            got = await peer.pass(fd, { pool: 1 });
          } finally {
            d.closeFd(fd);
          }
          const imported = await peer.call('importPool', { id: got.id, device: 0 });
          for (const [i, p] of ptrs.entries()) {
            const data = Buffer.from(d.memPoolExportPointer(p)).toString('hex');
            expect(data.length).toBe(128);
            const ip = await peer.call('importPointer', { pool: imported.pool, data });
            expect((await peer.call('copyVia', { ptr: ip.ptr, length: sizes[i] })).hex).toBe(Buffer.from(datas[i]!).toString('hex'));
            await peer.call('releasePointer', { ptr: ip.ptr });
          }
          await peer.call('releasePool', { pool: imported.pool });
          await childIsClean();
        } finally {
          for (const p of ptrs) d.memFreeAsync(p, stream);
          d.streamSynchronize(stream);
          d.streamDestroy(stream);
          d.memPoolDestroy(pool);
        }
        expect(d.fdMemoryResources()).toEqual(NONE);
      });

      it('a descriptor that is not the promised memory (size, or not GPU memory at all) is refused, and nothing leaks', async () => {
        const v = d.vmmAlloc(MiB);
        try {
          const ex = d.vmmExport(v.ptr, MiB);
          const ids = await passChunks(peer, d, ex);
          // The exporter promises twice the chunk it sent.
          await expectPeerCuda(peer.call('importVmm', { chunks: [{ ...ids[0]!, size: 2 * ids[0]!.size }], device: 0 }));
          await childIsClean();
          // A memfd that is no GPU memory at all.
          const { loadAddon } = await import('../../src/cuda/addon.js');
          const bogus = loadAddon().memfdCreate('smcuda-not-gpu', v.chunkSize);
          let got;
          try {
            got = await peer.pass(bogus, { bogus: true });
          } finally {
            d.closeFd(bogus);
          }
          await expectPeerCuda(peer.call('importVmm', { chunks: [{ id: got.id, offset: 0, size: v.chunkSize }] }));
          await childIsClean();
        } finally {
          d.vmmFree(v.ptr);
        }
        expect(d.fdMemoryResources()).toEqual(NONE);
      });

      it.skipIf(opts.devices < 2)(
        `memory of another device than the promised one is refused${opts.devices < 2 ? ' (skipped: fewer than 2 devices)' : ''}`,
        async () => {
          d.setDevice(1);
          let v;
          try {
            v = d.vmmAlloc(MiB);
          } finally {
            d.setDevice(0);
          }
          try {
            const ex = d.vmmExport(v.ptr, MiB);
            const ids = await passChunks(peer, d, ex);
            await expectPeerCuda(peer.call('importVmm', { chunks: ids, device: 0 }), 'CUDA_ERROR_INVALID_DEVICE');
            await childIsClean();
          } finally {
            d.vmmFree(v.ptr);
          }
        },
      );
    });
  });
}
