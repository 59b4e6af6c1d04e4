/**
 * Issue 23 findings 1 and 2, between real processes: the control rings and
 * the staging rings are sealed anonymous segments passed as descriptors on
 * the endpoint's descriptor socket, so a same-uid process without the token
 * that watches /dev/shm (inotify) and opens whatever appears finds nothing
 * of the job, while the rings are used: frames through the control rings,
 * a device message by staging.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/endpoint.js';
import { parseSegmentName } from '../../src/segment-owner.js';
import { Transport } from '../../src/transport.js';
import { spawnPeer, type WorkerClient } from '../helpers/child.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('sealed rings between processes', () => {
  it('a token-less same-uid process watching /dev/shm finds no segment of the job; the control rings and staging are used', async () => {
    const watcher: WorkerClient = await spawnPeer('shm-watcher.mjs');
    cleanup.push(() => watcher.exit());
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-sealed-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    // IPC off on this side: its device messages go by staging.
    const t = await Transport.create({ driver: 'sim', id: 'parent', device: 0, negotiation: { ipc: false } });
    cleanup.push(() => t.close());
    const path = join(dir, 's.sock');
    await t.listen(path);
    const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
    const peer = await spawnPeer('transport-peer.mjs', { args: [path] });
    cleanup.push(() => peer.exit());
    const ep = await accepted;
    await until(() => ep.stats().control.ringOut && ep.stats().control.ringIn, 'the control rings');

    for (let i = 0; i < 20; i++) {
      await ep.send(new Uint8Array(100).fill(i), { tag: 1 });
      const r = (await peer.call('recv', { tag: 1 })) as { length: number; path: string };
      expect(r).toMatchObject({ length: 100, path: 'eager' });
    }
    const n = 1 << 20;
    const ptr = t.driver.memAlloc(n);
    t.driver.memsetD8(ptr, 0x3c, n);
    const [, got] = await Promise.all([
      ep.send({ ptr, length: n }, { tag: 2 }),
      peer.call('recv', { tag: 2 }) as Promise<{ length: number; path: string; head: string }>,
    ]);
    expect(got).toMatchObject({ length: n, path: 'staging', head: '3c'.repeat(16) });
    expect(ep.stats().sent.staging.messages).toBe(1);

    const report = (await watcher.call('report')) as { seen: string[]; opened: string[] };
    // Other jobs on this machine may make segments meanwhile: only this job's two processes count.
    const job = new Set([process.pid, ep.peerPid]);
    const ours = (names: string[]) =>
      names.filter((name) => {
        const p = parseSegmentName(name);
        return p !== undefined && job.has(p.owner.pid) && p.kind !== 'sim'; // 'sim': the simulated driver's device memory
      });
    expect(ours(report.seen)).toEqual([]);
    expect(ours(report.opened)).toEqual([]);
  });
});
