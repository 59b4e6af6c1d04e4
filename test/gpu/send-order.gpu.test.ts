/**
 * A device send without `stream` delivers what the work queued before it on
 * the legacy default stream produced (issue 24, item 1), on a real GPU: the
 * peer rewrites one 256 MiB buffer before each send, by a pageable
 * cuMemcpyHtoD (which returns before its DMA is done) or a cuMemsetD8Async
 * on stream 0, and sends at once; every message must hold the new bytes, by
 * RGET and by staging. Before the fix the receiver copied while the write
 * was still in flight. Skipped, visibly, where no GPU is usable.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { patternBytes } from '../../src/cli/demo-pattern.js';
import type { CudaDriver } from '../../src/cuda/driver.js';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport } from '../../src/transport.js';
import { checksum, FaultPeer } from '../helpers/fault-peer.js';
import { reach } from '../helpers/transport-pair.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
const SIZE = 256 << 20;
const ROUNDS = 6;

describe.skipIf(p.skip !== false)(`send order after the legacy stream on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function setup(ipc: boolean): Promise<{ driver: CudaDriver; ep: Endpoint; peer: FaultPeer }> {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-gpu-order-'));
    const driver = p.make!();
    const t = await Transport.create({ driver, id: 'receiver', device: 0, ...(ipc ? {} : { negotiation: { ipc: false } }) });
    cleanups.push(
      () => rmSync(dir, { recursive: true, force: true }),
      () => driver.close(),
      () => t.close(),
    );
    await t.listen(join(dir, 'r.sock'));
    const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
    const peer = await FaultPeer.start(join(dir, 'r.sock'), { id: 'sender', driver: 'native', device: p.devices > 1 ? 1 : 0 });
    cleanups.push(() => peer.kill());
    const ep = await accepted;
    // The first device message (1 MiB) starts the negotiation and goes inline; the next ones go by RGET where IPC works.
    const first = ep.recv({ tag: 1 });
    await peer.call('send', { tag: 1, size: 1 << 20, count: 1, seed: 1, wait: true });
    await first;
    if (ipc) await reach(ep, 'OK');
    return { driver, ep, peer };
  }

  async function receiveAll(driver: CudaDriver, ep: Endpoint, tag: number): Promise<Array<{ path: string; bytes: Uint8Array }>> {
    const out = [];
    for (let i = 0; i < ROUNDS; i++) {
      const r = await ep.recv({ tag });
      const bytes = new Uint8Array(r.length);
      if ('ptr' in r.data) {
        driver.memcpyDtoH(bytes, r.data.ptr);
        driver.memFree(r.data.ptr);
      } else bytes.set(r.data);
      out.push({ path: r.path, bytes });
    }
    return out;
  }

  for (const ipc of [true, false]) {
    const path = ipc ? 'rget' : 'staging';
    it(`${path}: a send right after a large pageable cuMemcpyHtoD delivers the new bytes`, async () => {
      const { driver, ep, peer } = await setup(ipc);
      const got = receiveAll(driver, ep, 2);
      await peer.call('sendFresh', { tag: 2, size: SIZE, rounds: ROUNDS, how: 'htod' });
      const msgs = await got;
      expect(msgs.map((m) => m.path)).toEqual(Array(ROUNDS).fill(path));
      expect(msgs.map((m) => checksum(m.bytes))).toEqual(Array.from({ length: ROUNDS }, (_, round) => checksum(patternBytes(SIZE, round))));
    }, 120_000);

    it(`${path}: a send right after cuMemsetD8Async on stream 0 delivers the new bytes`, async () => {
      const { driver, ep, peer } = await setup(ipc);
      const got = receiveAll(driver, ep, 3);
      await peer.call('sendFresh', { tag: 3, size: SIZE, rounds: ROUNDS, how: 'memset' });
      const msgs = await got;
      const wrong = msgs.flatMap((m, round) => {
        const bad = m.bytes.findIndex((x) => x !== round + 1);
        return bad < 0 ? [] : [`message ${round}: byte ${bad} is ${m.bytes[bad]}, not ${round + 1}`];
      });
      expect(wrong).toEqual([]);
    }, 120_000);
  }
});
