/**
 * FdChannel / FdListener: descriptors between processes with SCM_RIGHTS.
 * In-process pairs for the mechanics, a real child process
 * (fixtures/fd-peer.mjs; `npx tsc -p .` first) for passing, admission and
 * EMFILE. Every test counts this process's open descriptors before and after.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FD_MESSAGE_MAX, FD_TOKEN_BYTES, FdChannel, FdListener, type FdMessage } from '../../../src/channel/fd-channel.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { AccessDeniedError, ClosedError, DescriptorError, PeerLostError } from '../../../src/errors.js';
import { patternBytes } from '../../helpers/bytes.js';
import { FdPeer, openFds } from '../../helpers/fd-peer.js';

const addon = loadAddon();

/** A memfd holding `bytes` (the caller closes it). */
function memfdWith(bytes: Uint8Array): number {
  const fd = addon.memfdCreate('smcuda-test', 0);
  writeSync(fd, bytes, 0, bytes.byteLength, 0);
  return fd;
}

function readAll(fd: number, n: number): Buffer {
  const buf = Buffer.alloc(n);
  readSync(fd, buf, 0, n, 0);
  return buf;
}

/** The next `count` messages a channel delivers. */
function collect(ch: FdChannel, count: number): Promise<FdMessage[]> {
  const got: FdMessage[] = [];
  return new Promise((resolve, reject) => {
    ch.start({
      message: (m) => {
        got.push(m);
        if (got.length === count) resolve(got);
      },
      close: (err) => err && reject(err),
    });
  });
}

let fdsAtStart = 0;
beforeEach(() => {
  fdsAtStart = openFds();
});

describe('FdChannel in one process', () => {
  afterEach(() => {
    expect(openFds()).toBe(fdsAtStart);
  });

  it('passes a descriptor with its metadata; the receiver reads the same file through it', async () => {
    const [a, b] = FdChannel.pair();
    const data = patternBytes(10_000, 7);
    const fd = memfdWith(data);
    const got = collect(b, 2);
    await a.send(fd, Buffer.from('first'));
    addon.fdClose(fd); // the peer holds its own duplicate now
    await a.send(undefined, Buffer.from('no descriptor'));
    const [m1, m2] = await got;
    expect(Buffer.from(m1!.meta).toString()).toBe('first');
    expect(m1!.fd).toBeDefined();
    expect(readAll(m1!.fd!, data.byteLength).equals(data)).toBe(true);
    addon.fdClose(m1!.fd!);
    expect(Buffer.from(m2!.meta).toString()).toBe('no descriptor');
    expect(m2!.fd).toBeUndefined();
    a.close();
    b.close();
  });

  it('keeps order across many messages and waits for room when the socket is full', async () => {
    const [a, b] = FdChannel.pair();
    const n = 600; // more than a SEQPACKET socket queues: sends must wait for writability
    const fd = memfdWith(Buffer.from('x'));
    const sends = Array.from({ length: n }, (_, i) => a.send(i % 3 === 0 ? fd : undefined, Buffer.from(`m${i}`)));
    await new Promise((r) => setTimeout(r, 20));
    const got = await collect(b, n);
    await Promise.all(sends);
    addon.fdClose(fd);
    got.forEach((m, i) => {
      expect(Buffer.from(m.meta).toString()).toBe(`m${i}`);
      expect(m.fd !== undefined).toBe(i % 3 === 0);
      if (m.fd !== undefined) addon.fdClose(m.fd);
    });
    a.close();
    b.close();
  });

  it('refuses bad arguments before the socket sees them', async () => {
    const [a, b] = FdChannel.pair();
    await expect(a.send(-1, Buffer.from('x'))).rejects.toThrow(RangeError);
    await expect(a.send(undefined, new Uint8Array(0))).rejects.toThrow(RangeError);
    await expect(a.send(undefined, new Uint8Array(FD_MESSAGE_MAX + 1))).rejects.toThrow(RangeError);
    a.close();
    b.close();
    await expect(a.send(undefined, Buffer.from('x'))).rejects.toThrow(ClosedError);
  });

  it('the peer closing is PeerLostError on the other side', async () => {
    const [a, b] = FdChannel.pair();
    const closed = new Promise<Error | undefined>((resolve) => b.start({ message: () => {}, close: resolve }));
    a.close();
    expect(await closed).toBeInstanceOf(PeerLostError);
    expect(b.closed).toBe(true);
  });

  it('a message too long for the channel fails it and its descriptor is closed, not leaked', async () => {
    const [sa, sb] = addon.fdSocketPair();
    const b = new FdChannel(sb);
    const fd = memfdWith(Buffer.from('x'));
    const long = new Uint8Array(FD_MESSAGE_MAX + 100);
    expect(addon.fdSend(sa, fd, long.buffer, 0, long.byteLength)).toBe(true);
    addon.fdClose(fd);
    const closed = new Promise<Error | undefined>((resolve) => b.start({ message: () => {}, close: resolve }));
    const err = await closed;
    expect(err).toBeInstanceOf(DescriptorError);
    expect((err as DescriptorError).code).toBe('SMCUDA_FD_CHANNEL');
    addon.fdClose(sa);
  });

  it('sending to a peer that closed is PeerLostError, and later sends are refused', async () => {
    const [a, b] = FdChannel.pair();
    b.close();
    await expect(a.send(undefined, Buffer.from('x'))).rejects.toThrow(PeerLostError);
    expect(a.closed).toBe(true);
    await expect(a.send(undefined, Buffer.from('y'))).rejects.toThrow(ClosedError);
  });

  it('a connection from a uid the policy does not allow is refused on both sides', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fd-'));
    const refused: Error[] = [];
    const listener = new FdListener(join(dir, 'fd.sock'), { peerUids: [process.getuid!() + 1], onRefused: (e) => refused.push(e) });
    try {
      const token = randomBytes(FD_TOKEN_BYTES);
      await expect(FdChannel.connect(listener.path, token, { peerUids: [process.getuid!() + 1] })).rejects.toThrow(AccessDeniedError);
      await new Promise((r) => setTimeout(r, 50));
      // The connector gave up first; whether the listener saw it depends on timing, but it never admits it.
    } finally {
      listener.close();
      rmSync(dir, { recursive: true, force: true });
    }
    expect(refused.every((e) => e instanceof AccessDeniedError)).toBe(true);
  });

  it('a connection that presents a wrong token is closed and never admitted (once the admission time is up)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fd-'));
    const refused: Error[] = [];
    const listener = new FdListener(join(dir, 'fd.sock'), { admissionTimeoutMs: 200, onRefused: (e) => refused.push(e) });
    try {
      const expected = listener.expect(randomBytes(FD_TOKEN_BYTES), 300);
      const wrong = await FdChannel.connect(listener.path, randomBytes(FD_TOKEN_BYTES));
      const lost = new Promise<Error | undefined>((resolve) => wrong.start({ message: () => {}, close: resolve }));
      expect(await lost).toBeInstanceOf(PeerLostError);
      expect(refused.length).toBe(1);
      expect(refused[0]).toBeInstanceOf(AccessDeniedError);
      await expect(expected).rejects.toThrow(DescriptorError);
    } finally {
      listener.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('FdListener admission', () => {
  it('a token presented before expect() is held (paused) and admitted when expect() comes; what followed it is delivered', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fd-'));
    const refused: Error[] = [];
    const listener = new FdListener(join(dir, 'fd.sock'), { onRefused: (e) => refused.push(e) });
    try {
      const token = randomBytes(FD_TOKEN_BYTES);
      const early = await FdChannel.connect(listener.path, token);
      const fd = memfdWith(Buffer.from('after the token'));
      await early.send(fd, Buffer.from('first'));
      addon.fdClose(fd);
      await new Promise((r) => setTimeout(r, 50)); // the listener has read the token by now, with nobody expecting it
      const admitted = await listener.expect(token, 1000);
      const [m] = await collect(admitted, 1);
      expect(Buffer.from(m!.meta).toString()).toBe('first');
      expect(readAll(m!.fd!, 15).toString()).toBe('after the token');
      addon.fdClose(m!.fd!);
      expect(refused).toEqual([]);
      admitted.close();
      early.close();
    } finally {
      listener.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a connection that never presents its token is closed after the admission timeout', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fd-'));
    const refused: Error[] = [];
    const listener = new FdListener(join(dir, 'fd.sock'), { admissionTimeoutMs: 100, onRefused: (e) => refused.push(e) });
    try {
      const silent = new FdChannel(addon.fdConnect(listener.path)); // connects, says nothing
      const lost = new Promise<Error | undefined>((resolve) => silent.start({ message: () => {}, close: resolve }));
      expect(await lost).toBeInstanceOf(PeerLostError);
      expect(refused.map((e) => e.message)).toEqual([expect.stringMatching(/presented no token within 100 ms/)]);
    } finally {
      listener.close();
      rmSync(dir, { recursive: true, force: true });
    }
    expect(openFds()).toBe(fdsAtStart);
  });
});

describe('the pid the control channel authenticated', () => {
  it('connect() to a socket served by another pid sends nothing and rejects (SMCUDA_PEER_PID); expect() refuses a connection from another pid', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fd-'));
    const refused: Error[] = [];
    const listener = new FdListener(join(dir, 'fd.sock'), { admissionTimeoutMs: 5000, onRefused: (e) => refused.push(e) });
    try {
      const token = randomBytes(FD_TOKEN_BYTES);
      const expected = listener.expect(token, 1000);
      await expect(FdChannel.connect(listener.path, token, { listenerPid: process.pid + 1 })).rejects.toMatchObject({ code: 'SMCUDA_PEER_PID' });
      // The listener got a connection that said nothing: the token never left.
      await expect(expected).rejects.toThrow(DescriptorError);
      const token2 = randomBytes(FD_TOKEN_BYTES);
      const fromElsewhere = listener.expect(token2, 1000, process.pid + 1);
      const ch = await FdChannel.connect(listener.path, token2, { listenerPid: process.pid });
      await expect(fromElsewhere).rejects.toMatchObject({ code: 'SMCUDA_PEER_PID' });
      expect(refused.some((e) => /presented the token of pid/.test(e.message))).toBe(true);
      ch.close();
    } finally {
      listener.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('FdChannel between two processes', () => {
  it('the child reads a memfd the parent sent, and sends one back', async () => {
    const peer = await FdPeer.start();
    try {
      const childStart = (await peer.call('info')).fds as number;
      const data = patternBytes(5000, 99);
      const fd = memfdWith(data);
      const got = await peer.pass(fd, { what: 'memfd' }, data.byteLength);
      addon.fdClose(fd);
      expect(got.meta).toBe('{"what":"memfd"}');
      expect(got.hasFd).toBe(true);
      expect(got.size).toBe(5000);
      expect(got.hex).toBe(Buffer.from(data).toString('hex'));
      await peer.call('closeFd', { id: got.id });
      expect((await peer.call('info')).fds).toBe(childStart);

      const back = collect(peer.channel, 1);
      await peer.call('sendMemfd', { meta: 'back', hex: 'c0ffee' });
      const [m] = await back;
      expect(Buffer.from(m!.meta).toString()).toBe('back');
      expect(readAll(m!.fd!, 3).toString('hex')).toBe('c0ffee');
      addon.fdClose(m!.fd!);
    } finally {
      await peer.stop();
    }
    expect(openFds()).toBe(fdsAtStart);
  });

  it('a child out of descriptor slots gets a typed EMFILE loss with the metadata, then recovers', async () => {
    const peer = await FdPeer.start({ fdLimit: 64 });
    try {
      const filled = (await peer.call('fill')).count as number;
      expect(filled).toBeGreaterThan(0);
      const fd = memfdWith(Buffer.from('lost'));
      const lost = await peer.pass(fd, { n: 1 });
      expect(lost.lost).toBe('SMCUDA_FD_EMFILE');
      expect(lost.hasFd).toBe(false);
      expect(lost.meta).toBe('{"n":1}');
      await peer.call('unfill');
      const ok = await peer.pass(fd, { n: 2 }, 4);
      addon.fdClose(fd);
      expect(ok.lost).toBeNull();
      expect(ok.hex).toBe(Buffer.from('lost').toString('hex'));
      await peer.call('closeFd', { id: ok.id });
    } finally {
      await peer.stop();
    }
    expect(openFds()).toBe(fdsAtStart);
  });
});

describe('DescriptorError', () => {
  it('carries its code and the metadata of the lost descriptor', () => {
    const e = new DescriptorError('SMCUDA_FD_EMFILE', 'dropped', { meta: Buffer.from('m') });
    expect(e.code).toBe('SMCUDA_FD_EMFILE');
    expect(Buffer.from(e.meta!).toString()).toBe('m');
  });
});
