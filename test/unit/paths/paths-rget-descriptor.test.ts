/**
 * RGET of VMM and pool memory (the descriptor side, src/paths/fd-side.ts, of src/paths/rget.ts) on its own: two sides on
 * simulated drivers (separate "processes" to the simulator, real memfds),
 * joined by a real descriptor channel pair; the test carries the control
 * frames between them.
 */
import { readdirSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { CudaError, PeerLostError, ProtocolError } from '../../../src/errors.js';
import { RgetPath, type Resender } from '../../../src/paths/rget.js';
import { FinStatus, type FinFrame, type Frame, FrameType, HandleKind, type RgetFrame } from '../../../src/wire/frames.js';
import { patternBytes, sameBytes } from '../../helpers/bytes.js';
import { attachDescriptors, pathSide, pendingRecv, type PathSide, until } from '../../helpers/path-harness.js';
import { POOL_SEGMENT } from '../../../src/cuda/sim/fd-memory.js';

const reasons: Record<string, number> = {};
const opened: PathSide[] = [];
const paths: RgetPath[] = [];
afterEach(() => {
  for (const k of Object.keys(reasons)) delete reasons[k];
  for (const p of paths.splice(0)) p.close(new Error('test done'));
  for (const s of opened.splice(0)) s.close();
});

const openFds = () => readdirSync('/proc/self/fd').length;

const resent: number[] = [];
const resender: Resender = { resend: (seq) => void resent.push(seq), countReason: (why) => void (reasons[why] = (reasons[why] ?? 0) + 1) };

function pair(o: { timeoutMs?: number; agreed?: boolean } = {}) {
  const options = { negotiation: { checkTimeoutMs: o.timeoutMs ?? 5000 } };
  const s = pathSide(0, { ipcOk: true, fdMemory: o.agreed ?? true, options });
  const r = pathSide(1, { ipcOk: true, fdMemory: o.agreed ?? true, options });
  opened.push(s, r);
  const sender = new RgetPath(s.link, s.link.parts.rget, resender);
  const receiver = new RgetPath(r.link, r.link.parts.rget, resender);
  paths.push(sender, receiver);
  const [a, b] = FdChannel.pair();
  attachDescriptors(s, a, sender);
  attachDescriptors(r, b, receiver);
  return { s, r, sender, receiver };
}

/** Hands the sender's control frames to the receiver path: the controls to onFrame, RGET to a new receive. */
function deliver(frames: Frame[], receiver: RgetPath) {
  const results = [];
  for (const f of frames) {
    if (f.type === FrameType.RGET) {
      const p = pendingRecv(f.tag);
      receiver.receive(p.recv, f);
      results.push(p.result);
    } else receiver.onFrame(f);
  }
  return results;
}

function vmmBuffer(s: PathSide, size: number, chunks: number, seed: number): { buf: DeviceBuffer; data: Uint8Array } {
  const a = s.driver.vmmAlloc(size, { chunks });
  const data = patternBytes(a.size, seed);
  s.driver.memcpyHtoD(a.ptr, data);
  return { buf: { ptr: a.ptr, length: a.size }, data };
}

const fins = (side: PathSide) => side.frames.filter((f): f is FinFrame => f.type === FrameType.FIN);

describe('RGET of descriptor keys', () => {
  it('RGET takes VMM memory (which cuIpcGetMemHandle refuses) only once the descriptor channel is up; legacy memory always', () => {
    const s = pathSide(0, { ipcOk: true, fdMemory: true });
    opened.push(s);
    const rget = new RgetPath(s.link, s.link.parts.rget, resender);
    paths.push(rget);
    const { buf } = vmmBuffer(s, 1 << 20, 1, 1);
    const legacy = s.driver.memAlloc(64);
    expect(rget.canSend(buf)).toBe(false);
    expect(rget.canSend({ ptr: legacy, length: 64 })).toBe(true);
    const [a, b] = FdChannel.pair();
    attachDescriptors(s, a, rget);
    expect(rget.canSend(buf)).toBe(true);
    b.close();
  });

  it('the RGET of a VMM key names the offer: kind VMM, zero identity, the offered range', () => {
    const { s, sender } = pair();
    const { buf } = vmmBuffer(s, 2 << 20, 2, 3);
    void sender.send(buf, 2, {}).catch(() => {});
    const [offer, rget] = s.take() as [Frame, RgetFrame];
    expect(offer.type).toBe(FrameType.FD_OFFER);
    expect(rget).toMatchObject({
      type: FrameType.RGET,
      kind: HandleKind.VMM,
      identity: new Uint8Array(64),
      base: buf.ptr,
      allocSize: buf.length,
      offset: 0,
      length: buf.length,
    });
  });

  it('a message spanning chunks: one FD_OFFER and a descriptor per chunk, once; the bytes arrive; the receiver keeps no descriptor', async () => {
    const { s, r, sender, receiver } = pair();
    const { buf, data } = vmmBuffer(s, 3 << 20, 3, 2);
    const fdsBefore = openFds();
    const msg = { ptr: buf.ptr + BigInt(1 << 19), length: buf.length - (1 << 19) };
    const sent = sender.send(msg, 4, {});
    const frames = s.take();
    expect(frames.map((f) => f.type)).toEqual([FrameType.FD_OFFER, FrameType.RGET]);
    const [result] = deliver(frames, receiver);
    const got = await result!;
    expect(got.path).toBe('rget-fd');
    const out = new Uint8Array(msg.length);
    r.driver.memcpyDtoH(out, (got.data as DeviceBuffer).ptr);
    expect(sameBytes(out, data.subarray(1 << 19))).toBe(true);
    r.driver.memFree((got.data as DeviceBuffer).ptr);
    r.link.fins.flush();
    const finFrames = r.take();
    expect(finFrames.some((f) => (f.type === FrameType.FIN && f.seq === 1) || (f.type === FrameType.FINS && f.seqs.includes(1)))).toBe(true);
    s.link.sends.settle(s.link.sends.get(1)!, FinStatus.OK, '');
    await sent;
    expect(s.link.fd.stats.descriptorsSent).toBe(3);
    expect(r.link.fd.stats.descriptorsReceived).toBe(3);
    // again from the same memory: RGET alone, a cache hit on the receiver
    void sender.send(msg, 4, {});
    const again = s.take();
    expect(again.map((f) => f.type)).toEqual([FrameType.RGET]);
    await deliver(again, receiver)[0];
    expect(s.link.fd.stats.offers).toBe(1);
    expect(r.link.fd.stats.imports).toBe(1);
    // every exported and received descriptor was closed once passed / imported; the import goes with the pool
    await until(() => openFds() <= fdsBefore, 'every descriptor passed or imported to be closed');
    receiver.close(new Error('done'));
    r.link.pool.close();
    expect(r.driver.fdMemoryResources()).toMatchObject({ reservations: 0, mappings: 0 });
  });

  it('the peer dies between FD_OFFER and its descriptors: the receive rejects with the close reason, nothing stays open', async () => {
    const { r, receiver } = pair();
    const fdsBefore = openFds();
    const [result] = deliver(offerWithoutDescriptors(r), receiver);
    await new Promise((res) => setTimeout(res, 10));
    const lost = new PeerLostError('lost peer');
    receiver.close(lost);
    await expect(result!).rejects.toBe(lost);
    expect(openFds()).toBeLessThanOrEqual(fdsBefore);
  });

  it('descriptors that do not come in time: FIN RESTAGE (the message goes by staging) and FD_RELEASE', async () => {
    const { r, receiver } = pair({ timeoutMs: 30 });
    const frames = offerWithoutDescriptors(r);
    deliver(frames, receiver);
    await until(() => fins(r).length > 0, 'the FIN');
    expect(fins(r)[0]).toMatchObject({ seq: 7, status: FinStatus.RESTAGE });
    expect(r.frames.find((f) => f.type === FrameType.FD_RELEASE)).toMatchObject({ kind: HandleKind.VMM, id: 99n, base: 0x7000_0000n });
    expect(r.link.resends.has(7)).toBe(true);
  });

  it('an RGET that names other memory than offered (size) restages; an injected import failure restages', async () => {
    const { s, r, sender, receiver } = pair();
    const { buf } = vmmBuffer(s, 1 << 20, 1, 4);
    void sender.send(buf, 1, {}).catch(() => {});
    const [offer, rget] = s.take() as [Frame, RgetFrame];
    deliver([offer, { ...rget, allocSize: rget.allocSize * 2, length: rget.length }], receiver);
    await until(() => fins(r).length === 1, 'the first FIN');
    expect(fins(r)[0]).toMatchObject({ status: FinStatus.RESTAGE });
    expect(fins(r)[0]!.message).toMatch(/offer has/);
    // the sender hears FD_RELEASE and offers again; the import fails this time (injected)
    for (const f of r.take()) if (f.type === FrameType.FD_RELEASE) sender.onFrame(f);
    expect(s.link.fd.stats.releasesReceived).toBe(1);
    r.driver.injectFdFaults({ importFailures: ['CUDA_ERROR_INVALID_VALUE'] });
    void sender.send(buf, 1, {}).catch(() => {});
    const second = s.take();
    expect(second.map((f) => f.type)).toEqual([FrameType.FD_OFFER, FrameType.RGET]);
    deliver(second, receiver);
    await until(() => fins(r).length === 1, 'the second FIN');
    expect(fins(r)[0]).toMatchObject({ status: FinStatus.RESTAGE });
    expect(fins(r)[0]!.message).toMatch(/CUDA_ERROR_INVALID_VALUE/);
    expect(r.link.fd.stats.restaged).toBe(2);
    expect(r.driver.fdMemoryResources()).toMatchObject({ reservations: 0, mappings: 0 });
  });

  it('pool memory: FD_POOL and its descriptor once, then FD_OFFERs; a failed import releases the pool too, and the sender sends it again', async () => {
    const { s, r, sender, receiver } = pair();
    const stream = s.driver.streamCreate();
    const pool = s.driver.memPoolCreate();
    const ptr = s.driver.memAllocFromPoolAsync(1 << 20, pool, stream);
    s.driver.streamSynchronize(stream);
    const data = patternBytes(1 << 20, 8);
    s.driver.memcpyHtoD(ptr, data);
    const buf = { ptr, length: 1 << 20 };
    void sender.send(buf, 1, {}).catch(() => {});
    const first = s.take();
    expect(first.map((f) => f.type)).toEqual([FrameType.FD_POOL, FrameType.FD_OFFER, FrameType.RGET]);
    const got = await deliver(first, receiver)[0]!;
    expect(got.path).toBe('rget-fd');
    const out = new Uint8Array(1 << 20);
    r.driver.memcpyDtoH(out, (got.data as DeviceBuffer).ptr);
    expect(sameBytes(out, data)).toBe(true);
    r.driver.memFree((got.data as DeviceBuffer).ptr);
    // the receiver's import goes (evicted); the next message from the pool cannot be imported (injected failure)
    r.link.pool.invalidate(first[1]!.type === FrameType.FD_OFFER ? first[1]!.deviceUuid : '', ptr);
    r.driver.injectFdFaults({ importFailures: ['CUDA_ERROR_INVALID_VALUE'] });
    void sender.send(buf, 1, {}).catch(() => {});
    r.take();
    deliver(s.take(), receiver);
    await until(() => fins(r).some((f) => f.status === FinStatus.RESTAGE), 'FIN RESTAGE');
    const releases = r.frames.filter((f) => f.type === FrameType.FD_RELEASE);
    expect(releases).toEqual([
      { type: FrameType.FD_RELEASE, kind: HandleKind.POOL, id: 0n + BigInt((first[1] as { bufferId: bigint }).bufferId), base: ptr },
      { type: FrameType.FD_RELEASE, kind: HandleKind.POOL, id: 1n, base: 0n },
    ]);
    for (const f of releases) sender.onFrame(f);
    void sender.send(buf, 1, {}).catch(() => {});
    expect(s.take().map((f) => f.type)).toEqual([FrameType.FD_POOL, FrameType.FD_OFFER, FrameType.RGET]);
    expect(s.link.fd.stats.pools).toBe(2);
  });

  it('pool memory sent from offsets past the first segment: exported by the allocation start, one offer, every slice by RGET', async () => {
    // cuMemGetAddressRange of pool memory names the segment holding the
    // pointer (the simulator models it), and cuMemPoolExportPointer takes only
    // the allocation's start: exporting the segment's base was refused, and
    // every such message went by staging (bench --suite memory, issue 24 item 2).
    const { s, r, sender, receiver } = pair();
    const stream = s.driver.streamCreate();
    const pool = s.driver.memPoolCreate();
    const size = 3 * POOL_SEGMENT;
    const ptr = s.driver.memAllocFromPoolAsync(size, pool, stream);
    s.driver.streamSynchronize(stream);
    expect(s.driver.memGetAddressRange(ptr + BigInt(POOL_SEGMENT + 1))).toEqual({ base: ptr + BigInt(POOL_SEGMENT), size: POOL_SEGMENT });
    const data = patternBytes(size, 9);
    s.driver.memcpyHtoD(ptr, data);
    const slice = 64 << 10;
    const offsets = [POOL_SEGMENT + 4096, 2 * POOL_SEGMENT + 100, 0, size - slice];
    const frames: Frame[] = [];
    for (const off of offsets) {
      void sender.send({ ptr: ptr + BigInt(off), length: slice }, 1, {}).catch(() => {});
      frames.push(...s.take());
    }
    expect(Object.keys(reasons)).toEqual([]);
    expect(frames.map((f) => f.type)).toEqual([FrameType.FD_POOL, FrameType.FD_OFFER, FrameType.RGET, FrameType.RGET, FrameType.RGET, FrameType.RGET]);
    const offer = frames[1] as Extract<Frame, { type: FrameType.FD_OFFER }>;
    expect([offer.base, offer.size]).toEqual([ptr, size]);
    expect((frames.filter((f) => f.type === FrameType.RGET) as RgetFrame[]).map((f) => f.offset)).toEqual(offsets);
    const got = await Promise.all(deliver(frames, receiver));
    offsets.forEach((off, k) => {
      const out = new Uint8Array(slice);
      r.driver.memcpyDtoH(out, (got[k]!.data as DeviceBuffer).ptr);
      expect(sameBytes(out, data.subarray(off, off + slice))).toBe(true);
      expect(got[k]!.path).toBe('rget-fd');
    });
  });

  it('memory the driver will not export (cuMemPoolExportPointer refuses it) goes by staging under its own seq, the reason counted', () => {
    const { s, sender } = pair();
    const stream = s.driver.streamCreate();
    const pool = s.driver.memPoolCreate();
    const ptr = s.driver.memAllocFromPoolAsync(1 << 20, pool, stream);
    s.driver.streamSynchronize(stream);
    const refuse = vi.spyOn(s.driver, 'memPoolExportPointer').mockImplementation(() => {
      throw new CudaError('cuMemPoolExportPointer', 'CUDA_ERROR_INVALID_VALUE', 1, 'injected');
    });
    const before = resent.length;
    void sender.send({ ptr, length: 1 << 20 }, 1, {}).catch(() => {});
    refuse.mockRestore();
    expect(resent.length).toBe(before + 1); // handed to staging, not rejected
    expect(s.link.sends.get(resent.at(-1)!)?.path).toBe('staging');
    expect(s.take().map((f) => f.type)).not.toContain(FrameType.RGET);
    expect(Object.keys(reasons).some((k) => k.startsWith('pool memory, export failed'))).toBe(true);
  });

  it('FD frames from a peer that did not announce FD_MEMORY are a protocol error', () => {
    const { r, receiver } = pair({ agreed: false });
    const [offer, rget] = offerWithoutDescriptors(r);
    expect(() => receiver.onFrame(offer!)).toThrow(ProtocolError);
    expect(() => receiver.receive(pendingRecv(1).recv, rget as RgetFrame)).toThrow(ProtocolError);
  });

  it('staging says why: a peer without FD_MEMORY, memory of no shareable kind', () => {
    const { s } = pair({ agreed: false });
    const path = new RgetPath(s.link, s.link.parts.rget, resender);
    paths.push(path);
    const { buf } = vmmBuffer(s, 1 << 20, 1, 5);
    expect(path.canSend(buf)).toBe(false);
    expect(path.stagingReason(buf)).toBe('vmm memory, peer without FD_MEMORY');
  });
});

/** An FD_OFFER (one chunk, bufferId 99, base 0x70000000) whose descriptor never comes, and an RGET naming it (seq 7). */
function offerWithoutDescriptors(r: PathSide): Frame[] {
  const deviceUuid = r.driver.deviceInfo(0).uuid;
  return [
    {
      type: FrameType.FD_OFFER,
      kind: HandleKind.VMM,
      bufferId: 99n,
      deviceUuid,
      base: 0x7000_0000n,
      size: 1 << 20,
      poolId: 0,
      exportData: new Uint8Array(64),
      chunks: [{ offset: 0, size: 1 << 20 }],
    },
    {
      type: FrameType.RGET,
      tag: 1,
      seq: 7,
      kind: HandleKind.VMM,
      identity: new Uint8Array(64),
      base: 0x7000_0000n,
      allocSize: 1 << 20,
      offset: 0,
      length: 4096,
      bufferId: 99n,
      deviceUuid,
      event: null,
    },
  ];
}
