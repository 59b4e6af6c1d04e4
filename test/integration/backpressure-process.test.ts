/**
 * Backpressure across real processes (docs/reliability.md, "Backpressure"):
 * this process sends 300 × 1 MiB host messages over a Unix socket to a peer
 * process that does not receive. With `maxUnreadBytes` 16 MiB about 16 go;
 * the rest stay pending — this process's RSS does not grow by the 300 MiB it
 * would have copied — until the peer receives, and then all arrive intact,
 * in order.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport } from '../../src/transport.js';
import { checksum, FaultPeer, type FaultPeerResults, fill, within } from '../helpers/fault-peer.js';

const MIB = 1 << 20;
const COUNT = 300;
const WINDOW = 16 * MIB;

describe('backpressure between processes', () => {
  it('a peer process that does not receive holds at most maxUnreadBytes; the sends beyond wait, then all arrive', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-bp-'));
    const driver = new SimulatedCudaDriver();
    const t = await Transport.create({ driver, id: 'sender', device: 0, maxUnreadBytes: WINDOW });
    let peer: FaultPeer | undefined;
    try {
      await t.listen(join(dir, 's.sock'));
      const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
      peer = await FaultPeer.start(join(dir, 's.sock'), { id: 'idle' });
      const ep = await accepted;
      const source = fill(MIB, 42);
      const rssBefore = process.memoryUsage().rss;
      let resolved = 0;
      // one source buffer for every send: what grows is only what smcuda copies
      const sends = Array.from({ length: COUNT }, (_, i) => ep.send(source, { tag: 4 }).then(() => void (resolved = i + 1)));
      for (let i = 0; i < 40; i++) await new Promise((r) => setTimeout(r, 10));
      const rssGrowth = process.memoryUsage().rss - rssBefore;
      expect(resolved).toBeLessThanOrEqual(WINDOW / MIB + 1);
      expect(resolved).toBeGreaterThan(0);
      expect(ep.stats().flow.waitingSends).toBe(COUNT - resolved);
      expect(ep.stats().flow.unreadBytes).toBeLessThanOrEqual(WINDOW + MIB);
      // far below the 300 MiB an unbounded sender copies into its socket buffers
      expect(rssGrowth).toBeLessThan(150 * MIB);
      const got = await within(peer.call<FaultPeerResults['recv']>('recv', { tag: 4, count: COUNT }), 60_000, 'the peer receiving');
      await within(Promise.all(sends), 10_000, 'the sends');
      const received = got.received as { length: number; sum: number }[];
      expect(received).toHaveLength(COUNT);
      const want = checksum(source);
      expect(received.every((r) => r.length === MIB && r.sum === want)).toBe(true);
    } finally {
      await peer?.exit();
      await t.close();
      driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
