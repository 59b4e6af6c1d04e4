import { describe, it, expect, beforeEach, afterEach } from 'vitest';
import { test, fc } from '@fast-check/vitest';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { connectUnix, listenUnix, type UnixChannel, type UnixListener } from '../../../src/channel/unix-channel.js';
import { FrameReader, lengthPrefix } from '../../../src/channel/framing.js';
import { ClosedError, ConfigError, NoListenerError, PeerLostError, ProtocolError } from '../../../src/errors.js';

let dir: string;
const listeners: UnixListener[] = [];
const sockets: net.Socket[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-unix-'));
});
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(listeners.splice(0).map((l) => l.close()));
  fs.rmSync(dir, { recursive: true, force: true });
});

async function listen(onChannel: (ch: UnixChannel) => void = () => {}, opts?: Parameters<typeof listenUnix>[2]) {
  const l = await listenUnix(path.join(dir, 's.sock'), onChannel, opts);
  listeners.push(l);
  return l;
}

/** A connected pair: client (connectUnix) and server (accepted). */
async function pair(opts?: Parameters<typeof listenUnix>[2]) {
  let accept!: (ch: UnixChannel) => void;
  const accepted = new Promise<UnixChannel>((r) => (accept = r));
  const l = await listen(accept, opts);
  const client = await connectUnix(l.path, opts);
  return { listener: l, client, server: await accepted };
}

/** A raw socket to the listener, for writing bytes the channel would never write. */
async function rawClient(p: string): Promise<net.Socket> {
  const s = net.createConnection({ path: p });
  sockets.push(s);
  await new Promise<void>((resolve, reject) => s.once('connect', resolve).once('error', reject));
  return s;
}

function closeEvent(ch: UnixChannel): Promise<Error | null> {
  return new Promise((resolve) => ch.once('close', (err) => resolve(err ?? null)));
}

function framed(frames: Uint8Array[]): Buffer {
  return Buffer.concat(frames.flatMap((f) => [lengthPrefix(f.byteLength), f]));
}

const MiB = 1024 * 1024;

describe('FrameReader', () => {
  test.prop([fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 20 }), fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 30 })], {
    numRuns: 300,
  })('reassembles any chunking of a framed stream into the same frames', (frames, cuts) => {
    const stream = framed(frames);
    const got: number[][] = [];
    const r = new FrameReader(1024, (f) => got.push([...f]));
    let at = 0;
    for (let i = 0; at < stream.length; i++) {
      const n = cuts[i % cuts.length]!;
      r.push(stream.subarray(at, at + n));
      at += n;
    }
    expect(got).toEqual(frames.map((f) => [...f]));
    expect(r.buffered).toBe(0);
  });

  it('hands on frames inside one chunk as views of it (no copy); split ones as one new buffer', () => {
    const chunk = framed([Uint8Array.of(1, 2), Uint8Array.of(3), new Uint8Array(0)]);
    const got: Uint8Array[] = [];
    const r = new FrameReader(1024, (f) => got.push(f));
    r.push(chunk);
    expect(got.map((f) => [...f])).toEqual([[1, 2], [3], []]);
    expect(got.every((f) => f.buffer === chunk.buffer)).toBe(true);
    const split = framed([Uint8Array.of(7, 8, 9)]);
    r.push(split.subarray(0, 5));
    expect(r.buffered).toBe(5);
    r.push(split.subarray(5));
    split.fill(0); // the assembled frame is a copy, not a view of the chunks
    expect([...got[3]!]).toEqual([7, 8, 9]);
  });

  it('refuses a length above maxFrameBytes before allocating, also when the prefix is split', () => {
    const r = new FrameReader(100, () => {});
    const e = (() => {
      try {
        r.push(lengthPrefix(101).subarray(0, 2));
        r.push(lengthPrefix(101).subarray(2));
      } catch (err) {
        return err as ProtocolError;
      }
    })();
    expect(e).toBeInstanceOf(ProtocolError);
    expect(e!.code).toBe('SMCUDA_PROTOCOL_FRAME_SIZE');
    expect(() => new FrameReader(100, () => {}).push(Buffer.from([0xff, 0xff, 0xff, 0xff]))).toThrow(/4294967295 bytes, above maxFrameBytes \(100\)/);
  });
});

describe('unix channel: connection', () => {
  it('connects; the socket file is mode 0600; labels name the path', async () => {
    const { listener, client, server } = await pair();
    expect(fs.statSync(listener.path).mode & 0o777).toBe(0o600);
    expect(fs.statSync(listener.path).isSocket()).toBe(true);
    expect(client.label).toBe(`unix:${listener.path}`);
    expect(server.label).toBe(`unix:${listener.path}#1`);
    expect(listener.channels.has(server)).toBe(true);
    expect(client.closed || server.closed).toBe(false);
  });

  it('connecting where nothing listens fails with NoListenerError (not a lost peer) saying so', async () => {
    const err = await connectUnix(path.join(dir, 'nobody.sock')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoListenerError);
    expect(err).not.toBeInstanceOf(PeerLostError);
    expect((err as NoListenerError).code).toBe('SMCUDA_NO_LISTENER');
    expect((err as Error).message).toMatch(/ENOENT.*nothing listens/);
  });

  it('refuses paths too long for a Unix socket, and bad options', async () => {
    await expect(connectUnix(path.join(dir, 'x'.repeat(120)))).rejects.toBeInstanceOf(ConfigError);
    await expect(listenUnix(path.join(dir, 'y.sock'), () => {}, { maxFrameBytes: 0 })).rejects.toBeInstanceOf(ConfigError);
  });

  it('replaces a stale socket file left by a dead process', async () => {
    const p = path.join(dir, 's.sock');
    const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(p)}, () => process.kill(process.pid, 'SIGKILL'))`]);
    await new Promise((r) => child.once('exit', r));
    expect(fs.statSync(p).isSocket()).toBe(true);
    const { client, server } = await pair();
    client.send(Uint8Array.of(1));
    await new Promise((r) => server.once('frame', r));
  });

  it('refuses a path where a process listens, or that is not a socket', async () => {
    const l = await listen();
    await expect(listenUnix(l.path, () => {})).rejects.toThrow(/Another process is listening/);
    const file = path.join(dir, 'plain');
    fs.writeFileSync(file, 'keep me');
    await expect(listenUnix(file, () => {})).rejects.toThrow(/is not a socket/);
    expect(fs.readFileSync(file, 'utf8')).toBe('keep me');
  });

  it('listener.close() closes accepted channels and removes the socket file', async () => {
    const { listener, client, server } = await pair();
    const clientClosed = closeEvent(client);
    const serverClosed = closeEvent(server);
    await listener.close();
    expect(await serverClosed).toBeNull();
    expect(await clientClosed).toBeNull();
    expect(fs.existsSync(listener.path)).toBe(false);
    await listener.close(); // idempotent
  });
});

describe('unix channel: frames', () => {
  it('1,000 frames of random sizes (0 B to 64 MiB) arrive whole and in order', async () => {
    const { client, server } = await pair();
    const sizes = fc.sample(fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 40_000 })), { numRuns: 999, seed: 42 });
    sizes.splice(500, 0, 64 * MiB);
    const big = Buffer.alloc(64 * MiB, 0x5a);
    big[0] = 1;
    big[big.length - 1] = 2;
    const got: { n: number; ok: boolean }[] = [];
    const done = new Promise<void>((resolve) =>
      server.on('frame', (f) => {
        const i = got.length;
        const expected = f.byteLength === 64 * MiB ? big : Buffer.alloc(f.byteLength, i & 0xff);
        const ok = Buffer.compare(f, expected) === 0;
        got.push({ n: f.byteLength, ok });
        if (got.length === sizes.length) resolve();
      }),
    );
    sizes.forEach((n, i) => {
      if (n === 64 * MiB) client.send(big);
      else if (i % 3 === 0) client.sendParts([new Uint8Array(n >> 1).fill(i & 0xff), new Uint8Array(n - (n >> 1)).fill(i & 0xff)]);
      else client.send(new Uint8Array(n).fill(i & 0xff));
    });
    await done;
    expect(got.map((g) => g.n)).toEqual(sizes);
    expect(got.every((g) => g.ok)).toBe(true);
  });

  it('reassembles frames written in pieces and many frames in one write', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept);
    const raw = await rawClient(l.path);
    const server = await accepted;
    const got: number[][] = [];
    server.on('frame', (f) => got.push([...f]));
    const frames = Array.from({ length: 100 }, (_, i) => new Uint8Array(i % 7).fill(i));
    raw.write(framed(frames)); // all at once
    const one = framed([Uint8Array.of(1, 2, 3, 4, 5)]);
    for (const b of one) {
      raw.write(Uint8Array.of(b)); // byte by byte
      await new Promise((r) => setImmediate(r));
    }
    await new Promise<void>((r) => {
      const check = () => (got.length === 101 ? r() : setTimeout(check, 2));
      check();
    });
    expect(got.slice(0, 100)).toEqual(frames.map((f) => [...f]));
    expect(got[100]).toEqual([1, 2, 3, 4, 5]);
  });

  it('backpressure: send returns false on a large frame, then drain; nothing is lost', async () => {
    const { client, server } = await pair();
    let received = 0;
    server.on('frame', (f) => (received += f.byteLength));
    const drained = new Promise<void>((r) => client.once('drain', r));
    expect(client.send(new Uint8Array(8 * MiB))).toBe(false);
    expect(client.send(Uint8Array.of(1))).toBe(false); // queued anyway
    await drained;
    await new Promise<void>((r) => {
      const check = () => (received === 8 * MiB + 1 ? r() : setTimeout(check, 2));
      check();
    });
    expect(client.send(Uint8Array.of(1))).toBe(true);
  });

  it('refuses to send a frame above maxFrameBytes', async () => {
    const { client } = await pair({ maxFrameBytes: 1000 });
    expect(() => client.send(new Uint8Array(1001))).toThrow(ProtocolError);
    expect(() => client.sendParts([new Uint8Array(600), new Uint8Array(401)])).toThrow(/above maxFrameBytes \(1000\)/);
    expect(client.send(new Uint8Array(1000))).toBe(true);
  });
});

describe('unix channel: close and failure', () => {
  it('orderly close: frames sent before close() arrive, then close without error on both ends, once', async () => {
    const { client, server } = await pair();
    const got: number[][] = [];
    server.on('frame', (f) => got.push([...f]));
    let serverCloses = 0;
    server.on('close', () => serverCloses++);
    const serverClosed = closeEvent(server);
    const clientClosed = closeEvent(client);
    client.send(Uint8Array.of(1, 2));
    client.send(new Uint8Array(100_000));
    client.close();
    client.close();
    expect(client.closed).toBe(true);
    expect(() => client.send(Uint8Array.of(3))).toThrow(ClosedError);
    expect(await clientClosed).toBeNull();
    expect(await serverClosed).toBeNull();
    expect(got.length).toBe(2);
    expect(got[0]).toEqual([1, 2]);
    expect(() => server.send(Uint8Array.of(3))).toThrow(ClosedError);
    await new Promise((r) => setTimeout(r, 10));
    expect(serverCloses).toBe(1);
  });

  it('close() toward a peer that never ends: the socket is destroyed after closeTimeoutMs', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept, { closeTimeoutMs: 50 });
    const hung = net.createConnection({ path: l.path, allowHalfOpen: true }); // reads the FIN, never ends
    sockets.push(hung);
    const server = await accepted;
    hung.resume();
    server.close();
    expect(await closeEvent(server)).toBeNull();
    await l.close(); // resolves only once the accepted socket is destroyed
    const peerError = new Promise<NodeJS.ErrnoException>((r) => hung.once('error', r));
    hung.write('x');
    expect((await peerError).code).toBe('EPIPE'); // our end is really gone
  });

  it('an oversized length closes the channel with ProtocolError', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept, { maxFrameBytes: 1024 });
    const raw = await rawClient(l.path);
    const server = await accepted;
    const closed = closeEvent(server);
    raw.write(lengthPrefix(1025));
    const err = await closed;
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as ProtocolError).code).toBe('SMCUDA_PROTOCOL_FRAME_SIZE');
    expect(server.closed).toBe(true);
  });

  it('a peer that ends in the middle of a frame: close with ProtocolError', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept);
    const raw = await rawClient(l.path);
    const server = await accepted;
    const closed = closeEvent(server);
    raw.end(Buffer.concat([lengthPrefix(10), Buffer.from([1, 2, 3])]));
    const err = await closed;
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err!.message).toMatch(/middle of a frame \(7 bytes/);
  });

  it('a peer socket destroyed with data unread: close with PeerLostError', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept);
    const raw = await rawClient(l.path);
    raw.pause();
    const server = await accepted;
    const closed = closeEvent(server);
    server.send(new Uint8Array(4 * MiB));
    await new Promise((r) => setTimeout(r, 10));
    raw.destroy();
    const err = await closed;
    expect(err).toBeInstanceOf(PeerLostError);
    expect(err!.message).toMatch(/ECONNRESET|EPIPE/);
    expect(() => server.send(Uint8Array.of(1))).toThrow(ClosedError);
  });
});

describe('unix channel: before the handshake, and frames that never finish', () => {
  it('until handshakeDone(), a frame above handshakeFrameBytes is refused from its prefix: a 200 MiB announcement (within maxFrameBytes) closes the channel, nothing of it is buffered', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept, { handshakeFrameBytes: 512 });
    const raw = await rawClient(l.path);
    const server = await accepted;
    const closed = closeEvent(server);
    const rawClosed = new Promise<void>((r) => raw.once('close', () => r()));
    raw.on('error', () => {});
    // The announcement, then as much body as the socket takes.
    raw.write(lengthPrefix(200 * MiB));
    raw.write(Buffer.alloc(256 * 1024, 0x41));
    const err = await closed;
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err!.message).toMatch(/has not completed the handshake announced a frame of 209715200 bytes.*at most 512/);
    expect(server.bufferedBytes).toBeLessThanOrEqual(512);
    await rawClosed; // the peer is dropped, not kept waiting
  });

  it('handshake-sized frames pass before handshakeDone(); larger ones after it', async () => {
    const { client, server } = await pair({ handshakeFrameBytes: 512 });
    const got: number[] = [];
    server.on('frame', (f) => got.push(f.byteLength));
    expect(server.frameLimit).toBe(512);
    client.send(new Uint8Array(512));
    await new Promise((r) => server.once('frame', r));
    server.handshakeDone();
    expect(server.frameLimit).toBe(256 * MiB);
    client.send(new Uint8Array(MiB));
    await new Promise((r) => server.once('frame', r));
    expect(got).toEqual([512, MiB]);
  });

  it('a frame that trickles in one byte at a time is dropped after frameTimeoutMs', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept, { frameTimeoutMs: 300 });
    const raw = await rawClient(l.path);
    raw.on('error', () => {});
    const server = await accepted;
    const closed = closeEvent(server);
    raw.write(lengthPrefix(100));
    const drip = setInterval(() => raw.write(Buffer.of(1)), 50);
    try {
      const err = await closed;
      expect(err).toBeInstanceOf(ProtocolError);
      expect((err as ProtocolError).code).toBe('SMCUDA_PROTOCOL_FRAME_TIMEOUT');
      expect(err!.message).toMatch(/still incomplete.*frameTimeoutMs \(300\)/);
    } finally {
      clearInterval(drip);
    }
  });

  it('the frame timeout is per frame: frames that each finish in time pass, however long the stream lasts', async () => {
    let accept!: (ch: UnixChannel) => void;
    const accepted = new Promise<UnixChannel>((r) => (accept = r));
    const l = await listen(accept, { frameTimeoutMs: 1000 });
    const raw = await rawClient(l.path);
    const server = await accepted;
    let closedEarly = false;
    server.once('close', () => (closedEarly = true));
    const got: Uint8Array[] = [];
    server.on('frame', (f) => got.push(f.slice()));
    // 5 frames, each sent in two halves 300 ms apart: 1.5 s in all, each frame well within 1 s.
    for (let i = 0; i < 5; i++) {
      const f = framed([new Uint8Array(8).fill(i)]);
      raw.write(f.subarray(0, 6));
      await new Promise((r) => setTimeout(r, 300));
      raw.write(f.subarray(6));
    }
    await new Promise((r) => setTimeout(r, 50));
    expect(closedEarly).toBe(false);
    expect(got.map((f) => f[0])).toEqual([0, 1, 2, 3, 4]);
  });

  it('refuses a bad handshakeFrameBytes or frameTimeoutMs', async () => {
    await expect(listenUnix(path.join(dir, 'y.sock'), () => {}, { handshakeFrameBytes: 0 })).rejects.toBeInstanceOf(ConfigError);
    await expect(listenUnix(path.join(dir, 'y.sock'), () => {}, { maxFrameBytes: 100, handshakeFrameBytes: 101 })).rejects.toBeInstanceOf(ConfigError);
    await expect(listenUnix(path.join(dir, 'y.sock'), () => {}, { frameTimeoutMs: -1 })).rejects.toBeInstanceOf(ConfigError);
  });
});

describe('unix channel: the listener removes only its own socket', () => {
  it('close() leaves an unrelated file put at the path after listen()', async () => {
    const l = await listen();
    fs.unlinkSync(l.path);
    fs.writeFileSync(l.path, 'not yours');
    await l.close();
    expect(fs.readFileSync(l.path, 'utf8')).toBe('not yours');
  });

  it("close() leaves another listener's socket at the path, and that listener keeps accepting", async () => {
    const first = await listen();
    fs.unlinkSync(first.path); // as an operator (or a new run of the job) would clear it
    const accepted: UnixChannel[] = [];
    const second = await listenUnix(first.path, (ch) => accepted.push(ch));
    listeners.push(second);
    await first.close();
    expect(fs.lstatSync(first.path).isSocket()).toBe(true);
    const client = await connectUnix(first.path);
    client.close();
    expect(accepted).toHaveLength(1);
  });

  it('the socket is never at the path with a mode other than 0600, and no temporary name is left', async () => {
    const l = await listen();
    expect(fs.lstatSync(l.path).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dir)).toEqual(['s.sock']);
    await l.close();
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});
