/**
 * An idle transport does not keep the process alive (issue 47): a job that
 * forgets close() exits by itself once nothing is pending, and its shared
 * memory goes with it (the exit hooks); a pending receive keeps it alive
 * until it is satisfied. And, between processes, a receiver that closes
 * right after a receive on its stream still reports the message (its FIN
 * goes before CLOSE): the sender's send resolves. Fixture:
 * test/fixtures/idle-exit.mjs (compiled code: `npx tsc -p .` first).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport } from '../../src/transport.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/idle-exit.mjs', import.meta.url));
const TOKEN = 'idle-exit-token';
/** How long an idle job may take to exit by itself. */
const EXIT_BOUND_MS = 5000;

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function privateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-idle-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `p`, or a rejection naming `what` after `ms` (a hang fails with where it hung). */
function within<T>(p: Promise<T>, what: string, ms = 10_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

function withoutSimEnv(): NodeJS.ProcessEnv {
  const { SMCUDA_SIM: _world, SMCUDA_SIM_VISIBLE: _visible, ...env } = process.env;
  return env;
}

function shmOf(pid: number): string[] {
  return readdirSync('/dev/shm').filter((n) => n.includes(`-${pid}-`));
}

interface Child {
  proc: ChildProcess;
  /** The next JSON line the child prints. */
  next(): Promise<Record<string, unknown>>;
  /** Resolves with the exit code (the signal, with stderr, if killed), or 'still running' after `ms`. */
  exit(ms: number): Promise<number | string>;
}

function start(...args: string[]): Child {
  const proc = spawn(process.execPath, [FIXTURE, ...args], { env: withoutSimEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  cleanups.push(() => proc.exitCode === null && proc.kill('SIGKILL'));
  const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  // 'close', not 'exit': only then have its stdout and stderr been read to the end.
  const exited = new Promise<number | string>((resolve) => proc.once('close', (code, signal) => resolve(code ?? `killed by ${signal}; stderr: ${stderr}`)));
  return {
    proc,
    async next() {
      // The line alone, never raced against the exit: a child that prints and exits at once
      // (as these do) can be seen to exit before its last line is read. Its stdout ends when it does.
      const r = await lines.next();
      if (r.done === true) throw new Error(`the fixture ended without a line (exit ${await exited}): ${stderr}`);
      return JSON.parse(r.value as string) as Record<string, unknown>;
    },
    exit: (ms) => Promise.race([exited, new Promise<string>((r) => setTimeout(() => r(`still running after ${ms} ms; stderr: ${stderr}`), ms))]),
  };
}

/** A transport of this process listening in a private directory; resolves with it and its socket path. */
async function parentListening(controlRing = true): Promise<{ t: Transport; driver: SimulatedCudaDriver; path: string }> {
  const driver = new SimulatedCudaDriver({ env: {} });
  const t = await Transport.create({ driver, id: 'parent', device: 0, token: TOKEN, controlRing });
  cleanups.push(async () => {
    await t.close();
    driver.close();
  });
  const path = join(privateDir(), 'p.sock');
  await t.listen(path);
  return { t, driver, path };
}

describe('a job that never calls close()', () => {
  it('two transports that exchanged messages: the process exits by itself, and its segments go with it', async () => {
    const child = start('exchange', privateDir());
    const line = await child.next();
    expect(line.exchanged).toBe('rget');
    expect((line.owned as string[]).length).toBeGreaterThan(0); // it held segments while it ran
    expect(await child.exit(EXIT_BOUND_MS)).toBe(0);
    expect(shmOf(line.pid as number)).toEqual([]);
  });

  it('keepAliveWhile (the hook for the layer above): the process waits for the promise, then exits', async () => {
    const child = start('exchange', privateDir(), '1500');
    expect((await child.next()).exchanged).toBe('rget');
    expect(await child.next()).toMatchObject({ settled: true }); // an unref'd timer alone would not have held it
    expect(await child.exit(EXIT_BOUND_MS)).toBe(0);
  });

  it('a pending receive keeps it alive; once satisfied, it exits by itself', async () => {
    const { t, driver, path } = await parentListening();
    const accepted = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
    const child = start('pending-recv', path);
    const ep = await accepted;
    expect((await child.next()).waiting).toBe(true);
    // Nothing but the receive is pending there: it must not exit under it.
    expect(await child.exit(1500)).toMatch(/^still running/);
    const n = 3 << 20;
    const src = { ptr: driver.memAlloc(n), length: n };
    await ep.send(src, { tag: 5 });
    const line = await child.next();
    expect(line.received).toBe(n);
    expect(await child.exit(EXIT_BOUND_MS)).toBe(0);
    expect(shmOf(line.pid as number)).toEqual([]);
  });

  it('it exits with code 0 every time, never aborted while Node tears down (12 jobs at once)', async () => {
    // The descriptor sockets' watches stop at 'exit' (channel/fd-watches.ts): before, a readiness
    // delivered during the teardown aborted about one job in ten (FATAL ERROR: napi_throw, SIGABRT).
    const { t, driver, path } = await parentListening();
    const jobs = 12;
    const eps = new Map<string, Endpoint>();
    const all = new Promise<void>((resolve) =>
      t.on('endpoint', (ep) => {
        eps.set(ep.peerId, ep);
        if (eps.size === jobs) resolve();
      }),
    );
    cleanups.push(() => t.removeAllListeners('endpoint'));
    const children = Array.from({ length: jobs }, () => start('pending-recv', path));
    await all;
    const n = 64 << 10;
    const src = { ptr: driver.memAlloc(n), length: n };
    const codes = await Promise.all(
      children.map(async (c) => {
        const { pid } = await c.next();
        await eps.get(`child-${pid as number}`)!.send(src, { tag: 5 });
        expect((await c.next()).received).toBe(n);
        return c.exit(EXIT_BOUND_MS);
      }),
    );
    expect(codes).toEqual(Array(jobs).fill(0));
  });
});

describe('a listener', () => {
  it("keeps the process alive while someone waits for a peer ('endpoint' listener); then it exits by itself", async () => {
    const dir = privateDir();
    const child = start('listen-wait', dir);
    expect((await child.next()).listening).toBe(true);
    expect(await child.exit(1500)).toMatch(/^still running/);
    const driver = new SimulatedCudaDriver({ env: {} });
    const t = await Transport.create({ driver, id: 'parent', device: 0, token: TOKEN });
    cleanups.push(async () => {
      await t.close();
      driver.close();
    });
    await t.connect(join(dir, 'c.sock'));
    expect((await child.next()).peer).toBe('parent');
    expect(await child.exit(EXIT_BOUND_MS)).toBe(0);
  });
});

describe('a receiver process that closes right after a receive on its stream', () => {
  it.each([
    ['control rings', true],
    ['the socket alone (no control rings)', false],
  ])("the sender's send resolves (its FIN came before CLOSE), and every byte arrived: frames by %s", async (_how, rings) => {
    const { t, driver, path } = await parentListening(rings);
    const accepted = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
    const n = 3 << 20;
    const child = start('recv-close', path, String(n), ...(rings ? [] : ['socket']));
    const ep = await within(accepted, 'the child connecting');
    const ready = await within(child.next(), 'the child negotiating');
    expect(ready).toMatchObject({ waiting: true, state: 'OK' });
    const bytes = new Uint8Array(n).map((_, i) => (i * 7 + 3) & 0xff);
    const src = { ptr: driver.memAlloc(n), length: n };
    driver.memcpyHtoD(src.ptr, bytes);
    await expect(within(ep.send(src, { tag: 6 }), 'the send')).resolves.toBeUndefined();
    const line = await within(child.next(), 'the child receiving');
    expect(line).toMatchObject({ received: n, path: 'rget', sum: bytes.reduce((a, b) => (a + b) % 65521, 0) });
    expect(await child.exit(EXIT_BOUND_MS)).toBe(0);
  });
});
