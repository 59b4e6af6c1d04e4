/**
 * A bad staged send fails alone on the native driver (docs/reliability.md,
 * "A bad message fails alone"): with IPC off, so device messages go by
 * staging, a send from freed device memory rejects at once with a CudaError
 * — cuMemGetAddressRange refuses it before anything is announced — and the
 * endpoint stays open: the next staged message reaches a peer process
 * intact. Skipped, visibly, where no GPU is usable.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/endpoint.js';
import { CudaError } from '../../src/errors.js';
import { Transport } from '../../src/transport.js';
import { checksum, FaultPeer, type FaultPeerResults, fill, rejection, within } from '../helpers/fault-peer.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
const STAGING = { negotiation: { ipc: false } };

describe.skipIf(p.skip !== false)(`staging fails alone on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  it('a staged send from freed memory rejects at once; the endpoint carries the next staged message intact', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-gpu-alone-'));
    const driver = p.make!();
    const t = await Transport.create({ driver, id: 'sender', device: 0, ...STAGING });
    let peer: FaultPeer | undefined;
    try {
      await t.listen(join(dir, 's.sock'));
      const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
      peer = await FaultPeer.start(join(dir, 's.sock'), { id: 'receiver', driver: 'native', device: p.devices > 1 ? 1 : 0, transport: STAGING });
      const ep = await accepted;
      const size = 6 << 20; // two chunks of the default 4 MiB ring
      const freed = driver.memAlloc(size);
      driver.memFree(freed);
      expect(await within(rejection(ep.send({ ptr: freed, length: size }, { tag: 1 })), 2000, 'the bad send')).toBeInstanceOf(CudaError);
      expect(ep.closed).toBe(false);
      const bytes = fill(size, 5);
      const src = driver.memAlloc(size);
      driver.memcpyHtoD(src, bytes);
      const got = peer.call<FaultPeerResults['recv']>('recv', { tag: 1, count: 1 });
      await within(ep.send({ ptr: src, length: size }, { tag: 1 }), 10_000, 'the good send');
      const received = (await within(got, 10_000, 'the receive')).received as { length: number; path: string; sum: number }[];
      expect(received).toEqual([{ length: size, path: 'staging', sum: checksum(bytes) }]);
      driver.memFree(src);
    } finally {
      await peer?.exit();
      await t.close();
      driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
