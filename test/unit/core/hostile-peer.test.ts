/**
 * A hostile peer (docs/reliability.md, "Hostile requests"): a fake peer with
 * its own simulated driver allocates real device memory and crafts RGET,
 * FIN, STAGE_BEGIN and STAGE_CHUNK frames by hand. Each bad request is
 * refused (FIN REFUSED/FAILED, or the endpoint closed with ProtocolError),
 * and the receiver copies nothing: the receive buffer stays as it was.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ProtocolError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { fieldOffset } from '../../../src/wire/schema.js';
import { FinStatus, type FinFrame, FrameType, HandleKind, type RgetFrame, SegmentKind } from '../../../src/wire/frames.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { rawPeer, type RawPeer } from '../../helpers/raw-peer.js';

let victim: SimulatedCudaDriver;
let attacker: SimulatedCudaDriver;
let t: Transport;
let n = 0;
const SENTINEL = 0xa5;

beforeAll(async () => {
  victim = new SimulatedCudaDriver();
  attacker = new SimulatedCudaDriver();
  attacker.init();
  attacker.setDevice(1);
  t = await Transport.create({ driver: victim, id: 'victim', device: 0 });
});
afterAll(async () => {
  await t.close();
  victim.close();
  attacker.close();
});

async function peer(): Promise<RawPeer> {
  return rawPeer(t, `attacker-${++n}`, attacker.deviceInfo(1).uuid);
}

/** A receive buffer in the victim's device memory, filled with SENTINEL. */
function guardedBuffer(size: number) {
  const ptr = victim.memAlloc(size);
  victim.memsetD8(ptr, SENTINEL, size);
  return {
    buf: { ptr, length: size },
    untouched(): boolean {
      const out = new Uint8Array(size);
      victim.memcpyDtoH(out, ptr);
      return out.every((b) => b === SENTINEL);
    },
  };
}

/** An allocation of the attacker's, full of 0x42, and an honest RGET for it. */
function exported(size: number): RgetFrame {
  const ptr = attacker.memAlloc(size);
  attacker.memsetD8(ptr, 0x42, size);
  const attrs = attacker.pointerAttributes(ptr);
  return {
    type: FrameType.RGET,
    tag: 1,
    seq: 1,
    kind: HandleKind.LEGACY,
    identity: attacker.ipcGetMemHandle(ptr),
    base: ptr,
    allocSize: size,
    offset: 0,
    length: size,
    bufferId: attrs.bufferId,
    deviceUuid: attacker.deviceInfo(1).uuid,
    event: null,
  };
}

function fins(p: RawPeer): FinFrame[] {
  return p.received.filter((f): f is FinFrame => f.type === FrameType.FIN);
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 2));
}

async function outcome<T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> {
  return p.then(
    (value) => ({ value }),
    (error: Error) => ({ error }),
  );
}

describe('hostile RGETs', () => {
  it('offset + length beyond the declared allocation: does not even decode; endpoint closed with ProtocolError', async () => {
    const p = await peer();
    const g = guardedBuffer(8192);
    const recv = outcome(p.ep.recv({ tag: 1, into: g.buf }));
    const bytes = encodeFrame({ ...exported(4096), length: 4096 });
    new DataView(bytes.buffer, bytes.byteOffset).setBigUint64(fieldOffset(FrameType.RGET, 'offset'), 1n, true); // offset 1: 1 + 4096 > 4096
    p.send(bytes);
    await p.settle();
    expect((await recv).error).toBeInstanceOf(Error);
    expect(p.closeError()).toBeInstanceOf(ProtocolError);
    expect(p.closeError()!.message).toMatch(/exceeds 'allocSize'/);
    expect(g.untouched()).toBe(true);
  });

  it('a lying allocSize (bigger than the real allocation): FIN REFUSED, nothing copied', async () => {
    const p = await peer();
    const g = guardedBuffer(1 << 20);
    const recv = outcome(p.ep.recv({ tag: 1, into: g.buf }));
    p.send({ ...exported(4096), allocSize: 1 << 20, length: 1 << 20 });
    await p.settle();
    await new Promise((r) => setTimeout(r, 20));
    expect(fins(p)).toEqual([expect.objectContaining({ seq: 1, status: FinStatus.REFUSED })]);
    expect(fins(p)[0]!.message).toMatch(/maps 4096 bytes, not the 1048576/);
    expect((await recv).error).toBeInstanceOf(ProtocolError);
    expect(g.untouched()).toBe(true);
    expect(p.ep.stats().cache.openMappings).toBe(0);
  });

  it("the handle of another (smaller) allocation under a big allocation's base and size: FIN REFUSED, nothing copied", async () => {
    const p = await peer();
    const small = exported(4096);
    const big = exported(1 << 20);
    const g = guardedBuffer(1 << 20);
    const recv = outcome(p.ep.recv({ tag: 1, into: g.buf }));
    p.send({ ...big, identity: small.identity });
    await p.settle();
    await new Promise((r) => setTimeout(r, 20));
    expect(fins(p)[0]).toMatchObject({ seq: 1, status: FinStatus.REFUSED });
    expect((await recv).error).toBeInstanceOf(ProtocolError);
    expect(g.untouched()).toBe(true);
  });

  it('a garbage handle: the message is re-sent by staging (FIN RESTAGE), nothing copied meanwhile', async () => {
    const p = await peer();
    const g = guardedBuffer(4096);
    void outcome(p.ep.recv({ tag: 1, into: g.buf }));
    p.send({ ...exported(4096), identity: new Uint8Array(64).fill(7) });
    await p.settle();
    await new Promise((r) => setTimeout(r, 20));
    expect(fins(p)[0]).toMatchObject({ seq: 1, status: FinStatus.RESTAGE });
    expect(g.untouched()).toBe(true);
  });

  it('a wrong buffer id reads at most the allocation the peer handed over, within the message: nothing past it', async () => {
    const p = await peer();
    const g = guardedBuffer(8192);
    const recv = outcome(p.ep.recv({ tag: 1, into: g.buf }));
    p.send({ ...exported(4096), bufferId: 0xdeadn });
    await p.settle();
    await new Promise((r) => setTimeout(r, 20));
    const r = await recv;
    const out = new Uint8Array(8192);
    victim.memcpyDtoH(out, g.buf.ptr);
    // either refused (nothing copied) or the peer's own 4096 bytes; never more
    expect(out.subarray(4096).every((b) => b === SENTINEL)).toBe(true);
    if (r.value) expect(out.subarray(0, 4096).every((b) => b === 0x42)).toBe(true);
  });
});

describe('frames for messages that do not exist', () => {
  it('a FIN for a message never sent closes the endpoint with ProtocolError', async () => {
    const p = await peer();
    p.send({ type: FrameType.FIN, seq: 99, status: FinStatus.OK, message: '' });
    await p.settle();
    expect(p.ep.closed).toBe(true);
    expect(p.closeError()).toBeInstanceOf(ProtocolError);
    expect((p.closeError() as ProtocolError).code).toBe('SMCUDA_BAD_FIN');
  });

  it('a STAGE_CHUNK for a message not being received closes the endpoint with ProtocolError', async () => {
    const p = await peer();
    p.send({ type: FrameType.STAGE_CHUNK, seq: 5, slot: 0, offset: 0, length: 16 });
    await p.settle();
    expect(p.closeError()).toBeInstanceOf(ProtocolError);
  });

  it('a STAGE_BEGIN from a peer without a descriptor channel (no ring can have come): refused, nothing copied', async () => {
    const p = await peer();
    const g = guardedBuffer(65536);
    const recv = outcome(p.ep.recv({ tag: 1, into: g.buf }));
    p.send({ type: FrameType.STAGE_BEGIN, tag: 1, seq: 1, length: 65536, chunkSize: 4096, slots: 2 });
    await p.settle();
    expect(fins(p)[0]).toMatchObject({ seq: 1 });
    expect([FinStatus.REFUSED, FinStatus.FAILED]).toContain(fins(p)[0]!.status);
    expect((await recv).error).toBeInstanceOf(Error);
    expect(g.untouched()).toBe(true);
    expect(p.received.some((f) => f.type === FrameType.STAGE_ACK)).toBe(false);
  });

  it('a STAGE_BEGIN whose ring segment is smaller than slots × chunkSize: FIN REFUSED, no slot granted, nothing copied, the endpoint fails alone', async () => {
    const p = await rawPeer(t, `attacker-${++n}`, attacker.deviceInfo(1).uuid, '', { descriptors: true });
    const addon = loadAddon();
    const seg = addon.sealedCreate('smcuda-test-small', 4096);
    try {
      new Uint8Array(seg.buffer).fill(0x42);
      await p.fd!.send(seg.fd, encodeFrame({ type: FrameType.SEGMENT, kind: SegmentKind.STAGING_RING, bytes: 4096 }));
      const g = guardedBuffer(65536);
      const recv = outcome(p.ep.recv({ tag: 1, into: g.buf }));
      p.send({ type: FrameType.STAGE_BEGIN, tag: 1, seq: 1, length: 65536, chunkSize: 32768, slots: 2 });
      await until(() => fins(p).length > 0);
      // a chunk sent anyway, as if granted
      p.send({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 0, offset: 0, length: 32768 });
      await p.settle();
      expect(fins(p)[0]).toMatchObject({ seq: 1, status: FinStatus.REFUSED });
      expect(p.received.some((f) => f.type === FrameType.STAGE_ACK)).toBe(false);
      expect((await recv).error).toBeInstanceOf(ProtocolError);
      expect(g.untouched()).toBe(true);
      expect(p.closeError()).toMatchObject({ code: 'SMCUDA_BAD_SEGMENT' });
    } finally {
      addon.fdClose(seg.fd);
      addon.shmClose(seg.buffer);
    }
  });

  it('an EAGER frame handed over as a ring view is copied before the view is reused, even while it waits unmatched', async () => {
    const p = await peer();
    const bytes = encodeFrame({ type: FrameType.EAGER, tag: 7, seq: 1, fromDevice: false, data: Uint8Array.from([1, 2, 3, 4]) });
    // What ShmChannel does with a ring entry: the frame is a view, valid during the call only.
    const channel = (p.ep as unknown as { channel: { emit(e: 'frame', b: Uint8Array, transient: boolean): void } }).channel;
    channel.emit('frame', bytes, true);
    bytes.fill(0xff); // the ring reuses the entry's space
    const r = await p.ep.recv({ tag: 7 }); // matched from the unexpected queue, after the reuse
    expect([...(r.data as Uint8Array)]).toEqual([1, 2, 3, 4]);
  });
});
