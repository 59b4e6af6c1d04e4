/**
 * A registration's memory as a RemoteKey (src/persistent/remote-memory.ts):
 * REG_OFFER carries the key an RGET would (legacy handle, pool export data,
 * the offered range), and the peer opens it through paths/open-remote.ts's
 * one switch. Two simulated "processes" on the path harness, joined by a
 * descriptor channel.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { describeForPeer, openRegistered, type RemoteMemoryContext } from '../../../src/persistent/remote-memory.js';
import { RgetPath, type Resender } from '../../../src/paths/rget.js';
import { type Frame, FrameType, HandleKind, type RegOfferFrame } from '../../../src/wire/frames.js';
import { patternBytes, sameBytes } from '../../helpers/bytes.js';
import { attachDescriptors, pathSide, type PathSide } from '../../helpers/path-harness.js';

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

const resender: Resender = { resend: () => undefined, countReason: () => undefined };

function setup(): { s: PathSide; r: PathSide; mine: RemoteMemoryContext; theirs: RemoteMemoryContext } {
  const s = pathSide(0, { ipcOk: true, fdMemory: true });
  const r = pathSide(1, { ipcOk: true, fdMemory: true, options: { negotiation: { checkTimeoutMs: 2000 } } });
  const sender = new RgetPath(s.link, s.link.parts.rget, resender);
  const receiver = new RgetPath(r.link, r.link.parts.rget, resender);
  const [a, b] = FdChannel.pair();
  attachDescriptors(s, a, sender);
  attachDescriptors(r, b, receiver);
  cleanup.push(() => {
    sender.close(new Error('test done'));
    receiver.close(new Error('test done'));
    r.close();
    s.close();
  });
  return { s, r, mine: { link: s.link, rget: sender }, theirs: { link: r.link, rget: receiver } };
}

/** REG_OFFER for `ptr`, the descriptor frames sent before it handed to the peer's RGET path. */
function offer(s: PathSide, mine: RemoteMemoryContext, theirs: RemoteMemoryContext, ptr: bigint, length: number): RegOfferFrame {
  const f: RegOfferFrame = { type: FrameType.REG_OFFER, regId: 1, ...describeForPeer(mine, { ptr, length }) };
  for (const x of s.take() as Frame[]) theirs.rget!.onFrame(x);
  return f;
}

function read(r: PathSide, ptr: bigint, n: number): Uint8Array {
  const out = new Uint8Array(n);
  r.driver.memcpyDtoH(out, ptr);
  return out;
}

describe('registered memory opens through the one remote-key switch', () => {
  it('legacy: REG_OFFER carries the IPC handle; the peer maps the allocation', async () => {
    const { s, r, mine, theirs } = setup();
    const data = patternBytes(1 << 16, 4);
    const ptr = s.driver.memAlloc(data.length);
    s.driver.memcpyHtoD(ptr, data);
    const f = offer(s, mine, theirs, ptr, data.length);
    expect(f.kind).toBe(HandleKind.LEGACY);
    const m = await openRegistered(theirs, f);
    expect(sameBytes(read(r, m.ptr + BigInt(f.offset), data.length), data)).toBe(true);
    m.release();
  });

  it("pool: the key's identity is the export data, as an RGET's; a key that names other memory than its offer is SMCUDA_BAD_REGISTRATION", async () => {
    const { s, r, mine, theirs } = setup();
    const stream = s.driver.streamCreate();
    const pool = s.driver.memPoolCreate();
    const ptr = s.driver.memAllocFromPoolAsync(1 << 20, pool, stream);
    s.driver.streamSynchronize(stream);
    const data = patternBytes(1 << 20, 5);
    s.driver.memcpyHtoD(ptr, data);
    const f = offer(s, mine, theirs, ptr, data.length);
    expect(f.kind).toBe(HandleKind.POOL);
    expect(f.handle.some((b) => b !== 0)).toBe(true);
    await expect(openRegistered(theirs, { ...f, allocSize: f.allocSize * 2 })).rejects.toMatchObject({ code: 'SMCUDA_BAD_REGISTRATION' });
    const m = await openRegistered(theirs, f);
    expect(m.kind).toBe('pool');
    expect(sameBytes(read(r, m.ptr + BigInt(f.offset), data.length), data)).toBe(true);
    m.release();
  });

  it('a descriptor kind where this endpoint has no RGET path is SMCUDA_REGISTER_KIND', async () => {
    const { r } = setup();
    const f: RegOfferFrame = {
      type: FrameType.REG_OFFER,
      regId: 1,
      kind: HandleKind.VMM,
      deviceUuid: '',
      base: 0x7000_0000n,
      allocSize: 4096,
      offset: 0,
      length: 4096,
      bufferId: 1n,
      handle: new Uint8Array(64),
    };
    await expect(openRegistered({ link: r.link, rget: undefined }, f)).rejects.toMatchObject({ code: 'SMCUDA_REGISTER_KIND' });
  });
});
