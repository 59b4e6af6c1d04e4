/**
 * A local close while an RGET copy is running (issue 23, finding 16): the
 * receive resolved once its copy finished, yet its FIN could no longer reach
 * the sender, whose send rejected with SMCUDA_PEER_LOST. Now both sides agree:
 * the FIN cannot go, so the receive fails too. (RGET of a descriptor key finishes its copies
 * through the same code, src/paths/remote-copy.ts.)
 */
import { describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { deviceWith, makePair, randomBytes, reach } from '../../helpers/transport-pair.js';

/** A pair whose negotiation is OK (the first device message starts it), so that device messages go by RGET. */
async function rgetPair() {
  const pr = await makePair({ a: { deviceEagerLimit: 0 }, b: { deviceEagerLimit: 0 } });
  const warm = deviceWith(pr.a.driver, randomBytes(64 << 10, 1));
  const got = pr.b.ep.recv({ tag: 999 });
  await pr.a.ep.send(warm, { tag: 999 });
  pr.b.driver.memFree(((await got).data as DeviceBuffer).ptr);
  await Promise.all([reach(pr.a.ep, 'OK'), reach(pr.b.ep, 'OK')]);
  return pr;
}

describe('a local close during an RGET copy', () => {
  for (const closer of ['receiver', 'sender'] as const) {
    it(`closed by the ${closer}: the send and the receive agree (both fail)`, async () => {
      const pr = await rgetPair();
      try {
        const src = deviceWith(pr.a.driver, randomBytes(64 << 10, 3));
        pr.b.driver.inject({ copyDelayMs: 300 }); // the receiver's copy out of the mapping takes a while
        const recv = pr.b.ep.recv({ tag: 1 });
        const send = pr.a.ep.send(src, { tag: 1 });
        await new Promise((r) => setTimeout(r, 80)); // RGET arrived, copy queued
        (closer === 'receiver' ? pr.b.ep : pr.a.ep).close();
        const [s, r] = await Promise.allSettled([send, recv]);
        expect({ send: s.status, recv: r.status }).toEqual({ send: 'rejected', recv: 'rejected' });
      } finally {
        await pr.close();
      }
    });
  }

  it('a copy that finishes before the close: both succeed', async () => {
    const pr = await rgetPair();
    try {
      const src = deviceWith(pr.a.driver, randomBytes(64 << 10, 4));
      const recv = pr.b.ep.recv({ tag: 2 });
      const send = pr.a.ep.send(src, { tag: 2 });
      const got = await recv;
      expect(got.path).toBe('rget');
      pr.b.ep.close(); // its FIN was flushed before CLOSE
      await expect(send).resolves.toBeUndefined();
    } finally {
      await pr.close();
    }
  });
});
