/**
 * An impostor at `<path>.fd` (issue 23, finding 5): a same-uid process moved
 * the listener's descriptor socket aside and listened there. The connecting
 * transport checks, before it sends a byte, that the socket is served by the
 * process that proved the token on the control channel (SO_PEERCRED pid):
 * the impostor gets a connection and nothing on it (no token, no
 * descriptor), and the endpoint works without a descriptor channel (such
 * memory goes by staging).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Transport } from '../../src/transport.js';

const fixture = fileURLToPath(new URL('../fixtures/fd-impostor.mjs', import.meta.url));
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function startImpostor(path: string): Promise<{ child: ChildProcess; seen: { event: string; bytes?: number }[] }> {
  const child = spawn(process.execPath, [fixture, path], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => child.kill('SIGKILL'));
  const seen: { event: string; bytes?: number }[] = [];
  let buf = '';
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`impostor exited with ${code}`)));
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const ev = JSON.parse(buf.slice(0, i)) as { event: string };
        buf = buf.slice(i + 1);
        seen.push(ev);
        if (ev.event === 'ready') resolve({ child, seen });
      }
    });
  });
}

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
}

describe('an impostor listening at the descriptor socket', () => {
  it('gets no token and no descriptor; the endpoint carries on without a descriptor channel', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-impostor-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const listener = await Transport.create({ id: 'listener', driver: 'sim', token: 'job' });
    cleanups.push(() => listener.close());
    const sock = join(dir, 's.sock');
    await listener.listen(sock);
    const { seen } = await startImpostor(`${sock}.fd`);
    const client = await Transport.create({ id: 'client', driver: 'sim', token: 'job' });
    cleanups.push(() => client.close());
    const ep = await client.connect(sock);
    await waitFor(() => seen.some((e) => e.event === 'connection'), 5000);
    expect(seen.map((e) => e.event)).toContain('connection'); // it was asked…
    await new Promise((r) => setTimeout(r, 300));
    expect(seen.filter((e) => e.event === 'message')).toEqual([]); // …and told nothing
    expect(ep.stats().fd.channel).toBe(false);
    // The control channel is untouched: messages still flow.
    const lep = listener.endpoint('client')!;
    const got = lep.recv({ tag: 1 });
    await ep.send(Uint8Array.of(7, 8, 9), { tag: 1 });
    expect([...((await got).data as Uint8Array)]).toEqual([7, 8, 9]);
  });
});
