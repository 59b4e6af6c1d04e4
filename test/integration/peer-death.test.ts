/**
 * Peer death with real processes (docs/reliability.md, "Peer death"): a peer
 * killed with SIGKILL in the middle of large staged and RGET transfers. The
 * survivor's pending sends and receives on that endpoint reject with
 * PeerLostError within 2 s, every mapping it opened from that peer is
 * closed, a new process can take the dead one's place under the same peer
 * id, and the survivor's other endpoints keep working.
 *
 * The kernel closes a dead process's sockets at once, so the survivor learns
 * of the death from its channel; no keepalive is involved here.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../src/buffers.js';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import { sweepSimSegments } from '../../src/cuda/sim/sweep.js';
import type { Endpoint } from '../../src/endpoint.js';
import { PeerLostError } from '../../src/errors.js';
import { Transport } from '../../src/transport.js';
import { WorkerFailedError } from '../helpers/child.js';
import { checksum, FaultPeer, type FaultPeerResults, fill, rejection, within } from '../helpers/fault-peer.js';
import { reach } from '../helpers/transport-pair.js';

const BOUND_MS = 2000;
const MiB = 1 << 20;

let dir: string;
let driver: SimulatedCudaDriver;
let t: Transport;
const peers: FaultPeer[] = [];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'smcuda-death-'));
  driver = new SimulatedCudaDriver();
  t = await Transport.create({ driver, id: 'survivor', device: 0, staging: { chunkSize: 64 << 10, slots: 2 } });
  await t.listen(join(dir, 's.sock'));
});

afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.kill()));
  sweepSimSegments(); // the killed peers' simulated device memory (no exit hook ran)
  await t.close();
  driver.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a peer process and resolves with it and the survivor's endpoint to it. */
async function connectPeer(id: string, o: Omit<Parameters<typeof FaultPeer.start>[1], 'id'> = {}): Promise<{ peer: FaultPeer; ep: Endpoint }> {
  const accepted = new Promise<Endpoint>((resolve) => {
    const on = (ep: Endpoint) => {
      if (ep.peerId !== id) return;
      t.off('endpoint', on);
      resolve(ep);
    };
    t.on('endpoint', on);
  });
  const peer = await FaultPeer.start(join(dir, 's.sock'), { id, ...o });
  peers.push(peer);
  return { peer, ep: await accepted };
}

function device(bytes: Uint8Array): DeviceBuffer {
  const ptr = driver.memAlloc(bytes.byteLength);
  driver.memcpyHtoD(ptr, bytes);
  return { ptr, length: bytes.byteLength };
}

function readBack(r: { data: Uint8Array | DeviceBuffer; length: number }): Uint8Array {
  if (r.data instanceof Uint8Array) return r.data;
  const out = new Uint8Array(r.length);
  driver.memcpyDtoH(out, r.data.ptr);
  driver.memFree(r.data.ptr);
  return out;
}

/** The survivor's own staging segments still in /dev/shm. */
function myStagingSegments(): string[] {
  return readdirSync('/dev/shm').filter((n) => n.startsWith(`smcuda-stg-${process.pid}-`));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A round trip both ways proves an endpoint works. */
async function roundTrip(peer: FaultPeer, ep: Endpoint, seed: number): Promise<void> {
  const bytes = fill(256 << 10, seed);
  const theirs = peer.call<FaultPeerResults['recv']>('recv', { tag: 50, count: 1 });
  await ep.send(device(bytes), { tag: 50 });
  expect(((await theirs).received as { sum: number }[])[0]!.sum).toBe(checksum(bytes));
  const mine = ep.recv({ tag: 51 });
  await peer.call('send', { tag: 51, size: 256 << 10, count: 1, seed });
  expect(checksum(readBack(await mine))).toBe(checksum(fill(256 << 10, seed)));
}

describe('a peer killed with SIGKILL', () => {
  it('in the middle of staged transfers both ways: every pending send and receive rejects with PeerLostError', async () => {
    // IPC off: every device message is staged; the peer's copies are slow, so
    // both transfers are mid-flight when it dies.
    const { peer, ep } = await connectPeer('victim', {
      transport: { negotiation: { ipc: false }, staging: { chunkSize: 64 << 10, slots: 2 } },
      sim: { faults: { copyDelayMs: 20 } },
    });
    const incoming = ep.recv({ tag: 1 }); // the peer's 8 MiB: 128 slow chunks
    const never = ep.recv({ tag: 9 }); // posted, nothing will come
    const issued = peer.call('send', { tag: 1, size: 8 * MiB, count: 1, seed: 1 });
    const theirRecv = peer.call('recv', { tag: 2, count: 1 }); // ends with the peer
    const outgoing = ep.send(device(fill(8 * MiB, 2)), { tag: 2 }); // matched by the peer, slow
    const unmatched = ep.send(device(fill(1 * MiB, 3)), { tag: 3 }); // the peer never posts tag 3
    await issued;
    await sleep(200);
    // Handlers first: the channel may report the death before the exit event.
    const errors = Object.entries({ incoming, never, outgoing, unmatched }).map(([what, p]) => [what, within(rejection(p), BOUND_MS, what)] as const);
    await peer.kill();
    await expect(theirRecv).rejects.toBeInstanceOf(WorkerFailedError);
    for (const [what, p] of errors) {
      const err = await p;
      expect(err, what).toBeInstanceOf(PeerLostError);
      expect(err.code).toBe('SMCUDA_PEER_LOST');
    }
    expect(ep.closed).toBe(true);
    expect(ep.stats().cache.openMappings).toBe(0);
    expect(t.endpoint('victim')).toBeUndefined();
    expect(myStagingSegments()).toEqual([]);
    await expect(ep.send(new Uint8Array(4))).rejects.toBeInstanceOf(PeerLostError);
  });

  const rgetCase = (waitOnPeerEvent: boolean) => async () => {
    const { peer: bystander, ep: epB } = await connectPeer('bystander');
    const { peer, ep } = await connectPeer('victim');
    // Negotiate IPC: the first device message starts it (and waits for it).
    const warm = peer.call<FaultPeerResults['recv']>('recv', { tag: 0, count: 1 });
    await ep.send(device(fill(64 << 10, 9)), { tag: 0 });
    await warm;
    await reach(ep, 'OK');

    // Survivor → peer by RGET; the peer never receives it: the send waits for a FIN.
    const outgoing = ep.send(device(fill(4 * MiB, 4)), { tag: 4 });
    // Peer → survivor by RGET, on a stream whose work never ends: the
    // survivor maps the peer's memory and its copy waits on the peer's event.
    const incoming = ep.recv({ tag: 5 });
    const more = ep.recv({ tag: 5 });
    if (!waitOnPeerEvent) driver.inject({ copyDelayMs: 400 }); // our own copies are slow instead
    await peer.call('send', { tag: 5, size: 4 * MiB, count: 2, seed: 5, stream: waitOnPeerEvent });
    for (let i = 0; i < 200 && ep.stats().cache.openMappings === 0; i++) await sleep(10);
    expect(ep.stats().cache.openMappings).toBeGreaterThan(0);

    const sent = within(rejection(outgoing), BOUND_MS, 'outgoing');
    // A receive whose copy had finished when the peer died may resolve (with
    // intact bytes); any other rejects with PeerLostError. None may hang.
    const received = [incoming, more].map((p, i) =>
      within(
        p.then(
          (r) => ({ bytes: readBack(r) }),
          (err: Error) => ({ err }),
        ),
        BOUND_MS,
        `incoming #${i}`,
      ),
    );
    await peer.kill();
    const settled = await Promise.allSettled([sent, ...received]); // every hang reported, none left unhandled
    for (const o of settled) if (o.status === 'rejected') throw o.reason;
    expect(await sent).toBeInstanceOf(PeerLostError);
    for (const [i, p] of received.entries()) {
      const r = await p;
      if ('err' in r) expect(r.err).toBeInstanceOf(PeerLostError);
      else expect(checksum(r.bytes)).toBe(checksum(fill(4 * MiB, 5 + i)));
    }
    expect(ep.closed).toBe(true);
    expect(ep.stats().cache.openMappings).toBe(0);
    // The survivor's other endpoint never noticed.
    expect(epB.closed).toBe(false);
    driver.inject({ copyDelayMs: 0 });
    await roundTrip(bystander, epB, 77);
  };

  it('in the middle of RGETs both ways: pending operations reject, every mapping from it is closed, other endpoints keep working', rgetCase(false));

  // A receive whose copy waits on the dead peer's IPC event can never
  // complete on the GPU: Endpoint.shutdown settles it and releases its mapping.
  it('… even where the copy waits on an IPC event of the dead peer', rgetCase(true));

  it('a new process takes its place under the same peer id, and works', async () => {
    const { peer, ep } = await connectPeer('phoenix');
    await roundTrip(peer, ep, 1);
    const pending = within(rejection(ep.recv({ tag: 60 })), BOUND_MS, 'recv');
    await peer.kill();
    expect(await pending).toBeInstanceOf(PeerLostError);
    const { peer: again, ep: ep2 } = await connectPeer('phoenix');
    expect(ep2).not.toBe(ep);
    expect(ep2.peerPid).toBe(again.child.pid);
    expect(t.endpoint('phoenix')).toBe(ep2);
    await roundTrip(again, ep2, 2);
  });

  it("while this side was only receiving: the endpoint's 'close' says the peer was lost (PeerLostError)", async () => {
    const { peer, ep } = await connectPeer('quiet');
    const closed = new Promise<Error | undefined>((resolve) => ep.once('close', resolve));
    const pending = within(rejection(ep.recv({ tag: 61 })), BOUND_MS, 'recv');
    await peer.kill();
    expect(await pending).toBeInstanceOf(PeerLostError);
    const err = await within(closed, BOUND_MS, "'close'");
    expect(err).toBeInstanceOf(PeerLostError);
    expect((err as PeerLostError).code).toBe('SMCUDA_PEER_LOST');
  });
});
