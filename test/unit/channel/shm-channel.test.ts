import { describe, expect, it } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import { createMemoryChannelPair, type MemoryChannel } from '../../../src/channel/memory-channel.js';
import { concatBytes } from '../../../src/channel/bytes.js';
import type { ControlChannel } from '../../../src/channel/channel.js';
import { RingReader, RingWriter, ringSegmentBytes } from '../../../src/channel/shm-ring.js';
import { ShmChannel } from '../../../src/channel/shm-channel.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import type { SegmentNative } from '../../../src/channel/sealed-segment.js';
import { ringPortPair } from '../../helpers/ring-ports.js';
import { ProgressEngine } from '../../../src/progress/engine.js';
import { ProtocolError } from '../../../src/errors.js';
import { decodeFrameType, encodeFrame } from '../../../src/wire/codec.js';
import { FrameType } from '../../../src/wire/frames.js';

const tick = () => new Promise<void>((r) => setImmediate(r));

/** A frame the channel carries: a valid header (an EAGER frame) whose payload encodes `i` and has `n` bytes. */
function frame(i: number, n: number): Uint8Array {
  const data = new Uint8Array(n);
  for (let k = 0; k < n; k++) data[k] = (i * 31 + k) & 0xff;
  return encodeFrame({ type: FrameType.EAGER, tag: 0, seq: i, fromDevice: false, data }).slice();
}

function ringOver(capacity: number): { reader: RingReader; writer: RingWriter; bytes: Uint8Array } {
  const bytes = new Uint8Array(ringSegmentBytes(capacity));
  const reader = new RingReader(bytes, capacity);
  const writer = new RingWriter(bytes, capacity, capacity);
  return { reader, writer, bytes };
}

describe('shm ring', () => {
  test.prop([fc.array(fc.tuple(fc.integer({ min: 0, max: 1500 }), fc.boolean()), { minLength: 1, maxLength: 300 })], { numRuns: 100 })(
    'entries come out whole and in order across wrap-arounds; a full ring refuses without writing',
    (ops) => {
      const { reader, writer } = ringOver(4096);
      const pending: { seq: number; bytes: Uint8Array }[] = [];
      let seq = 0;
      for (const [n, drain] of ops) {
        const payload = Uint8Array.from({ length: n }, (_, k) => (seq + k) & 0xff);
        if (writer.tryWrite(seq, [payload.subarray(0, n >> 1), payload.subarray(n >> 1)], n)) pending.push({ seq: seq++, bytes: payload });
        else expect(pending.length).toBeGreaterThan(0); // refused only when something is unread
        if (drain) {
          let filled = false;
          while (pending.length > 0) {
            const want = pending.shift()!;
            expect(reader.peekSeq()).toBe(want.seq);
            const entry = reader.peek();
            if (!filled) {
              // A peeked entry stays put until consumed: the writer cannot reuse its space meanwhile.
              filled = true;
              const fill = new Uint8Array(64).fill(0xee);
              while (writer.tryWrite(seq, [fill], 64)) pending.push({ seq: seq++, bytes: fill });
            }
            expect(Buffer.from(entry).equals(Buffer.from(want.bytes))).toBe(true);
            reader.consume();
          }
          expect(reader.peekSeq()).toBe(-1);
        }
      }
    },
  );

  it('the doorbell is claimed once until the reader clears it', () => {
    const { reader, writer } = ringOver(4096);
    expect(writer.needsDoorbell()).toBe(true);
    expect(writer.needsDoorbell()).toBe(false);
    reader.setBell(0);
    expect(writer.needsDoorbell()).toBe(true);
    reader.setBell(1); // watching
    expect(writer.needsDoorbell()).toBe(false);
  });

  it('refuses a corrupt ring: a tail past the capacity, an entry past the written bytes, a head ahead of the tail', () => {
    const { reader, bytes } = ringOver(4096);
    const words = new Int32Array(bytes.buffer, 0, 64);
    words[16] = 8192; // tail claims more than the ring holds
    expect(() => reader.peekSeq()).toThrow(ProtocolError);
    const r2 = ringOver(4096);
    r2.writer.tryWrite(0, [new Uint8Array(16)], 16);
    new Uint32Array(r2.bytes.buffer, 256, 1)[0] = 4000; // the entry's length runs past what was written
    expect(() => r2.reader.peekSeq()).toThrow(/corrupt/);
    const r3 = ringOver(4096);
    new Int32Array(r3.bytes.buffer, 0, 64)[32] = 8000; // a consumer claiming to have read what was never written
    expect(r3.writer.tryWrite(0, [new Uint8Array(8)], 8)).toBe(false);
  });

  it('a writer refuses a segment that is not a ring of the offered capacity', () => {
    const bytes = new Uint8Array(ringSegmentBytes(4096));
    expect(() => new RingWriter(bytes, 4096, 1024)).toThrow(ProtocolError);
    new RingReader(bytes, 4096);
    expect(() => new RingWriter(bytes, 8192, 1024)).toThrow(ProtocolError);
  });
});

describe('ShmChannel over a memory channel', () => {
  function pair(o: { spinUs?: number; capacity?: number; maxRingFrame?: number; nativeB?: SegmentNative } = {}) {
    const [ma, mb] = createMemoryChannelPair({ names: ['a', 'b'] });
    const spA = new ProgressEngine(o.spinUs ?? 100);
    const spB = new ProgressEngine(o.spinUs ?? 100);
    const ports = ringPortPair();
    const a = new ShmChannel(ma, { progress: spA, capacity: o.capacity ?? 4096, maxRingFrame: o.maxRingFrame ?? 512 });
    const b = new ShmChannel(mb, { native: o.nativeB, progress: spB, capacity: o.capacity ?? 4096, maxRingFrame: o.maxRingFrame ?? 512 });
    a.useSegments(ports.a);
    b.useSegments(ports.b);
    return { a, b, ma, mb, stop: () => (spA.stop(), spB.stop(), ports.close()) };
  }

  async function until(cond: () => boolean, what: string): Promise<void> {
    for (let i = 0; i < 2000 && !cond(); i++) await tick();
    if (!cond()) throw new Error(`timed out waiting for ${what}`);
  }

  test.prop([fc.array(fc.integer({ min: 0, max: 2000 }), { minLength: 1, maxLength: 120 }), fc.constantFrom(0, 100)], { numRuns: 25 })(
    'frames arrive whole and in order through ring, spills and full-ring fallbacks, spinning or by doorbell',
    async (sizes, spinUs) => {
      const { a, b, stop } = pair({ spinUs });
      const got: Uint8Array[] = [];
      b.on('frame', (f) => got.push(f));
      // The first frames go before the upgrade is done (written to the channel directly), the rest after.
      const early = Math.min(3, sizes.length);
      for (let i = 0; i < early; i++) a.send(frame(i, sizes[i]!));
      await until(() => a.ringOut, 'the upgrade');
      for (let i = early; i < sizes.length; i++) a.send(frame(i, sizes[i]!));
      await until(() => got.length === sizes.length && b.ringIn, `${sizes.length} frames`);
      sizes.forEach((n, i) => expect(Buffer.from(got[i]!).equals(Buffer.from(frame(i, n)))).toBe(true));
      expect(a.ringOut).toBe(true);
      expect(b.ringIn).toBe(true);
      a.close();
      stop();
    },
  );

  it('a frame too large for the ring is spilled to a channel with sendParts as two parts, the frame itself not copied', async () => {
    const { a, b, ma, stop } = pair({ maxRingFrame: 512 });
    const parts: Uint8Array[][] = [];
    // A channel with sendParts (as UnixChannel): record the parts, then deliver them joined.
    (ma as ControlChannel).sendParts = (ps) => {
      parts.push([...ps]);
      return ma.send(concatBytes(ps));
    };
    const got: Uint8Array[] = [];
    b.on('frame', (f) => got.push(f));
    await until(() => a.ringOut, 'the upgrade');
    const big = frame(1, 2000);
    a.send(big);
    await until(() => got.length === 1, 'the spilled frame');
    expect(parts).toHaveLength(1);
    expect(parts[0]![1]).toBe(big); // handed over as is
    expect(Buffer.from(got[0]!).equals(Buffer.from(big))).toBe(true);
    a.close();
    stop();
  });

  it('a side that cannot create a ring is written to on the channel; it still writes into the peer ring', async () => {
    const addon = loadAddon();
    const noMemory: SegmentNative = {
      sealedCreate: () => {
        throw Object.assign(new Error('posix_fallocate failed: ENOMEM'), { code: 'ENOMEM' });
      },
      sealedMap: (fd, bytes) => addon.sealedMap(fd, bytes),
      shmClose: (b) => addon.shmClose(b),
      fdClose: (fd) => addon.fdClose(fd),
    };
    const { a, b, stop } = pair({ nativeB: noMemory });
    const atA: Uint8Array[] = [];
    const atB: Uint8Array[] = [];
    a.on('frame', (f) => atA.push(f));
    b.on('frame', (f) => atB.push(f));
    await until(() => b.ringOut, 'the upgrade');
    for (let i = 0; i < 20; i++) {
      a.send(frame(i, 10));
      b.send(frame(i, 10));
    }
    await until(() => atA.length === 20 && atB.length === 20, 'both directions');
    expect(a.ringOut).toBe(false); // b offered nothing
    expect(b.ringOut).toBe(true); // b writes into a's ring
    expect(a.ringIn).toBe(true);
    a.close();
    stop();
  });

  it('frames written just before the peer closes are delivered before close', async () => {
    const { a, b, stop } = pair({ spinUs: 0 });
    const got: number[] = [];
    let closedAfter = -1;
    b.on('frame', (f) => got.push(f.byteLength));
    b.on('close', () => (closedAfter = got.length));
    await until(() => a.ringOut, 'the upgrade');
    for (let i = 0; i < 10; i++) a.send(frame(i, 5));
    a.close();
    await until(() => closedAfter >= 0, 'close');
    expect(closedAfter).toBe(10);
    stop();
  });

  it('a DOORBELL that arrives while the reader is watched leaves its bell at "watching": the next writes do not ring', async () => {
    // Progress-engine stand-ins: the test polls and watches by hand (a real engine holds the thread while it spins).
    const stub = { kick: () => {}, forget: () => {} } as unknown as ProgressEngine;
    const [ma, mb] = createMemoryChannelPair({ names: ['a', 'b'] });
    const ports = ringPortPair();
    const a = new ShmChannel(ma, { progress: stub, capacity: 4096, maxRingFrame: 512 });
    const b = new ShmChannel(mb, { progress: stub, capacity: 4096, maxRingFrame: 512 });
    a.useSegments(ports.a);
    b.useSegments(ports.b);
    let bells = 0;
    const send = ma.send.bind(ma);
    ma.send = (f: Uint8Array) => {
      if (decodeFrameType(f) === FrameType.DOORBELL) bells++;
      return send(f);
    };
    const got: Uint8Array[] = [];
    b.on('frame', (f) => got.push(f));
    await until(() => a.ringOut && b.ringIn, 'the upgrade');
    b.watch(true); // what the engine does when b turns hot
    send(encodeFrame({ type: FrameType.DOORBELL })); // one that was in flight arrives now
    await tick();
    for (let i = 0; i < 3; i++) a.send(frame(i, 8));
    expect(b.poll()).toBe(true);
    expect(got).toHaveLength(3);
    expect(bells).toBe(0);
    b.watch(false); // cold: the next write rings
    a.send(frame(3, 8));
    expect(bells).toBe(1);
    a.close();
    ports.close();
  });

  it('a peer that writes to the channel after RING_SWITCH is refused with a ProtocolError', async () => {
    const { a, b, ma, stop } = pair();
    let err: Error | undefined;
    b.on('close', (e) => (err = e));
    await until(() => a.ringOut && b.ringIn, 'the upgrade');
    (ma as MemoryChannel).send(frame(0, 4)); // bypasses a's ring
    await until(() => err !== undefined, 'the refusal');
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err!.message).toMatch(/after RING_SWITCH/);
    stop();
  });
});
