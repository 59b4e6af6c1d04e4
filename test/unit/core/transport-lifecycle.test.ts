/**
 * A Transport's set-up and tear-down as a careless user or a hostile peer
 * meets them (issue 16): options checked at create, typed errors from the
 * socket layer, close() racing listen() and connect(), every call after
 * close(), the stale-socket probe, and what a connection may do before and
 * after it has authenticated.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Handshake } from '../../../src/auth/handshake.js';
import { FrameReader, lengthPrefix } from '../../../src/channel/framing.js';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ClosedError, ConfigError, NoListenerError, PeerLostError, ProtocolError } from '../../../src/errors.js';
import { Transport, type TransportCreateOptions } from '../../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../../src/wire/codec.js';
import { type Frame, FrameType } from '../../../src/wire/frames.js';

let dir: string;
const cleanups: (() => Promise<void> | void)[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-life-'));
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function transport(id: string, opts: TransportCreateOptions = {}): Promise<Transport> {
  const driver = new SimulatedCudaDriver();
  const t = await Transport.create({ driver, id, device: 0, ...opts });
  cleanups.push(async () => {
    await t.close();
    driver.close();
  });
  return t;
}

const fdCount = () => fs.readdirSync('/proc/self/fd').length;

function raw(p: string): Promise<net.Socket> {
  const s = net.createConnection(p);
  s.on('error', () => {});
  cleanups.push(() => void s.destroy());
  return new Promise((resolve, reject) => s.once('connect', () => resolve(s)).once('error', reject));
}

const send = (s: net.Socket, f: Frame) => {
  const b = encodeFrame(f);
  s.write(Buffer.concat([lengthPrefix(b.byteLength), b]));
};

describe('options are checked at create', () => {
  it('an id of more bytes than HELLO carries (450 bytes in 150 characters) is a ConfigError at create, not an encode error later', async () => {
    const err = await Transport.create({ driver: 'sim', id: '€'.repeat(150) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/id must be 1..256 UTF-8 bytes, got 450: use a shorter id/);
  });

  it('ids and tokens: control characters, lone surrogates, over-long tokens refused; 256-byte ids accepted', async () => {
    for (const bad of [
      { id: '' },
      { id: 'a\nb' },
      { id: 'a\u0000' },
      { id: 'x\ud800' },
      { token: 't'.repeat(257) },
      { token: 'x\udc00' },
      { token: 5 as unknown as string },
    ]) {
      await expect(Transport.create({ driver: 'sim', ...bad }), JSON.stringify(bad)).rejects.toBeInstanceOf(ConfigError);
    }
    const t = await transport('i'.repeat(256), { token: 'k'.repeat(256) });
    expect(t.id).toHaveLength(256);
  });

  it('helloTimeoutMs and frameTimeoutMs must be numbers of milliseconds', async () => {
    await expect(Transport.create({ driver: 'sim', helloTimeoutMs: 0 })).rejects.toBeInstanceOf(ConfigError);
    await expect(Transport.create({ driver: 'sim', frameTimeoutMs: -5 })).rejects.toBeInstanceOf(ConfigError);
  });
});

describe('typed errors from the socket layer', () => {
  it('connecting where nothing listens is NoListenerError (not a lost peer), with the fix', async () => {
    const t = await transport('c');
    const err = await t.connect(path.join(dir, 'none.sock')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoListenerError);
    expect(err).not.toBeInstanceOf(PeerLostError);
    expect((err as NoListenerError).code).toBe('SMCUDA_NO_LISTENER');
    expect((err as Error).message).toMatch(/ENOENT.*start the listening process first/);
  });

  it('a socket file whose process is gone (ECONNREFUSED) is NoListenerError too', async () => {
    const p = path.join(dir, 'stale.sock');
    const server = net.createServer().listen(p);
    await new Promise((r) => server.once('listening', r));
    // Close the fd without unlinking: what a killed process leaves behind.
    fs.linkSync(p, `${p}.keep`);
    await new Promise<void>((r) => server.close(() => r()));
    fs.renameSync(`${p}.keep`, p);
    const t = await transport('c');
    const err = await t.connect(p).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoListenerError);
    expect((err as Error).message).toMatch(/ECONNREFUSED.*restart the listener/);
  });

  it('listening where the directory does not exist is a ConfigError that says so', async () => {
    const t = await transport('l');
    const err = await t.listen(path.join(dir, 'missing', 's.sock'), { privateDir: false }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/does not exist/);
  });
});

describe('close() and what follows it', () => {
  it('every call after close() throws ClosedError', async () => {
    const t = await transport('closed');
    await t.close();
    const calls: [string, () => unknown][] = [
      ['listen', () => t.listen(path.join(dir, 'x.sock'))],
      ['connect', () => t.connect(path.join(dir, 'x.sock'))],
      ['attach', () => t.attach(undefined as never)],
      ['useDevice', () => t.useDevice(0)],
      ['invalidate', () => t.invalidate(1n)],
      ['free', () => t.free(1n)],
    ];
    for (const [name, call] of calls) {
      let err: unknown;
      try {
        await call();
      } catch (e) {
        err = e;
      }
      expect(err, name).toBeInstanceOf(ClosedError);
      expect((err as ClosedError).code, name).toBe('SMCUDA_CLOSED');
    }
  });

  it('close() racing a listen() that was not awaited: listen rejects with ClosedError, nothing listens, no fd is left, nothing is thrown', async () => {
    const t = await transport('racer');
    const before = fdCount();
    const p = path.join(dir, 'race.sock');
    const listening = t.listen(p);
    const closing = t.close();
    await expect(listening).rejects.toBeInstanceOf(ClosedError);
    await closing;
    // close() waited for the listener to be closed again: its fd is gone already.
    expect(fdCount()).toBeLessThanOrEqual(before);
    // Nothing accepts there (an accept would have thrown from the callback before).
    await expect(raw(p)).rejects.toMatchObject({ code: expect.stringMatching(/ENOENT|ECONNREFUSED/) });
    expect(fs.existsSync(p)).toBe(false);
  });

  it('close() racing connect(): connect rejects with ClosedError and its socket is closed', async () => {
    const server = await transport('server');
    const p = path.join(dir, 'server.sock');
    await server.listen(p);
    const t = await transport('client');
    const before = fdCount();
    const connecting = t.connect(p);
    const closing = t.close();
    await expect(connecting).rejects.toBeInstanceOf(ClosedError);
    await closing;
    expect(t.endpoints()).toHaveLength(0);
    // Both ends of the connection are gone (the listener's too, once it sees the end).
    await vi.waitFor(() => expect(fdCount()).toBeLessThanOrEqual(before));
  });

  it('close() during the handshake: attach rejects with ClosedError, not a lost peer', async () => {
    const t = await transport('client');
    const [x] = createMemoryChannelPair();
    const attached = t.attach(x).catch((e: unknown) => e);
    await t.close();
    expect(await attached).toBeInstanceOf(ClosedError);
  });

  it("close() with accepted connections still in their handshake ends them without reporting them as 'refused'", async () => {
    const t = await transport('listener');
    const refused: Error[] = [];
    t.on('refused', (e) => refused.push(e));
    const p = path.join(dir, 'l.sock');
    await t.listen(p);
    const s = await raw(p);
    const closed = new Promise<void>((r) => s.once('close', () => r()));
    s.write(Buffer.from([1])); // a byte of a frame: the connection is not a silent probe
    await new Promise((r) => s.once('data', r)); // the listener's HELLO: it is in its handshake
    await t.close();
    await closed;
    expect(refused).toEqual([]);
  });
});

describe("listen()'s stale-socket probe", () => {
  it('does not make the live listener it finds emit refused', async () => {
    const live = await transport('live');
    const refused: Error[] = [];
    live.on('refused', (e) => refused.push(e));
    const p = path.join(dir, 'live.sock');
    await live.listen(p);
    const other = await transport('other');
    await expect(other.listen(p)).rejects.toThrow(/Another process is listening/);
    // A connection that does send something wrong is still refused; by then the probe's connection is long handled.
    const bad = await raw(p);
    bad.write(Buffer.concat([lengthPrefix(4), Buffer.from('nope')]));
    await vi.waitFor(() => expect(refused).toHaveLength(1));
    expect(refused[0]).toBeInstanceOf(ProtocolError);
    expect(refused[0]!.message).toMatch(/magic/);
  });
});

describe('before authentication', () => {
  it('a connection announcing a 200 MiB frame (within maxFrameBytes) is refused at once (not at the HELLO timeout), its socket closed', async () => {
    const t = await transport('victim', { helloTimeoutMs: 600_000 });
    const refused = new Promise<Error>((resolve) => t.once('refused', resolve));
    const p = path.join(dir, 'v.sock');
    await t.listen(p);
    const s = await raw(p);
    const closed = new Promise<void>((r) => s.once('close', () => r()));
    s.write(lengthPrefix(200 * 1024 * 1024));
    s.write(Buffer.alloc(64 * 1024, 1));
    const err = await refused;
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as ProtocolError).code).toBe('SMCUDA_PROTOCOL_FRAME_SIZE');
    expect(err.message).toMatch(/not completed the handshake/);
    await closed;
    expect(t.endpoints()).toHaveLength(0);
  });

  it('any frame but HELLO first, or PROOF second, is refused at once', async () => {
    const t = await transport('victim', { helloTimeoutMs: 600_000 });
    const p = path.join(dir, 'v.sock');
    await t.listen(p);
    const refused: Error[] = [];
    t.on('refused', (e) => refused.push(e));
    const first = await raw(p);
    send(first, { type: FrameType.CLOSE, reason: 'hi' });
    const second = await raw(p);
    const hs = new Handshake({ id: 'm', token: '', deviceUuid: '', features: 0 });
    send(second, hs.hello);
    send(second, { type: FrameType.EAGER, tag: 1, seq: 0, fromDevice: false, data: new Uint8Array(8) });
    await vi.waitFor(() => expect(refused).toHaveLength(2));
    expect(refused.map((e) => e.message).sort()).toEqual([
      expect.stringMatching(/expected HELLO first, got CLOSE/),
      expect.stringMatching(/expected PROOF after HELLO from m, got EAGER/),
    ]);
  });
});

describe('after authentication', () => {
  it('a frame that trickles in is dropped after frameTimeoutMs: the endpoint closes with ProtocolError', async () => {
    const t = await transport('victim', { frameTimeoutMs: 300 });
    const p = path.join(dir, 'v.sock');
    await t.listen(p);
    const endpoint = new Promise<import('../../../src/endpoint.js').Endpoint>((resolve) => t.once('endpoint', resolve));
    const s = await raw(p);
    // An honest handshake (same token: none), by hand.
    const hs = new Handshake({ id: 'slow', token: '', deviceUuid: '', features: 0 });
    const reader = new FrameReader(1 << 20, (f) => {
      const frame = decodeFrame(f);
      if (frame.type === FrameType.HELLO || frame.type === FrameType.PROOF) {
        const step = hs.receive(frame);
        if (step.kind === 'proof') send(s, step.proof);
      }
    });
    s.on('data', (b: Buffer) => reader.push(b));
    send(s, hs.hello);
    const ep = await endpoint;
    const closed = new Promise<Error | undefined>((resolve) => ep.once('close', resolve));
    s.write(lengthPrefix(1000));
    const drip = setInterval(() => s.write(Buffer.of(0)), 50);
    try {
      const err = await closed;
      expect(err).toBeInstanceOf(ProtocolError);
      expect((err as ProtocolError).code).toBe('SMCUDA_PROTOCOL_FRAME_TIMEOUT');
    } finally {
      clearInterval(drip);
    }
  });
});
