/**
 * Endpoint.negotiate(): the negotiation started before any device message
 * (as the first device send would start it), so that peer access and the
 * probe are set up before the first message needs them (issue 27). On the
 * simulated driver, between two endpoints of one process.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { makePair, deviceWith, randomBytes, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe('Endpoint.negotiate()', () => {
  it('settles the negotiation with no message sent; the first device message then goes by RGET', async () => {
    pair = await makePair();
    const { a, b } = pair;
    expect(a.ep.state).toBe('INIT');
    await expect(a.ep.negotiate()).resolves.toBe('OK');
    expect(a.ep.stats().negotiation.path).toEqual(expect.arrayContaining(['INIT', 'OK']));
    const r = b.ep.recv({ tag: 3 });
    await a.ep.send(deviceWith(a.driver, randomBytes(64 << 10, 1)), { tag: 3 });
    expect((await r).path).toBe('rget');
    expect(a.ep.stats().sent.staging.messages).toBe(0);
  });

  it("makes each side's stream and legacy-stream event during the negotiation, not on the first message's way", async () => {
    pair = await makePair();
    const { a, b } = pair;
    const streams = [vi.spyOn(a.driver, 'streamCreate'), vi.spyOn(b.driver, 'streamCreate')];
    const events = [vi.spyOn(a.driver, 'eventCreate'), vi.spyOn(b.driver, 'eventCreate')];
    await expect(a.ep.negotiate()).resolves.toBe('OK');
    await expect(b.ep.negotiate()).resolves.toBe('OK');
    for (const spy of [...streams, ...events]) expect(spy).toHaveBeenCalledTimes(1);
    const r = b.ep.recv({ tag: 5 });
    await a.ep.send(deviceWith(a.driver, randomBytes(64 << 10, 2)), { tag: 5 });
    expect((await r).path).toBe('rget');
    // The receiver's copy ran on the stream made during the negotiation; the sender's check reused its event.
    expect(streams[1]).toHaveBeenCalledTimes(1);
    expect(events[0]).toHaveBeenCalledTimes(1);
  });

  it('answers at once once settled, on either side, and both calls of a race get the one outcome', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const [x, y] = await Promise.all([a.ep.negotiate(), b.ep.negotiate()]);
    expect([x, y]).toEqual(['OK', 'OK']);
    await expect(a.ep.negotiate()).resolves.toBe('OK');
    expect(a.ep.stats().negotiation.tries).toBeLessThanOrEqual(2);
  });

  it('says BAD where IPC is off', async () => {
    pair = await makePair({ a: { negotiation: { ipc: false } } });
    await expect(pair.a.ep.negotiate()).resolves.toBe('BAD');
  });

  it('rejects on a closed endpoint', async () => {
    pair = await makePair();
    await pair.a.ep.close();
    await expect(pair.a.ep.negotiate()).rejects.toThrow();
  });
});
