/**
 * Transport and Endpoint on the simulated driver, two transports in one
 * process over an in-memory channel: data paths, negotiation outcomes,
 * ordering, truncation, cancellation, peer loss.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { PeerLostError, TruncationError } from '../../../src/errors.js';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { deviceWith, makePair, type Pair, randomBytes, reach, readDevice, sameBytes } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe('host messages', () => {
  it('travel eagerly, in order per tag, whatever the order of receives', async () => {
    pair = await makePair();
    const { a, b } = pair;
    await a.ep.send(Buffer.from('one'), { tag: 1 });
    await a.ep.send(Buffer.from('two'), { tag: 1 });
    await a.ep.send(new Uint16Array([7, 8]), { tag: 2 });
    const t2 = await b.ep.recv({ tag: 2 });
    const first = await b.ep.recv({ tag: 1 });
    const second = await b.ep.recv({ tag: 1 });
    expect(Buffer.from(first.data as Uint8Array).toString()).toBe('one');
    expect(Buffer.from(second.data as Uint8Array).toString()).toBe('two');
    expect([...new Uint16Array((t2.data as Uint8Array).slice().buffer)]).toEqual([7, 8]);
    expect(first.path).toBe('eager');
    expect(b.ep.stats().received.eager.messages).toBe(3);
    expect(a.ep.state).toBe('INIT'); // host data never starts the negotiation
    // Both sides move their frames to the shared-memory rings after HELLO (RING_OFFER, RING_SWITCH).
    const upgraded = () => [a.ep, b.ep].every((ep) => ep.stats().control.ringOut && ep.stats().control.ringIn);
    for (let i = 0; i < 100 && !upgraded(); i++) await new Promise((r) => setImmediate(r));
    for (const ep of [a.ep, b.ep]) expect(ep.stats().control).toMatchObject({ ringOut: true, ringIn: true });
    await a.ep.send(Buffer.from('through the ring'));
    expect(Buffer.from((await b.ep.recv()).data as Uint8Array).toString()).toBe('through the ring');
    expect(a.ep.stats().control.channel).toMatch(/\+ring$/);
  });

  it('through the rings, messages that wait unmatched keep their bytes while the ring reuses its space', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const upgraded = () => [a.ep, b.ep].every((ep) => ep.stats().control.ringOut && ep.stats().control.ringIn);
    for (let i = 0; i < 100 && !upgraded(); i++) await new Promise((r) => setImmediate(r));
    expect(upgraded()).toBe(true);
    // 300 × 2 KiB in bursts of 20 that b takes off the ring in between: more than
    // the 256 KiB ring holds, so later ones are written where earlier ones lay,
    // all before any receive is posted.
    const sent = Array.from({ length: 300 }, (_, i) => randomBytes(2048, 2 * i + 1));
    for (let i = 0; i < sent.length; i++) {
      await a.ep.send(sent[i]!, { tag: 3 });
      if (i % 20 === 19) await new Promise((r) => setTimeout(r, 2));
    }
    await new Promise((r) => setTimeout(r, 50));
    for (const want of sent) expect(sameBytes((await b.ep.recv({ tag: 3 })).data as Uint8Array, want)).toBe(true);
  });

  it('stay on the channel when either side turns the control rings off', async () => {
    pair = await makePair({ b: { controlRing: false } });
    const { a, b } = pair;
    await a.ep.send(Buffer.from('x'));
    expect(Buffer.from((await b.ep.recv()).data as Uint8Array).toString()).toBe('x');
    expect(a.ep.stats().control).toMatchObject({ ringOut: false, ringIn: false });
  });

  it('land in a given host buffer, or in device memory', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const into = new Uint8Array(10);
    const dev: DeviceBuffer = { ptr: b.driver.memAlloc(16), length: 16 };
    const r1 = b.ep.recv({ tag: 3, into });
    const r2 = b.ep.recv({ tag: 3, into: dev });
    await a.ep.send(Buffer.from('hello'), { tag: 3 });
    await a.ep.send(Buffer.from('device'), { tag: 3 });
    expect(Buffer.from((await r1).data as Uint8Array).toString()).toBe('hello');
    expect((await r2).data).toBe(dev);
    expect(Buffer.from(readDevice(b.driver, { ptr: dev.ptr, length: 6 })).toString()).toBe('device');
  });

  it('too long for the receive buffer: the receive fails with TruncationError', async () => {
    pair = await makePair();
    const r = pair.b.ep.recv({ tag: 0, into: new Uint8Array(2) });
    await pair.a.ep.send(Buffer.from('three'));
    await expect(r).rejects.toBeInstanceOf(TruncationError);
  });
});

describe('device messages and the negotiation', () => {
  it('first GPU send above negotiationEagerLimit negotiates INIT→SENT→OK and waits for it: it and later ones go by RGET, no staging ring is made', async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const { a, b } = pair;
    const data = randomBytes(1 << 20, 1);
    const src = deviceWith(a.driver, data);
    const r1 = b.ep.recv({ tag: 9 });
    await a.ep.send(src, { tag: 9 });
    const got1 = await r1;
    expect(got1.path).toBe('rget');
    expect(a.ep.stats().sent.staging.messages).toBe(0);
    expect(sameBytes(readDevice(b.driver, got1.data as DeviceBuffer), data)).toBe(true);
    await reach(a.ep, 'OK');
    await reach(b.ep, 'OK');
    expect(a.ep.stats().negotiation.path).toEqual(['INIT', 'SENT', 'OK']);
    expect(b.ep.stats().negotiation.path).toEqual(['INIT', 'ACKING', 'ACKED', 'OK']);
    expect(a.ep.stats().negotiation.tries).toBe(1);

    const into: DeviceBuffer = { ptr: b.driver.memAlloc(1 << 20), length: 1 << 20 };
    const r2 = b.ep.recv({ tag: 9, into });
    await a.ep.send(src, { tag: 9 });
    const got2 = await r2;
    expect(got2.path).toBe('rget');
    expect(sameBytes(readDevice(b.driver, into), data)).toBe(true);
    // the same buffer again: the mapping comes from the cache
    const r3 = b.ep.recv({ tag: 9, into });
    await a.ep.send(src, { tag: 9 });
    await r3;
    const cache = b.ep.stats().cache;
    expect(cache.misses).toBe(2); // the peer's negotiation probe, then the buffer
    expect(cache.hits).toBe(2);
  });

  it('below negotiationEagerLimit the first device message goes inline at once while the negotiation runs; once OK, by RGET', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const data = randomBytes(1 << 20, 21);
    const src = deviceWith(a.driver, data);
    const r1 = b.ep.recv({ tag: 4 });
    await a.ep.send(src, { tag: 4 });
    expect(a.ep.state).not.toBe('OK'); // sent (copied) before the negotiation settled
    const got1 = await r1;
    expect(got1.path).toBe('eager');
    expect(sameBytes(readDevice(b.driver, got1.data as DeviceBuffer), data)).toBe(true);
    // One byte more than the limit waits for the negotiation like any larger message.
    const big = deviceWith(a.driver, randomBytes((1 << 20) + 1, 22));
    const r2 = b.ep.recv({ tag: 4 });
    await a.ep.send(big, { tag: 4 });
    expect((await r2).path).toBe('rget');
    await reach(a.ep, 'OK');
    const r3 = b.ep.recv({ tag: 4 });
    await a.ep.send(src, { tag: 4 });
    expect((await r3).path).toBe('rget');
    expect(a.ep.stats().sent.staging.messages).toBe(0);
  });

  it('with IPC off, nothing waits for a negotiation: above deviceEagerLimit, staging from the first message', async () => {
    pair = await makePair({ a: { negotiation: { ipc: false } } });
    const r = pair.b.ep.recv();
    await pair.a.ep.send(deviceWith(pair.a.driver, randomBytes(64 << 10, 23)));
    expect((await r).path).toBe('staging');
  });

  it('an interior slice of an allocation arrives exactly', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const data = randomBytes(256 << 10, 2);
    const src = deviceWith(a.driver, data);
    const first = b.ep.recv({ tag: 1 });
    await a.ep.send({ ptr: src.ptr, length: 16 << 10 }, { tag: 1 }); // inline (below negotiationEagerLimit); starts the negotiation
    await first;
    await reach(a.ep, 'OK');
    const r = b.ep.recv({ tag: 1, into: new Uint8Array(100 << 10) });
    await a.ep.send({ ptr: src.ptr + 1000n, length: 100 << 10 }, { tag: 1 });
    const got = await r;
    expect(got.path).toBe('rget');
    expect(sameBytes(got.data as Uint8Array, data.subarray(1000, 1000 + (100 << 10)))).toBe(true);
  });

  it('IPC off: BAD on both sides, device data goes by staging', async () => {
    pair = await makePair({ a: { negotiation: { ipc: false } } });
    const { a, b } = pair;
    const data = randomBytes(9 << 20, 3); // more than one ring of 4 × 4 MiB? no: 3 chunks, pipelined
    const src = deviceWith(a.driver, data);
    for (let i = 0; i < 2; i++) {
      const r = b.ep.recv({ tag: 4 });
      await a.ep.send(src, { tag: 4 });
      const got = await r;
      expect(got.path).toBe('staging');
      expect(sameBytes(readDevice(b.driver, got.data as DeviceBuffer), data)).toBe(true);
    }
    await reach(b.ep, 'BAD');
    expect(a.ep.state).toBe('BAD');
    expect(a.ep.stats().sent.staging).toEqual({ messages: 2, bytes: 2 * data.byteLength });
  });

  it('no peer access between the devices: ACK(no), both BAD', async () => {
    pair = await makePair({ simA: { peerAccess: 'none' }, simB: { peerAccess: 'none' } });
    const { a, b } = pair;
    const src = deviceWith(a.driver, randomBytes(64 << 10, 4));
    const r = b.ep.recv();
    await a.ep.send(src);
    await r;
    await reach(a.ep, 'BAD');
    await reach(b.ep, 'BAD');
    expect(b.ep.stats().negotiation.path).toEqual(['INIT', 'ACKING', 'BAD']);
  });

  it('a peer that has not initialised CUDA answers NOT_READY; the requester retries on its next GPU send', async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 }, b: { lazyDevice: true } });
    const { a, b } = pair;
    const src = deviceWith(a.driver, randomBytes(64 << 10, 5));
    let r = b.ep.recv({ into: new Uint8Array(64 << 10) });
    await a.ep.send(src);
    expect((await r).path).toBe('staging'); // it waited for the attempt, which did not start another
    await reach(a.ep, 'INIT'); // back to INIT after NOT_READY
    expect(a.ep.stats().negotiation.path).toEqual(['INIT', 'SENT', 'INIT']);
    b.transport.useDevice(1);
    r = b.ep.recv({ into: new Uint8Array(64 << 10) });
    await a.ep.send(src);
    await r;
    await reach(a.ep, 'OK');
    expect(a.ep.stats().negotiation.tries).toBe(2);
  });

  it('same GPU with same-GPU IPC off: BAD; with it on: OK', async () => {
    pair = await makePair({ devices: [0, 0], b: { negotiation: { sameGpuIpc: false } } });
    const src = deviceWith(pair.a.driver, randomBytes(64 << 10, 6));
    const r = pair.b.ep.recv();
    await pair.a.ep.send(src);
    await r;
    await reach(pair.a.ep, 'BAD');
    await pair.close();
    pair = await makePair({ devices: [0, 0] });
    const src2 = deviceWith(pair.a.driver, randomBytes(64 << 10, 6));
    const r2 = pair.b.ep.recv();
    await pair.a.ep.send(src2);
    await r2;
    await reach(pair.a.ep, 'OK');
  });

  it('same GPU: a run of RGETs into buffers of that GPU is one launch of the copy kernel; every byte lands', async () => {
    pair = await makePair({ devices: [0, 0] });
    const { a, b } = pair;
    const first = b.ep.recv();
    await a.ep.send(deviceWith(a.driver, randomBytes(64 << 10, 30)));
    await first;
    await reach(a.ep, 'OK');
    const graph = vi.spyOn(b.driver, 'graphLaunch');
    const sizes = [64 << 10, (64 << 10) + 3, 200 << 10];
    const data = sizes.map((n, k) => randomBytes(n, 31 + k));
    const intos = sizes.map((n) => ({ ptr: b.driver.memAlloc(n), length: n }));
    const recvs = intos.map((into) => b.ep.recv({ into }));
    // One synchronous run of sends: the receiver finds their RGETs in one look at its ring.
    await Promise.all(data.map((d) => a.ep.send(deviceWith(a.driver, d))));
    const got = await Promise.all(recvs);
    expect(got.map((g) => g.path)).toEqual(['rget', 'rget', 'rget']);
    for (const [k, into] of intos.entries()) expect(sameBytes(readDevice(b.driver, into), data[k]!), `message ${k}`).toBe(true);
    expect(graph).toHaveBeenCalled();
    const kernel = b.ep.stats().copyKernel;
    expect(kernel.launches).toBe(graph.mock.calls.length);
    expect(kernel.copies).toBeGreaterThanOrEqual(2 * kernel.launches);
    expect(kernel.unavailable).toBeUndefined();
  });

  it('across GPUs the same run goes to the driver: no copy kernel', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const first = b.ep.recv();
    await a.ep.send(deviceWith(a.driver, randomBytes(64 << 10, 40)));
    await first;
    await reach(a.ep, 'OK');
    const graph = vi.spyOn(b.driver, 'graphLaunch');
    const batch = vi.spyOn(b.driver, 'memcpyBatchAsync');
    const data = [0, 1, 2].map((k) => randomBytes(64 << 10, 41 + k));
    const intos = data.map((d) => ({ ptr: b.driver.memAlloc(d.byteLength), length: d.byteLength }));
    const recvs = intos.map((into) => b.ep.recv({ into }));
    await Promise.all(data.map((d) => a.ep.send(deviceWith(a.driver, d))));
    await Promise.all(recvs);
    for (const [k, into] of intos.entries()) expect(sameBytes(readDevice(b.driver, into), data[k]!)).toBe(true);
    expect(graph).not.toHaveBeenCalled();
    expect(batch).toHaveBeenCalled();
    expect(b.ep.stats().copyKernel).toEqual({ launches: 0, copies: 0 });
  });

  it('sends after a device message that waits for the negotiation do not overtake it', async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const { a, b } = pair;
    const data = randomBytes(64 << 10, 8);
    const sends = [a.ep.send(deviceWith(a.driver, data), { tag: 3 }), a.ep.send(Buffer.from('after'), { tag: 3 })];
    expect(a.ep.stats().flow.waitingSends).toBe(2);
    const first = await b.ep.recv({ tag: 3 });
    const second = await b.ep.recv({ tag: 3 });
    await Promise.all(sends);
    expect([first.path, second.path]).toEqual(['rget', 'eager']);
    expect(sameBytes(readDevice(b.driver, first.data as DeviceBuffer), data)).toBe(true);
    expect(Buffer.from(second.data as Uint8Array).toString()).toBe('after');
  });

  it('small device messages travel eagerly and do start the negotiation', async () => {
    pair = await makePair();
    const data = randomBytes(100, 7);
    const r = pair.b.ep.recv();
    await pair.a.ep.send(deviceWith(pair.a.driver, data));
    const got = await r;
    expect(got.path).toBe('eager');
    expect(got.fromDevice).toBe(true);
    expect(sameBytes(readDevice(pair.b.driver, got.data as DeviceBuffer), data)).toBe(true);
    await reach(pair.a.ep, 'OK');
  });

  it('a device message too long for the receive buffer: both sides fail, nothing is copied', async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const src = deviceWith(pair.a.driver, randomBytes(64 << 10, 8));
    const into = new Uint8Array(1000);
    const r = pair.b.ep.recv({ into });
    const s = pair.a.ep.send(src);
    await expect(r).rejects.toBeInstanceOf(TruncationError);
    await expect(s).rejects.toBeInstanceOf(TruncationError);
    expect(into.every((x) => x === 0)).toBe(true);
  });
});

describe('invalidation', () => {
  it('the owner frees through the transport: the peer drops its mapping at once', async () => {
    pair = await makePair();
    const { a, b } = pair;
    const src = deviceWith(a.driver, randomBytes(64 << 10, 11));
    let r = b.ep.recv();
    await a.ep.send(src);
    await r;
    await reach(a.ep, 'OK');
    r = b.ep.recv({ into: new Uint8Array(64 << 10) });
    await a.ep.send(src);
    expect((await r).path).toBe('rget');
    expect(b.ep.stats().cache.openMappings).toBe(2); // the buffer, and the peer's negotiation probe
    a.transport.free(src.ptr);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const cache = b.ep.stats().cache;
    expect(cache.openMappings).toBe(1); // only the probe is left
    expect(cache.invalidations).toBe(1);
  });
});

describe('cancellation and loss', () => {
  it('an aborted receive that has not matched is withdrawn; the next one gets the message', async () => {
    pair = await makePair();
    const ac = new AbortController();
    const r1 = pair.b.ep.recv({ tag: 1, signal: ac.signal });
    ac.abort();
    await expect(r1).rejects.toThrow(/abort/i);
    const r2 = pair.b.ep.recv({ tag: 1 });
    await pair.a.ep.send(Buffer.from('x'), { tag: 1 });
    expect((await r2).length).toBe(1);
  });

  it('an aborted device send that the peer has not matched is cancelled; the peer never sees it', async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const src = deviceWith(pair.a.driver, randomBytes(64 << 10, 9));
    const ac = new AbortController();
    const s = pair.a.ep.send(src, { tag: 5, signal: ac.signal });
    await new Promise((r) => setTimeout(r, 20));
    ac.abort();
    await expect(s).rejects.toThrow(/abort/i);
    const r = pair.b.ep.recv({ tag: 5 });
    await pair.a.ep.send(Buffer.from('after'), { tag: 5 });
    expect(Buffer.from((await r).data as Uint8Array).toString()).toBe('after');
  });

  it('an orderly close keeps the negotiation outcome on both sides (OK stays OK)', async () => {
    pair = await makePair();
    const r = pair.b.ep.recv();
    await pair.a.ep.send(deviceWith(pair.a.driver, randomBytes(100, 12)));
    await r;
    await reach(pair.a.ep, 'OK');
    await reach(pair.b.ep, 'OK');
    pair.a.ep.close('done');
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(pair.b.ep.closed).toBe(true);
    expect(pair.a.ep.state).toBe('OK');
    expect(pair.b.ep.state).toBe('OK');
  });

  it('losing the peer rejects pending sends and receives with PeerLostError and closes mappings', async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const { a, b } = pair;
    const src = deviceWith(a.driver, randomBytes(64 << 10, 10));
    const pendingRecv = a.ep.recv({ tag: 77 });
    const pendingSend = a.ep.send(src, { tag: 78 });
    b.ep.close('test');
    await expect(pendingRecv).rejects.toBeInstanceOf(PeerLostError);
    await expect(pendingSend).rejects.toBeInstanceOf(PeerLostError);
    expect(a.ep.closed).toBe(true);
    expect(a.ep.stats().cache.openMappings).toBe(0);
    await expect(a.ep.send(Buffer.from('x'))).rejects.toBeInstanceOf(PeerLostError);
  });
});
