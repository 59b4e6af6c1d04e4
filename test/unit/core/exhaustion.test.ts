/**
 * Exhaustion (docs/reliability.md, "Exhaustion"): the handle cache at its
 * bound under load, IPC opens failing at random (each such message is
 * re-sent by staging: FIN RESTAGE), and many concurrent staged sends on
 * several tags competing for one staging ring. Every message arrives intact;
 * afterwards no mapping is open and no smcuda segment of this process is
 * left in /dev/shm.
 */
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { deviceWith, makePair, randomBytes, reach, readDevice, sameBytes, type Pair } from '../../helpers/transport-pair.js';

function mySegments(): string[] {
  return readdirSync('/dev/shm').filter((n) => n.includes(`-${process.pid}-`) && n.startsWith('smcuda-'));
}

async function negotiate(p: Pair, outcome: 'OK' | 'BAD' = 'OK'): Promise<void> {
  const warm = deviceWith(p.a.driver, randomBytes(64 << 10, 1));
  const got = p.b.ep.recv({ tag: 999 });
  await p.a.ep.send(warm, { tag: 999 });
  const r = await got;
  p.b.driver.memFree((r.data as DeviceBuffer).ptr);
  p.a.driver.memFree(warm.ptr);
  await reach(p.a.ep, outcome);
  await reach(p.b.ep, outcome);
}

/** Sends `count` device messages from `count` different allocations, `concurrency` at a time, and checks each. */
async function blast(p: Pair, count: number, size: number, tags: number): Promise<{ paths: Record<string, number> }> {
  const paths: Record<string, number> = {};
  const sources = Array.from({ length: count }, (_, i) => randomBytes(size, i + 7));
  const bufs = sources.map((s) => deviceWith(p.a.driver, s));
  const recvs = sources.map((_, i) => p.b.ep.recv({ tag: i % tags }));
  const sends = bufs.map((b, i) => p.a.ep.send(b, { tag: i % tags }));
  await Promise.all(sends);
  const got = await Promise.all(recvs);
  for (const [i, r] of got.entries()) {
    paths[r.path] = (paths[r.path] ?? 0) + 1;
    const bytes = readDevice(p.b.driver, r.data as DeviceBuffer);
    expect(sameBytes(bytes, sources[i]!), `message ${i}`).toBe(true);
    p.b.driver.memFree((r.data as DeviceBuffer).ptr);
  }
  for (const b of bufs) p.a.driver.memFree(b.ptr);
  return { paths };
}

describe('exhaustion', () => {
  it('the cache at its bound (maxEntries 2) while sending from many allocations: all intact, at most 2 mappings, evictions counted', async () => {
    const p = await makePair({ b: { cache: { maxEntries: 2 } } });
    try {
      await negotiate(p);
      const { paths } = await blast(p, 24, 64 << 10, 3);
      expect(paths.rget).toBe(24);
      const cache = p.b.ep.stats().cache;
      expect(cache.residentEntries).toBeLessThanOrEqual(2);
      expect(cache.evictions).toBeGreaterThanOrEqual(22 - 2);
    } finally {
      await p.close();
    }
    expect(p.b.ep.stats().cache.openMappings).toBe(0);
    expect(mySegments()).toEqual([]);
  });

  it('opens failing at random (openFailureRate 0.5): each failed RGET is re-sent by staging, all intact', async () => {
    const p = await makePair({
      simB: { faults: { openFailureRate: { probability: 0.5, codes: ['CUDA_ERROR_OUT_OF_MEMORY', 'CUDA_ERROR_TOO_MANY_PEERS'], seed: 3 } } },
    });
    try {
      await negotiate(p);
      const { paths } = await blast(p, 30, 32 << 10, 2);
      expect((paths.rget ?? 0) + (paths.staging ?? 0)).toBe(30);
      expect(paths.staging ?? 0).toBeGreaterThan(0); // some opens failed and were restaged
      expect(p.b.ep.stats().cache.openFailures).toBeGreaterThan(0);
    } finally {
      await p.close();
    }
    expect(p.b.ep.stats().cache.openMappings).toBe(0);
    expect(mySegments()).toEqual([]);
  });

  it('every open failing (maxOpenMappings 0): the negotiation ends BAD (its probe does not open); everything arrives by staging', async () => {
    const p = await makePair({ simB: { faults: { maxOpenMappings: 0 } } });
    try {
      await negotiate(p, 'BAD');
      const { paths } = await blast(p, 8, 32 << 10, 2);
      expect(paths.staging).toBe(8);
    } finally {
      await p.close();
    }
    expect(mySegments()).toEqual([]);
  });

  it('staging all busy: 40 concurrent staged sends on 5 tags through a 2-slot ring of 4 KiB chunks, all intact', async () => {
    const p = await makePair({ a: { negotiation: { ipc: false }, staging: { chunkSize: 4096, slots: 2 } }, b: { negotiation: { ipc: false } } });
    try {
      const { paths } = await blast(p, 40, 20_000, 5);
      expect(paths.staging).toBe(40);
    } finally {
      await p.close();
    }
    expect(mySegments()).toEqual([]);
  });
});
