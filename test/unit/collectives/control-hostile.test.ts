/**
 * A peer that breaks the communicator's control protocol (control.ts,
 * control-schema.ts): whatever it sends on the control tag, the other ranks
 * never crash, never go deaf to it silently, never touch files it names, and
 * never hold unbounded memory for it: the communicator aborts with
 * SMCUDA_PROTOCOL naming it.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CONTROL_TAG, MAX_HELD_MESSAGES } from '../../../src/collectives/control.js';
import { parseControl } from '../../../src/collectives/control-schema.js';
import { abortOf, makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

const text = (s: string) => new TextEncoder().encode(s);

describe('a peer that breaks the control protocol', () => {
  it.each([
    { name: 'the JSON text null', data: () => text('null') },
    { name: 'bytes that are not JSON', data: () => new Uint8Array([0xff, 0xfe, 0x00, 0x7b]) },
    { name: 'an unknown message type', data: () => text('{"t":"hello-there"}') },
    { name: 'a step signal with a negative seq', data: () => text('{"t":"sig","seq":-1,"step":0}') },
    { name: 'an ABORT whose rank is a path', data: () => text('{"t":"abort","rank":"../../x","code":"SMCUDA_PEER_LOST","message":"x"}') },
    { name: 'an ABORT whose rank is out of range', data: () => text('{"t":"abort","rank":7,"code":"SMCUDA_PEER_LOST","message":"x"}') },
    { name: 'call prints that are not numbers', data: () => text('{"t":"fp","s":1,"w":["a","b","c"]}') },
  ])("$name: every rank's pending call fails with SMCUDA_PROTOCOL naming the sender, at once", async ({ data }) => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const pending = [0, 2].map((r) => abortOf(w!.comms[r]!.barrier()));
    // Rank 1 sends the bad message to rank 0 on the communicator's control tag.
    await w.comms[1]!.endpoint(0).send(data(), { tag: CONTROL_TAG });
    const t0 = performance.now();
    for (const e of await Promise.all(pending)) {
      expect(e.causeCode).toBe('SMCUDA_PROTOCOL');
      expect(e.failedRank).toBe(1);
    }
    expect(performance.now() - t0).toBeLessThan(2000);
  });

  it('a device buffer on the control tag is a protocol error, not a silent stop of the reads', async () => {
    w = await makeWorld(2, { timeoutMs: 60_000 });
    const pending = abortOf(w.comms[0]!.barrier());
    const d = w.sides[1]!.driver;
    const ptr = d.memAlloc(64);
    void w.comms[1]!.endpoint(0)
      .send({ ptr, length: 64 }, { tag: CONTROL_TAG })
      .catch(() => undefined);
    const e = await pending;
    expect(e.causeCode).toBe('SMCUDA_PROTOCOL');
    expect(e.failedRank).toBe(1);
  });

  it('an ABORT naming a path as its rank deletes nothing outside the rendezvous directory', () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-ctl-'));
    const victim = join(dir, 'victim.sock');
    writeFileSync(victim, 'x');
    try {
      expect(() => parseControl(text(JSON.stringify({ t: 'abort', rank: `../${dir}/victim`, code: 'SMCUDA_PEER_LOST', message: 'x' })), 4)).toThrow(
        expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }),
      );
      expect(existsSync(victim)).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it(`step signals for calls not made yet are held up to ${MAX_HELD_MESSAGES}, then the sender is cut off`, async () => {
    w = await makeWorld(2, { timeoutMs: 60_000 });
    const ep = w.comms[1]!.endpoint(0);
    const heap0 = process.memoryUsage().heapUsed;
    const pending = abortOf(w.comms[0]!.barrier());
    for (let seq = 1000; seq < 1000 + MAX_HELD_MESSAGES + 10; seq++)
      void ep.send(text(`{"t":"sig","seq":${seq},"step":0}`), { tag: CONTROL_TAG }).catch(() => undefined);
    const e = await pending;
    expect(e.causeCode).toBe('SMCUDA_PROTOCOL');
    expect(e.message).toMatch(/control messages for calls this rank has not made/);
    expect(process.memoryUsage().heapUsed - heap0).toBeLessThan(64 * 1024 * 1024);
  });
});

describe('parseControl', () => {
  it('takes every message an honest peer sends', () => {
    for (const m of [
      { t: 'sig', seq: 3, step: 1 },
      { t: 'put', key: 'hello', value: { rank: 1 } },
      { t: 'fp', s: 1, w: [1, 2, 3] },
      { t: 'abort', rank: 1, code: 'SMCUDA_CALL_MISMATCH', message: 'm', pid: 42, seq: 3, ranks: [0, 1], fields: ['dtype'] },
      { t: 'bye', last: 7 },
      { t: 'bye' },
    ]) {
      expect(parseControl(text(JSON.stringify(m)), 2)).toEqual(m);
    }
  });
});
