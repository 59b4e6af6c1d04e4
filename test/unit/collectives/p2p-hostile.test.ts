/**
 * What a peer can get wrong in point to point's control messages ('pp', a
 * send's or receive's print): a malformed print, a second print of one
 * call, or more prints than an honest peer ever has outstanding aborts the
 * communicator with SMCUDA_PROTOCOL naming the sender; a print that
 * disagrees with the call it matches aborts it with SMCUDA_P2P_MISMATCH.
 * And the matching itself (p2p-match.ts), whichever side calls first.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CONTROL_TAG } from '../../../src/collectives/control.js';
import { parseControl } from '../../../src/collectives/control-schema.js';
import { MAX_HELD_PRINTS, P2PMatch } from '../../../src/collectives/p2p-match.js';
import { P2PMismatchError } from '../../../src/errors.js';
import { abortOf, makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

const text = (s: string) => new TextEncoder().encode(s);

describe("a peer that sends bad 'pp' messages", () => {
  it.each([
    { name: 'an unknown kind', msg: '{"t":"pp","k":"put","n":1,"c":4,"d":"f32"}' },
    { name: 'n = 0', msg: '{"t":"pp","k":"send","n":0,"c":4,"d":"f32"}' },
    { name: 'a negative count', msg: '{"t":"pp","k":"send","n":1,"c":-4,"d":"f32"}' },
    { name: 'a fractional count', msg: '{"t":"pp","k":"send","n":1,"c":1.5,"d":"f32"}' },
    { name: 'an unknown dtype', msg: '{"t":"pp","k":"send","n":1,"c":4,"d":"f17"}' },
  ])('$name: the waiting recv fails with SMCUDA_PROTOCOL naming the sender, at once, on every rank', async ({ msg }) => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const recv = abortOf(w.comms[0]!.recv({ buf: w.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 1 }));
    const other = abortOf(w.comms[2]!.barrier());
    await w.comms[1]!.endpoint(0).send(text(msg), { tag: CONTROL_TAG });
    const t0 = performance.now();
    for (const e of await Promise.all([recv, other])) {
      expect(e.causeCode).toBe('SMCUDA_PROTOCOL');
      expect(e.failedRank).toBe(1);
    }
    expect(performance.now() - t0).toBeLessThan(2000);
  });

  it('a second print of the same send is a protocol error', async () => {
    w = await makeWorld(2, { timeoutMs: 60_000 });
    const recv = abortOf(w.comms[0]!.recv({ buf: w.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 1 }));
    const ep = w.comms[1]!.endpoint(0);
    // Rank 1 claims a send #1 and #2 twice each: the first #1 matches the recv, the others are held, then repeated.
    for (const n of [1, 2, 2]) await ep.send(text(`{"t":"pp","k":"send","n":${n},"c":16,"d":"f32"}`), { tag: CONTROL_TAG });
    const e = await recv;
    expect(e.causeCode).toBe('SMCUDA_PROTOCOL');
    expect(e.message).toMatch(/second print of its send #2/);
  });

  it("a print that disagrees with this rank's matching call fails both with SMCUDA_P2P_MISMATCH", async () => {
    w = await makeWorld(2, { timeoutMs: 60_000 });
    const recv = abortOf(w.comms[0]!.recv({ buf: w.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 1 }));
    await w.comms[1]!.endpoint(0).send(text('{"t":"pp","k":"send","n":1,"c":15,"d":"f32"}'), { tag: CONTROL_TAG });
    const e = await recv;
    expect(e.causeCode).toBe('SMCUDA_P2P_MISMATCH');
    expect((await abortOf(w.comms[1]!.barrier())).causeCode).toBe('SMCUDA_P2P_MISMATCH');
  });
});

describe('P2PMatch', () => {
  it('pairs the n-th send of a pair with the n-th recv, whichever is made first; pairs are counted apart', () => {
    const a = new P2PMatch(0, 3);
    // Rank 0 sends twice to 1 and once to 2; rank 1's prints of its receives arrive before and after.
    expect(a.made('send', 1, 8, 'f32')).toMatchObject({ n: 1, agreed: false, print: { kind: 'send', n: 1, count: 8, dtype: 'f32' } });
    expect(a.arrive(1, { kind: 'recv', n: 2, count: 4, dtype: 'u8' })).toBeUndefined();
    expect(a.made('send', 2, 3, 'i32')).toMatchObject({ n: 1, agreed: false });
    expect(a.arrive(1, { kind: 'recv', n: 1, count: 8, dtype: 'f32' })).toEqual({ kind: 'send', n: 1, agreed: true });
    expect(a.made('send', 1, 4, 'u8')).toMatchObject({ n: 2, agreed: true });
    expect(a.waiting('send', 2, 1)).toBe(true);
    expect(a.arrive(2, { kind: 'recv', n: 1, count: 3, dtype: 'i32' })).toEqual({ kind: 'send', n: 1, agreed: true });
    expect(a.waiting('send', 2, 1)).toBe(false);
    // Receives from rank 1 have their own sequence.
    expect(a.made('recv', 1, 5, 'f64')).toMatchObject({ n: 1, agreed: false });
  });

  it('a count or dtype that differs is a P2PMismatchError naming sender, receiver, n and fields', () => {
    const a = new P2PMatch(1, 2);
    a.made('recv', 0, 200, 'f32');
    const r = a.arrive(0, { kind: 'send', n: 1, count: 100, dtype: 'i32' });
    expect(r!.agreed).toBeInstanceOf(P2PMismatchError);
    const e = r!.agreed as P2PMismatchError;
    expect(e).toMatchObject({ code: 'SMCUDA_P2P_MISMATCH', n: 1, ranks: [0, 1], fields: ['dtype', 'count'] });
    expect(e.message).toMatch(/rank 0's send #1 to rank 1 is i32 × 100, but rank 1's receive #1 from rank 0 is f32 × 200 \(dtype and count differ\)/);
  });

  it(`prints held for calls not made are bounded (${MAX_HELD_PRINTS} per peer), then the peer is cut off`, () => {
    const a = new P2PMatch(0, 2);
    for (let n = 1; n <= MAX_HELD_PRINTS; n++) a.arrive(1, { kind: 'send', n, count: 1, dtype: 'u8' });
    expect(() => a.arrive(1, { kind: 'send', n: MAX_HELD_PRINTS + 1, count: 1, dtype: 'u8' })).toThrow(
      expect.objectContaining({ code: 'SMCUDA_PROTOCOL', message: expect.stringMatching(/not matched yet/) }),
    );
    // A print of a call already matched is refused too.
    const b = new P2PMatch(0, 2);
    b.made('recv', 1, 1, 'u8');
    b.arrive(1, { kind: 'send', n: 1, count: 1, dtype: 'u8' });
    expect(() => b.arrive(1, { kind: 'send', n: 1, count: 1, dtype: 'u8' })).toThrow(expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }));
  });

  it('parseControl takes the prints an honest peer sends', () => {
    for (const m of [
      { t: 'pp', k: 'send', n: 1, c: 0, d: 'f32' },
      { t: 'pp', k: 'recv', n: 9, c: 2 ** 40, d: 'f8e5m2' },
    ]) {
      expect(parseControl(text(JSON.stringify(m)), 2)).toEqual(m);
    }
  });
});
