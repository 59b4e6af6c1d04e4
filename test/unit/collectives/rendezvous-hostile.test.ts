/**
 * The rendezvous directory against hostile or stale contents (issue 47):
 * directories and token files planted by someone else, of the wrong kind,
 * owner or mode, links where the token goes, a FIFO that would block a
 * reader, a token left by a job that was killed, peers whose transport id is
 * no rank of the job, and a join that names the ranks that did not come.
 * Every wrong input ends in a typed error (class and code) within a bounded
 * time, and the token never reaches a file rank 0 did not create.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { spawnSync, execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { joinMesh, rankOfPeerId, type Mesh, type RendezvousOptions } from '../../../src/collectives/rendezvous.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { AccessDeniedError, CommunicatorTimeoutError, ConfigError, SmcudaError } from '../../../src/errors.js';
import { localOwner } from '../../../src/segment-owner.js';
import { Transport } from '../../../src/transport.js';

const root = process.getuid?.() === 0;
const NOBODY = 65534;

let base: string;
let dir: string;
let savedToken: string | undefined;
const drivers: SimulatedCudaDriver[] = [];
const meshes: Mesh[] = [];
const transports: Transport[] = [];

beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'smcuda-rdvh-'));
  dir = join(base, 'job');
  mkdirSync(dir, { mode: 0o700 });
  savedToken = process.env.SMCUDA_TOKEN;
  delete process.env.SMCUDA_TOKEN;
});

afterEach(async () => {
  for (const m of meshes.splice(0)) await m.transport.close();
  for (const t of transports.splice(0)) await t.close();
  for (const d of drivers.splice(0)) d.close();
  rmSync(base, { recursive: true, force: true });
  if (savedToken !== undefined) process.env.SMCUDA_TOKEN = savedToken;
});

function driver(): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env: {} });
  drivers.push(d);
  return d;
}

async function join_(o: Partial<RendezvousOptions> & { rank: number; size: number }): Promise<Mesh> {
  const m = await joinMesh({ dir, driver: driver(), ...o });
  meshes.push(m);
  return m;
}

/** Expects `p` to reject with an error of `cls` and `code` within `ms`; returns it. */
async function rejectsTyped(p: Promise<unknown>, cls: new (...a: never[]) => Error, code: string, ms = 2000): Promise<SmcudaError> {
  const started = Date.now();
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(cls);
  expect((err as SmcudaError).code).toBe(code);
  expect(Date.now() - started).toBeLessThan(ms);
  return err as SmcudaError;
}

/** A token file as rank 0 writes it, stamped with `pid` (and this boot and pid namespace). */
function tokenLine(pid: number, start = 0): string {
  const me = localOwner();
  return `smcuda-token 1 ${pid} ${start} ${me.boot} ${me.pidns} ${'ab'.repeat(24)}\n`;
}

function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid!;
}

/** A file outside the directory that must never receive the token. */
function victim(): string {
  const v = join(base, 'victim');
  writeFileSync(v, 'root only\n', { mode: 0o600 });
  return v;
}

async function closedWithin(ep: Endpoint, ms: number): Promise<void> {
  const started = Date.now();
  while (!ep.closed && Date.now() - started < ms) await new Promise((r) => setTimeout(r, 10));
  expect(ep.closed).toBe(true);
}

describe('the rendezvous directory is checked before anything is written in it', () => {
  it('a missing directory is made 0700 (with its parents), and the job runs in it', async () => {
    dir = join(base, 'a', 'b');
    const m = await join_({ rank: 0, size: 1 });
    expect(m.endpoints.size).toBe(0);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(readdirSync(dir)).toEqual([]); // the token went with the join
  });

  it('group or other bits: AccessDeniedError saying chmod 700, and nothing written', async () => {
    chmodSync(dir, 0o755);
    const err = await rejectsTyped(join_({ rank: 0, size: 2 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(err.message).toContain(`chmod 700 ${dir}`);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('a directory shared by every user (/tmp) is refused with advice for a private one inside it', async () => {
    dir = tmpdir();
    const err = await rejectsTyped(join_({ rank: 1, size: 2 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(err.message).toContain('shared by every user');
  });

  it('a symbolic link to a private directory: AccessDeniedError, nothing written through it', async () => {
    const link = join(base, 'link');
    symlinkSync(dir, link);
    const real = dir;
    dir = link;
    const err = await rejectsTyped(join_({ rank: 0, size: 1 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(err.message).toContain('symbolic link');
    expect(readdirSync(real)).toEqual([]);
  });

  it.skipIf(!root)("another user's directory: AccessDeniedError, nothing written", async () => {
    chownSync(dir, NOBODY, NOBODY);
    const err = await rejectsTyped(join_({ rank: 0, size: 2 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(err.message).toContain(`uid ${NOBODY}`);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('a regular file where the directory goes, or in its path: ConfigError, never a raw ENOTDIR', async () => {
    const file = join(base, 'file');
    writeFileSync(file, 'x');
    dir = file;
    const a = await rejectsTyped(join_({ rank: 0, size: 1 }), ConfigError, 'SMCUDA_CONFIG');
    expect(a.message).toContain('not a directory');
    dir = join(file, 'sub');
    await rejectsTyped(join_({ rank: 1, size: 2 }), ConfigError, 'SMCUDA_CONFIG');
    expect(readFileSync(file, 'utf8')).toBe('x');
  });
});

describe('the token file: created exclusively, never through a link, checked before it is read', () => {
  const tokenPath = () => join(dir, 'token');

  it('a symbolic link planted where the token goes: neither rank follows it; the linked file keeps its bytes', async () => {
    const v = victim();
    symlinkSync(v, tokenPath());
    const r0 = await rejectsTyped(join_({ rank: 0, size: 2 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(r0.message).toContain('symbolic link');
    await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 30_000 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(readFileSync(v, 'utf8')).toBe('root only\n');
  });

  it('a 0666 file planted where the token goes: rank 0 writes nothing into it, rank 1 does not read it', async () => {
    writeFileSync(tokenPath(), 'planted');
    chmodSync(tokenPath(), 0o666);
    const r0 = await rejectsTyped(join_({ rank: 0, size: 2 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(r0.message).toContain('mode 0666');
    await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 30_000 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(readFileSync(tokenPath(), 'utf8')).toBe('planted');
  });

  it.each(['a symbolic link', 'a 0666 file'])('%s at the old temporary name (token.<pid>.tmp): untouched, and the job joins', async (kind) => {
    const v = victim();
    const tmp = join(dir, `token.${process.pid}.tmp`);
    if (kind === 'a symbolic link') symlinkSync(v, tmp);
    else {
      writeFileSync(tmp, 'planted');
      chmodSync(tmp, 0o666);
    }
    const [m0, m1] = await Promise.all([join_({ rank: 0, size: 2 }), join_({ rank: 1, size: 2 })]);
    expect([...m0.endpoints.keys()]).toEqual([1]);
    expect([...m1.endpoints.keys()]).toEqual([0]);
    expect(readFileSync(v, 'utf8')).toBe('root only\n');
    if (kind === 'a 0666 file') expect(readFileSync(tmp, 'utf8')).toBe('planted');
    expect(existsSync(tokenPath())).toBe(false);
  });

  it('a FIFO as the token file: a typed error at once, not a process blocked for good', async () => {
    execFileSync('mkfifo', ['-m', '600', tokenPath()]);
    const r1 = await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 60_000 }), ConfigError, 'SMCUDA_CONFIG');
    expect(r1.message).toContain('FIFO');
    await rejectsTyped(join_({ rank: 0, size: 2, joinTimeoutMs: 60_000 }), ConfigError, 'SMCUDA_CONFIG');
  });

  it('a directory as the token file: ConfigError on both sides, never a raw EISDIR', async () => {
    mkdirSync(tokenPath(), { mode: 0o700 });
    const r1 = await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 60_000 }), ConfigError, 'SMCUDA_CONFIG');
    expect(r1.message).toContain('directory');
    await rejectsTyped(join_({ rank: 0, size: 2 }), ConfigError, 'SMCUDA_CONFIG');
  });

  it('a token file with a second link: AccessDeniedError for the reader', async () => {
    writeFileSync(tokenPath(), tokenLine(process.pid), { mode: 0o600 });
    linkSync(tokenPath(), join(dir, 'other-name'));
    const err = await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 60_000 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    expect(err.message).toContain('2 links');
  });

  it.skipIf(!root)("another user's token file (0600): AccessDeniedError on both sides", async () => {
    writeFileSync(tokenPath(), tokenLine(process.pid), { mode: 0o600 });
    chownSync(tokenPath(), NOBODY, NOBODY);
    await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 60_000 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
    await rejectsTyped(join_({ rank: 0, size: 2 }), AccessDeniedError, 'SMCUDA_ACCESS_DENIED');
  });
});

describe('stale tokens and failed joins', () => {
  const tokenPath = () => join(dir, 'token');

  it('a token left by a job whose rank 0 was killed is never read: rank 1 waits past it, rank 0 replaces it, they join', async () => {
    writeFileSync(tokenPath(), tokenLine(deadPid()), { mode: 0o600 });
    const r1 = join_({ rank: 1, size: 2 });
    await new Promise((r) => setTimeout(r, 100)); // rank 1 sees the stale file first
    const [m0, m1] = await Promise.all([join_({ rank: 0, size: 2 }), r1]);
    expect([...m0.endpoints.keys(), ...m1.endpoints.keys()]).toEqual([1, 0]);
    expect(existsSync(tokenPath())).toBe(false);
  });

  it('a stale token with no rank 0 coming: rank 1 times out saying the token is stale', async () => {
    writeFileSync(tokenPath(), tokenLine(deadPid()), { mode: 0o600 });
    const err = await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 300 }), CommunicatorTimeoutError, 'SMCUDA_COMM_TIMEOUT');
    expect(err.message).toContain('has exited');
  });

  it('the token of a job still running (its rank 0 is alive): rank 0 refuses the directory and leaves the file as it was', async () => {
    const line = tokenLine(process.pid, localOwner().start >>> 0);
    writeFileSync(tokenPath(), line, { mode: 0o600 });
    const err = await rejectsTyped(join_({ rank: 0, size: 2 }), ConfigError, 'SMCUDA_CONFIG');
    expect(err.message).toContain('another job');
    expect(readFileSync(tokenPath(), 'utf8')).toBe(line);
  });

  it('a file that is no token file: rank 0 refuses it (ConfigError), rank 1 never reads it and times out saying so', async () => {
    writeFileSync(tokenPath(), 'abc', { mode: 0o600 });
    const r0 = await rejectsTyped(join_({ rank: 0, size: 2 }), ConfigError, 'SMCUDA_CONFIG');
    expect(r0.message).toContain('fresh rendezvous directory');
    const r1 = await rejectsTyped(join_({ rank: 1, size: 2, joinTimeoutMs: 300 }), CommunicatorTimeoutError, 'SMCUDA_COMM_TIMEOUT');
    expect(r1.message).toContain('not a complete token file');
    expect(readFileSync(tokenPath(), 'utf8')).toBe('abc');
  });

  it('a failed join leaves no token behind (timeout, bad device), and the next job in the directory joins', async () => {
    await rejectsTyped(join_({ rank: 0, size: 2, joinTimeoutMs: 300 }), CommunicatorTimeoutError, 'SMCUDA_COMM_TIMEOUT');
    expect(readdirSync(dir)).toEqual([]);
    const bad = await join_({ rank: 0, size: 2, device: 99 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(bad).toBeInstanceOf(SmcudaError);
    expect(readdirSync(dir)).toEqual([]);
    const ms = await Promise.all([join_({ rank: 0, size: 2 }), join_({ rank: 1, size: 2 })]);
    expect(ms.map((m) => m.endpoints.size)).toEqual([1, 1]);
  });
});

describe('ranks: only canonical ids of this job join', () => {
  propTest.prop([fc.nat({ max: 9999 }), fc.integer({ min: 1, max: 4096 })])('rank<n> is rank n exactly when n < size', (n, size) => {
    expect(rankOfPeerId(`rank${n}`, size)).toBe(n < size ? n : undefined);
  });

  propTest.prop([fc.string({ maxLength: 12 }), fc.integer({ min: 1, max: 4096 })])('any id that parses names itself canonically', (id, size) => {
    const r = rankOfPeerId(id, size);
    if (r !== undefined) expect(`rank${r}`).toBe(id);
  });

  it('refuses out of range and non-canonical ids', () => {
    for (const id of ['rank2', 'rank01', 'rank-1', 'rank1x', 'rank+1', 'RANK1', 'rank 1', ' rank1', 'rank1.0', 'rank1e0', 'rank'])
      expect(rankOfPeerId(id, 2)).toBeUndefined();
    expect(rankOfPeerId('rank1', 2)).toBe(1);
  });

  async function rogue(id: string): Promise<Transport> {
    const t = await Transport.create({ driver: driver(), id, token: 't', lazyDevice: true });
    transports.push(t);
    return t;
  }

  async function listening(path: string): Promise<void> {
    while (!existsSync(path)) await new Promise((r) => setTimeout(r, 10));
  }

  it('peers named rank5 (of 2), rank01, rank-1, rank1x are closed; the honest ranks still join', async () => {
    const r0 = join_({ rank: 0, size: 2, token: 't' });
    await listening(join(dir, 'r0.sock'));
    const eps = await Promise.all(['rank5', 'rank01', 'rank-1', 'rank1x'].map(async (id) => (await rogue(id)).connect(join(dir, 'r0.sock'))));
    await Promise.all(eps.map((ep) => closedWithin(ep, 2000)));
    const [m0, m1] = await Promise.all([r0, join_({ rank: 1, size: 2, token: 't' })]);
    expect([...m0.endpoints.keys()]).toEqual([1]);
    expect(m0.endpoints.get(1)!.peerId).toBe('rank1');
    expect([...m1.endpoints.keys()]).toEqual([0]);
  });

  it('only a rogue came: the timeout names the missing rank and the peer that was no rank of the job', async () => {
    const r0 = join_({ rank: 0, size: 2, token: 't', joinTimeoutMs: 500 });
    await listening(join(dir, 'r0.sock'));
    await (await rogue('rank5')).connect(join(dir, 'r0.sock'));
    const err = await rejectsTyped(r0, CommunicatorTimeoutError, 'SMCUDA_COMM_TIMEOUT', 5000);
    expect(err.message).toContain('rank 1 did not join');
    expect(err.message).toContain('"rank5"');
    expect(err.message).toContain('WORLD_SIZE');
  });

  it('a socket of rank 0 answered by a process that is not rank0: ConfigError naming it', async () => {
    const impostor = await rogue('rank7');
    await impostor.listen(join(dir, 'r0.sock'));
    const err = await rejectsTyped(join_({ rank: 1, size: 2, token: 't', joinTimeoutMs: 60_000 }), ConfigError, 'SMCUDA_CONFIG');
    expect(err.message).toContain('"rank7"');
  });
});

describe('a join that times out names the ranks that did not come', () => {
  it('a job of 4 without rank 3: every rank says rank 3 did not join, and which did', async () => {
    const results = await Promise.all(
      [0, 1, 2].map((rank) => rejectsTyped(join_({ rank, size: 4, token: 't', joinTimeoutMs: 600 }), CommunicatorTimeoutError, 'SMCUDA_COMM_TIMEOUT', 5000)),
    );
    for (const [rank, err] of results.entries()) {
      expect(err.message).toContain(`rank ${rank} of 4: rank 3 did not join ${dir} within 600 ms (joined: 0, 1, 2)`);
    }
    expect(readdirSync(dir)).toEqual([]);
  });

  it('a job of 3 without rank 0: a timeout naming rank 0, not a NoListenerError', async () => {
    const results = await Promise.all(
      [1, 2].map((rank) => rejectsTyped(join_({ rank, size: 3, token: 't', joinTimeoutMs: 600 }), CommunicatorTimeoutError, 'SMCUDA_COMM_TIMEOUT', 5000)),
    );
    for (const err of results) expect(err.message).toContain('rank 0 did not join');
    for (const err of results) expect(err.message).toContain('(joined: 1, 2)');
  });
});
