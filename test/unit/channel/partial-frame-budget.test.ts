/**
 * Frames not yet complete count against maxBufferedBytes across all of one
 * peer process's connections (issue 47, item 8): six connections of one peer,
 * each holding a 250 MiB partial frame (each within its own endpoint's
 * budget), took a receiver from 65 to 1567 MiB. Here with small numbers:
 * maxBufferedBytes 1 MiB, and another process (test/fixtures/
 * partial-frames-peer.mjs) holding several authenticated raw connections. A
 * frame that does not fit beside the others' partial frames is refused from
 * its prefix; a partial frame that grows past what is left cuts its
 * connection off. Both with PeerLimitError, within a bounded time; the
 * peer's other connections carry on.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { Endpoint } from '../../../src/endpoint.js';
import { PeerLimitError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';

const fixture = fileURLToPath(new URL('../../fixtures/partial-frames-peer.mjs', import.meta.url));
const KiB = 1024;
const MiB = 1 << 20;
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

type Step = { conn: string; prefix?: number; bytes: number };

/** A listener with a 1 MiB budget; the peer process plays `steps` on connections `conns`. How each endpoint closed (null: open). */
async function play(conns: string[], steps: Step[]): Promise<Map<string, Error | undefined | null>> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-partial-'));
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const t = await Transport.create({ id: 'victim', driver: 'sim', maxBufferedBytes: MiB, controlRing: false });
  cleanup.push(() => t.close());
  const closed = new Map<string, Error | undefined | null>();
  t.on('endpoint', (ep: Endpoint) => {
    closed.set(ep.peerId, null);
    ep.once('close', (e?: Error) => closed.set(ep.peerId, e));
  });
  const sock = path.join(dir, 's.sock');
  await t.listen(sock);
  const child = spawn(process.execPath, [fixture, sock, JSON.stringify({ conns, steps })], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanup.push(() => child.kill('SIGKILL'));
  await new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the peer exited with ${code}`)));
    child.stdout!.on('data', (d: Buffer) => d.toString().includes('"done"') && resolve());
  });
  return closed;
}

describe('partial frames of one peer process, over several connections', () => {
  it("a frame that does not fit beside the others' partial frames is refused from its prefix", async () => {
    const closed = await play(
      ['a', 'b', 'c'],
      [
        { conn: 'a', prefix: 500 * KiB, bytes: 300 * KiB },
        { conn: 'b', prefix: 500 * KiB, bytes: 300 * KiB }, // 600 KiB held: within 1 MiB
        { conn: 'c', prefix: 500 * KiB, bytes: 16 }, // 500 KiB more would pass it
      ],
    );
    await until(() => closed.get('c') !== null && closed.get('c') !== undefined, 'c cut off', 2000);
    expect(closed.get('c')).toBeInstanceOf(PeerLimitError);
    expect(closed.get('c')!.message).toMatch(/announced a frame of 512000 bytes/);
    expect([closed.get('a'), closed.get('b')]).toEqual([null, null]);
  });

  it('partial frames that each fitted when announced, grown past the budget together: the connection that goes past is cut off', async () => {
    const closed = await play(
      ['a', 'b'],
      [
        { conn: 'a', prefix: 600 * KiB, bytes: 100 * KiB },
        { conn: 'b', prefix: 600 * KiB, bytes: 100 * KiB }, // 200 KiB held, 824 left: fits
        { conn: 'a', bytes: 400 * KiB },
        { conn: 'b', bytes: 400 * KiB }, // 1000 KiB held: still within 1 MiB
        { conn: 'a', bytes: 90 * KiB }, // 1090 KiB: past it
      ],
    );
    await until(() => closed.get('a') !== null && closed.get('a') !== undefined, 'a cut off', 2000);
    const err = closed.get('a') as PeerLimitError;
    expect(err).toBeInstanceOf(PeerLimitError);
    expect(err.code).toBe('SMCUDA_PEER_BUFFER_LIMIT');
    expect(err.message).toMatch(/holds \d+ bytes of frames not yet complete on its connections here/);
    await new Promise((r) => setTimeout(r, 100));
    expect(closed.get('b')).toBe(null); // its own partial frame, within the budget again once a's is gone
  });
});
