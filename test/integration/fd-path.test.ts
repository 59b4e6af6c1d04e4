/**
 * RGET by descriptor between two real processes on the simulated driver
 * (real memfds, SCM_RIGHTS over the transport's descriptor channel): this
 * process sends from VMM, chunked VMM and pool memory; test/fixtures/fd-path-peer.mjs
 * receives. Bytes verified, the path is 'rget-fd' (RGET of a descriptor key), a descriptor goes once per
 * allocation per peer, and the receiver's descriptors and imports are back
 * to their start once the endpoint closes. A peer without FD_MEMORY gets
 * staging; an injected import failure and EMFILE make that message restage
 * (or fail) alone.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../src/buffers.js';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport } from '../../src/transport.js';
import { checksum, patternBytes } from '../helpers/bytes.js';
import { spawnPeer, type WorkerClient } from '../helpers/child.js';

interface Side {
  driver: SimulatedCudaDriver;
  t: Transport;
  peer: WorkerClient;
  ep: Endpoint;
  dir: string;
}

interface FdsReply {
  open: number;
  resources: Record<string, number>;
}

let side: Side | undefined;

afterEach(async () => {
  if (!side) return;
  const s = side;
  side = undefined;
  await s.peer.exit().catch(() => s.peer.kill());
  await s.t.close();
  s.driver.close();
  rmSync(s.dir, { recursive: true, force: true });
});

async function start(env: NodeJS.ProcessEnv = {}): Promise<Side> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-fdpath-'));
  const path = join(dir, 'rank0.sock');
  const driver = new SimulatedCudaDriver();
  const t = await Transport.create({ driver, id: 'sender', device: 0 });
  await t.listen(path);
  const endpoint = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
  const peer = await spawnPeer('fd-path-peer.mjs', { args: [path], env: { ...process.env, ...env } });
  const ep = await endpoint;
  side = { driver, t, peer, ep, dir };
  return side;
}

/**
 * Sends until the negotiation is OK (the first device message starts it and
 * waits for it, then goes by RGET). From a legacy allocation of its own, so
 * the memory under test is first offered to the peer by the test itself.
 */
async function warmUp(s: Side): Promise<void> {
  const buf: DeviceBuffer = { ptr: s.driver.memAlloc(64 << 10), length: 64 << 10 };
  for (let i = 0; s.ep.state !== 'OK'; i++) {
    if (i > 200) throw new Error(`negotiation stayed ${s.ep.state}`);
    const got = s.peer.call('recv', { tag: 9 });
    await s.ep.send(buf, { tag: 9 });
    await got;
  }
  // the descriptor channel comes up right after the handshake
  for (let i = 0; !s.ep.stats().fd.channel; i++) {
    if (i > 500) throw new Error('the descriptor channel never came up');
    await new Promise((r) => setTimeout(r, 2));
  }
}

function fill(driver: SimulatedCudaDriver, ptr: bigint, bytes: Uint8Array): void {
  driver.memcpyHtoD(ptr, bytes);
}

type Kind = 'vmm' | 'vmm-chunked' | 'pool';

function allocate(s: Side, kind: Kind, size: number): { buf: DeviceBuffer; free: () => void } {
  const d = s.driver;
  if (kind === 'pool') {
    const stream = d.streamCreate();
    const pool = d.memPoolCreate();
    const ptr = d.memAllocFromPoolAsync(size, pool, stream);
    d.streamSynchronize(stream);
    return {
      buf: { ptr, length: size },
      free: () => {
        s.t.invalidate(ptr);
        d.memFreeAsync(ptr, stream);
        d.streamSynchronize(stream);
        d.memPoolDestroy(pool);
        d.streamDestroy(stream);
      },
    };
  }
  const a = d.vmmAlloc(size, { chunks: kind === 'vmm-chunked' ? 3 : 1 });
  return {
    buf: { ptr: a.ptr, length: size },
    free: () => {
      s.t.invalidate(a.ptr);
      d.vmmFree(a.ptr);
    },
  };
}

describe('RGET of descriptor keys between two processes (simulated driver)', () => {
  it.each<Kind>(['vmm', 'vmm-chunked', 'pool'])(
    '%s: bytes verified, RGET of a descriptor key used, one descriptor per allocation, the receiver back to its start after close',
    async (kind) => {
      const s = await start();
      const before = await s.peer.call<FdsReply>('fds');
      const size = 3 << 20;
      const mem = allocate(s, kind, size);
      const data = patternBytes(size, 7);
      fill(s.driver, mem.buf.ptr, data);
      await warmUp(s);
      // a message that spans chunks (vmm-chunked: 3 chunks of 1 MiB; the message covers bytes 0.5 MiB .. 3 MiB)
      const msg: DeviceBuffer = kind === 'vmm-chunked' ? { ptr: mem.buf.ptr + BigInt(1 << 19), length: size - (1 << 19) } : mem.buf;
      const expected = kind === 'vmm-chunked' ? data.subarray(1 << 19) : data;
      const one = async () => {
        const got = s.peer.call<{ length: number; path: string; sum: number }>('recv', { tag: 1 });
        await s.ep.send(msg, { tag: 1 });
        expect(await got).toEqual({ length: expected.length, path: 'rget-fd', sum: checksum(expected) });
      };
      await one();
      const first = s.ep.stats();
      expect(first.fd.offers).toBeGreaterThanOrEqual(1);
      expect(first.fd.descriptorsSent).toBeGreaterThanOrEqual(kind === 'vmm-chunked' ? 2 : 1); // vmm: one per chunk the message touches
      for (let i = 0; i < 3; i++) await one();
      const st = s.ep.stats();
      expect(st.sent['rget-fd'].messages).toBeGreaterThanOrEqual(4);
      // once per allocation per peer: the later messages from the same memory sent no offer, no descriptor
      expect(st.fd.offers).toBe(first.fd.offers);
      expect(st.fd.descriptorsSent).toBe(first.fd.descriptorsSent);
      expect(st.fd.pools).toBe(kind === 'pool' ? 1 : 0);
      if (kind !== 'vmm-chunked') expect(st.fd.offers).toBe(1);
      const peerStats = (await s.peer.call<{ stats: { fd: Record<string, number>; cache: { byKind: Record<string, { openMappings: number }> } } }>('stats'))
        .stats;
      expect(peerStats.fd.descriptorsReceived).toBe(st.fd.descriptorsSent);
      expect(peerStats.fd.restaged).toBe(0);
      // VMM imports stay in the handle pool; a pool pointer goes with the message that used it (HandlePool.releaseEntry says why), one import a message
      expect(peerStats.cache.byKind[kind === 'pool' ? 'pool' : 'vmm']!.openMappings).toBe(kind === 'pool' ? 0 : 1);
      if (kind === 'pool') expect(peerStats.cache.byKind.pool).toMatchObject({ opens: 4, closes: 4 });
      // the receiver closed every descriptor once imported: only the import holds the memory
      const during = await s.peer.call<FdsReply>('fds');
      expect(during.open).toBeLessThanOrEqual(before.open + 2); // + the descriptor channel's socket (and its listener side none)
      await s.peer.call('close');
      await new Promise((r) => setTimeout(r, 50));
      const after = await s.peer.call<FdsReply>('fds');
      expect(after.resources).toEqual(before.resources);
      expect(after.open).toBeLessThanOrEqual(before.open);
      mem.free();
    },
  );

  it('the descriptor socket lives beside the control socket while listening, and goes with close', async () => {
    const s = await start();
    const fdPath = join(s.dir, 'rank0.sock.fd');
    expect(existsSync(fdPath)).toBe(true);
    await s.peer.exit();
    await s.t.close();
    expect(existsSync(fdPath)).toBe(false);
    s.peer = { exit: async () => {}, kill: async () => {} } as unknown as WorkerClient; // already gone
  });

  it('a peer without FD_MEMORY gets such memory by staging, never an error, and stats say why', async () => {
    const s = await start({ SMCUDA_TEST_NO_FD: '1' });
    const size = 1 << 20;
    const mem = allocate(s, 'vmm', size);
    const data = patternBytes(size, 3);
    fill(s.driver, mem.buf.ptr, data);
    await warmUp(s).catch(() => {}); // the channel never comes up: that is the point
    expect(s.ep.state).toBe('OK');
    const got = s.peer.call<{ path: string; sum: number }>('recv', { tag: 1 });
    await s.ep.send(mem.buf, { tag: 1 });
    expect(await got).toMatchObject({ path: 'staging', sum: checksum(data) });
    const st = s.ep.stats();
    expect(st.fd.agreed).toBe(false);
    expect(st.stagingReasons['vmm memory, peer without FD_MEMORY']).toBeGreaterThanOrEqual(1);
    mem.free();
  });

  it('an injected import failure restages that message alone; the next offers again and goes by RGET (descriptor key)', async () => {
    const s = await start();
    const size = 1 << 20;
    const mem = allocate(s, 'vmm', size);
    const data = patternBytes(size, 5);
    fill(s.driver, mem.buf.ptr, data);
    await warmUp(s);
    await s.peer.call('inject', { faults: { importFailures: ['CUDA_ERROR_INVALID_VALUE'] } });
    const first = s.peer.call<{ path: string; sum: number }>('recv', { tag: 1 });
    await s.ep.send(mem.buf, { tag: 1 });
    expect(await first).toEqual({ length: size, path: 'staging', sum: checksum(data) });
    const second = s.peer.call<{ path: string; sum: number }>('recv', { tag: 1 });
    await s.ep.send(mem.buf, { tag: 1 });
    expect(await second).toEqual({ length: size, path: 'rget-fd', sum: checksum(data) });
    const st = s.ep.stats();
    expect(st.fd.releasesReceived).toBe(1);
    expect(st.fd.offers).toBe(2);
    const peerStats = (await s.peer.call<{ stats: { fd: Record<string, number> } }>('stats')).stats;
    expect(peerStats.fd.restaged).toBe(1);
    mem.free();
  });

  it('EMFILE on the receiver: that message restages or fails alone, nothing leaks, the next one goes by RGET (descriptor key)', async () => {
    const s = await start();
    const before = await s.peer.call<FdsReply>('fds');
    const size = 1 << 20;
    const mem = allocate(s, 'vmm', size);
    const data = patternBytes(size, 11);
    fill(s.driver, mem.buf.ptr, data);
    await warmUp(s);
    const hogged = await s.peer.call<{ hogged: number }>('hog');
    expect(hogged.hogged).toBeGreaterThan(0);
    const first = s.peer.call<{ path: string; sum: number }>('recv', { tag: 1 });
    const sent = s.ep.send(mem.buf, { tag: 1 });
    const outcomes = Promise.allSettled([first, sent]);
    // the descriptor is lost, or the staged resend finds no slot either: either way that message alone
    await new Promise((r) => setTimeout(r, 200));
    await s.peer.call('unhog');
    const outcome = await outcomes;
    if (outcome[0].status === 'fulfilled') expect(outcome[0].value).toMatchObject({ path: 'staging', sum: checksum(data) });
    // the descriptor was lost (EMFILE): the receiver answered RESTAGE and FD_RELEASE (the staged resend may then fail alone: no slot for its memory either)
    const peerFd = (await s.peer.call<{ stats: { fd: Record<string, number> } }>('stats')).stats.fd;
    expect(peerFd.restaged).toBe(1);
    expect(peerFd.releasesSent).toBe(1);
    const second = s.peer.call<{ path: string; sum: number }>('recv', { tag: 1 });
    await s.ep.send(mem.buf, { tag: 1 });
    expect(await second).toEqual({ length: size, path: 'rget-fd', sum: checksum(data) });
    await s.peer.call('close');
    await new Promise((r) => setTimeout(r, 50));
    const after = await s.peer.call<FdsReply>('fds');
    expect(after.resources).toEqual(before.resources);
    expect(after.open).toBeLessThanOrEqual(before.open);
    mem.free();
  });
});
