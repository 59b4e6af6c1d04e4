/**
 * A same-uid process without the job token floods a listener's descriptor
 * socket `<path>.fd` (issue 47, item 8): connections that send nothing,
 * garbage, or a well-formed token nobody expects, as fast as it can. Before,
 * its connections evicted honest peers' pending ones and filled the backlog,
 * and 6–9 of 20 honest endpoints came up without a descriptor channel and
 * without rings. Now the listener evicts from the process holding the most
 * connections not yet admitted, so a flood evicts only its own, and a
 * connector retries a full backlog: all 20 come up whole.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Transport } from '../../src/transport.js';

const flooder = fileURLToPath(new URL('../fixtures/fd-flooder.mjs', import.meta.url));
const honest = fileURLToPath(new URL('../fixtures/fd-honest-peers.mjs', import.meta.url));
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Line {
  event?: string;
  connects?: number;
  results?: { id: string; fd: boolean; ringOut: boolean; ringIn: boolean }[];
}

function child(args: string[], until: (l: Line) => boolean): { proc: ChildProcess; lines: Line[]; done: Promise<Line> } {
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => proc.kill('SIGKILL'));
  const lines: Line[] = [];
  let buf = '';
  const done = new Promise<Line>((resolve, reject) => {
    // 'close', not 'exit': a child that prints its last line and exits can be seen to exit before that line is read.
    proc.once('close', (code) => reject(new Error(`${args[0]} exited with ${code}`)));
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const l = JSON.parse(buf.slice(0, i)) as Line;
        buf = buf.slice(i + 1);
        lines.push(l);
        if (until(l)) resolve(l);
      }
    });
  });
  return { proc, lines, done };
}

describe('a flood of token-less connections at the descriptor socket', () => {
  it('20 honest endpoints connecting meanwhile all get their descriptor channel and both rings', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fdflood-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const listener = await Transport.create({ id: 'listener', driver: 'sim', token: 'job' });
    cleanups.push(() => listener.close());
    listener.on('refused', () => {}); // thousands: one per flood connection
    const sock = join(dir, 's.sock');
    await listener.listen(sock);
    const flood = child([flooder, `${sock}.fd`, '2000'], (l) => l.event === 'stats' && (l.connects ?? 0) > 500);
    await flood.done; // the flood is well under way
    const peers = child([honest, sock, '20', '8000', 'job'], (l) => l.results !== undefined);
    const { results } = await peers.done;
    const floodConnects = flood.lines.at(-1)?.connects ?? 0;
    expect(floodConnects).toBeGreaterThan(500);
    expect(results).toHaveLength(20);
    expect(results!.filter((r) => !(r.fd && r.ringOut && r.ringIn))).toEqual([]);
  }, 30_000);
});
