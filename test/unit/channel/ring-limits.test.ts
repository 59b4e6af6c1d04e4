/**
 * Limits of a live shared-memory control ring (docs/reliability.md): a frame
 * the channel underneath refuses (above its maxFrameBytes) fails that send
 * alone — it takes no sequence number, so later frames still arrive — and a
 * SPILL outside the reader's window (far ahead, repeated, out of order) is a
 * protocol error that closes the channel instead of being buffered.
 */
import { describe, expect, it } from 'vitest';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { ShmChannel } from '../../../src/channel/shm-channel.js';
import { ProgressEngine } from '../../../src/progress/engine.js';
import { ProtocolError } from '../../../src/errors.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { FrameType } from '../../../src/wire/frames.js';
import { makePair } from '../../helpers/transport-pair.js';
import { ringPortPair } from '../../helpers/ring-ports.js';

const tick = () => new Promise<void>((r) => setImmediate(r));

function frame(i: number, n: number): Uint8Array {
  return encodeFrame({ type: FrameType.EAGER, tag: 0, seq: i, fromDevice: false, data: new Uint8Array(n).fill(i & 0xff) }).slice();
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000 && !cond(); i++) await tick();
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

function pair(maxFrameBytes?: number) {
  const [ma, mb] = createMemoryChannelPair({ names: ['a', 'b'], maxFrameBytes });
  const spA = new ProgressEngine(0);
  const spB = new ProgressEngine(0);
  const ports = ringPortPair();
  const a = new ShmChannel(ma, { progress: spA, capacity: 4096, maxRingFrame: 512 });
  const b = new ShmChannel(mb, { progress: spB, capacity: 4096, maxRingFrame: 512 });
  a.useSegments(ports.a);
  b.useSegments(ports.b);
  const got: Uint8Array[] = [];
  b.on('frame', (f) => got.push(f.slice()));
  let closedWith: Error | undefined | null = null;
  b.on('close', (err) => (closedWith = err));
  return { a, b, ma, mb, got, closed: () => closedWith, stop: () => (spA.stop(), spB.stop(), a.close(), b.close(), ports.close()) };
}

describe('a live control ring', () => {
  it('an oversize frame is refused before it takes a sequence number: the frames after it still arrive', async () => {
    const p = pair(8192);
    try {
      await until(() => p.a.ringOut && p.b.ringIn, 'the upgrade');
      p.a.send(frame(1, 100));
      expect(() => p.a.send(frame(2, 20_000))).toThrow(ProtocolError);
      p.a.send(frame(3, 100)); // through the ring
      p.a.send(frame(4, 3000)); // a SPILL (above maxRingFrame)
      await until(() => p.got.length === 3, 'the frames after the refused one');
      expect(p.got.map((f) => Buffer.from(f).equals(Buffer.from(frame(1, 100))))).toEqual([true, false, false]);
      expect(Buffer.from(p.got[1]!).equals(Buffer.from(frame(3, 100)))).toBe(true);
      expect(Buffer.from(p.got[2]!).equals(Buffer.from(frame(4, 3000)))).toBe(true);
      expect(p.a.closed).toBe(false);
    } finally {
      p.stop();
    }
  });

  it('an endpoint whose send is too large for the channel rejects that send and carries on', async () => {
    const pr = await makePair({ channel: { maxFrameBytes: 64 << 10 } });
    try {
      await until(() => pr.a.ep.stats().control.ringOut === true, 'the ring');
      await expect(pr.a.ep.send(new Uint8Array(100 << 10))).rejects.toThrow(/maxFrameBytes/);
      const got = pr.b.ep.recv({ tag: 5 });
      await pr.a.ep.send(Uint8Array.of(1, 2, 3), { tag: 5 });
      expect([...((await got).data as Uint8Array)]).toEqual([1, 2, 3]);
      expect(pr.a.ep.closed || pr.b.ep.closed).toBe(false);
    } finally {
      await pr.close();
    }
  });

  for (const [what, seq] of [
    ['far ahead of the expected frame', 1_000_000],
    ['behind the expected frame', 0xffff_fff0],
  ] as const) {
    it(`a SPILL ${what} closes the channel with ProtocolError (not buffered)`, async () => {
      const p = pair();
      try {
        await until(() => p.a.ringOut && p.b.ringIn, 'the upgrade');
        p.a.send(frame(1, 10));
        await until(() => p.got.length === 1, 'a frame');
        p.ma.send(encodeFrame({ type: FrameType.SPILL, seq, frame: frame(2, 10) }));
        await until(() => p.closed() !== null, 'the close');
        expect(p.closed()).toBeInstanceOf(ProtocolError);
        expect((p.closed() as Error).message).toMatch(/outside the window/);
      } finally {
        p.stop();
      }
    });
  }

  it('a SPILL repeated while it waits for the ring closes the channel with ProtocolError', async () => {
    const p = pair();
    try {
      await until(() => p.a.ringOut && p.b.ringIn, 'the upgrade');
      // seq 0 never comes; seq 1 waits for it, then comes again
      p.ma.send(encodeFrame({ type: FrameType.SPILL, seq: 1, frame: frame(1, 10) }));
      p.ma.send(encodeFrame({ type: FrameType.SPILL, seq: 1, frame: frame(1, 10) }));
      await until(() => p.closed() !== null, 'the close');
      expect(p.closed()).toBeInstanceOf(ProtocolError);
    } finally {
      p.stop();
    }
  });
});
