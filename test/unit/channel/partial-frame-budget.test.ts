/**
 * Frames not yet complete count against maxBufferedBytes across all of one
 * peer process's connections (issue 47, item 8): six connections of one peer,
 * each holding a 250 MiB partial frame (each within its own endpoint's
 * budget), took a receiver from 65 to 1567 MiB. Here with small numbers:
 * maxBufferedBytes 1 MiB, three authenticated raw connections from this
 * process. A frame that does not fit beside the others' partial frames is
 * refused from its prefix; a partial frame that grows past what is left cuts
 * its connection off. Both with PeerLimitError, within a bounded time.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Handshake } from '../../../src/auth/handshake.js';
import { FrameReader, lengthPrefix } from '../../../src/channel/framing.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { PeerLimitError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../../src/wire/codec.js';
import { type Frame, FrameType } from '../../../src/wire/frames.js';

const KiB = 1024;
const MiB = 1 << 20;
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 2));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

interface Raw {
  sock: net.Socket;
  ep: Endpoint;
  closedWith: () => Error | undefined | null;
}

/** A raw client that completes the handshake; its endpoint on the listener's side, and how it closed (null: open). */
async function raw(t: Transport, sockPath: string, id: string): Promise<Raw> {
  const accepted = new Promise<Endpoint>((r) => {
    const on = (ep: Endpoint) => {
      if (ep.peerId !== id) return;
      t.off('endpoint', on);
      r(ep);
    };
    t.on('endpoint', on);
  });
  const sock = net.createConnection(sockPath);
  sock.on('error', () => {});
  cleanup.push(() => sock.destroy());
  const frames: Frame[] = [];
  const reader = new FrameReader(MiB, (f) => frames.push(decodeFrame(f.slice())));
  sock.on('data', (b: Buffer) => reader.push(b));
  const write = (f: Frame) => sock.write(Buffer.concat([lengthPrefix(encodeFrame(f).byteLength), encodeFrame(f)]));
  const hs = new Handshake({ id, token: '', deviceUuid: '', features: 0 });
  write(hs.hello);
  await until(() => frames.some((f) => f.type === FrameType.HELLO), 'the HELLO');
  const step = hs.receive(frames.find((f) => f.type === FrameType.HELLO)!);
  if (step.kind !== 'proof') throw new Error('expected a proof');
  write(step.proof);
  const ep = await accepted;
  let closed: Error | undefined | null = null;
  ep.once('close', (e?: Error) => (closed = e));
  return { sock, ep, closedWith: () => closed };
}

/** Writes `bytes` and waits until the listener has read them (its side drains the socket). */
async function send(r: Raw, bytes: Buffer): Promise<void> {
  await new Promise<void>((res) => r.sock.write(bytes, () => res()));
  await new Promise((res) => setTimeout(res, 50));
}

async function listener(): Promise<{ t: Transport; sock: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-partial-'));
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const t = await Transport.create({ id: 'victim', driver: 'sim', maxBufferedBytes: MiB, controlRing: false });
  cleanup.push(() => t.close());
  t.on('refused', () => {});
  const sock = path.join(dir, 's.sock');
  await t.listen(sock);
  return { t, sock };
}

describe('partial frames of one peer process, over several connections', () => {
  it('a frame that does not fit beside the others\' partial frames is refused from its prefix', async () => {
    const { t, sock } = await listener();
    const [a, b, c] = [await raw(t, sock, 'a'), await raw(t, sock, 'b'), await raw(t, sock, 'c')];
    await send(a, Buffer.concat([lengthPrefix(500 * KiB), Buffer.alloc(300 * KiB)]));
    await send(b, Buffer.concat([lengthPrefix(500 * KiB), Buffer.alloc(300 * KiB)]));
    expect([a.closedWith(), b.closedWith()]).toEqual([null, null]); // 600 KiB held: within 1 MiB
    await send(c, Buffer.concat([lengthPrefix(500 * KiB), Buffer.alloc(16)])); // 500 KiB more would pass it
    await until(() => c.closedWith() !== null, 'c cut off', 2000);
    expect(c.closedWith()).toBeInstanceOf(PeerLimitError);
    expect(c.closedWith()!.message).toMatch(/announced a frame of 512000 bytes/);
    expect([a.closedWith(), b.closedWith()]).toEqual([null, null]);
  });

  it('partial frames that each fitted when announced, grown past the budget together: the connection that goes past is cut off', async () => {
    const { t, sock } = await listener();
    const [a, b] = [await raw(t, sock, 'a'), await raw(t, sock, 'b')];
    await send(a, Buffer.concat([lengthPrefix(600 * KiB), Buffer.alloc(100 * KiB)]));
    await send(b, Buffer.concat([lengthPrefix(600 * KiB), Buffer.alloc(100 * KiB)])); // 200 KiB held, 924 left: fits
    await send(a, Buffer.alloc(400 * KiB));
    await send(b, Buffer.alloc(400 * KiB)); // 1000 KiB held: still within 1 MiB
    expect([a.closedWith(), b.closedWith()]).toEqual([null, null]);
    await send(a, Buffer.alloc(90 * KiB)); // 1090 KiB: past it
    await until(() => a.closedWith() !== null, 'a cut off', 2000);
    expect(a.closedWith()).toBeInstanceOf(PeerLimitError);
    expect((a.closedWith() as PeerLimitError).code).toBe('SMCUDA_PEER_BUFFER_LIMIT');
    expect(a.closedWith()!.message).toMatch(/frames not yet complete on its connections here/);
    // b's partial frame stays; with a's gone, what b holds is within the budget again.
    await new Promise((r) => setTimeout(r, 100));
    expect(b.closedWith()).toBe(null);
  });
});
