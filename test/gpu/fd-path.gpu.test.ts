/**
 * RGET by descriptor on a real GPU: this process and a child
 * (test/fixtures/fd-path-peer.mjs) on one GPU, native driver, through
 * Transport/Endpoint. 256 MiB from VMM memory (one chunk), chunked VMM (four
 * chunks, the message spanning them) and a POSIX-fd pool; the receiver's
 * bytes are checked by sha256 and the message must go by RGET (descriptor key) (not
 * staging), with one offer per allocation. Where no GPU is usable every case
 * is reported as skipped, with the reason. Needs compiled code: `npx tsc -p .` first.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../src/buffers.js';
import type { CudaDriver } from '../../src/cuda/driver.js';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport } from '../../src/transport.js';
import { patternBytes } from '../helpers/bytes.js';
import { spawnPeer } from '../helpers/child.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();
const SIZE = 256 << 20;

type Kind = 'vmm' | 'vmm-chunked' | 'pool';

function allocate(d: CudaDriver, kind: Kind, size = SIZE): { buf: DeviceBuffer; free: (t: Transport) => void } {
  if (kind === 'pool') {
    const stream = d.streamCreate();
    const pool = d.memPoolCreate();
    const ptr = d.memAllocFromPoolAsync(size, pool, stream);
    d.streamSynchronize(stream);
    return {
      buf: { ptr, length: size },
      free: (t) => {
        t.invalidate(ptr);
        d.memFreeAsync(ptr, stream);
        d.streamSynchronize(stream);
        d.memPoolDestroy(pool);
        d.streamDestroy(stream);
      },
    };
  }
  const a = d.vmmAlloc(SIZE, { chunks: kind === 'vmm-chunked' ? 4 : 1 });
  return {
    buf: { ptr: a.ptr, length: SIZE },
    free: (t) => {
      t.invalidate(a.ptr);
      d.vmmFree(a.ptr);
    },
  };
}

describe.skipIf(Boolean(probe.skip))(`RGET of descriptor keys on the native driver${probe.skip ? ` (skipped: ${probe.skip})` : ''}`, () => {
  it.each<Kind>(['vmm', 'vmm-chunked', 'pool'])(
    '%s: 256 MiB between two processes on one GPU by RGET (descriptor key), sha256 verified',
    async (kind) => {
      const dir = mkdtempSync(join(tmpdir(), 'smcuda-fdgpu-'));
      const path = join(dir, 'rank0.sock');
      const driver = probe.make!();
      const t = await Transport.create({ driver, id: 'gpu-sender', device: 0 });
      try {
        await t.listen(path);
        const endpoint = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
        const peer = await spawnPeer('fd-path-peer.mjs', { args: [path], env: { ...process.env, SMCUDA_TEST_DRIVER: 'native', SMCUDA_TEST_DEVICE: '0' } });
        try {
          const ep = await endpoint;
          const mem = allocate(driver, kind);
          // the message starts inside the first chunk and ends in the last: it spans every chunk (vmm-chunked)
          const skip = kind === 'vmm-chunked' ? 1 << 20 : 0;
          const msg: DeviceBuffer = { ptr: mem.buf.ptr + BigInt(skip), length: SIZE - skip };
          const data = patternBytes(SIZE, 21);
          driver.memcpyHtoD(mem.buf.ptr, data);
          const want = createHash('sha256').update(data.subarray(skip)).digest('hex');
          // the first device message starts the negotiation (inline meanwhile); then the descriptor channel is up
          for (let i = 0; ep.state !== 'OK' || !ep.stats().fd.channel; i++) {
            if (i > 100) throw new Error(`endpoint stayed ${ep.state}, descriptor channel ${ep.stats().fd.channel}`);
            const got = peer.call('recv', { tag: 9 });
            await ep.send({ ptr: mem.buf.ptr, length: 4096 }, { tag: 9 });
            await got;
            await new Promise((r) => setTimeout(r, 10));
          }
          for (let i = 0; i < 2; i++) {
            const got = peer.call<{ length: number; path: string; sha256: string }>('recv', { tag: 1, sha256: true });
            await ep.send(msg, { tag: 1 });
            expect(await got).toMatchObject({ length: msg.length, path: 'rget-fd', sha256: want });
          }
          const st = ep.stats();
          expect(st.sent['rget-fd'].messages).toBeGreaterThanOrEqual(2);
          expect(st.stagingReasons).not.toHaveProperty([`${kind === 'pool' ? 'pool' : 'vmm'} memory, descriptor channel not up`]);
          mem.free(t);
        } finally {
          await peer.exit().catch(() => peer.kill());
        }
      } finally {
        await t.close();
        driver.close();
        rmSync(dir, { recursive: true, force: true });
      }
    },
    180_000,
  );

  // bench --suite memory sends slices of one pool allocation (issue 24, item 2):
  // cuMemPoolExportPointer takes only the allocation's start, which
  // cuMemGetAddressRange of a pointer past the first segment does not give.
  it('pool: 256 MiB slices at offsets of one 1 GiB pool allocation, each by RGET (descriptor key), sha256 verified', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fdgpu-'));
    const path = join(dir, 'rank0.sock');
    const driver = probe.make!();
    const t = await Transport.create({ driver, id: 'gpu-sender', device: 0 });
    try {
      await t.listen(path);
      const endpoint = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
      const peer = await spawnPeer('fd-path-peer.mjs', { args: [path], env: { ...process.env, SMCUDA_TEST_DRIVER: 'native', SMCUDA_TEST_DEVICE: '0' } });
      try {
        const ep = await endpoint;
        const total = 4 * SIZE;
        const mem = allocate(driver, 'pool', total);
        const data = patternBytes(total, 22);
        driver.memcpyHtoD(mem.buf.ptr, data);
        for (let i = 0; ep.state !== 'OK' || !ep.stats().fd.channel; i++) {
          if (i > 100) throw new Error(`endpoint stayed ${ep.state}, descriptor channel ${ep.stats().fd.channel}`);
          const got = peer.call('recv', { tag: 9 });
          await ep.send({ ptr: mem.buf.ptr, length: 4096 }, { tag: 9 });
          await got;
          await new Promise((r) => setTimeout(r, 10));
        }
        for (const off of [SIZE + 4096, 3 * SIZE - 8192, 2 * SIZE, 0]) {
          const want = createHash('sha256')
            .update(data.subarray(off, off + SIZE))
            .digest('hex');
          const got = peer.call<{ length: number; path: string; sha256: string }>('recv', { tag: 1, sha256: true });
          await ep.send({ ptr: mem.buf.ptr + BigInt(off), length: SIZE }, { tag: 1 });
          expect(await got).toMatchObject({ length: SIZE, path: 'rget-fd', sha256: want });
        }
        expect(Object.keys(ep.stats().stagingReasons).filter((k) => k.includes('export failed'))).toEqual([]);
        mem.free(t);
      } finally {
        await peer.exit().catch(() => peer.kill());
      }
    } finally {
      await t.close();
      driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);

  // bench --suite memory makes a pool per operation (issue 24, item 2): the
  // driver gives a destroyed pool's handle to the next pool made, and the
  // sender took the new pool for the one it had sent: every message of it
  // went by staging (cuMemPoolExportPointer refused its pointers).
  it('pool: pools destroyed and made again (the driver reuses their handles), every message of each new pool by RGET (descriptor key)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fdgpu-'));
    const path = join(dir, 'rank0.sock');
    const driver = probe.make!();
    const t = await Transport.create({ driver, id: 'gpu-sender', device: 0 });
    try {
      await t.listen(path);
      const endpoint = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
      const peer = await spawnPeer('fd-path-peer.mjs', { args: [path], env: { ...process.env, SMCUDA_TEST_DRIVER: 'native', SMCUDA_TEST_DEVICE: '0' } });
      try {
        const ep = await endpoint;
        const size = 4 << 20;
        const handles: bigint[] = [];
        for (let cycle = 0; cycle < 4; cycle++) {
          const mem = allocate(driver, 'pool', size);
          handles.push(driver.memoryKind(mem.buf.ptr).pool!);
          const data = patternBytes(size, 30 + cycle);
          driver.memcpyHtoD(mem.buf.ptr, data);
          for (let i = 0; ep.state !== 'OK' || !ep.stats().fd.channel; i++) {
            if (i > 100) throw new Error(`endpoint stayed ${ep.state}, descriptor channel ${ep.stats().fd.channel}`);
            const got = peer.call('recv', { tag: 9 });
            await ep.send({ ptr: mem.buf.ptr, length: 4096 }, { tag: 9 });
            await got;
            await new Promise((r) => setTimeout(r, 10));
          }
          const want = createHash('sha256').update(data).digest('hex');
          for (let i = 0; i < 3; i++) {
            const got = peer.call<{ length: number; path: string; sha256: string }>('recv', { tag: 1, sha256: true });
            await ep.send(mem.buf, { tag: 1 });
            expect(await got, `pool ${cycle} (handle 0x${handles[cycle]!.toString(16)}), message ${i}`).toMatchObject({
              length: size,
              path: 'rget-fd',
              sha256: want,
            });
          }
          mem.free(t);
        }
        console.log(`pool handles: ${handles.map((h) => `0x${h.toString(16)}`).join(' ')}`);
        expect(Object.keys(ep.stats().stagingReasons).filter((k) => k.includes('export failed') || k.includes('restaged'))).toEqual([]);
      } finally {
        await peer.exit().catch(() => peer.kill());
      }
    } finally {
      await t.close();
      driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
