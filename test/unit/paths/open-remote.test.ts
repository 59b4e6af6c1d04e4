/**
 * Opening a RemoteKey (src/paths/open-remote.ts), the one switch over the
 * kinds of remote memory, on its own: keys of each kind as an RGET names
 * them, opened on another simulated "process" through its handle pool and
 * (descriptor kinds) the table of what the peer offered.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { ProtocolError } from '../../../src/errors.js';
import { FdSide } from '../../../src/paths/fd-side.js';
import { lookupRemote, openRemote, type RemoteMemory } from '../../../src/paths/open-remote.js';
import { type RemoteKey, remoteKind } from '../../../src/paths/remote-key.js';
import { RgetPath, type Resender } from '../../../src/paths/rget.js';
import { type Frame, FrameType, type RgetFrame } from '../../../src/wire/frames.js';
import { patternBytes, sameBytes } from '../../helpers/bytes.js';
import { attachDescriptors, pathSide, type PathSide } from '../../helpers/path-harness.js';

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

const resender: Resender = { resend: () => undefined, countReason: () => undefined };

/** A sender (an RGET path, to make offers) and a receiver's RemoteMemory, joined by a descriptor channel. */
function setup(o: { fdMemory?: boolean } = {}) {
  const fdMemory = o.fdMemory ?? true;
  const s = pathSide(0, { ipcOk: true, fdMemory });
  const r = pathSide(1, { ipcOk: true, fdMemory, options: { negotiation: { checkTimeoutMs: 2000 } } });
  const sender = new RgetPath(s.link, s.link.parts.rget, resender);
  const fd = new FdSide(r.link, r.link.parts.rget);
  const [a, b] = FdChannel.pair();
  attachDescriptors(s, a, sender);
  attachDescriptors(r, b, fd);
  cleanup.push(() => {
    sender.close(new Error('test done'));
    fd.close(new Error('test done'));
    r.close();
    s.close();
  });
  const memory: RemoteMemory = { pool: r.link.pool, offers: fd.table };
  return { s, r, sender, fd, memory };
}

/** Sends `buf` and returns the key its RGET names (the offer, if any, handed to the receiver's side). */
function keyOf(s: PathSide, sender: RgetPath, fd: FdSide, buf: DeviceBuffer): { key: RemoteKey; frame: RgetFrame } {
  void sender.send(buf, 1, {}).catch(() => {});
  let frame: RgetFrame | undefined;
  for (const f of s.take() as Frame[]) {
    if (f.type === FrameType.RGET) frame = f;
    else fd.onFrame(f);
  }
  const f = frame!;
  return { frame: f, key: { kind: remoteKind(f.kind), identity: f.identity, base: f.base, size: f.allocSize, bufferId: f.bufferId, device: f.deviceUuid } };
}

function read(r: PathSide, ptr: bigint, n: number): Uint8Array {
  const out = new Uint8Array(n);
  r.driver.memcpyDtoH(out, ptr);
  return out;
}

describe('openRemote: one switch over the kinds', () => {
  it("legacy: opened by its IPC handle, then a pool hit; the bytes are the sender's", async () => {
    const { s, r, sender, fd, memory } = setup();
    const data = patternBytes(1 << 16, 1);
    const ptr = s.driver.memAlloc(data.length);
    s.driver.memcpyHtoD(ptr, data);
    const { key } = keyOf(s, sender, fd, { ptr, length: data.length });
    expect(key.kind).toBe('legacy');
    expect(lookupRemote(memory, key)).toBeUndefined();
    const m = await openRemote(memory, key);
    expect(m.kind).toBe('legacy-ipc');
    expect(sameBytes(read(r, m.ptr, data.length), data)).toBe(true);
    const hit = lookupRemote(memory, key)!;
    expect(hit.ptr).toBe(m.ptr);
    hit.release();
    m.release();
    expect(r.link.pool.stats()).toMatchObject({ opens: 1, hits: 1 });
  });

  it('vmm-fd: waits for the offer and its descriptors, imports, then hits; a key bigger than the offer is refused', async () => {
    const { s, r, sender, fd, memory } = setup();
    const a = s.driver.vmmAlloc(2 << 20, { chunks: 2 });
    const data = patternBytes(a.size, 2);
    s.driver.memcpyHtoD(a.ptr, data);
    const { key, frame } = keyOf(s, sender, fd, { ptr: a.ptr, length: a.size });
    expect(key).toMatchObject({ kind: 'vmm-fd', base: a.ptr, size: a.size, identity: new Uint8Array(64) });
    const m = await openRemote(memory, key); // the descriptors arrive on the channel meanwhile
    expect(m.kind).toBe('vmm');
    expect(sameBytes(read(r, m.ptr + BigInt(frame.offset), a.size), data)).toBe(true);
    const hit = lookupRemote(memory, key)!;
    expect(hit.ptr).toBe(m.ptr);
    hit.release();
    m.release();
    await expect(openRemote(memory, { ...key, size: key.size * 2 })).rejects.toMatchObject({ code: 'SMCUDA_BAD_RGET' });
    expect(lookupRemote(memory, { ...key, size: key.size * 2 })).toBeUndefined();
  });

  it('pool-fd: the identity is the export data; a key with other export data than its offer is refused', async () => {
    const { s, r, sender, fd, memory } = setup();
    const stream = s.driver.streamCreate();
    const pool = s.driver.memPoolCreate();
    const ptr = s.driver.memAllocFromPoolAsync(1 << 20, pool, stream);
    s.driver.streamSynchronize(stream);
    const data = patternBytes(1 << 20, 3);
    s.driver.memcpyHtoD(ptr, data);
    const { key } = keyOf(s, sender, fd, { ptr, length: 1 << 20 });
    expect(key.kind).toBe('pool-fd');
    expect(key.identity.some((b) => b !== 0)).toBe(true);
    const forged = { ...key, identity: key.identity.map((b) => b ^ 0xff) };
    await expect(openRemote(memory, forged)).rejects.toMatchObject({ code: 'SMCUDA_BAD_RGET' });
    const m = await openRemote(memory, key);
    expect(m.kind).toBe('pool');
    expect(sameBytes(read(r, m.ptr, 1 << 20), data)).toBe(true);
    expect(lookupRemote(memory, forged)).toBeUndefined();
    m.release();
  });

  it('a descriptor key where the peer has no FD_MEMORY is a protocol error', async () => {
    const r = pathSide(1, { ipcOk: true });
    cleanup.push(() => r.close());
    const key: RemoteKey = { kind: 'vmm-fd', identity: new Uint8Array(64), base: 0x7000_0000n, size: 4096, bufferId: 1n, device: r.driver.deviceInfo(0).uuid };
    const memory: RemoteMemory = { pool: r.link.pool, offers: undefined };
    expect(lookupRemote(memory, key)).toBeUndefined();
    await expect(openRemote(memory, key)).rejects.toBeInstanceOf(ProtocolError);
  });
});
