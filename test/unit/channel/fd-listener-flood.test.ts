/**
 * The descriptor listener under a flood of connections that never present a
 * token (issue 23, finding 4: a thread per connection let 480 token-less
 * connections abort the process under a pids limit, and a connection with a
 * random token stayed parked 10 s after its client hung up). Now: one
 * readiness loop for the whole process, at most `maxUnadmitted` connections
 * waiting for admission (a new one evicts the oldest), and a connection whose
 * client hangs up closed at once.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FD_TOKEN_BYTES, FdChannel, FdListener } from '../../../src/channel/fd-channel.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { AccessDeniedError } from '../../../src/errors.js';

const addon = loadAddon();
const threads = () => readdirSync('/proc/self/task').length;
const fds = () => readdirSync('/proc/self/fd').length;

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

function listen(options: ConstructorParameters<typeof FdListener>[1] = {}): FdListener {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-flood-'));
  const listener = new FdListener(join(dir, 'fd.sock'), options);
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  cleanup.push(() => listener.close());
  return listener;
}

async function until(cond: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
}

describe('a descriptor listener flooded with token-less connections', () => {
  it('300 connections: no thread per connection, and it keeps at most maxUnadmitted of them', async () => {
    const before = threads();
    const refused: Error[] = [];
    const listener = listen({ admissionTimeoutMs: 60_000, onRefused: (e) => refused.push(e) });
    const fdsBefore = fds();
    const clients: number[] = [];
    cleanup.push(() => clients.forEach((c) => addon.fdClose(c)));
    for (let i = 0; i < 300; i++) {
      clients.push(addon.fdConnect(listener.path));
      if (i % 50 === 49) await new Promise((r) => setTimeout(r, 20)); // let it accept (the backlog is finite)
    }
    await until(() => refused.length >= 300 - 64, 10_000);
    expect(threads() - before).toBeLessThanOrEqual(1); // the one readiness loop, if this file started it
    expect(refused.length).toBe(300 - 64);
    expect(refused.every((e) => e instanceof AccessDeniedError && /64 were waiting for admission, a newer one came/.test(e.message))).toBe(true);
    expect(fds() - fdsBefore - clients.length).toBeLessThanOrEqual(64); // the listener's side: the 64 newest
  });

  it('a connection parked with a token nobody expects yet is closed as soon as its client hangs up, not at the admission timeout', async () => {
    const listener = listen({ admissionTimeoutMs: 60_000 });
    const base = fds();
    const token = randomBytes(FD_TOKEN_BYTES);
    const parked = await FdChannel.connect(listener.path, token);
    await new Promise((r) => setTimeout(r, 100)); // the listener has read the token and parked the connection
    parked.close();
    await until(() => fds() <= base, 2000);
    expect(fds()).toBeLessThanOrEqual(base); // the listener's side is closed too
    // Nothing is left to admit under that token: expect() waits, and times out.
    await expect(listener.expect(token, 300)).rejects.toMatchObject({ code: 'SMCUDA_FD_CHANNEL' });
  });

  it('a token-less connection whose client hangs up is closed at once too; an honest connector is still admitted', async () => {
    const listener = listen({ admissionTimeoutMs: 60_000, maxUnadmitted: 4 });
    const base = fds();
    const silent = addon.fdConnect(listener.path);
    await until(() => fds() === base + 2, 2000);
    addon.fdClose(silent);
    await until(() => fds() === base, 2000);
    expect(fds()).toBe(base);
    const token = randomBytes(FD_TOKEN_BYTES);
    const admitted = listener.expect(token, 2000);
    const ch = await FdChannel.connect(listener.path, token);
    cleanup.push(() => ch.close());
    const got = await admitted;
    expect(got.closed).toBe(false);
    got.close();
  });
});
