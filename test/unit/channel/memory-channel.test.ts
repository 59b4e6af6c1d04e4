import { describe, it, expect } from 'vitest';
import { test, fc } from '@fast-check/vitest';
import { createMemoryChannelPair, type MemoryChannel } from '../../../src/channel/memory-channel.js';
import { sendFrameParts } from '../../../src/channel/bytes.js';
import { ClosedError, ConfigError, PeerLostError } from '../../../src/errors.js';

/** Everything `ch` receives, as arrays of numbers for easy comparison. */
function collect(ch: MemoryChannel): number[][] {
  const got: number[][] = [];
  ch.on('frame', (f) => got.push([...f]));
  return got;
}

/** Resolves with the argument of the channel's 'close' event (null: no error). */
function closed(ch: MemoryChannel): Promise<Error | null> {
  return new Promise((resolve) => ch.once('close', (err) => resolve(err ?? null)));
}

const tick = () => new Promise<void>((r) => setImmediate(r));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('memory channel: default delivery', () => {
  it('delivers asynchronously, whole and in order, in both directions', async () => {
    const [a, b] = createMemoryChannelPair({ names: ['left', 'right'] });
    expect(a.label).toBe('memory:left->right');
    expect(b.label).toBe('memory:right->left');
    const atB = collect(b);
    const atA = collect(a);
    for (let i = 0; i < 50; i++) {
      expect(a.send(Uint8Array.of(i, i + 1))).toBe(true);
      b.send(Uint8Array.of(100 + i));
    }
    expect(atB).toEqual([]); // nothing synchronously
    await sleep(20);
    expect(atB).toEqual(Array.from({ length: 50 }, (_, i) => [i, i + 1]));
    expect(atA).toEqual(Array.from({ length: 50 }, (_, i) => [100 + i]));
  });

  it('copies on send: later changes to the sent buffer do not reach the receiver', async () => {
    const [a, b] = createMemoryChannelPair();
    const got: Uint8Array[] = [];
    b.on('frame', (f) => got.push(f));
    const buf = Uint8Array.of(1, 2, 3);
    a.send(buf);
    sendFrameParts(a, [buf, buf]);
    buf.fill(9);
    await tick();
    await tick();
    expect(got.map((f) => [...f])).toEqual([
      [1, 2, 3],
      [1, 2, 3, 1, 2, 3],
    ]);
    expect(got[0]).not.toBe(buf);
    expect(got[0]!.buffer).not.toBe(buf.buffer);
  });

  it('sendFrameParts on a channel without sendParts: one frame, concatenated', async () => {
    const [a, b] = createMemoryChannelPair({ manual: true });
    const atB = collect(b);
    sendFrameParts(a, [Uint8Array.of(1), new Uint8Array(0), Uint8Array.of(2, 3)]);
    expect(a.pending()).toBe(1);
    a.deliverAll();
    expect(atB).toEqual([[1, 2, 3]]);
  });

  it('send() refuses non-bytes', () => {
    const [a] = createMemoryChannelPair();
    expect(() => a.send('x' as unknown as Uint8Array)).toThrow(TypeError);
  });

  it('refuses bad options', () => {
    expect(() => createMemoryChannelPair({ highWaterMark: 0 })).toThrow(ConfigError);
    expect(() => createMemoryChannelPair({ delay: -1 })).toThrow(ConfigError);
  });
});

describe('memory channel: controlled delivery', () => {
  it('manual: holds frames until released, one at a time or all', async () => {
    const [a, b] = createMemoryChannelPair({ manual: true });
    const atB = collect(b);
    a.send(Uint8Array.of(1));
    a.send(Uint8Array.of(2));
    a.send(Uint8Array.of(3));
    await sleep(5);
    expect(atB).toEqual([]);
    expect(a.pending()).toBe(3);
    expect(b.pending()).toBe(0);
    expect(a.deliverNext()).toBe(true);
    expect(atB).toEqual([[1]]);
    expect(a.deliverAll()).toBe(2);
    expect(atB).toEqual([[1], [2], [3]]);
    expect(a.deliverNext()).toBe(false);
    expect(a.pending()).toBe(0);
  });

  it('manual: deliverAll also delivers frames sent while delivering', () => {
    const [a, b] = createMemoryChannelPair({ manual: true });
    const atB = collect(b);
    b.on('frame', (f) => {
      if (f[0]! < 3) a.send(Uint8Array.of(f[0]! + 1));
    });
    a.send(Uint8Array.of(0));
    expect(a.deliverAll()).toBe(4);
    expect(atB).toEqual([[0], [1], [2], [3]]);
  });

  it('delay: frames wait, and varying delays never reorder them', async () => {
    const delays = [40, 5, 25, 0, 10];
    let i = 0;
    const [a, b] = createMemoryChannelPair({ delay: (frame) => (frame ? delays[i++]! : 0) });
    const atB = collect(b);
    for (let k = 0; k < delays.length; k++) a.send(Uint8Array.of(k));
    await tick();
    expect(atB.length).toBeLessThan(delays.length);
    await sleep(80);
    expect(atB).toEqual([[0], [1], [2], [3], [4]]);
  });

  it('deliver hook: the test releases deliveries in any order; frames still arrive in order', () => {
    const releases: (() => void)[] = [];
    const infos: (number | null)[] = [];
    const [a, b] = createMemoryChannelPair({
      deliver: (release, info) => {
        releases.push(release);
        infos.push(info.frame ? info.frame[0]! : null);
        expect(info.from).toBe('memory:a->b');
      },
    });
    const atB = collect(b);
    a.send(Uint8Array.of(10));
    a.send(Uint8Array.of(11));
    a.send(Uint8Array.of(12));
    expect(infos).toEqual([10, 11, 12]);
    releases[2]!();
    releases[0]!();
    expect(atB).toEqual([[10], [11]]);
    releases[1]!();
    releases[1]!(); // an extra release with nothing queued does nothing
    expect(atB).toEqual([[10], [11], [12]]);
  });

  test.prop([fc.scheduler(), fc.integer({ min: 0, max: 8 }), fc.integer({ min: 0, max: 8 })], { numRuns: 100 })(
    'under a fast-check scheduler, each direction is FIFO and nothing is lost or duplicated',
    async (s, nA, nB) => {
      const [a, b] = createMemoryChannelPair({
        deliver: (release) => void s.schedule(Promise.resolve(), 'deliver').then(release),
      });
      const atA = collect(a);
      const atB = collect(b);
      const sentByA: number[][] = [];
      const sentByB: number[][] = [];
      // Each side sends at moments the scheduler picks; a echoes what it gets (+100).
      a.on('frame', (f) => f[0]! < 100 && a.send(Uint8Array.of(f[0]! + 100)));
      const send = (ch: MemoryChannel, log: number[][], v: number) => {
        log.push([v]);
        ch.send(Uint8Array.of(v));
      };
      for (let i = 0; i < nA; i++) void s.schedule(Promise.resolve(), `a sends ${i}`).then(() => send(a, sentByA, i));
      for (let i = 0; i < nB; i++) void s.schedule(Promise.resolve(), `b sends ${50 + i}`).then(() => send(b, sentByB, 50 + i));
      await s.waitAll();
      expect(atB.filter((f) => f[0]! < 100)).toEqual(sentByA);
      expect(atA).toEqual(sentByB);
      // a's echoes go in the order a received, i.e. b's send order.
      expect(atB.filter((f) => f[0]! >= 100)).toEqual(sentByB.map(([v]) => [v! + 100]));
    },
  );

  it('highWaterMark: send returns false past it, then drain once delivered', async () => {
    const [a, b] = createMemoryChannelPair({ manual: true, highWaterMark: 10 });
    collect(b);
    let drains = 0;
    a.on('drain', () => drains++);
    expect(a.send(new Uint8Array(6))).toBe(true);
    expect(a.send(new Uint8Array(6))).toBe(false);
    expect(a.send(new Uint8Array(6))).toBe(false); // still queued, never dropped
    expect(a.pending()).toBe(3);
    a.deliverNext();
    await tick();
    expect(drains).toBe(0); // 12 bytes still queued
    a.deliverNext();
    await tick();
    expect(drains).toBe(1);
    a.deliverAll();
    await tick();
    expect(drains).toBe(1);
  });
});

describe('memory channel: close and faults', () => {
  it('close(): this end closes at once without error; the peer after the frames sent before', async () => {
    const [a, b] = createMemoryChannelPair({ manual: true });
    const atB = collect(b);
    const aClosed = closed(a);
    let bCloses = 0;
    b.on('close', () => bCloses++);
    a.send(Uint8Array.of(1));
    a.close();
    a.close(); // idempotent
    expect(a.closed).toBe(true);
    expect(await aClosed).toBeNull();
    expect(() => a.send(Uint8Array.of(2))).toThrow(ClosedError);
    expect(b.closed).toBe(false);
    expect(a.pending()).toBe(2); // the frame and the end marker
    a.deliverNext();
    expect(atB).toEqual([[1]]);
    expect(b.closed).toBe(false);
    a.deliverNext();
    expect(b.closed).toBe(true);
    await tick();
    expect(bCloses).toBe(1);
    expect(() => b.send(Uint8Array.of(3))).toThrow(ClosedError);
  });

  it('frames sent to an end that closed are dropped', async () => {
    const [a, b] = createMemoryChannelPair();
    const atA = collect(a);
    b.send(Uint8Array.of(1));
    a.close();
    await sleep(5);
    expect(atA).toEqual([]);
  });

  it('default close reaches the peer without error', async () => {
    const [a, b] = createMemoryChannelPair();
    const bClosed = closed(b);
    a.close();
    expect(await bClosed).toBeNull();
  });

  it('breakLink: both ends close with the error at once; pending frames are lost; close is emitted once', async () => {
    const [a, b] = createMemoryChannelPair({ manual: true });
    const atB = collect(b);
    const events: [string, Error | undefined][] = [];
    a.on('close', (e) => events.push(['a', e]));
    b.on('close', (e) => events.push(['b', e]));
    a.send(Uint8Array.of(1));
    const boom = new Error('boom');
    b.breakLink(boom);
    a.close();
    b.breakLink();
    expect(a.closed && b.closed).toBe(true);
    expect(a.deliverAll()).toBe(0);
    await tick();
    expect(atB).toEqual([]);
    expect(events.sort()).toEqual([
      ['a', boom],
      ['b', boom],
    ]);
  });

  it('breakLink without an argument reports PeerLostError', async () => {
    const [a, b] = createMemoryChannelPair();
    const err = closed(b);
    a.breakLink();
    expect(await err).toBeInstanceOf(PeerLostError);
  });

  it('hang: a hung end neither receives nor sends, and nobody closes', async () => {
    const [a, b] = createMemoryChannelPair();
    const atA = collect(a);
    const atB = collect(b);
    b.hang();
    expect(a.send(Uint8Array.of(1))).toBe(true);
    expect(b.send(Uint8Array.of(2))).toBe(true);
    // An immediate queued after the sends' deliveries: they have run once it has,
    // even when a loaded machine fires the 5 ms timer first.
    await new Promise((resolve) => setImmediate(resolve));
    await sleep(5);
    expect(atA).toEqual([]);
    expect(atB).toEqual([]);
    expect(a.closed || b.closed).toBe(false);
    b.hang(false);
    a.send(Uint8Array.of(3));
    await sleep(5);
    expect(atB).toEqual([[3]]);
  });
});
