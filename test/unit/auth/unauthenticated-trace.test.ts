/**
 * A peer that fails the PROOF never reaches the trace or the inspector page
 * (issue 23, finding 13: 300 such clients made 264 endpoint cards); a peer
 * that proves the token is traced from its HELLO on, as before.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Handshake } from '../../../src/auth/handshake.js';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { BadTokenError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../../src/wire/codec.js';
import { FrameType } from '../../../src/wire/frames.js';

const dirs: string[] = [];
const open: Transport[] = [];
afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function getJson(url: string): Promise<{ endpoints: { peer: string }[] }> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve(JSON.parse(body) as { endpoints: { peer: string }[] }));
    })
      .on('error', reject)
      .end();
  });
}

/** Runs the handshake over an attached in-memory channel with `token`; resolves with attach()'s outcome. */
function client(t: Transport, id: string, token: string): Promise<unknown> {
  const [mine, theirs] = createMemoryChannelPair({ names: [id, t.id] });
  const hs = new Handshake({ id, token, deviceUuid: '', features: 0 });
  mine.on('frame', (bytes) => {
    const frame = decodeFrame(bytes);
    if (!hs.authenticated && (frame.type === FrameType.HELLO || frame.type === FrameType.PROOF)) {
      try {
        const step = hs.receive(frame);
        if (step.kind === 'proof') mine.send(encodeFrame(step.proof));
      } catch {
        // the listener's PROOF does not verify under a wrong token: the listener refuses us first anyway
      }
    }
  });
  const attached = t.attach(theirs).then(
    (ep) => ep,
    (e: unknown) => e,
  );
  mine.send(encodeFrame(hs.hello));
  return attached;
}

describe('only authenticated peers are traced and shown', () => {
  it('30 clients with a wrong token: no trace line and no endpoint card names them; an honest client is traced and shown', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-untraced-'));
    dirs.push(dir);
    const trace = join(dir, 'trace.jsonl');
    const t = await Transport.create({ id: 'victim', driver: 'sim', token: 'the-token', trace, inspect: 0 });
    open.push(t);
    const outcomes = await Promise.all(Array.from({ length: 30 }, (_, i) => client(t, `intruder-${i}`, 'a guess')));
    for (const o of outcomes) expect(o).toBeInstanceOf(BadTokenError);
    expect(await client(t, 'honest', 'the-token')).not.toBeInstanceOf(Error);
    const lines = readFileSync(trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { peer: string; frame?: string });
    expect(lines.filter((r) => r.peer.startsWith('intruder'))).toEqual([]);
    expect(
      lines
        .filter((r) => r.peer === 'honest')
        .map((r) => r.frame)
        .slice(0, 4),
    ).toEqual(['HELLO', 'HELLO', 'PROOF', 'PROOF']);
    const state = await getJson(`${t.inspectUrl!}state`);
    expect(state.endpoints.map((e) => e.peer)).toEqual(['honest']);
  });
});
