/**
 * Issue 23 finding 17: a SIGKILLed `smcuda demo` parent left its (empty)
 * socket folder behind. The ranks notice the parent is gone (their IPC
 * channel closes), close their transports, and the last one removes the
 * folder.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

async function until(cond: () => boolean, what: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('smcuda demo whose parent is SIGKILLed', () => {
  it('its ranks exit and the last one removes the socket folder', async () => {
    // The demo makes its folder under TMPDIR: a private one shows exactly what it leaves.
    const tmp = mkdtempSync(join(tmpdir(), 'smcuda-orphan-'));
    cleanup.push(() => rmSync(tmp, { recursive: true, force: true }));
    const parent = spawn(process.execPath, [CLI, 'demo', '--driver', 'sim', '--ranks', '3', '--sizes', '1M', '--iters', '100000'], {
      env: { ...process.env, TMPDIR: tmp },
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    cleanup.push(() => parent.kill('SIGKILL'));
    const folder = () => readdirSync(tmp).filter((n) => n.startsWith('smcuda-demo-'));
    // Every rank listening: three control sockets in the folder.
    await until(
      () => folder().length === 1 && readdirSync(join(tmp, folder()[0]!)).filter((n) => n.endsWith('.sock')).length === 3,
      'the ranks to listen',
      30_000,
    );
    const dir = join(tmp, folder()[0]!);
    parent.kill('SIGKILL');
    await new Promise((r) => parent.once('exit', r));
    expect(existsSync(dir)).toBe(true); // the parent could not remove it
    await until(() => !existsSync(dir), 'the ranks to remove the folder', 15_000);
    expect(readdirSync(tmp)).toEqual([]);
  });
});
