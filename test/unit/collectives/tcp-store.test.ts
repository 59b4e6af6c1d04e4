/**
 * The TCP store of a rendezvous across machines (src/collectives/tcp-store*.ts):
 *  - set/get/wait/add between processes, the address and token from
 *    MASTER_ADDR/MASTER_PORT and SMCUDA_TOKEN as torchrun's ranks get them;
 *    a rank that starts before rank 0 waits for it;
 *  - the job token is proven both ways and never sent: a wrong token is
 *    refused, a store that cannot prove it is refused;
 *  - hostile connections are bounded: oversized and malformed frames,
 *    many connections, bytes trickled in (before and after authenticating),
 *    values and waits over the limits;
 *  - rank 0's store gone, unreachable or silent: a typed error within the timeout.
 */
import { randomBytes } from 'node:crypto';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { storeProof } from '../../../src/auth/store-proof.js';
import { TcpStore } from '../../../src/collectives/tcp-store.js';
import { CLIENT_HELLO_BYTES, encodeFrame, keyBytes, STORE_VERSION, StoreFrame, u8, u32, valueBytes } from '../../../src/collectives/tcp-store-frames.js';
import { TcpStoreServer } from '../../../src/collectives/tcp-store-server.js';
import { envCommunicator, envStoreAddress } from '../../../src/env.js';
import { BadTokenError, ConfigError, StoreError } from '../../../src/errors.js';
import { spawnPeer, type WorkerClient, WorkerCommandError } from '../../helpers/child.js';

const TOKEN = 'job-secret-4f1c';
const LOCAL = '127.0.0.1';

const cleanup: Array<() => unknown> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function track<T extends { close(): unknown }>(x: T): T {
  cleanup.push(() => x.close());
  return x;
}

async function rank(env: Record<string, string>): Promise<WorkerClient> {
  const peer = await spawnPeer('store-rank.mjs', { env: { ...process.env, SMCUDA_TOKEN: TOKEN, ...env } });
  cleanup.push(() => {
    peer.child.kill('SIGKILL');
  });
  return peer;
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolves once `cond` holds (checked every 10 ms), or fails after `ms`. */
async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`condition not met within ${ms} ms`);
    await sleep(10);
  }
}

/** Resolves when `socket` is closed by the other side (or errors). */
function closed(socket: Socket): Promise<number> {
  const t0 = Date.now();
  return new Promise((r) => {
    if (socket.destroyed) return r(0);
    socket.once('close', () => r(Date.now() - t0));
  });
}

/** A raw connection to `port`, with everything it received. */
async function raw(port: number): Promise<{ socket: Socket; received: () => Buffer }> {
  const socket = netConnect({ host: LOCAL, port });
  cleanup.push(() => socket.destroy());
  const chunks: Buffer[] = [];
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.on('error', () => {});
  await new Promise<void>((r) => socket.once('connect', () => r()));
  return { socket, received: () => Buffer.concat(chunks) };
}

/** A raw connection that proves the token as a client would, for frames a TcpStore would never send. */
async function rawAuthenticated(port: number): Promise<{ socket: Socket; received: () => Buffer }> {
  const c = await raw(port);
  while (c.received().byteLength < 42) await sleep(5);
  const storeNonce = c.received().subarray(10, 42);
  const nonce = randomBytes(32);
  c.socket.write(encodeFrame(StoreFrame.CLIENT_HELLO, 0, [u8(STORE_VERSION), nonce, storeProof(TOKEN, STORE_VERSION, 'client', nonce, storeNonce)]));
  while (c.received().byteLength < 42 + 41) await sleep(5);
  expect(c.received()[46]).toBe(StoreFrame.SERVER_PROOF);
  return c;
}

describe('set, get, wait and add between processes', () => {
  it('ranks find rank 0 through MASTER_ADDR/MASTER_PORT and SMCUDA_TOKEN; get waits for the key; adds are distinct', async () => {
    const store0 = track(await TcpStore.create({ rank: 0, address: { host: LOCAL, port: 0 }, token: TOKEN, timeoutMs: 10_000 }));
    const env = { MASTER_ADDR: LOCAL, MASTER_PORT: String(store0.server!.port) };
    const [r1, r2] = await Promise.all([rank(env), rank(env)]);
    await Promise.all([r1.call('connect', { rank: 1, timeoutMs: 10_000 }), r2.call('connect', { rank: 2, timeoutMs: 10_000 })]);

    const id = randomBytes(128);
    const got = r1.call<string>('get', { key: 'nccl/unique-id', timeoutMs: 10_000 });
    await sleep(50);
    await store0.set('nccl/unique-id', id);
    expect(await got).toBe(hex(id));
    expect(await r2.call<string>('get', { key: 'nccl/unique-id', timeoutMs: 1000 })).toBe(hex(id));

    const sums = await Promise.all([
      r1.call<number>('add', { key: 'arrived', delta: 1 }),
      r2.call<number>('add', { key: 'arrived', delta: 1 }),
      store0.add('arrived', 1),
    ]);
    expect([...sums].sort()).toEqual([1, 2, 3]);

    const waited = r2.call('wait', { keys: ['node/1', 'node/2'], timeoutMs: 10_000 });
    await store0.set('node/1', 'host-a');
    await r1.call('set', { key: 'node/2', value: hex(Buffer.from('host-b')) });
    await waited;
    expect(Buffer.from(await store0.get('node/2')).toString()).toBe('host-b');

    const err = await rejection(r1.call('wait', { keys: ['never'], timeoutMs: 100 }));
    expect(err).toBeInstanceOf(WorkerCommandError);
    expect((err as WorkerCommandError).code).toBe('SMCUDA_STORE_TIMEOUT');
  });

  it('a rank that starts before rank 0 tries again until the store listens', async () => {
    const probe = await TcpStoreServer.listen({ port: 0, token: TOKEN });
    const port = probe.port;
    await probe.close();
    const r1 = await rank({ SMCUDA_RENDEZVOUS: `tcp://${LOCAL}:${port}` });
    const joined = r1.call('connect', { rank: 1, timeoutMs: 10_000 });
    await sleep(300);
    const store0 = track(await TcpStore.create({ rank: 0, address: { host: LOCAL, port }, token: TOKEN }));
    await joined;
    await r1.call('set', { key: 'late', value: 'ff' });
    expect(hex(await store0.get('late', { timeoutMs: 1000 }))).toBe('ff');
  });
});

describe('the job token', () => {
  it('a rank with another token is refused at once, with a BadTokenError; the store counts it', async () => {
    const server = track(await TcpStoreServer.listen({ port: 0, token: TOKEN }));
    const t0 = Date.now();
    const err = await rejection(TcpStore.connect({ host: LOCAL, port: server.port }, { token: 'another-job', timeoutMs: 10_000 }));
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(err).toBeInstanceOf(BadTokenError);
    expect((err as BadTokenError).code).toBe('SMCUDA_BAD_TOKEN');
    expect((err as Error).message).toContain('same SMCUDA_TOKEN');
    expect(server.stats()).toMatchObject({ connections: 0, closed: 1 });
  });

  it('the token never travels: the client sends its HMAC only, and refuses a store that cannot prove the token', async () => {
    // An impostor: answers with a HELLO, then a proof it cannot make.
    const sent: Buffer[] = [];
    const impostor: Server = createServer((s) => {
      s.on('data', (c: Buffer) => {
        sent.push(c);
        if (Buffer.concat(sent).byteLength >= CLIENT_HELLO_BYTES) s.write(encodeFrame(StoreFrame.SERVER_PROOF, 0, [randomBytes(32)]));
      });
      s.on('error', () => {});
      s.write(encodeFrame(StoreFrame.SERVER_HELLO, 0, [u8(STORE_VERSION), randomBytes(32)]));
    });
    await new Promise<void>((r) => impostor.listen(0, LOCAL, () => r()));
    cleanup.push(() => new Promise((r) => impostor.close(r)));
    const port = (impostor.address() as { port: number }).port;
    const err = await rejection(TcpStore.connect({ host: LOCAL, port }, { token: TOKEN, timeoutMs: 5000 }));
    expect(err).toBeInstanceOf(BadTokenError);
    expect((err as Error).message).toMatch(/could not prove the job token: it is not this job's store/);
    const bytes = Buffer.concat(sent);
    expect(bytes.byteLength).toBe(CLIENT_HELLO_BYTES);
    expect(bytes.includes(Buffer.from(TOKEN))).toBe(false);
  });

  it('a store needs a token; no address is a ConfigError that names the variables', async () => {
    await expect(TcpStoreServer.listen({ port: 0, token: '' })).rejects.toThrow(ConfigError);
    await expect(TcpStore.create({ rank: 1, env: { MASTER_ADDR: LOCAL, MASTER_PORT: '1' } })).rejects.toThrow(/SMCUDA_TOKEN/);
    await expect(TcpStore.create({ rank: 1, token: TOKEN, env: {} })).rejects.toThrow(/MASTER_ADDR and MASTER_PORT/);
    // Rank 0 on a port already taken (another job's store, or a second rank 0).
    const first = track(await TcpStoreServer.listen({ port: 0, token: TOKEN }));
    const err = await rejection(TcpStore.create({ rank: 0, token: TOKEN, address: { host: LOCAL, port: first.port } }));
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/cannot listen on every interface, port \d+ \(EADDRINUSE\): set MASTER_PORT/);
  });
});

describe('hostile connections are bounded', () => {
  it('before authenticating: an oversized or foreign frame is closed at once; a trickled HELLO at authTimeoutMs', async () => {
    const server = track(await TcpStoreServer.listen({ port: 0, token: TOKEN, limits: { authTimeoutMs: 10_000 } }));
    const big = await raw(server.port);
    big.socket.write(Buffer.from([0xff, 0xff, 0xff, 0x7f, StoreFrame.CLIENT_HELLO]));
    expect(await closed(big.socket)).toBeLessThan(1000);
    const foreign = await raw(server.port);
    foreign.socket.write(encodeFrame(StoreFrame.SET, 1, [keyBytes('k'), ...valueBytes(Buffer.from('v'))]));
    expect(await closed(foreign.socket)).toBeLessThan(1000);
    expect(server.stats()).toMatchObject({ connections: 0, unauthenticated: 0, keys: 0, bytes: 0, closed: 2 });

    const strict = track(await TcpStoreServer.listen({ port: 0, token: TOKEN, limits: { authTimeoutMs: 300 } }));
    const slow = await raw(strict.port);
    const hello = encodeFrame(StoreFrame.CLIENT_HELLO, 0, [u8(STORE_VERSION), randomBytes(64)]);
    let i = 0;
    const drip = setInterval(() => slow.socket.writable && i < hello.byteLength && slow.socket.write(hello.subarray(i, ++i)), 20);
    cleanup.push(() => clearInterval(drip));
    const ms = await closed(slow.socket);
    expect(ms).toBeGreaterThan(250);
    expect(ms).toBeLessThan(3000);
    expect(i).toBeLessThan(hello.byteLength);
    expect(strict.stats()).toMatchObject({ connections: 0, unauthenticated: 0, closed: 1 });
  });

  it('many connections: at most maxUnauthenticated held, the rest closed on accept; an honest rank still gets in', async () => {
    const server = track(await TcpStoreServer.listen({ port: 0, token: TOKEN, limits: { maxUnauthenticated: 4, authTimeoutMs: 400, maxConnections: 8 } }));
    const flood = await Promise.all(Array.from({ length: 12 }, () => raw(server.port)));
    await until(() => flood.filter((c) => c.socket.destroyed).length === 8);
    expect(server.stats().unauthenticated).toBe(4);
    // Refused while the flood holds its places, it tries again and joins once they time out.
    const honest = track(await TcpStore.connect({ host: LOCAL, port: server.port }, { token: TOKEN, timeoutMs: 5000 }));
    await honest.set('k', 'v');
    expect(server.stats()).toMatchObject({ connections: 1, unauthenticated: 0 });
  });

  it('after authenticating: a frame over the limits is refused and dropped without being held; a trickled frame is closed', async () => {
    const server = track(
      await TcpStoreServer.listen({
        port: 0,
        token: TOKEN,
        limits: { maxValueBytes: 1024, frameTimeoutMs: 300, maxStoreBytes: 3500, maxWaitsPerConnection: 2 },
      }),
    );
    const store = track(await TcpStore.connect({ host: LOCAL, port: server.port }, { token: TOKEN, timeoutMs: 5000 }));
    // One value over maxValueBytes: refused, and the connection goes on.
    const err = await rejection(store.set('big', new Uint8Array(2048)));
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).code).toBe('SMCUDA_STORE_REFUSED');
    expect((err as Error).message).toMatch(/values are at most 1024 bytes/);
    await store.set('a', new Uint8Array(1000));
    await store.set('b', new Uint8Array(1000));
    await store.set('c', new Uint8Array(1000));
    // maxStoreBytes: a fourth would go over; replacing one is accounted as a replacement.
    await expect(store.set('d', new Uint8Array(1000))).rejects.toThrow(/maxStoreBytes of 3500/);
    await store.set('a', new Uint8Array(10));
    await store.set('d', new Uint8Array(1000));
    expect(server.stats()).toMatchObject({ keys: 4, bytes: 4 + 10 + 3000 });
    // maxWaitsPerConnection: two waits open, the third refused.
    const w1 = store.wait(['x'], { timeoutMs: 5000 });
    const w2 = store.wait(['y'], { timeoutMs: 5000 });
    await expect(store.wait(['z'], { timeoutMs: 5000 })).rejects.toThrow(/more than 2 waits/);
    await store.set('x', '1');
    await store.set('y', '1');
    await Promise.all([w1, w2]);
    // A counter that is not one.
    await expect(store.add('b', 1)).rejects.toThrow(/not a counter/);

    // A raw client announces a 1 GB frame: refused, its bytes dropped as they come, closed when they stop.
    const hostile = await rawAuthenticated(server.port);
    hostile.socket.write(Buffer.concat([u32(1 << 30), u8(StoreFrame.SET), u32(77)]));
    hostile.socket.write(Buffer.alloc(64 * 1024));
    expect(await closed(hostile.socket)).toBeLessThan(3000);
    expect(hostile.received().subarray(42 + 41)[4]).toBe(StoreFrame.ERROR);
    // A frame trickled after the handshake: closed at frameTimeoutMs.
    const slow = await rawAuthenticated(server.port);
    slow.socket.write(Buffer.concat([u32(100), u8(StoreFrame.GET), u32(1)]));
    const ms = await closed(slow.socket);
    expect(ms).toBeGreaterThan(250);
    expect(ms).toBeLessThan(3000);
    expect(server.stats()).toMatchObject({ connections: 1, keys: 6, bytes: 4 + 10 + 3000 + 4 });
  });
});

describe("rank 0's store gone", () => {
  it('rank 0 killed: a rank waiting on a key fails with SMCUDA_STORE_LOST at once, and so does every later request', async () => {
    const r0 = await rank({});
    const { port } = await r0.call<{ port: number }>('connect', { rank: 0, port: 0, timeoutMs: 10_000 });
    const store = track(await TcpStore.create({ rank: 1, address: { host: LOCAL, port }, token: TOKEN, timeoutMs: 30_000 }));
    await store.set('k', 'v');
    const waiting = rejection(store.get('never', { timeoutMs: 30_000 }));
    await sleep(50);
    const t0 = Date.now();
    r0.child.kill('SIGKILL');
    const err = await waiting;
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).code).toBe('SMCUDA_STORE_LOST');
    expect((err as Error).message).toContain('rank 0 (which serves it) exited');
    await expect(store.set('k', 'v')).rejects.toMatchObject({ code: 'SMCUDA_STORE_LOST' });
  });

  it('nothing listening: SMCUDA_STORE_TIMEOUT once the timeout is up, saying what to check', async () => {
    const probe = await TcpStoreServer.listen({ port: 0, token: TOKEN });
    const port = probe.port;
    await probe.close();
    const t0 = Date.now();
    const err = await rejection(TcpStore.connect({ host: LOCAL, port }, { token: TOKEN, timeoutMs: 300 }));
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(err).toMatchObject({ code: 'SMCUDA_STORE_TIMEOUT' });
    expect((err as Error).message).toMatch(/start rank 0.*MASTER_ADDR\/MASTER_PORT/);
  });

  it("a store whose machine stops answering (no FIN, as when a node dies): each request's timeout, typed", async () => {
    // Proves the token, then never answers: a store on a machine that went away.
    const accepted: Socket[] = [];
    const silent: Server = createServer((s) => {
      accepted.push(s);
      const nonce = randomBytes(32);
      let buf = Buffer.alloc(0);
      s.on('error', () => {});
      s.on('data', (c: Buffer) => {
        buf = Buffer.concat([buf, c]);
        if (buf.byteLength === CLIENT_HELLO_BYTES)
          s.write(encodeFrame(StoreFrame.SERVER_PROOF, 0, [storeProof(TOKEN, STORE_VERSION, 'store', nonce, buf.subarray(10, 42))]));
      });
      s.write(encodeFrame(StoreFrame.SERVER_HELLO, 0, [u8(STORE_VERSION), nonce]));
    });
    await new Promise<void>((r) => silent.listen(0, LOCAL, () => r()));
    cleanup.push(() => {
      for (const s of accepted) s.destroy();
      return new Promise((r) => silent.close(r));
    });
    const store = track(await TcpStore.connect({ host: LOCAL, port: (silent.address() as { port: number }).port }, { token: TOKEN, timeoutMs: 200 }));
    const t0 = Date.now();
    await expect(store.set('k', 'v')).rejects.toMatchObject({ code: 'SMCUDA_STORE_TIMEOUT' });
    expect(Date.now() - t0).toBeLessThan(2000);
    await expect(store.wait(['k'], { timeoutMs: 100 })).rejects.toThrow(/did not answer within 2100 ms/);
  });
});

describe('the address from the environment', () => {
  it('SMCUDA_RENDEZVOUS=tcp://host:port wins over MASTER_ADDR/MASTER_PORT; a directory there is the one-node rendezvous', () => {
    expect(envStoreAddress({ SMCUDA_RENDEZVOUS: 'tcp://node-0:29500', MASTER_ADDR: 'x', MASTER_PORT: '1' })).toEqual({
      host: 'node-0',
      port: 29500,
      from: 'SMCUDA_RENDEZVOUS',
    });
    expect(envStoreAddress({ SMCUDA_RENDEZVOUS: 'tcp://[fe80::1]:80/' })).toMatchObject({ host: 'fe80::1', port: 80 });
    expect(envStoreAddress({ MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500' })).toEqual({ host: '10.0.0.1', port: 29500, from: 'MASTER_ADDR/MASTER_PORT' });
    expect(envStoreAddress({ SMCUDA_RENDEZVOUS: '/tmp/job-rdv' })).toBeUndefined();
    expect(envCommunicator({ SMCUDA_RENDEZVOUS: '/tmp/job-rdv' }).rendezvous).toBe('/tmp/job-rdv');
    expect(envCommunicator({ SMCUDA_RENDEZVOUS: 'tcp://node-0:29500' }).rendezvous).toBeUndefined();
    expect(envStoreAddress({})).toBeUndefined();
  });

  it('a malformed or half-given address is a ConfigError naming the variable', () => {
    expect(() => envStoreAddress({ SMCUDA_RENDEZVOUS: 'tcp://node-0' })).toThrow(/SMCUDA_RENDEZVOUS must be tcp:\/\/host:port/);
    expect(() => envStoreAddress({ SMCUDA_RENDEZVOUS: 'tcp://node-0:99999' })).toThrow(ConfigError);
    expect(() => envStoreAddress({ MASTER_ADDR: 'node-0' })).toThrow(/MASTER_ADDR is set without MASTER_PORT/);
    expect(() => envStoreAddress({ MASTER_PORT: '29500' })).toThrow(/MASTER_PORT is set without MASTER_ADDR/);
    expect(() => envStoreAddress({ MASTER_ADDR: 'n', MASTER_PORT: 'http' })).toThrow(/MASTER_PORT must be a port number/);
  });
});
