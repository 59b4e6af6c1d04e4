/**
 * Pool memory after its pool was destroyed and another made (issue 24 item 2):
 * the driver gives the new pool the old one's handle (seen on H100; the
 * simulator models it), which is what `bench --suite memory` does between
 * its probe and its transfer (one pool per operation). The new pool must be
 * exported before its pointers (cuMemPoolExportPointer refuses them before:
 * seen on H100, modelled too) and announced to the peer afresh; every message
 * of it must still go by RGET. Before the fix every one went by staging.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { allocDemoMemory } from '../../../src/cli/demo-memory.js';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { makePair, type Pair, reach, readDevice, randomBytes, sameBytes } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

const SIZE = 1 << 20;

/** One operation as the bench runs it: a pool of its own, `n` messages in flight from one allocation, then invalidate, free, destroy. */
async function operation(p: Pair, n: number, seed: number): Promise<string[]> {
  const mem = allocDemoMemory(p.a.driver, 'pool');
  const buf = mem.alloc(SIZE).view(SIZE);
  const want = randomBytes(SIZE, seed);
  p.a.driver.memcpyHtoD(buf.ptr, want);
  const recvs = Array.from({ length: n }, (_, k) => p.b.ep.recv({ tag: seed * 100 + k }));
  const sends = Array.from({ length: n }, (_, k) => p.a.ep.send(buf, { tag: seed * 100 + k }));
  await Promise.all(sends);
  const got = await Promise.all(recvs);
  for (const r of got) {
    expect(sameBytes(readDevice(p.b.driver, r.data as DeviceBuffer), want)).toBe(true);
    p.b.driver.memFree((r.data as DeviceBuffer).ptr);
  }
  p.a.ep.invalidate(buf.ptr);
  mem.freeAll();
  return got.map((r) => r.path);
}

describe('pool memory from a pool made after another was destroyed', () => {
  it('the new pool (same handle) is sent afresh: every message of every operation goes by RGET', async () => {
    pair = await makePair();
    const warm = await operation(pair, 1, 1); // the first message waits for the negotiation (or, IPC BAD, stages)
    await reach(pair.a.ep, 'OK');
    expect(warm).toHaveLength(1);
    const paths: string[] = [];
    const before = { ...pair.a.ep.stats().stagingReasons };
    const poolsBefore = pair.a.ep.stats().fd.pools; // the warm-up's pool, where its message went by descriptor key
    for (let op = 2; op < 6; op++) paths.push(...(await operation(pair, 8, op)));
    expect(paths.filter((p) => p !== 'rget-fd')).toEqual([]);
    expect(pair.a.ep.stats().stagingReasons).toEqual(before);
    expect(pair.a.ep.stats().fd.pools - poolsBefore).toBe(4); // each new pool announced once, under the reused handle's id
  });

  it('an import that fails with a window of messages in flight: those restage (the reason counted), and the peer recovers: the next operations go by RGET', async () => {
    pair = await makePair();
    await operation(pair, 1, 1);
    await reach(pair.a.ep, 'OK');
    expect(await operation(pair, 8, 2)).toEqual(Array(8).fill('rget-fd'));
    pair.b.driver.injectFdFaults({ importFailures: ['CUDA_ERROR_INVALID_VALUE'] });
    const hit = await operation(pair, 8, 3);
    expect(hit).toContain('staging');
    const reasons = Object.keys(pair.a.ep.stats().stagingReasons);
    expect(reasons.some((r) => r.startsWith('descriptor key restaged, the peer could not open it: '))).toBe(true);
    for (let op = 4; op < 7; op++) expect(await operation(pair, 8, op)).toEqual(Array(8).fill('rget-fd'));
  });
});
