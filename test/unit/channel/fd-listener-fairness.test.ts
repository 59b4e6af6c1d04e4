/**
 * Eviction under a flood from another process (issue 47, item 8): when the
 * listener has `maxUnadmitted` connections waiting, a new one evicts the
 * oldest of the process holding the most of them. A flooding process evicts
 * its own; an honest peer's one pending connection stays, even silent for a
 * while, and is admitted once it presents its token.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { FD_TOKEN_BYTES, FdListener } from '../../../src/channel/fd-channel.js';
import { loadAddon } from '../../../src/cuda/addon.js';

const addon = loadAddon();
const flooder = fileURLToPath(new URL('../../fixtures/fd-flooder.mjs', import.meta.url));
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

function startFlooder(path: string): Promise<{ child: ChildProcess; connects: () => number }> {
  const child = spawn(process.execPath, [flooder, path, '500'], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanup.push(() => child.kill('SIGKILL'));
  let connects = 0;
  let buf = '';
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`flooder exited with ${code}`)));
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const l = JSON.parse(buf.slice(0, i)) as { event: string; connects?: number };
        buf = buf.slice(i + 1);
        if (l.connects !== undefined) connects = l.connects;
        if (l.event === 'ready') resolve({ child, connects: () => connects });
      }
    });
  });
}

async function until(cond: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
}

describe('a descriptor listener flooded by another process', () => {
  it("evicts the flooder's connections, never this process's one pending connection; that one is admitted when its token comes", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fair-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const refused: Error[] = [];
    const listener = new FdListener(join(dir, 'fd.sock'), { admissionTimeoutMs: 60_000, maxUnadmitted: 8, onRefused: (e) => refused.push(e) });
    cleanup.push(() => listener.close());
    const honest = addon.fdConnect(listener.path); // silent for now: its token comes after the flood
    cleanup.push(() => addon.fdClose(honest));
    await until(() => false, 50);
    const flood = await startFlooder(listener.path);
    await until(() => flood.connects() > 300, 10_000);
    expect(flood.connects()).toBeGreaterThan(300);
    const evicted = refused.filter((e) => /not yet admitted/.test(e.message));
    expect(evicted.length).toBeGreaterThan(100);
    expect(evicted.filter((e) => e.message.includes(`pid ${process.pid} `))).toEqual([]);
    const token = randomBytes(FD_TOKEN_BYTES);
    const admitted = listener.expect(token, 5000, process.pid);
    const msg = Buffer.concat([Buffer.from('SMFD1'), token]);
    addon.fdSend(honest, -1, msg.buffer, msg.byteOffset, msg.byteLength);
    const ch = await admitted;
    expect(ch.closed).toBe(false);
    expect(ch.peer?.pid).toBe(process.pid);
    ch.close();
  }, 20_000);
});
