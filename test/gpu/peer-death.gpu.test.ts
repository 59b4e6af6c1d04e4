/**
 * Peer death on the native driver: a peer that sent by RGET (so the survivor
 * holds a cached IPC mapping of its memory) is killed with SIGKILL while the
 * survivor waits for more. The survivor's pending receive rejects with
 * PeerLostError and its open-mapping count returns to 0. Skipped, visibly,
 * where no GPU is usable.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/endpoint.js';
import { PeerLostError } from '../../src/errors.js';
import { Transport } from '../../src/transport.js';
import { FaultPeer, rejection, within } from '../helpers/fault-peer.js';
import { reach } from '../helpers/transport-pair.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();

describe.skipIf(p.skip !== false)(`peer death on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  it('SIGKILL of a peer whose memory the survivor has mapped: pending receive rejects, open mappings back to 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-gpu-death-'));
    const driver = p.make!();
    const t = await Transport.create({ driver, id: 'survivor', device: 0 });
    let peer: FaultPeer | undefined;
    try {
      await t.listen(join(dir, 's.sock'));
      const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
      peer = await FaultPeer.start(join(dir, 's.sock'), { id: 'victim', driver: 'native', device: p.devices > 1 ? 1 : 0 });
      const ep = await accepted;
      // the first device message (4 MiB) waits for the IPC negotiation, then all go by RGET
      for (let i = 0; i < 3; i++) {
        const got = ep.recv({ tag: 1 });
        await peer.call('send', { tag: 1, size: 4 << 20, count: 1, seed: i });
        const r = await got;
        if ('ptr' in r.data) driver.memFree(r.data.ptr);
        if (i === 0) await reach(ep, 'OK');
      }
      expect(ep.stats().received.rget.messages).toBeGreaterThan(0);
      expect(ep.stats().cache.openMappings).toBeGreaterThan(0);
      const pending = within(rejection(ep.recv({ tag: 2 })), 2000, 'recv');
      await peer.kill();
      expect(await pending).toBeInstanceOf(PeerLostError);
      expect(ep.stats().cache.openMappings).toBe(0);
    } finally {
      await peer?.kill();
      await t.close();
      driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
