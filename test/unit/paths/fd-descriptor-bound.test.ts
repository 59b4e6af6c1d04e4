/**
 * Descriptors a peer can make an endpoint hold are bounded by
 * `maxPeerDescriptors` (issue 23, finding 6: 3,000 pool descriptors and 3,072
 * offer descriptors were held for the endpoint's lifetime). The test is the
 * hostile peer: it writes FD_POOL / FD_OFFER frames and passes real memfds on
 * a descriptor channel, and never sends the RGET_FD that would import them.
 */
import { readdirSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { PeerLimitError } from '../../../src/errors.js';
import { FdRgetPath } from '../../../src/paths/fd-rget.js';
import type { Resender } from '../../../src/paths/rget.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { FrameType, HandleKind } from '../../../src/wire/frames.js';
import { pathSide, type PathSide, until } from '../../helpers/path-harness.js';

const addon = loadAddon();
const openFds = () => readdirSync('/proc/self/fd').length;
const MAX = 8;

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

function victim(): { r: PathSide; peer: FdChannel; failures: Error[]; receiver: FdRgetPath } {
  const r = pathSide(1, { ipcOk: true, fdMemory: true, options: { maxPeerDescriptors: MAX, negotiation: { checkTimeoutMs: 60_000 } } });
  const failures: Error[] = [];
  r.link.onFail = (err) => failures.push(err);
  const receiver = new FdRgetPath(r.link, { resend: () => undefined } satisfies Resender);
  const [peer, mine] = FdChannel.pair();
  r.link.attachFd(mine);
  cleanup.push(() => {
    receiver.close(new Error('test done'));
    peer.close();
    r.close();
  });
  return { r, peer, failures, receiver };
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

describe('maxPeerDescriptors', () => {
  it('pools announced and their descriptors passed, never used: past the bound the endpoint fails with PeerLimitError and holds no more', async () => {
    const { r, peer, failures, receiver } = victim();
    const before = openFds();
    const deviceUuid = r.driver.deviceInfo(0).uuid;
    for (let id = 1; id <= 3 * MAX && failures.length === 0; id++) {
      receiver.onFrame({ type: FrameType.FD_POOL, poolId: id, deviceUuid });
      await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.POOL, id: BigInt(id), base: 0n, index: 0 });
      await until(() => r.link.fdStats.descriptorsReceived >= id, 'the descriptor');
    }
    expect(failures).toHaveLength(1);
    expect(failures[0]).toBeInstanceOf(PeerLimitError);
    expect((failures[0] as PeerLimitError).code).toBe('SMCUDA_PEER_FD_LIMIT');
    expect(r.link.fdStats.descriptorsReceived).toBe(MAX + 1);
    expect(openFds() - before).toBeLessThanOrEqual(MAX); // the one over the bound was closed at once
  });

  it('VMM offers whose descriptors are never imported count the same; so do descriptors that answer no offer', async () => {
    const { r, peer, failures, receiver } = victim();
    const deviceUuid = r.driver.deviceInfo(0).uuid;
    const half = MAX / 2;
    for (let i = 0; i < half; i++) {
      const base = BigInt(0x7000_0000 + i * 0x10_0000);
      receiver.onFrame({ type: FrameType.FD_OFFER, kind: HandleKind.VMM, bufferId: BigInt(i + 1), deviceUuid, base, size: 1 << 20, poolId: 0, exportData: new Uint8Array(64), chunks: [{ offset: 0, size: 1 << 20 }] });
      await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: BigInt(i + 1), base, index: 0 });
    }
    for (let i = 0; i < 3 * MAX && failures.length === 0; i++) {
      await pass(peer, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: 1000n + BigInt(i), base: 0x9000_0000n, index: 0 });
      await until(() => r.link.fdStats.descriptorsReceived >= half + i + 1, 'the descriptor');
    }
    expect(failures[0]).toBeInstanceOf(PeerLimitError);
    expect(r.link.fdStats.descriptorsReceived).toBe(MAX + 1);
  });

  it('the bound is an option: at least 1, ConfigError otherwise', () => {
    expect(() => pathSide(1, { options: { maxPeerDescriptors: 0 } })).toThrow(/maxPeerDescriptors must be an integer ≥ 1/);
  });
});
