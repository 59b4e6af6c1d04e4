/**
 * What an authenticated peer can make an endpoint buffer for it is bounded by
 * `maxBufferedBytes` (issue 23, finding 7): unexpected EAGERs sent past the
 * flow-control window, a frame announced larger than what is left (refused
 * from its length prefix, before its body is buffered), and out-of-order
 * SPILLs inside the ring window. Past it: PeerLimitError, that endpoint
 * closes with it. An honest peer, which keeps to its window, never meets it.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Handshake } from '../../../src/auth/handshake.js';
import { FrameReader, lengthPrefix } from '../../../src/channel/framing.js';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { ShmChannel } from '../../../src/channel/shm-channel.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { openDriver } from '../../../src/cuda/open-driver.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { PeerLimitError } from '../../../src/errors.js';
import { ProgressEngine } from '../../../src/progress/engine.js';
import { Transport } from '../../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../../src/wire/codec.js';
import { type Frame, FrameType } from '../../../src/wire/frames.js';
import { rawPeer } from '../../helpers/raw-peer.js';
import { makePair } from '../../helpers/transport-pair.js';

const MiB = 1 << 20;
const tick = () => new Promise<void>((r) => setImmediate(r));
async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 2));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

const open: Transport[] = [];
afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
});

describe('maxBufferedBytes', () => {
  it('unexpected EAGERs past the window: the endpoint closes with PeerLimitError before it holds more than the bound', async () => {
    const t = await Transport.create({ id: 'victim', driver: 'sim', maxBufferedBytes: MiB });
    open.push(t);
    const p = await rawPeer(t, 'flooder');
    const pending = p.ep.recv({ tag: 1 }).catch((e: unknown) => e);
    for (let i = 0; i < 40 && !p.ep.closed; i++) {
      p.send({ type: FrameType.EAGER, tag: 9, seq: i + 1, fromDevice: false, data: new Uint8Array(64 << 10) });
      await p.settle();
    }
    expect(p.closeError()).toBeInstanceOf(PeerLimitError);
    expect((p.closeError() as PeerLimitError).code).toBe('SMCUDA_PEER_BUFFER_LIMIT');
    expect(p.closeError()!.message).toMatch(/above maxBufferedBytes \(1048576\)/);
    expect(await pending).toBeInstanceOf(Error); // every pending operation of that endpoint rejects
    expect(p.ep.stats().flow.unexpectedMessages).toBeLessThanOrEqual(16); // never more than the bound held
  });

  it('a frame announced larger than what is left is refused from its length prefix, without waiting for (or buffering) its body', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-buflimit-'));
    try {
      const t = await Transport.create({ id: 'victim', driver: 'sim', maxBufferedBytes: MiB, controlRing: false });
      open.push(t);
      const sock = path.join(dir, 's.sock');
      await t.listen(sock);
      const accepted = new Promise<Endpoint>((r) => t.once('endpoint', r));
      const s = net.createConnection(sock);
      s.on('error', () => {});
      const frames: Frame[] = [];
      const reader = new FrameReader(MiB, (f) => frames.push(decodeFrame(f.slice())));
      s.on('data', (b: Buffer) => reader.push(b));
      const write = (f: Frame) => s.write(Buffer.concat([lengthPrefix(encodeFrame(f).byteLength), encodeFrame(f)]));
      const hs = new Handshake({ id: 'big', token: '', deviceUuid: '', features: 0 });
      write(hs.hello);
      await until(() => frames.some((f) => f.type === FrameType.HELLO), 'the HELLO');
      const step = hs.receive(frames.find((f) => f.type === FrameType.HELLO)!);
      if (step.kind !== 'proof') throw new Error('expected a proof');
      write(step.proof);
      const ep = await accepted;
      const closed = new Promise<Error | undefined>((r) => ep.once('close', r));
      // 4 MiB announced, 16 bytes of it sent: the rest never comes.
      s.write(Buffer.concat([lengthPrefix(4 * MiB), Buffer.alloc(16)]));
      const err = await closed;
      expect(err).toBeInstanceOf(PeerLimitError);
      expect(err!.message).toMatch(/announced a frame of 4194304 bytes/);
      s.destroy();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('out-of-order SPILLs inside the ring window', () => {
    let driver: CudaDriver;
    beforeAll(async () => {
      driver = (await openDriver({ driver: 'sim' })).driver;
    });
    afterAll(() => driver.close());

    it('count against the bound: past it, the channel closes with PeerLimitError', async () => {
      const [ma, mb] = createMemoryChannelPair({ names: ['a', 'b'] });
      const [ea, eb] = [new ProgressEngine(0), new ProgressEngine(0)];
      const a = new ShmChannel(ma, { segments: driver, progress: ea, capacity: 4096, maxRingFrame: 512 });
      const b = new ShmChannel(mb, { segments: driver, progress: eb, capacity: 4096, maxRingFrame: 512 });
      let closedWith: Error | undefined | null = null;
      b.on('close', (e) => (closedWith = e));
      b.limitBuffered(() => 10_000);
      try {
        for (let i = 0; i < 2000 && !(a.ringOut && b.ringIn); i++) await tick();
        // seq 0 never comes: every SPILL after it waits, inside the window of 256 frames.
        const inner = encodeFrame({ type: FrameType.EAGER, tag: 0, seq: 1, fromDevice: false, data: new Uint8Array(3000) }).slice();
        for (let seq = 1; seq <= 10 && closedWith === null; seq++) {
          ma.send(encodeFrame({ type: FrameType.SPILL, seq, frame: inner }));
          await tick();
        }
        await until(() => closedWith !== null, 'the close');
        expect(closedWith).toBeInstanceOf(PeerLimitError);
      } finally {
        ea.stop();
        eb.stop();
        a.close();
        b.close();
      }
    });
  });

  it('an honest peer keeps to its window and never meets it: 64 × 64 KiB to a late receiver, bound 1 MiB, window 512 KiB', async () => {
    const pr = await makePair({ a: { maxUnreadBytes: 512 << 10 }, b: { maxBufferedBytes: MiB } });
    try {
      const sends = Array.from({ length: 64 }, (_, i) => pr.a.ep.send(new Uint8Array(64 << 10).fill(i), { tag: 3 }));
      await new Promise((r) => setTimeout(r, 50));
      for (let i = 0; i < 64; i++) {
        const m = await pr.b.ep.recv({ tag: 3 });
        expect((m.data as Uint8Array)[0]).toBe(i);
      }
      await Promise.all(sends);
      expect(pr.b.ep.closed).toBe(false);
    } finally {
      await pr.close();
    }
  });
});
