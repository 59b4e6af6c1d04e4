/**
 * Messages that arrived whole before the endpoint closed (EAGER: host data,
 * and small device data before IPC is negotiated) can still be received
 * after the close, in order, as a socket's buffered bytes can; a receive
 * with nothing left rejects with the close's error; a device message whose
 * bytes were still in the peer's memory (RGET) is gone with the peer.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ANY_TAG } from '../../../src/matching.js';
import { makePair, type Pair, deviceWith, randomBytes } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

async function closedBy(p: Pair, who: 'a' | 'b'): Promise<void> {
  const other = who === 'a' ? p.b.ep : p.a.ep;
  const closed = new Promise<void>((r) => other.once('close', () => r()));
  p[who].ep.close();
  await closed;
}

describe('receiving after the endpoint closed', () => {
  it('host messages that arrived before the peer closed are received after, in order; then the close error', async () => {
    pair = await makePair();
    await pair.a.ep.send(new Uint8Array([1, 2, 3]), { tag: 5 });
    await pair.a.ep.send(new Uint8Array([4]), { tag: 5 });
    await pair.a.ep.send(new Uint8Array([9, 9]), { tag: 6 });
    await closedBy(pair, 'a');
    expect(pair.b.ep.closed).toBe(true);
    const first = await pair.b.ep.recv({ tag: 5 });
    expect([...(first.data as Uint8Array)]).toEqual([1, 2, 3]);
    const any = await pair.b.ep.recv({ tag: ANY_TAG });
    expect([...(any.data as Uint8Array)]).toEqual([4]);
    const into = new Uint8Array(2);
    await pair.b.ep.recv({ tag: 6, into });
    expect([...into]).toEqual([9, 9]);
    await expect(pair.b.ep.recv({ tag: 5 })).rejects.toThrow();
  });

  it("our own close keeps them too; a device message still in the peer's memory (staging or RGET) is not kept", async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const big = randomBytes(1 << 20, 3);
    const dev = deviceWith(pair.a.driver, big);
    const sent = pair.a.ep.send(dev, { tag: 8 }).catch((e: Error) => e);
    await pair.a.ep.send(new Uint8Array([7]), { tag: 7 });
    await new Promise((r) => setTimeout(r, 50));
    pair.b.ep.close();
    const host = await pair.b.ep.recv({ tag: 7 });
    expect([...(host.data as Uint8Array)]).toEqual([7]);
    const arrivedWhole = pair.b.ep.tryProbe({ tag: 8 });
    // A large device message travels by RGET or staging, never inline: it is not receivable after the close.
    expect(arrivedWhole).toBeUndefined();
    await expect(pair.b.ep.recv({ tag: 8 })).rejects.toThrow();
    await sent;
  });
  it('a closed endpoint says IPC is neither OK nor pending (path choices made after the close see neither)', async () => {
    pair = await makePair();
    const link = (ep: unknown) => (ep as { link: { ipcOk: boolean; ipcPending: boolean } }).link;
    expect(link(pair.b.ep).ipcPending).toBe(true); // not negotiated yet, IPC on
    await closedBy(pair, 'a');
    for (const ep of [pair.a.ep, pair.b.ep]) expect(link(ep)).toMatchObject({ ipcOk: false, ipcPending: false });
  });
});
