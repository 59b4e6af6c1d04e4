/**
 * A message spanning more chunks than the receiver's `maxPeerDescriptors`
 * goes by staging at once (issue 47, item 8): before, when the descriptors
 * came before their offer (the two sockets keep no order), the refused ones
 * were forgotten, the offer waited for them, and its RGET stalled the
 * negotiation's checkTimeoutMs (about 5 s) before it fell back. Now an
 * offer of more chunks than the bound is lost when it comes, and a
 * descriptor refused ahead of its offer marks that offer lost.
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
const MAX = 4;
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

/** A receiver with the default checkTimeoutMs (the stall this guards against) and a small bound. */
function victim(): { r: PathSide; peer: FdChannel; receiver: RgetPath } {
  const r = pathSide(1, { ipcOk: true, fdMemory: true, options: { maxPeerDescriptors: MAX } });
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

async function pass(peer: FdChannel, offer: FdOfferFrame, index: number): Promise<void> {
  const fd = addon.memfdCreate('smcuda-chunk', 0);
  try {
    await peer.send(fd, encodeFrame({ type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: offer.bufferId, base: offer.base, index }));
  } finally {
    addon.fdClose(fd);
  }
}

function vmmOffer(r: PathSide, chunks: number): FdOfferFrame {
  const chunkList = Array.from({ length: chunks }, (_, k) => ({ offset: k * 4096, size: 4096 }));
  return {
    type: FrameType.FD_OFFER,
    kind: HandleKind.VMM,
    bufferId: 1n,
    deviceUuid: r.driver.deviceInfo(0).uuid,
    base: 0x7000_0000n,
    size: chunks * 4096,
    poolId: 0,
    exportData: new Uint8Array(64),
    chunks: chunkList,
  };
}

/** RGETs the offer's first chunk and returns its FIN and how long it took to come. */
async function rget(r: PathSide, receiver: RgetPath, offer: FdOfferFrame): Promise<{ fin: FinFrame; ms: number }> {
  const start = performance.now();
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
  return { fin: r.frames.find((f): f is FinFrame => f.type === FrameType.FIN)!, ms: performance.now() - start };
}

describe('a message of more chunks than maxPeerDescriptors', () => {
  it('descriptors before their offer: the offer is lost when it comes, and its RGET restages at once (not after checkTimeoutMs)', async () => {
    const { r, peer, receiver } = victim();
    const offer = vmmOffer(r, MAX + 2);
    for (let k = 0; k < MAX + 2; k++) await pass(peer, offer, k);
    await until(() => r.link.fd.stats.descriptorsReceived === MAX + 2, 'every descriptor');
    expect(r.link.fd.stats.descriptorsRefused).toBe(2);
    receiver.onFrame(offer);
    const { fin, ms } = await rget(r, receiver, offer);
    expect(fin).toMatchObject({ seq: 5, status: FinStatus.RESTAGE });
    expect(fin.message).toMatch(/maxPeerDescriptors/);
    expect(ms).toBeLessThan(1000);
    expect(r.link.resends.has(5)).toBe(true); // the receive waits for the same message by staging
  });

  it('the offer first, its RGET before any descriptor: restaged at once, and the descriptors that follow are closed', async () => {
    const { r, peer, receiver } = victim();
    const before = openFds();
    const offer = vmmOffer(r, MAX + 1);
    receiver.onFrame(offer);
    const { fin, ms } = await rget(r, receiver, offer);
    expect(fin).toMatchObject({ seq: 5, status: FinStatus.RESTAGE });
    expect(fin.message).toMatch(/more than maxPeerDescriptors \(4\)/);
    expect(ms).toBeLessThan(1000);
    for (let k = 0; k < MAX + 1; k++) await pass(peer, offer, k);
    await until(() => r.link.fd.stats.descriptorsReceived === MAX + 1, 'every descriptor');
    expect(openFds()).toBeLessThanOrEqual(before); // the offer is refused already: nothing of it is held
  });
});

describe('end to end, two transports on the simulated driver', () => {
  it("a VMM message of more chunks than the receiver's bound goes by staging without a stall, and its bytes arrive", async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { SimulatedCudaDriver } = await import('../../../src/cuda/sim-driver.js');
    const { Transport } = await import('../../../src/transport.js');
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fdlimit-'));
    const da = new SimulatedCudaDriver();
    const db = new SimulatedCudaDriver();
    const a = await Transport.create({ driver: da, id: 'sender', device: 0 });
    const b = await Transport.create({ driver: db, id: 'receiver', device: 1, maxPeerDescriptors: 2 });
    cleanup.push(() => {
      void a
        .close()
        .then(() => b.close())
        .finally(() => {
          da.close();
          db.close();
          rmSync(dir, { recursive: true, force: true });
        });
    });
    await a.listen(join(dir, 's.sock'));
    const accepted = new Promise<import('../../../src/endpoint.js').Endpoint>((r) => a.once('endpoint', r));
    const rep = await b.connect(join(dir, 's.sock'));
    const sep = await accepted;
    // Warm up: until the negotiation is OK and the descriptor channel is up.
    const warm = { ptr: da.memAlloc(64 << 10), length: 64 << 10 };
    for (let i = 0; sep.state !== 'OK' || !sep.stats().fd.channel; i++) {
      if (i > 200) throw new Error(`negotiation stayed ${sep.state}`);
      const got = rep.recv({ tag: 9 });
      await sep.send(warm, { tag: 9 });
      await got;
      await new Promise((r) => setTimeout(r, 2));
    }
    const size = 8 << 20;
    const mem = da.vmmAlloc(size, { chunks: 4 }); // four chunks of the sim's 2 MiB granularity: four descriptors, the bound is 2
    const data = new Uint8Array(size).map((_, i) => (i * 7 + 3) & 0xff);
    da.memcpyHtoD(mem.ptr, data);
    const start = performance.now();
    const got = rep.recv({ tag: 1 });
    await sep.send({ ptr: mem.ptr, length: size }, { tag: 1 });
    const r = await got;
    const ms = performance.now() - start;
    const bytes = new Uint8Array(size);
    db.memcpyDtoH(bytes, (r.data as { ptr: bigint }).ptr);
    expect(Buffer.compare(bytes, data)).toBe(0);
    expect(r.path).toBe('staging');
    expect(ms).toBeLessThan(1000); // before: about checkTimeoutMs (5 s) before it fell back
    expect(rep.stats().fd.restaged).toBe(1); // its offer was forgotten on both sides: the next message offers afresh
  }, 20_000);
});
