/**
 * Shutdown never loses a completed transfer (issue 47): a receiver that
 * closes as soon as its receive is done — with a `stream`, once it has
 * synchronized that stream — reports the message's FIN before CLOSE, so the
 * sender's send resolves. Before, a device receive by RGET on the caller's
 * stream resolved at once, its completion was not yet seen when close()
 * came, and the sender's send rejected with SMCUDA_PEER_LOST although every
 * byte had arrived. Over RGET and staging, with and without a stream, 2-4
 * MiB, closed by the endpoint or by its transport.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { deviceWith, makePair, type Pair, randomBytes, reach, readDevice, sameBytes } from '../../helpers/transport-pair.js';

type PathName = 'rget' | 'staging';

/** A pair whose device messages go by `path`: RGET once the negotiation is OK, staging with IPC off. */
async function pairFor(path: PathName): Promise<Pair> {
  if (path === 'staging') {
    const off = { negotiation: { ipc: false } };
    return makePair({ a: off, b: off });
  }
  const pr = await makePair({ a: { deviceEagerLimit: 0 }, b: { deviceEagerLimit: 0 } });
  const warm = deviceWith(pr.a.driver, randomBytes(64 << 10, 1));
  const got = pr.b.ep.recv({ tag: 999 });
  await pr.a.ep.send(warm, { tag: 999 });
  pr.b.driver.memFree(((await got).data as DeviceBuffer).ptr);
  await Promise.all([reach(pr.a.ep, 'OK'), reach(pr.b.ep, 'OK')]);
  return pr;
}

/** Sends `size` bytes a→b; b receives into its own buffer (on its stream, synchronized, if `stream`) and closes at once. */
async function receiveThenClose(pr: Pair, size: number, stream: boolean, closer: 'endpoint' | 'transport', seed: number) {
  const bytes = randomBytes(size, seed);
  const src = deviceWith(pr.a.driver, bytes);
  const into = { ptr: pr.b.driver.memAlloc(size), length: size };
  const s = stream ? pr.b.driver.streamCreate() : undefined;
  const send = pr.a.ep.send(src, { tag: 7 });
  const got = await pr.b.ep.recv({ tag: 7, into, ...(s !== undefined ? { stream: s } : {}) });
  if (s !== undefined) pr.b.driver.streamSynchronize(s);
  const closed = closer === 'endpoint' ? (pr.b.ep.close(), Promise.resolve()) : pr.b.transport.close();
  const outcome = await Promise.race([
    send.then(
      () => 'resolved',
      (e: Error & { code?: string }) => `rejected ${e.code ?? ''}: ${e.message}`,
    ),
    new Promise((r) => setTimeout(() => r('pending after 2 s'), 2000)),
  ]);
  await closed;
  return { path: got.path, outcome, landed: sameBytes(readDevice(pr.b.driver, into), bytes) };
}

const MiB = 1 << 20;

describe('a receiver that closes right after its receive', () => {
  test.prop(
    [
      fc.integer({ min: 2 * MiB, max: 4 * MiB }),
      fc.boolean(),
      fc.constantFrom<PathName>('rget', 'staging'),
      fc.constantFrom('endpoint' as const, 'transport' as const),
    ],
    { numRuns: 12 },
  )("the sender's send resolves (size, stream, path, closer)", async (size, stream, path, closer) => {
    const pr = await pairFor(path);
    try {
      const r = await receiveThenClose(pr, size, stream, closer, size & 0xff);
      expect(r).toEqual({ path, outcome: 'resolved', landed: true });
    } finally {
      await pr.close();
    }
  });

  for (const path of ['rget', 'staging'] as const) {
    for (const stream of [true, false]) {
      it(`${path}, ${stream ? 'with' : 'without'} a stream, 2 and 4 MiB: the send resolves, every time`, async () => {
        for (const size of [2 * MiB, 4 * MiB]) {
          const pr = await pairFor(path);
          try {
            expect(await receiveThenClose(pr, size, stream, 'endpoint', 3)).toEqual({ path, outcome: 'resolved', landed: true });
          } finally {
            await pr.close();
          }
        }
      });
    }
  }

  it('a copy still running on the unsynchronized stream when close() comes: the send fails, within a bounded time', async () => {
    const pr = await pairFor('rget');
    try {
      const size = 2 * MiB;
      const src = deviceWith(pr.a.driver, randomBytes(size, 5));
      const into = { ptr: pr.b.driver.memAlloc(size), length: size };
      const s = pr.b.driver.streamCreate();
      pr.b.driver.inject({ copyDelayMs: 3000 });
      const send = pr.a.ep.send(src, { tag: 8 });
      await pr.b.ep.recv({ tag: 8, into, stream: s });
      const t0 = performance.now();
      pr.b.ep.close();
      expect(performance.now() - t0).toBeLessThan(1000); // close waits a short bound, not for the copy
      await expect(send).rejects.toMatchObject({ code: 'SMCUDA_PEER_LOST' });
    } finally {
      await pr.close();
    }
  });
});
