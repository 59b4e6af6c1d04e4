/**
 * Descriptors a peer can make an endpoint hold are bounded by
 * `maxPeerDescriptors` (issue 23, finding 6: 3,000 pool descriptors and 3,072
 * offer descriptors were held for the endpoint's lifetime). The test is the
 * hostile peer: it writes FD_POOL / FD_OFFER frames and passes real memfds on
 * a descriptor channel, and never sends the RGET that would import them.
 * One past the bound is closed at once and counts as lost: the message of its
 * offer goes by staging (FIN RESTAGE), so an honest peer loses nothing.
 */
import { readdirSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { RgetPath, type Resender } from '../../../src/paths/rget.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { type FdOfferFrame, FinStatus, type FinFrame, FrameType, HandleKind } from '../../../src/wire/frames.js';
import { attachDescriptors, pathSide, type PathSide, pendingRecv, until } from '../../helpers/path-harness.js';

const addon = loadAddon();
const openFds = () => readdirSync('/proc/self/fd').length;
const MAX = 8;

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

function victim(): { r: PathSide; peer: FdChannel; receiver: RgetPath } {
  const r = pathSide(1, { ipcOk: true, fdMemory: true, options: { maxPeerDescriptors: MAX, negotiation: { checkTimeoutMs: 60_000 } } });
  const receiver = new RgetPath(r.link, r.link.parts.rget, { resend: () => undefined, countReason: () => undefined } satisfies Resender);
  const [peer, mine] = FdChannel.pair();
  attachDescriptors(r, mine, receiver);
  cleanup.push(() => {
    receiver.close(new Error('test done'));
    peer.close();
    r.close();
  });
  return { r, peer, receiver };
}

/** Passes a fresh memfd with `meta` (our copy is closed once passed). */
async function pass(peer: FdChannel, meta: Parameters<typeof encodeFrame>[0]): Promise<void> {
  const fd = addon.memfdCreate('smcuda-hoard', 0);
  try {
    await peer.send(fd, encodeFrame(meta));
  } finally {
    addon.fdClose(fd);
  }
}

function vmmOffer(r: PathSide, id: number, chunks: number): FdOfferFrame {
  const base = BigInt(0x7000_0000 + id * 0x100_0000);
  const chunkList = Array.from({ length: chunks }, (_, k) => ({ offset: k * 4096, size: 4096 }));
  return {
    type: FrameType.FD_OFFER,
    kind: HandleKind.VMM,
    bufferId: BigInt(id),
    deviceUuid: r.driver.deviceInfo(0).uuid,
    base,
    size: chunks * 4096,
    poolId: 0,
    exportData: new Uint8Array(64),
    chunks: chunkList,
  };
}

describe('maxPeerDescriptors', () => {
  it('pools announced and their descriptors passed, never used: the endpoint holds at most the bound; the rest are closed at once', async () => {
    const { r, peer, receiver } = victim();
    const before = openFds();
    const deviceUuid = r.driver.deviceInfo(0).uuid;
    const N = 5 * MAX;
    for (let id = 1; id <= N; id++) {
      receiver.onFrame({ type: FrameType.FD_POOL, poolId: id, deviceUuid });
      await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.POOL, id: BigInt(id), base: 0n, index: 0 });
    }
    await until(() => r.link.fd.stats.descriptorsReceived === N, 'every descriptor');
    expect(r.link.fd.stats.descriptorsRefused).toBe(N - MAX);
    expect(openFds() - before).toBeLessThanOrEqual(MAX);
    expect(r.link.closed).toBe(false);
  });

  it('VMM offers whose descriptors are never imported count the same, and so do descriptors that answer no offer', async () => {
    const { r, peer, receiver } = victim();
    const before = openFds();
    for (let i = 1; i <= MAX / 2; i++) {
      const offer = vmmOffer(r, i, 1);
      receiver.onFrame(offer);
      await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: offer.bufferId, base: offer.base, index: 0 });
    }
    for (let i = 0; i < 4 * MAX; i++)
      await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: 1000n + BigInt(i), base: 0x9000_0000n, index: 0 });
    await until(() => r.link.fd.stats.descriptorsReceived === MAX / 2 + 4 * MAX, 'every descriptor');
    expect(r.link.fd.stats.descriptorsRefused).toBe(4 * MAX - MAX / 2);
    expect(openFds() - before).toBeLessThanOrEqual(MAX);
  });

  it('an offer of more chunks than the bound (an honest large message): its RGET goes by staging (FIN RESTAGE), and nothing of it stays open', async () => {
    const { r, peer, receiver } = victim();
    const before = openFds();
    const offer = vmmOffer(r, 1, MAX + 4);
    receiver.onFrame(offer);
    for (let k = 0; k < MAX + 4; k++) await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: offer.bufferId, base: offer.base, index: k });
    const p = pendingRecv(1);
    receiver.receive(p.recv, {
      type: FrameType.RGET,
      tag: 1,
      seq: 5,
      kind: HandleKind.VMM,
      identity: new Uint8Array(64),
      base: offer.base,
      allocSize: offer.size,
      offset: 0,
      length: 4096,
      bufferId: offer.bufferId,
      deviceUuid: offer.deviceUuid,
      event: null,
    });
    await until(() => r.frames.some((f) => f.type === FrameType.FIN), 'the FIN');
    const fin = r.frames.find((f): f is FinFrame => f.type === FrameType.FIN)!;
    expect(fin).toMatchObject({ seq: 5, status: FinStatus.RESTAGE });
    expect(fin.message).toMatch(/maxPeerDescriptors/);
    expect(r.link.resends.has(5)).toBe(true); // the receive waits for the same message by staging
    expect(openFds()).toBeLessThanOrEqual(before);
  });

  it('the bound is an option: at least 1, ConfigError otherwise', () => {
    expect(() => pathSide(1, { options: { maxPeerDescriptors: 0 } })).toThrow(/maxPeerDescriptors must be an integer ≥ 1/);
  });
});
