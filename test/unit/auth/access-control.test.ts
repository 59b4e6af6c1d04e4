/**
 * Who may connect (docs/reliability.md, "Access"): the socket's directory
 * must be private, a peer of another uid is refused by SO_PEERCRED even
 * where file modes would let it in, and a peer with a wrong job token never
 * gets an endpoint. The uid tests run a real second process as `nobody`
 * (uid 65534), which needs root; elsewhere they are skipped visibly.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connectUnix, listenUnix, type UnixListener } from '../../../src/channel/unix-channel.js';
import { checkPeer, socketPeerCredentials } from '../../../src/channel/peer-credentials.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { AccessDeniedError, BadTokenError, ConfigError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import type { Endpoint } from '../../../src/endpoint.js';
import * as net from 'node:net';

const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;
let dir: string;
const listeners: UnixListener[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-acl-'));
});
afterEach(async () => {
  await Promise.all(listeners.splice(0).map((l) => l.close()));
  for (const c of cleanups.splice(0).reverse()) await c();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A world-writable directory straight under tmpdir (as /tmp itself is): file modes keep no one out. */
function openDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-acl-open-'));
  fs.chmodSync(d, 0o777);
  cleanups.push(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

/** Runs `code` in a node child as uid `uid`; resolves with its stdout lines once it exits. */
function runAs(uid: number, code: string, env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', code], {
      uid,
      gid: uid,
      env: { ...env, PATH: process.env.PATH ?? '' },
      cwd: '/',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    child.on('error', reject);
    child.on('exit', (c) => resolve({ code: c, out }));
  });
}

/** A child that connects to SOCK and prints what happened: 'EACCES', 'closed' (accepted then dropped), 'data'. */
const CONNECT_AND_REPORT = `
const s = require('net').createConnection(process.env.SOCK);
let got = false;
s.on('data', () => { got = true; });
s.on('error', (e) => { console.log(e.code); process.exit(0); });
s.on('close', () => { console.log(got ? 'data' : 'closed'); process.exit(0); });
setTimeout(() => { console.log('open'); process.exit(0); }, 3000);
`;

describe('the socket directory must be private', () => {
  it('refuses to listen in a directory others can enter, and says how to fix it', async () => {
    const open = path.join(dir, 'open');
    fs.mkdirSync(open);
    fs.chmodSync(open, 0o777);
    const err = await listenUnix(path.join(open, 's.sock'), () => {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/mode 0777.*chmod 700/s);
    expect(fs.existsSync(path.join(open, 's.sock'))).toBe(false);
    fs.chmodSync(open, 0o750);
    await expect(listenUnix(path.join(open, 's.sock'), () => {})).rejects.toThrow(/mode 0750/);
  });

  it.skipIf(!isRoot)(`refuses a directory owned by another user${isRoot ? '' : ' (skipped: needs root to chown)'}`, async () => {
    const theirs = path.join(dir, 'theirs');
    fs.mkdirSync(theirs, { mode: 0o700 });
    fs.chownSync(theirs, NOBODY, NOBODY);
    await expect(listenUnix(path.join(theirs, 's.sock'), () => {})).rejects.toThrow(/belongs to uid 65534/);
  });

  it('Transport.listen applies the same check', async () => {
    const driver = new SimulatedCudaDriver();
    const t = await Transport.create({ driver, id: 'dircheck', device: 0 });
    cleanups.push(async () => {
      await t.close();
      driver.close();
    });
    fs.chmodSync(dir, 0o755);
    await expect(t.listen(path.join(dir, 's.sock'))).rejects.toBeInstanceOf(ConfigError);
  });

  it.skipIf(!isRoot)(`a private directory alone keeps another user out, whatever the socket's mode${isRoot ? '' : ' (skipped: needs root)'}`, async () => {
    const accepted: unknown[] = [];
    // peerUids 'any': only the directory stands in the way here
    const l = await listenUnix(path.join(dir, 's.sock'), (ch) => accepted.push(ch), { peerUids: 'any' });
    listeners.push(l);
    fs.chmodSync(l.path, 0o666); // as if the socket's own mode were wrong
    const r = await runAs(NOBODY, CONNECT_AND_REPORT, { SOCK: l.path });
    expect(r.out.trim()).toBe('EACCES');
    expect(accepted).toHaveLength(0);
  });
});

describe.skipIf(!isRoot)(`the peer's uid is checked (SO_PEERCRED)${isRoot ? '' : ' (skipped: needs root to run a child as nobody)'}`, () => {
  it('the addon reports the pid, uid and gid of the peer of a connected socket', async () => {
    const seen: Promise<net.Socket> = new Promise((resolve) => {
      const server = net.createServer((s) => resolve(s)).listen(path.join(dir, 'raw.sock'));
      cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    });
    const client = net.createConnection(path.join(dir, 'raw.sock'));
    cleanups.push(() => void client.destroy());
    const serverSide = await seen;
    cleanups.push(() => void serverSide.destroy());
    expect(socketPeerCredentials(serverSide)).toEqual({ pid: process.pid, uid: process.getuid!(), gid: process.getgid!() });
    expect(checkPeer(serverSide, [process.getuid!()], 'test')).toMatchObject({ pid: process.pid });
    expect(() => checkPeer(serverSide, [12345], 'test')).toThrow(AccessDeniedError);
    expect(() => checkPeer(serverSide, [12345], 'test')).toThrow(/pid \d+, uid 0: only uid 12345 may connect/);
  });

  it('a process of another user is refused before it becomes a channel, even where the file modes let it in', async () => {
    const open = openDir();
    const accepted: unknown[] = [];
    const refused: AccessDeniedError[] = [];
    const l = await listenUnix(path.join(open, 's.sock'), (ch) => accepted.push(ch), { privateDir: false, onRefused: (e) => refused.push(e) });
    listeners.push(l);
    fs.chmodSync(l.path, 0o666);
    const r = await runAs(NOBODY, CONNECT_AND_REPORT, { SOCK: l.path });
    expect(r.out.trim()).toBe('closed'); // connected, then dropped at once
    expect(accepted).toHaveLength(0);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toBeInstanceOf(AccessDeniedError);
    expect(refused[0]!.code).toBe('SMCUDA_ACCESS_DENIED');
    expect(refused[0]!.message).toMatch(/uid 65534: only uid 0 may connect/);
  });

  it('a Transport fed by such a listener never gets an endpoint for that peer', async () => {
    const driver = new SimulatedCudaDriver();
    const t = await Transport.create({ driver, id: 'guarded', device: 0 });
    cleanups.push(async () => {
      await t.close();
      driver.close();
    });
    const endpoints: Endpoint[] = [];
    t.on('endpoint', (ep) => endpoints.push(ep));
    const open = openDir();
    const refused: Error[] = [];
    const l = await listenUnix(path.join(open, 's.sock'), (ch) => void t.attach(ch).catch(() => {}), { privateDir: false, onRefused: (e) => refused.push(e) });
    listeners.push(l);
    fs.chmodSync(l.path, 0o666);
    // The intruder even knows the wire format: it sends a HELLO at once.
    const hello = `
      const s = require('net').createConnection(process.env.SOCK, () => s.write(Buffer.from([6,0,0,0, 0x53,1,0,0,0,0])));
      s.on('data', () => console.log('data'));
      s.on('error', (e) => { console.log(e.code); process.exit(0); });
      s.on('close', () => { console.log('closed'); process.exit(0); });`;
    const r = await runAs(NOBODY, hello, { SOCK: l.path });
    expect(r.out).not.toMatch(/data/);
    expect(refused).toHaveLength(1);
    expect(endpoints).toHaveLength(0);
  });

  it('connectUnix refuses a listener run by another user', async () => {
    const open = openDir();
    const sock = path.join(open, 'theirs.sock');
    const child = spawn(
      process.execPath,
      [
        '-e',
        `require('net').createServer(() => {}).listen(process.env.SOCK, () => { require('fs').chmodSync(process.env.SOCK, 0o666); console.log('up'); }); setTimeout(() => {}, 10000);`,
      ],
      { uid: NOBODY, gid: NOBODY, env: { SOCK: sock, PATH: process.env.PATH ?? '' }, cwd: '/', stdio: ['ignore', 'pipe', 'inherit'] },
    );
    cleanups.push(() => void child.kill('SIGKILL'));
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`listener as nobody exited with ${code}`)));
    });
    const err = await connectUnix(sock).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AccessDeniedError);
    expect((err as Error).message).toMatch(/uid 65534/);
    // Told explicitly that uid 65534 is part of the job, it connects.
    const ch = await connectUnix(sock, { peerUids: [NOBODY] });
    ch.close();
  });
});

describe('the job token', () => {
  it('a peer with a wrong token is refused on both sides, with a clear message, and never gets an endpoint', async () => {
    const da = new SimulatedCudaDriver();
    const db = new SimulatedCudaDriver();
    const a = await Transport.create({ driver: da, id: 'a', device: 0, token: 'job-secret' });
    const b = await Transport.create({ driver: db, id: 'b', device: 0, token: 'wrong' });
    cleanups.push(async () => {
      await a.close();
      await b.close();
      da.close();
      db.close();
    });
    const endpoints: Endpoint[] = [];
    a.on('endpoint', (ep) => endpoints.push(ep));
    const refused = new Promise<Error & { code?: string }>((resolve) => a.once('refused', resolve));
    await a.listen(path.join(dir, 'a.sock'));
    const connectErr = (await b.connect(path.join(dir, 'a.sock')).then(
      () => undefined,
      (e: unknown) => e,
    )) as Error & { code?: string };
    const err = await refused;
    expect(err.code).toBe('SMCUDA_BAD_TOKEN');
    expect(err).toBeInstanceOf(BadTokenError);
    expect(err.message).toMatch(/peer b \(pid \d+\) could not prove the job token: refused/);
    // The connecting side refuses the listener for the same reason: neither can prove the other's token.
    expect(connectErr).toBeInstanceOf(BadTokenError);
    expect(connectErr.code).toBe('SMCUDA_BAD_TOKEN');
    expect(endpoints).toHaveLength(0);
    expect(a.endpoints()).toHaveLength(0);
    expect(b.endpoints()).toHaveLength(0);
  });
});
