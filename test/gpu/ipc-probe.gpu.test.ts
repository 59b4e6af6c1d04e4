/**
 * The IPC probe on the native driver (issue 16 item 13): two processes
 * negotiate; before OK each opens the other's probe allocation through its
 * handle pool and reads it back, so when the endpoint reaches OK the
 * survivor's pool already holds the peer's probe and the first RGET finds the
 * peer context set up. The first message waits for the negotiation and goes
 * by RGET too, so after it the pool holds two mappings: the probe and the
 * message's buffer. Skipped, visibly, where no GPU is usable.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport } from '../../src/transport.js';
import { FaultPeer } from '../helpers/fault-peer.js';
import { reach } from '../helpers/transport-pair.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();

describe.skipIf(p.skip !== false)(`IPC probe on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  it('OK only after the probe opened: the pool holds the peer probe before the first RGET, which then runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-gpu-probe-'));
    const driver = p.make!();
    const t = await Transport.create({ driver, id: 'receiver', device: 0 });
    let peer: FaultPeer | undefined;
    try {
      await t.listen(join(dir, 'r.sock'));
      const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
      peer = await FaultPeer.start(join(dir, 'r.sock'), { id: 'sender', driver: 'native', device: p.devices > 1 ? 1 : 0 });
      const ep = await accepted;
      const first = ep.recv({ tag: 1 });
      await peer.call('send', { tag: 1, size: 4 << 20, count: 1, seed: 1 });
      const r1 = await first;
      expect(r1.path).toBe('rget'); // the first message waited for OK
      if ('ptr' in r1.data) driver.memFree(r1.data.ptr);
      await reach(ep, 'OK');
      const s = ep.stats();
      expect(s.negotiation.path.at(-1)).toBe('OK');
      expect(s.cache.openMappings).toBe(2); // the peer's probe, opened during the negotiation, and the first message's buffer
      expect(s.cache.misses).toBe(2);
      const second = ep.recv({ tag: 1 });
      await peer.call('send', { tag: 1, size: 4 << 20, count: 1, seed: 2 });
      const r2 = await second;
      expect(r2.path).toBe('rget');
      if ('ptr' in r2.data) driver.memFree(r2.data.ptr);
    } finally {
      await peer?.kill();
      await t.close();
      driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
