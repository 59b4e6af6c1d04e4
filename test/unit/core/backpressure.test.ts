/**
 * Backpressure (docs/reliability.md, "Backpressure"): an endpoint lets its
 * peer hold at most `maxUnreadBytes` of messages no receive has matched
 * (inline data + 64 B a message). A peer that never receives gets that much
 * and no more: the sends beyond it stay pending — holding only the caller's
 * own buffers — until the peer receives, then go in order; they reject with
 * a typed error when the endpoint closes or the peer is lost, or their signal
 * aborts. A peer that lies about what it received is a protocol error.
 */
import { describe, expect, it } from 'vitest';
import { ClosedError, ConfigError, PeerLostError, ProtocolError } from '../../../src/errors.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { Transport } from '../../../src/transport.js';
import { FrameType } from '../../../src/wire/frames.js';
import { makePair } from '../../helpers/transport-pair.js';
import { rawPeer } from '../../helpers/raw-peer.js';

const WINDOW = 1 << 20;
const SIZE = 64 << 10;
const COUNT = 100;
const tick = () => new Promise<void>((r) => setTimeout(r, 5));

function message(i: number): Uint8Array {
  return new Uint8Array(SIZE).fill(i & 0xff);
}

/** Sends COUNT host messages without waiting; `resolved` counts those that completed. */
function flood(send: (b: Uint8Array) => Promise<void>) {
  const state = { resolved: 0, rejected: [] as Error[] };
  const sends = Array.from({ length: COUNT }, (_, i) =>
    send(message(i)).then(
      () => void state.resolved++,
      (err: Error) => void state.rejected.push(err),
    ),
  );
  return { state, all: Promise.all(sends) };
}

describe('backpressure', () => {
  it('a peer that never receives holds at most maxUnreadBytes; the sends beyond stay pending until it receives, then go in order', async () => {
    const p = await makePair({ a: { maxUnreadBytes: WINDOW } });
    try {
      const { state, all } = flood((b) => p.a.ep.send(b, { tag: 3 }));
      for (let i = 0; i < 20; i++) await tick();
      const fit = Math.floor(WINDOW / (SIZE + 64));
      expect(state.resolved).toBeGreaterThanOrEqual(fit - 1);
      expect(state.resolved).toBeLessThanOrEqual(fit + 1);
      const flow = p.a.ep.stats().flow;
      expect(flow.unreadBytes).toBeLessThanOrEqual(WINDOW);
      expect(flow.waitingSends).toBe(COUNT - state.resolved);
      expect(p.b.ep.stats().flow.unexpectedMessages).toBe(state.resolved); // what the peer holds
      // the peer starts receiving: everything arrives, in order, intact
      for (let i = 0; i < COUNT; i++) {
        const r = await p.b.ep.recv({ tag: 3 });
        expect(
          (r.data as Uint8Array).every((b) => b === (i & 0xff)),
          `message ${i}`,
        ).toBe(true);
      }
      await all;
      expect(state.resolved).toBe(COUNT);
      expect(p.a.ep.stats().flow.waitingSends).toBe(0);
    } finally {
      await p.close();
    }
  });

  it('sends waiting for the window reject with PeerLostError when the peer goes, ClosedError when we close', async () => {
    for (const [who, type] of [
      ['peer', PeerLostError],
      ['local', ClosedError],
    ] as const) {
      const p = await makePair({ a: { maxUnreadBytes: WINDOW } });
      try {
        const { state, all } = flood((b) => p.a.ep.send(b));
        for (let i = 0; i < 10; i++) await tick();
        expect(state.resolved).toBeLessThan(COUNT);
        if (who === 'peer') p.b.ep.close('gone');
        else p.a.ep.close('done');
        await all;
        expect(state.resolved + state.rejected.length).toBe(COUNT);
        for (const err of state.rejected) expect(err).toBeInstanceOf(type);
      } finally {
        await p.close();
      }
    }
  });

  it('a waiting send whose signal aborts rejects with the reason; the ones behind it still go, in order', async () => {
    const p = await makePair({ a: { maxUnreadBytes: WINDOW } });
    try {
      const fit = Math.floor(WINDOW / (SIZE + 64));
      const first = Array.from({ length: fit + 1 }, (_, i) => p.a.ep.send(message(i)));
      const ac = new AbortController();
      const aborted = p.a.ep.send(message(200), { signal: ac.signal });
      const after = p.a.ep.send(message(201));
      await tick();
      ac.abort(new Error('not needed'));
      await expect(aborted).rejects.toThrow('not needed');
      const got: number[] = [];
      for (let i = 0; i < fit + 2; i++) got.push(((await p.b.ep.recv()).data as Uint8Array)[0]!);
      await Promise.all([...first, after]);
      expect(got).toEqual([...Array.from({ length: fit + 1 }, (_, i) => i), 201]);
    } finally {
      await p.close();
    }
  });

  it('maxUnreadBytes is validated where the transport options are', async () => {
    const driver = new SimulatedCudaDriver();
    try {
      await expect(Transport.create({ driver, id: 'v', maxUnreadBytes: 1000 })).rejects.toBeInstanceOf(ConfigError);
    } finally {
      driver.close();
    }
  });

  it('a peer claiming to have received more than was sent closes the endpoint with ProtocolError', async () => {
    const driver = new SimulatedCudaDriver();
    const t = await Transport.create({ driver, id: 'credited', device: 0 });
    try {
      const peer = await rawPeer(t, 'liar');
      peer.send({ type: FrameType.CREDIT, consumed: 1 << 30 });
      await peer.settle();
      expect(peer.closeError()).toBeInstanceOf(ProtocolError);
      expect((peer.closeError() as ProtocolError).code).toBe('SMCUDA_BAD_CREDIT');
    } finally {
      await t.close();
      driver.close();
    }
  });

  it('a receiver reports what it receives: a long stream in a small window never stalls', async () => {
    const p = await makePair({ a: { maxUnreadBytes: 64 << 10 } });
    try {
      const n = 3000;
      const recvs = Array.from({ length: n }, () => p.b.ep.recv({ tag: 1 }));
      const sends = Array.from({ length: n }, (_, i) => p.a.ep.send(Uint8Array.of(i & 0xff, i >> 8), { tag: 1 }));
      await Promise.all(sends);
      const got = await Promise.all(recvs);
      expect(got.every((r, i) => (r.data as Uint8Array)[0] === (i & 0xff) && (r.data as Uint8Array)[1] === i >> 8)).toBe(true);
    } finally {
      await p.close();
    }
  });
});
