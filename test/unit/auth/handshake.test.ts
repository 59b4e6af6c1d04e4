/**
 * The connection handshake (src/auth/handshake.ts, docs/protocol.md
 * "Connection set-up"): HELLO with a nonce both ways, then an HMAC PROOF of
 * the job token. The token never crosses the wire, a recorded or reflected
 * proof is refused, and a listener that cannot prove the token is refused by
 * the side that connects to it.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Handshake, MAX_HANDSHAKE_FRAME_BYTES } from '../../../src/auth/handshake.js';
import { computeProof } from '../../../src/auth/proof.js';
import { createMemoryChannelPair, type MemoryChannel } from '../../../src/channel/memory-channel.js';
import { FrameReader, lengthPrefix } from '../../../src/channel/framing.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { AccessDeniedError, BadTokenError, ProtocolError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../../src/wire/codec.js';
import { type Frame, FrameType, type HelloFrame, NONCE_BYTES, WIRE_VERSION } from '../../../src/wire/frames.js';

const TOKEN = 'job-secret-5f3c9a0e7b21d4c8';
let dir: string;
const cleanups: (() => Promise<void> | void)[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-hs-'));
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function transport(id: string, token = TOKEN, extra: Parameters<typeof Transport.create>[0] = {}): Promise<Transport> {
  const driver = new SimulatedCudaDriver();
  const t = await Transport.create({ driver, id, device: 0, token, ...extra });
  cleanups.push(async () => {
    await t.close();
    driver.close();
  });
  return t;
}

/** A raw Unix socket peer: every byte it receives, and the frames in them. */
function rawSocket(socket: net.Socket) {
  const bytes: Buffer[] = [];
  const frames: Frame[] = [];
  const reader = new FrameReader(1 << 20, (f) => frames.push(decodeFrame(f.slice())));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('data', (b: Buffer) => {
    bytes.push(b);
    reader.push(b);
  });
  socket.on('error', () => {});
  return {
    socket,
    frames,
    closed,
    all: () => Buffer.concat(bytes),
    send: (f: Frame) => socket.write(Buffer.concat([lengthPrefix(encodeFrame(f).byteLength), encodeFrame(f)])),
    async next(type: FrameType): Promise<Frame> {
      for (;;) {
        const f = frames.find((x) => x.type === type);
        if (f) return f;
        if (socket.destroyed) throw new Error(`socket closed before ${FrameType[type]}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    },
  };
}

function hasToken(b: Buffer): boolean {
  return b.includes(Buffer.from(TOKEN)) || b.includes(Buffer.from(TOKEN.slice(0, 8)));
}

describe('the job token never crosses the wire', () => {
  it('a raw client of a listener gets a HELLO and a PROOF, neither holding the token; its own wrong PROOF is refused', async () => {
    const t = await transport('listener');
    const refused = new Promise<Error>((resolve) => t.once('refused', resolve));
    const sock = path.join(dir, 'l.sock');
    await t.listen(sock);
    const peer = rawSocket(net.createConnection(sock));
    cleanups.push(() => void peer.socket.destroy());
    const hello = (await peer.next(FrameType.HELLO)) as HelloFrame;
    expect(hello.nonce.byteLength).toBe(NONCE_BYTES);
    expect(hello).not.toHaveProperty('token');
    // Answer with a HELLO of our own: the listener proves the token (without sending it) and waits for ours.
    const mine = new Handshake({ id: 'snoop', token: 'a guess', deviceUuid: '', features: 0 });
    peer.send(mine.hello);
    await peer.next(FrameType.PROOF);
    expect(hasToken(peer.all())).toBe(false);
    const step = mine.receive(hello);
    if (step.kind !== 'proof') throw new Error('expected a proof to send');
    peer.send(step.proof); // made with a guess: refused
    const err = await refused;
    expect(err).toBeInstanceOf(BadTokenError);
    expect((err as BadTokenError).code).toBe('SMCUDA_BAD_TOKEN');
    await peer.closed;
    expect(t.endpoints()).toHaveLength(0);
  });

  it('a connecting transport sends no byte of its token to whatever listens at the path, and refuses a listener that cannot prove it', async () => {
    const t = await transport('client', TOKEN, { helloTimeoutMs: 60_000 });
    const sock = path.join(dir, 'fake.sock');
    const seen: ReturnType<typeof rawSocket>[] = [];
    const server = net.createServer((s) => {
      const peer = rawSocket(s);
      seen.push(peer);
      // An impostor that does not know the token: it runs the handshake with a guess.
      const hs = new Handshake({ id: 'impostor', token: 'not-the-token', deviceUuid: '', features: 0 });
      peer.send(hs.hello);
      void peer.next(FrameType.HELLO).then((h) => {
        const step = hs.receive(h);
        if (step.kind === 'proof') peer.send(step.proof);
      });
    });
    await new Promise<void>((r) => server.listen(sock, r));
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    const err = await t.connect(sock).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadTokenError);
    expect((err as Error).message).toMatch(/peer impostor \(pid \d+\) could not prove the job token/);
    expect(seen).toHaveLength(1);
    await seen[0]!.closed;
    expect(seen[0]!.frames.map((f) => f.type)).toEqual([FrameType.HELLO, FrameType.PROOF]);
    expect(hasToken(seen[0]!.all())).toBe(false);
    expect(t.endpoints()).toHaveLength(0);
  });

  it('two transports with the same token authenticate over a Unix socket; the trace holds no nonce or proof bytes', async () => {
    const trace = path.join(dir, 'trace.jsonl');
    const a = await transport('a', TOKEN, { trace });
    const b = await transport('b', TOKEN, { trace });
    await a.listen(path.join(dir, 'a.sock'));
    const accepted = new Promise((resolve) => a.once('endpoint', resolve));
    const ep = await b.connect(path.join(dir, 'a.sock'));
    await accepted;
    expect(ep.peerId).toBe('a');
    expect(a.endpoint('b')).toBeDefined();
    const text = fs.readFileSync(trace, 'utf8');
    expect(text).toMatch(/"frame":"PROOF"/);
    expect(text).toMatch(/"proof":true/);
    expect(text).not.toContain(TOKEN);
  });
});

/** Two memory channels with every frame that crosses them recorded. */
function tappedPair(names: [string, string]): { ends: [MemoryChannel, MemoryChannel]; sent: Map<string, Uint8Array[]> } {
  const [x, y] = createMemoryChannelPair({ names });
  const sent = new Map<string, Uint8Array[]>([
    [names[0], []],
    [names[1], []],
  ]);
  y.on('frame', (f) => sent.get(names[0])!.push(f.slice()));
  x.on('frame', (f) => sent.get(names[1])!.push(f.slice()));
  return { ends: [x, y], sent };
}

describe('replays and reflections', () => {
  it('a HELLO and PROOF recorded from an honest connection, replayed to a new one, are refused (the proof covers the old nonces)', async () => {
    const a = await transport('a');
    const b = await transport('b');
    const { ends, sent } = tappedPair(['a', 'b']);
    await Promise.all([a.attach(ends[0]), b.attach(ends[1])]);
    const [bHello, bProof] = sent.get('b')!;
    expect(decodeFrame(bProof!).type).toBe(FrameType.PROOF);
    a.endpoint('b')!.close('done');
    // The attacker replays b's frames on a fresh connection to a.
    const [attacker, victim] = createMemoryChannelPair({ names: ['m', 'a'] });
    const attached = a.attach(victim);
    attacker.send(bHello!);
    attacker.send(bProof!);
    const err = await attached.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadTokenError);
    expect(a.endpoint('b')).toBeUndefined();
  });

  it("a side's own PROOF sent back to it is refused; so is its own HELLO, and its own nonce under another id", async () => {
    const a = await transport('a');
    // Reflect the PROOF: say HELLO as 'm', then return a's PROOF to it.
    {
      const [m, victim] = createMemoryChannelPair({ names: ['m', 'a'] });
      const frames: Frame[] = [];
      m.on('frame', (f) => {
        const frame = decodeFrame(f);
        frames.push(frame);
        if (frame.type === FrameType.PROOF) m.send(encodeFrame(frame));
      });
      const attached = a.attach(victim);
      m.send(
        encodeFrame({
          type: FrameType.HELLO,
          version: WIRE_VERSION,
          pid: process.pid,
          peerId: 'm',
          deviceUuid: '',
          nonce: new Uint8Array(NONCE_BYTES).fill(7),
        }),
      );
      await expect(attached).rejects.toBeInstanceOf(BadTokenError);
    }
    // Reflect the HELLO as it is, and with another id.
    for (const rename of [false, true]) {
      const [m, victim] = createMemoryChannelPair({ names: ['m', 'a'] });
      m.on('frame', (f) => {
        const frame = decodeFrame(f);
        if (frame.type === FrameType.HELLO) m.send(encodeFrame(rename ? { ...frame, peerId: 'mirror' } : frame));
      });
      const err = await a.attach(victim).catch((e: unknown) => e);
      if (rename) expect(err).toBeInstanceOf(AccessDeniedError);
      else expect((err as ProtocolError).code).toBe('SMCUDA_DUPLICATE_PEER');
    }
    expect(a.endpoints()).toHaveLength(0);
  });

  it('a second PROOF after the handshake closes the endpoint with ProtocolError', async () => {
    const a = await transport('a');
    const b = await transport('b');
    const { ends, sent } = tappedPair(['a', 'b']);
    const [epA] = await Promise.all([a.attach(ends[0]), b.attach(ends[1])]);
    const closed = new Promise<Error | undefined>((resolve) => epA.once('close', resolve));
    ends[1].send(sent.get('b')![1]!);
    expect(await closed).toBeInstanceOf(ProtocolError);
  });
});

describe('Handshake', () => {
  const opts = (id: string, token: string, pid: number, peerPid?: number) => ({ id, token, pid, peerPid, deviceUuid: '', features: 0 });

  it('honest sides with the same token authenticate each other in one exchange; with different tokens neither does', () => {
    for (const [ta, tb, ok] of [
      ['t', 't', true],
      ['', '', true],
      ['t', 'u', false],
      ['', 't', false],
    ] as const) {
      const x = new Handshake(opts('x', ta, 10, 20));
      const y = new Handshake(opts('y', tb, 20, 10));
      const px = x.receive(y.hello);
      const py = y.receive(x.hello);
      if (px.kind !== 'proof' || py.kind !== 'proof') throw new Error('expected proofs');
      if (ok) {
        expect(x.receive(py.proof).kind).toBe('authenticated');
        expect(y.receive(px.proof).kind).toBe('authenticated');
      } else {
        expect(() => x.receive(py.proof)).toThrow(BadTokenError);
        expect(() => y.receive(px.proof)).toThrow(BadTokenError);
      }
    }
  });

  it('a peer whose HELLO claims another pid than the kernel reports for the connection is refused (a relay, or another pid namespace)', () => {
    const x = new Handshake(opts('x', 't', 10, 30));
    const y = new Handshake(opts('y', 't', 20, 10));
    expect(() => x.receive(y.hello)).toThrow(/says it is pid 20 but the kernel reports pid 30/);
  });

  it('only HELLO then PROOF, each once; anything else before authentication is a ProtocolError', () => {
    const x = new Handshake(opts('x', 't', 10));
    expect(() => x.receive({ type: FrameType.CLOSE, reason: '' })).toThrow(ProtocolError);
    const y = new Handshake(opts('y', 't', 20));
    y.receive(x.hello);
    expect(() => y.receive(x.hello)).toThrow(/expected PROOF/);
  });

  it('handshake frames fit the pre-authentication bound; the proof covers the wire version', () => {
    const longest = encodeFrame({
      ...new Handshake(opts('i'.repeat(256), 't', 1)).hello,
      deviceUuid: 'GPU-00112233-4455-6677-8899-aabbccddeeff',
      features: 0xffffffff,
    });
    expect(longest.byteLength).toBe(MAX_HANDSHAKE_FRAME_BYTES);
    expect(MAX_HANDSHAKE_FRAME_BYTES).toBeLessThanOrEqual(512);
    const input = {
      version: WIRE_VERSION,
      senderPid: 1,
      receiverPid: 2,
      senderId: 'a',
      receiverId: 'b',
      senderNonce: new Uint8Array(32),
      receiverNonce: new Uint8Array(32).fill(1),
    };
    const p = computeProof('t', input);
    expect(computeProof('t', { ...input, version: WIRE_VERSION - 1 })).not.toEqual(p);
    // Moving a byte between the two ids changes the proof (ids are length-prefixed).
    expect(computeProof('t', { ...input, senderId: 'ab', receiverId: '' })).not.toEqual(computeProof('t', { ...input, senderId: 'a', receiverId: 'b' }));
  });
});
