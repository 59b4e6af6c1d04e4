/**
 * Issue 23 findings 1 and 2 at the endpoint: an authenticated peer that
 * passes a ring segment the victim could be hurt by — an unsealed memfd it
 * could shrink under the victim's mapping (SIGBUS), one of another size than
 * announced, a second one — is refused before anything is mapped; that
 * endpoint fails alone with SMCUDA_BAD_SEGMENT, the transport's other
 * endpoints and the process carry on. Real memfds over a real SCM_RIGHTS
 * socketpair (the descriptor channel given to attach()).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAddon } from '../../../src/cuda/addon.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ProtocolError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { Feature, FrameType, SegmentKind } from '../../../src/wire/frames.js';
import { rawPeer, type RawPeer } from '../../helpers/raw-peer.js';

const addon = loadAddon();
let victim: SimulatedCudaDriver;
let t: Transport;
let n = 0;

beforeAll(async () => {
  victim = new SimulatedCudaDriver();
  t = await Transport.create({ driver: victim, id: 'victim', device: 0 });
});
afterAll(async () => {
  await t.close();
  victim.close();
});

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 2));
}

/** A bystander endpoint of the same transport still delivers. */
async function bystanderWorks(): Promise<void> {
  const b = await rawPeer(t, `bystander-${++n}`);
  const r = b.ep.recv({ tag: 9 });
  b.send({ type: FrameType.EAGER, tag: 9, seq: 1, fromDevice: false, data: Uint8Array.of(1, 2, 3) });
  expect([...((await r).data as Uint8Array)]).toEqual([1, 2, 3]);
  b.ep.close();
}

async function passSegment(p: RawPeer, kind: SegmentKind, fd: number, bytes: number): Promise<void> {
  await p.fd!.send(fd, encodeFrame({ type: FrameType.SEGMENT, kind, bytes }));
  addon.fdClose(fd); // the victim holds its own copy now
}

describe('a hostile peer passing ring segments', () => {
  it('an unsealed memfd as its control ring: refused unmapped, that endpoint fails with SMCUDA_BAD_SEGMENT, the rest carries on', async () => {
    const p = await rawPeer(t, `attacker-${++n}`, '', '', { descriptors: true, features: Feature.RING });
    await passSegment(p, SegmentKind.CONTROL_RING, addon.memfdCreate('smcuda-evil-ring', 256 + 4096), 256 + 4096);
    p.send({ type: FrameType.RING_OFFER, capacity: 4096 });
    await until(() => p.closeError() !== undefined);
    expect(p.closeError()).toBeInstanceOf(ProtocolError);
    expect(p.closeError()).toMatchObject({ code: 'SMCUDA_BAD_SEGMENT' });
    expect(p.closeError()!.message).toMatch(/seals/);
    await bystanderWorks();
  });

  it('a shrinkable (sealable, unsealed) staging ring: the staged receive is refused, that endpoint fails, the rest carries on', async () => {
    const p = await rawPeer(t, `attacker-${++n}`, '', '', { descriptors: true });
    const seg = addon.sealedCreate('smcuda-evil-stg', 8192, false);
    await passSegment(p, SegmentKind.STAGING_RING, seg.fd, 8192);
    const recv = p.ep.recv({ tag: 1, into: new Uint8Array(8192) }).then(
      () => undefined,
      (e: Error) => e,
    );
    p.send({ type: FrameType.STAGE_BEGIN, tag: 1, seq: 1, length: 8192, chunkSize: 4096, slots: 2 });
    const err = await recv;
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err).toMatchObject({ code: 'SMCUDA_BAD_SEGMENT' });
    await until(() => p.closeError() !== undefined);
    expect(p.closeError()).toMatchObject({ code: 'SMCUDA_BAD_SEGMENT' });
    expect(p.received.some((f) => f.type === FrameType.STAGE_ACK)).toBe(false);
    addon.shmClose(seg.buffer);
    await bystanderWorks();
  });

  it('a second staging ring: a protocol error, its descriptor closed at once', async () => {
    const p = await rawPeer(t, `attacker-${++n}`, '', '', { descriptors: true });
    const a = addon.sealedCreate('smcuda-stg-1', 8192);
    const b = addon.sealedCreate('smcuda-stg-2', 8192);
    await passSegment(p, SegmentKind.STAGING_RING, a.fd, 8192);
    await passSegment(p, SegmentKind.STAGING_RING, b.fd, 8192);
    await until(() => p.closeError() !== undefined);
    expect(p.closeError()).toMatchObject({ code: 'SMCUDA_BAD_SEGMENT' });
    addon.shmClose(a.buffer);
    addon.shmClose(b.buffer);
    await bystanderWorks();
  });

  it('an honest sealed control ring is used: frames to the peer go through it', async () => {
    const p = await rawPeer(t, `honest-${++n}`, '', '', { descriptors: true, features: Feature.RING });
    const seg = addon.sealedCreate('smcuda-ring', 256 + 4096);
    await passSegment(p, SegmentKind.CONTROL_RING, seg.fd, 256 + 4096);
    // An empty ring the peer reads: header written as RingReader does.
    const words = new Int32Array(seg.buffer, 0, 64);
    words[1] = 4096;
    Atomics.store(words, 0, 0x31524d53);
    p.send({ type: FrameType.RING_OFFER, capacity: 4096 });
    await until(() => p.ep.stats().control.ringOut);
    expect(p.ep.stats().control.ringOut).toBe(true);
    expect(p.closeError()).toBeUndefined();
    addon.shmClose(seg.buffer);
    p.ep.close();
  });
});
