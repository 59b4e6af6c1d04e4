/**
 * The API a framework needs (issue 28): negotiate() on demand, any-tag and
 * any-source receives, probes, receives typed by their `into`, copies of any
 * ArrayBufferView, offsetDevice, a device `into` checked at recv(), the one
 * "past its allocation" message, a duplicate id refused on both sides with
 * its code, and no MaxListenersExceededWarning with many transports.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ANY_TAG, ArgumentRangeError, ClosedError, offsetDevice, type Received } from '../../../src/index.js';
import { Transport } from '../../../src/transport.js';
import { deviceWith, makePair, makeSide, type Pair, randomBytes, readDevice, sameBytes, type Side } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
const sides: Side[] = [];
afterEach(async () => {
  await pair?.close();
  pair = undefined;
  for (const s of sides.splice(0)) {
    await s.transport.close();
    s.driver.close();
  }
});

const STAGING = { a: { deviceEagerLimit: 0, negotiationEagerLimit: 0 }, b: { deviceEagerLimit: 0, negotiationEagerLimit: 0 } };

describe('negotiate()', () => {
  it('settles IPC before the first device message, which then goes by RGET', async () => {
    pair = await makePair(STAGING);
    const { a, b } = pair;
    expect(a.ep.state).toBe('INIT');
    expect(await a.ep.negotiate()).toBe('OK');
    expect(await b.ep.negotiate()).toBe('OK'); // the other side: settled by the same negotiation
    const src = deviceWith(a.driver, randomBytes(10_000, 3));
    const [, r] = await Promise.all([a.ep.send(src, { tag: 1 }), b.ep.recv({ tag: 1 })]);
    expect(r.path).toBe('rget');
    expect(a.ep.stats().sent.staging.messages).toBe(0);
    b.transport.free((r.data as { ptr: bigint }).ptr);
    a.driver.memFree(src.ptr);
  });

  it("resolves 'BAD' where IPC is off, and rejects once the endpoint is closed", async () => {
    pair = await makePair({ a: { negotiation: { ipc: false } } });
    expect(await pair.a.ep.negotiate()).toBe('BAD');
    pair.b.ep.close();
    await expect(pair.b.ep.negotiate()).rejects.toBeInstanceOf(ClosedError);
  });

  it('keeps asking a peer that has no device yet, and settles once it has one', async () => {
    pair = await makePair({ b: { lazyDevice: true, negotiation: { maxTries: 20 } } });
    const settled = pair.a.ep.negotiate();
    await new Promise((r) => setTimeout(r, 30));
    pair.b.transport.useDevice(1);
    expect(await settled).toBe('OK');
  });
});

describe('wildcards and probes', () => {
  it('ANY_TAG takes the earliest message of any tag and reports its tag', async () => {
    pair = await makePair();
    const { a, b } = pair;
    await a.ep.send(Buffer.from('seven'), { tag: 7 });
    await a.ep.send(Buffer.from('three'), { tag: 3 });
    const first = await b.ep.recv({ tag: ANY_TAG });
    expect([first.tag, Buffer.from(first.data as Uint8Array).toString()]).toEqual([7, 'seven']);
    const second = await b.ep.recv({ tag: ANY_TAG });
    expect(second.tag).toBe(3);
  });

  it('an ANY_TAG receive posted before a tagged one takes the next arrival; the tagged one the following', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const any = b.ep.recv({ tag: ANY_TAG });
    const tagged = b.ep.recv({ tag: 5 });
    await a.ep.send(Buffer.from('x'), { tag: 5 });
    await a.ep.send(Buffer.from('y'), { tag: 5 });
    expect(Buffer.from((await any).data as Uint8Array).toString()).toBe('x');
    expect(Buffer.from((await tagged).data as Uint8Array).toString()).toBe('y');
  });

  it('probe says the size of the next message without receiving it; tryProbe does not wait', async () => {
    pair = await makePair(STAGING);
    const { a, b } = pair;
    expect(b.ep.tryProbe({ tag: 2 })).toBeUndefined();
    const probed = b.ep.probe({ tag: ANY_TAG });
    const src = deviceWith(a.driver, randomBytes(5000, 9));
    const sent = a.ep.send(src, { tag: 2 });
    expect(await probed).toEqual({ tag: 2, length: 5000, fromDevice: true, peerId: 'a' });
    expect(b.ep.tryProbe({ tag: 2 })).toEqual({ tag: 2, length: 5000, fromDevice: true, peerId: 'a' });
    expect(b.ep.tryProbe({ tag: 3 })).toBeUndefined();
    // Size the receive buffer from the probe, then receive.
    const info = b.ep.tryProbe({ tag: 2 })!;
    const into = new Uint8Array(info.length);
    const r = await b.ep.recv({ tag: 2, into });
    await sent;
    expect(sameBytes(r.data, randomBytes(5000, 9))).toBe(true);
    expect(b.ep.tryProbe({ tag: ANY_TAG })).toBeUndefined();
    a.driver.memFree(src.ptr);
  });

  it('a waiting probe rejects when the endpoint closes, or when its signal aborts', async () => {
    pair = await makePair();
    const ac = new AbortController();
    const aborted = pair.b.ep.probe({ signal: ac.signal });
    ac.abort(new Error('enough'));
    await expect(aborted).rejects.toThrow('enough');
    const closed = pair.b.ep.probe({ tag: 4 });
    pair.b.ep.close();
    await expect(closed).rejects.toBeInstanceOf(ClosedError);
  });

  it('transport.recv() receives from any peer, earliest first, and says which endpoint', async () => {
    // hub with two peers
    const hub = await makeSide('hub', 0);
    const p1 = await makeSide('p1', 1);
    const p2 = await makeSide('p2', 0);
    sides.push(hub, p1, p2);
    const eps = [];
    for (const p of [p1, p2]) {
      const [c1, c2] = createMemoryChannelPair({ names: ['hub', p.transport.id] });
      const [h, e] = await Promise.all([hub.transport.attach(c1), p.transport.attach(c2)]);
      eps.push({ h, e });
    }
    // Waiting first: the next message from either peer takes it.
    const waiting = hub.transport.recv({ tag: 1 });
    await eps[1]!.e.send(Buffer.from('from p2'), { tag: 1 });
    const w = await waiting;
    expect([w.endpoint.peerId, Buffer.from(w.data as Uint8Array).toString()]).toEqual(['p2', 'from p2']);
    // Messages waiting: the earliest arrival, across endpoints.
    await eps[0]!.e.send(Buffer.from('p1 first'), { tag: 9 });
    await eps[1]!.e.send(Buffer.from('p2 second'), { tag: 9 });
    await Promise.all([eps[0]!.h.probe({ tag: 9 }), eps[1]!.h.probe({ tag: 9 })]); // both arrived
    expect(hub.transport.tryProbe({ tag: ANY_TAG })).toMatchObject({ peerId: 'p1', tag: 9, length: 8 });
    const r1 = await hub.transport.recv({ tag: ANY_TAG });
    const r2 = await hub.transport.recv({ tag: 9 });
    expect([r1.endpoint.peerId, r2.endpoint.peerId]).toEqual(['p1', 'p2']);
    // A receive posted on an endpoint before the any-source one keeps its turn.
    const own = eps[0]!.h.recv({ tag: 4 });
    const anySource = hub.transport.recv({ tag: 4 });
    await eps[0]!.e.send(Buffer.from('one'), { tag: 4 });
    await eps[0]!.e.send(Buffer.from('two'), { tag: 4 });
    expect(Buffer.from((await own).data as Uint8Array).toString()).toBe('one');
    expect(Buffer.from((await anySource).data as Uint8Array).toString()).toBe('two');
    // Closing the transport rejects what still waits.
    const pending = hub.transport.recv({ tag: 77 });
    await hub.transport.close();
    await expect(pending).rejects.toBeInstanceOf(ClosedError);
  });
});

describe('typed arrays, offsets, device `into`', () => {
  it('Received.data has the type of `into`', async () => {
    pair = await makePair();
    const { a, b } = pair;
    await a.ep.send(new Float32Array([1.5, -2, 3]), { tag: 1 });
    const into = new Float32Array(8);
    const r: Received<Float32Array> = await b.ep.recv({ tag: 1, into });
    expect(r.data).toBeInstanceOf(Float32Array);
    expect([...r.data]).toEqual([1.5, -2, 3]);
    expect(r.length).toBe(12);
    await a.ep.send(Buffer.from('dv'), { tag: 2 });
    const dv = await b.ep.recv({ tag: 2, into: new DataView(new ArrayBuffer(16)) });
    expect(dv.data).toBeInstanceOf(DataView);
    expect(dv.data.byteLength).toBe(2);
    await a.ep.send(Buffer.from('buf'), { tag: 3 });
    const asBuffer = await b.ep.recv({ tag: 3, into: Buffer.alloc(10) });
    expect(Buffer.isBuffer(asBuffer.data)).toBe(true);
    expect(asBuffer.data.toString()).toBe('buf');
  });

  it('copies take any ArrayBufferView, and offsetDevice moves into a device buffer without bigints', () => {
    const d = new SimulatedCudaDriver();
    try {
      d.init();
      d.setDevice(0);
      const whole = { ptr: d.memAlloc(64), length: 64 };
      d.memsetD8(whole.ptr, 0, 64);
      const part = offsetDevice(whole, 16, 12);
      expect(part).toEqual({ ptr: whole.ptr + 16n, length: 12 });
      d.memcpyHtoD(part.ptr, new Uint32Array([1, 2, 3]));
      const back = new Uint32Array(3);
      d.memcpyDtoH(back, part.ptr);
      expect([...back]).toEqual([1, 2, 3]);
      const viaView = new DataView(new ArrayBuffer(4));
      d.memcpyDtoH(viaView, offsetDevice(whole, 20).ptr);
      expect(viaView.getUint32(0, true)).toBe(2);
      expect(offsetDevice(whole, 64)).toEqual({ ptr: whole.ptr + 64n, length: 0 });
      expect(() => offsetDevice(whole, 60, 8)).toThrow(ArgumentRangeError);
      expect(() => offsetDevice(whole, -1)).toThrow(ArgumentRangeError);
      d.memFree(whole.ptr);
    } finally {
      d.close();
    }
  });

  it('a device `into` longer than its allocation is refused at recv(), with the one message sends give too', async () => {
    pair = await makePair(STAGING);
    const { a, b } = pair;
    const small = b.driver.memAlloc(100);
    let recvErr: unknown;
    try {
      b.ep.recv({ into: { ptr: small, length: 200 } });
    } catch (err) {
      recvErr = err;
    }
    expect(recvErr).toBeInstanceOf(ArgumentRangeError);
    expect((recvErr as Error).message).toBe(
      'options.into (200 bytes at offset 0 of its allocation) runs past the end of the allocation: 100 bytes are mapped from its start; pass a length of at most 100, or a larger allocation',
    );
    // The same words from a send, by staging (before IPC) and by RGET (after).
    const src = a.driver.memAlloc(100);
    const staged = await a.ep.send({ ptr: src + 50n, length: 100 }).catch((e: unknown) => e);
    expect((staged as Error).message).toMatch(/^buffer \(100 bytes at offset 50 of its allocation\) runs past the end of the allocation: 50 bytes are mapped/);
    expect(await a.ep.negotiate()).toBe('OK');
    const viaRget = await a.ep.send({ ptr: src + 50n, length: 100 }).catch((e: unknown) => e);
    expect((viaRget as Error).message).toBe((staged as Error).message);
    a.driver.memFree(src);
    b.driver.memFree(small);
  });
});

describe('handshake and process-wide resources', () => {
  it('a duplicate id: the connecting side also gets SMCUDA_DUPLICATE_PEER, not "closed during the handshake"', async () => {
    const hub = await makeSide('hub', 0);
    const x1 = await makeSide('x', 1);
    const x2 = await makeSide('x', 1);
    sides.push(hub, x1, x2);
    const [c1, c2] = createMemoryChannelPair({ names: ['hub', 'x'] });
    await Promise.all([hub.transport.attach(c1), x1.transport.attach(c2)]);
    const [d1, d2] = createMemoryChannelPair({ names: ['hub', 'x'] });
    const [hubSide, xSide] = await Promise.allSettled([hub.transport.attach(d1), x2.transport.attach(d2)]);
    for (const r of [hubSide, xSide]) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'SMCUDA_DUPLICATE_PEER' });
    }
    expect(((xSide as PromiseRejectedResult).reason as Error).message).toMatch(/refused the connection: a peer with id "x" is already connected to "hub"/);
  });

  it('twelve transports in one process: no MaxListenersExceededWarning', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const ts = await Promise.all(Array.from({ length: 12 }, (_, i) => Transport.create({ driver: 'sim', id: `many-${i}` })));
      // Device memory: each simulated driver now has segments to remove at exit.
      for (const t of ts) t.driver.memFree(t.driver.memAlloc(4096));
      await new Promise((r) => setImmediate(r));
      for (const t of ts) await t.close();
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.map((w) => w.name)).not.toContain('MaxListenersExceededWarning');
  });
});

void readDevice;
