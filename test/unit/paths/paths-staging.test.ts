/**
 * The staging path on its own (src/paths/staging.ts): a sender side and a
 * receiver side, each a real EndpointLink over a recording channel on its
 * own simulated driver, with the test carrying frames between them (the
 * endpoint's routing, done by hand) — no endpoint, no matching.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { ProtocolError, SmcudaError } from '../../../src/errors.js';
import { StagingPath } from '../../../src/paths/staging.js';
import { FinStatus, type Frame, FrameType, type StageBeginFrame } from '../../../src/wire/frames.js';
import { patternBytes, sameBytes } from '../../helpers/bytes.js';
import { connectDescriptors, pathSide, pendingRecv, type PathSide, until } from '../../helpers/path-harness.js';

const KiB = 1024;
const sides: PathSide[] = [];
const paths: StagingPath[] = [];
function side(device: number): { s: PathSide; path: StagingPath } {
  const s = pathSide(device, { options: { staging: { chunkSize: 4 * KiB, slots: 2 } } });
  sides.push(s);
  const path = new StagingPath(s.link, s.link.parts.staging);
  paths.push(path);
  return { s, path };
}
afterEach(() => {
  for (const p of paths.splice(0)) p.close(new Error('test over'));
  for (const s of sides.splice(0)) s.close();
});

function deviceWith(s: PathSide, bytes: Uint8Array): DeviceBuffer {
  const ptr = s.driver.memAlloc(bytes.length);
  s.driver.memcpyHtoD(ptr, bytes);
  return { ptr, length: bytes.length };
}

/** Carries frames both ways (STAGE_ACK to the sender, STAGE_CHUNK to the receiver) until `done()`; returns every frame the receiver sent. */
async function pump(a: { s: PathSide; path: StagingPath }, b: { s: PathSide; path: StagingPath }, done: () => boolean): Promise<Frame[]> {
  const fromB: Frame[] = [];
  await until(() => {
    for (const f of a.s.take()) if (f.type === FrameType.STAGE_CHUNK) b.path.onFrame(f);
    for (const f of b.s.take()) {
      fromB.push(f);
      if (f.type === FrameType.STAGE_ACK) a.path.onFrame(f);
    }
    return done();
  }, 'the transfer');
  return fromB;
}

describe('StagingPath', () => {
  it('takes any device buffer (the paths before it took the rest)', () => {
    const { s, path } = side(0);
    expect(path.canSend(deviceWith(s, new Uint8Array(4)))).toBe(true);
    expect(path.canSend(new Uint8Array(4))).toBe(false);
    expect(path.inlineBytes(deviceWith(s, new Uint8Array(4)))).toBe(0); // its ring will reach the peer: nothing inline
  });

  it('moves a message of several chunks through a 2-slot ring, byte-exact, then FIN OK', async () => {
    const a = side(0);
    const b = side(1);
    connectDescriptors(a.s, b.s);
    const data = patternBytes(10 * KiB + 123, 9);
    const sent = a.path.send(deviceWith(a.s, data), 4, {});
    const begin = a.s.take()[0] as StageBeginFrame;
    expect(begin).toMatchObject({ type: FrameType.STAGE_BEGIN, tag: 4, seq: 1, length: data.length, chunkSize: 4 * KiB, slots: 2 });
    const r = pendingRecv(4);
    b.path.receive(r.recv, begin);
    let settled = false;
    void r.result.then(() => (settled = true));
    const fromB = await pump(a, b, () => settled);
    const got = await r.result;
    expect(got).toMatchObject({ tag: 4, length: data.length, path: 'staging', fromDevice: true });
    const back = new Uint8Array(data.length);
    b.s.driver.memcpyDtoH(back, (got.data as DeviceBuffer).ptr);
    expect(sameBytes(back, data)).toBe(true);
    expect(fromB.filter((f) => f.type === FrameType.STAGE_ACK)).toHaveLength(3); // 3 chunks, one grant each
    expect(fromB.at(-1)).toEqual({ type: FrameType.FIN, seq: 1, status: FinStatus.OK, message: '' });
    a.s.link.sends.settle(a.s.link.sends.get(1)!, FinStatus.OK, ''); // the endpoint's part
    await sent;
    expect(a.s.link.sent.staging).toEqual({ messages: 1, bytes: data.length });
    expect(b.s.link.received.staging).toEqual({ messages: 1, bytes: data.length });
  });

  it('into host bytes, and two queued messages take the ring one after the other', async () => {
    const a = side(0);
    const b = side(1);
    connectDescriptors(a.s, b.s);
    const d1 = patternBytes(5 * KiB, 1);
    const d2 = patternBytes(3 * KiB, 2);
    void a.path.send(deviceWith(a.s, d1), 1, {});
    void a.path.send(deviceWith(a.s, d2), 1, {});
    const [b1, b2] = a.s.take() as StageBeginFrame[];
    const r1 = pendingRecv(1, new Uint8Array(5 * KiB));
    const r2 = pendingRecv(1, new Uint8Array(4 * KiB));
    b.path.receive(r1.recv, b1!);
    b.path.receive(r2.recv, b2!);
    // Only the first message is granted slots until it is done.
    expect(b.s.frames.every((f) => f.type === FrameType.STAGE_ACK && f.seq === 1)).toBe(true);
    let n = 0;
    void r1.result.then(() => n++);
    void r2.result.then(() => n++);
    await pump(a, b, () => n === 2);
    expect(sameBytes((await r1.result).data as Uint8Array, d1)).toBe(true);
    expect(sameBytes((await r2.result).data as Uint8Array, d2)).toBe(true);
  });

  it('a bad source fails send() before anything is announced, and uses no seq', () => {
    const { s, path } = side(0);
    const buf = deviceWith(s, new Uint8Array(64));
    expect(() => path.send({ ptr: buf.ptr + 32n, length: 64 }, 1, {})).toThrow(RangeError);
    expect(s.frames).toEqual([]);
    expect(s.link.nextSeq()).toBe(1);
  });

  it('a chunk outside the message or ring, or for a message not being received, is a protocol error', () => {
    const a = side(0);
    const b = side(1);
    connectDescriptors(a.s, b.s);
    void a.path.send(deviceWith(a.s, patternBytes(8 * KiB, 3)), 1, {});
    const begin = a.s.take()[0] as StageBeginFrame;
    b.path.receive(pendingRecv(1).recv, begin);
    expect(() => b.path.onFrame({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 2, offset: 0, length: 4 * KiB })).toThrow(ProtocolError);
    expect(() => b.path.onFrame({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 0, offset: 6 * KiB, length: 4 * KiB })).toThrow(ProtocolError);
    expect(() => b.path.onFrame({ type: FrameType.STAGE_CHUNK, seq: 2, slot: 0, offset: 0, length: 1 })).toThrow(ProtocolError);
    expect(() => a.path.onFrame({ type: FrameType.STAGE_ACK, seq: 1, slot: 5 })).toThrow(ProtocolError);
  });

  it('FIN SENDER_FAILED fails the receive alone, without a FIN back; the ring goes to the next message', async () => {
    const a = side(0);
    const b = side(1);
    connectDescriptors(a.s, b.s);
    const d2 = patternBytes(2 * KiB, 4);
    void a.path.send(deviceWith(a.s, patternBytes(8 * KiB, 3)), 1, {});
    void a.path.send(deviceWith(a.s, d2), 1, {});
    const [b1, b2] = a.s.take() as StageBeginFrame[];
    const r1 = pendingRecv(1);
    const r2 = pendingRecv(1);
    b.path.receive(r1.recv, b1!);
    b.path.receive(r2.recv, b2!);
    b.s.take(); // the grants for message 1: the sender never answers them
    const err = new SmcudaError('SMCUDA_SENDER_FAILED', 'source freed');
    expect(b.path.senderFailed(1, err)).toBe(true);
    await expect(r1.result).rejects.toBe(err);
    expect(b.path.senderFailed(1, err)).toBe(false); // known no more
    expect(b.s.frames.some((f) => f.type === FrameType.FIN)).toBe(false);
    expect(b.s.frames.every((f) => f.type === FrameType.STAGE_ACK && f.seq === 2)).toBe(true);
    let done = false;
    void r2.result.then(() => (done = true));
    await pump(a, b, () => done);
    const back = new Uint8Array(d2.length);
    b.s.driver.memcpyDtoH(back, ((await r2.result).data as DeviceBuffer).ptr);
    expect(sameBytes(back, d2)).toBe(true);
  });

  it('close rejects the receives waiting for the ring', async () => {
    const a = side(0);
    const b = side(1);
    connectDescriptors(a.s, b.s);
    void a.path.send(deviceWith(a.s, patternBytes(8 * KiB, 3)), 1, {});
    void a.path.send(deviceWith(a.s, patternBytes(8 * KiB, 3)), 1, {});
    const [b1, b2] = a.s.take() as StageBeginFrame[];
    const r1 = pendingRecv(1);
    const r2 = pendingRecv(1);
    b.path.receive(r1.recv, b1!);
    b.path.receive(r2.recv, b2!);
    const reason = new Error('closing');
    b.s.link.closedWith = null;
    b.path.close(reason);
    await expect(r1.result).rejects.toBe(reason);
    await expect(r2.result).rejects.toBe(reason);
  });
});
