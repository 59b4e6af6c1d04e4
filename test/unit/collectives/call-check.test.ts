/**
 * Call prints and their comparison (call-print.ts, call-check.ts): a print
 * decodes to the call it was made of, two calls agree exactly when every
 * compared field does, and of two ranks publishing different calls for the
 * same number the later one always finds the difference.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { CallCheck, PrintRead, type PrintBoard } from '../../../src/collectives/call-check.js';
import {
  alltoallvShare,
  CALL_OPS,
  COUNTS_OPS,
  countsHash,
  countsWords,
  decodePrint,
  describePrint,
  differingFields,
  encodePrint,
  printsAgree,
  type CallPrint,
} from '../../../src/collectives/call-print.js';
import { MessagePrintBoard } from '../../../src/collectives/message-print-board.js';
import { printTableBytes, SharedPrintTable } from '../../../src/collectives/print-table.js';
import { DTYPES, REDUCE_OPS } from '../../../src/kernels/dtypes.js';

const print = fc
  .record({
    op: fc.constantFrom(...CALL_OPS.filter((o) => o !== 'barrier')),
    dtype: fc.constantFrom(...DTYPES),
    count: fc.oneof(fc.nat(5000), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER })),
    root: fc.option(fc.nat(4095), { nil: undefined }),
    redop: fc.option(fc.constantFrom(...REDUCE_OPS), { nil: undefined }),
    inPlace: fc.boolean(),
  })
  .map((p) => (COUNTS_OPS.has(p.op) ? { ...p, count: undefined, counts: p.count } : p)) as fc.Arbitrary<CallPrint>;

describe('call prints', () => {
  test.prop([print])('decode(encode(p)) is p', (p) => {
    const [a, b, c] = encodePrint(p);
    const d = decodePrint(a, b, c);
    expect(d.op).toBe(p.op);
    expect(d.dtype).toBe(p.dtype);
    expect(d.count).toBe(p.count);
    expect(d.counts).toBe(p.counts);
    expect(d.root).toBe(p.root);
    expect(d.redop).toBe(p.redop);
    expect(!!d.inPlace).toBe(p.inPlace);
  });

  test.prop([print, print])('two prints agree exactly when no compared field differs (in place is not compared)', (p, q) => {
    const [a0, a1, a2] = encodePrint(p);
    const [b0, b1, b2] = encodePrint(q);
    expect(printsAgree(a0, a1, a2, b0, b1, b2)).toBe(differingFields(p, q).length === 0);
  });

  it('describes a call as a person reads it', () => {
    expect(describePrint({ op: 'allreduce', dtype: 'f32', count: 1000, redop: 'sum' })).toBe('allreduce f32 × 1000 sum');
    expect(describePrint({ op: 'broadcast', dtype: 'u8', count: 4, root: 1, inPlace: true })).toBe('broadcast u8 × 4 root 1 in place');
    expect(differingFields({ op: 'allreduce', dtype: 'f32', count: 8, redop: 'sum' }, { op: 'allreduce', dtype: 'i32', count: 4, redop: 'max' })).toEqual([
      'dtype',
      'count',
      'op',
    ]);
  });
});

/** Boards of `n` ranks over one shared array, as print-table.ts lays them out: what the ranks see of each other. */
function sharedBoards(n: number): PrintBoard[] {
  const table = new Map<string, [number, number, number]>();
  return [...Array(n).keys()].map((rank) => ({
    publish: (seq, w0, w1, w2) => void table.set(`${rank}:${seq}`, [w0, w1, w2]),
    read: (peer, seq, out) => {
      const w = table.get(`${peer}:${seq}`);
      if (!w) return PrintRead.None;
      out.set(w);
      return PrintRead.Found;
    },
    done: () => undefined,
    close: () => undefined,
  }));
}

/** Prints as every rank makes them for one call: alltoallv's shares differ by rank (counts 0: the share of a call that moves nothing). */
const samePrint = print.map((p) => (p.op === 'alltoallv' ? { ...p, counts: 0 } : p));

/** The real shared table (print-table.ts) of `n` ranks over plain memory: with its one-pass fast path (agreeing). */
function tableBoards(n: number): PrintBoard[] {
  const seg = { bytes: new Uint8Array(printTableBytes(n)), fd: undefined, releaseFd: () => undefined, lendFd: () => undefined, close: () => undefined };
  return [...Array(n).keys()].map((rank) => new SharedPrintTable(seg, rank, n));
}

describe('CallCheck', () => {
  for (const [board, boardsOf] of [
    ['a board read peer by peer', sharedBoards],
    ["the shared table (all peers' prints read in one pass first)", tableBoards],
  ] as const)
    test.prop([
      fc.integer({ min: 2, max: 6 }),
      fc.array(samePrint, { minLength: 1, maxLength: 20 }),
      fc.nat(),
      fc.nat(),
      samePrint,
      fc.infiniteStream(fc.nat()),
    ])(
      `ranks making the same calls agree; one rank making another call at any point is found by whichever rank publishes last, naming the fields: ${board}`,
      (n, calls, badRankSeed, badAt, other, order) => {
        const boards = boardsOf(n);
        const checks = boards.map((b, r) => new CallCheck(r, n, b));
        const bad = badRankSeed % n;
        const at = badAt % calls.length;
        const found: number[] = [];
        for (const [i, c] of calls.entries()) {
          const seq = i + 1;
          // Ranks publish call seq in an arbitrary order.
          const ranks = [...Array(n).keys()].sort(() => ((order.next().value as number) % 3) - 1);
          for (const r of ranks) {
            const p = r === bad && i === at ? other : c;
            const [w0, w1, w2] = encodePrint(p);
            const m = checks[r]!.made(seq, w0, w1, w2);
            if (m) {
              expect(m.seq).toBe(seq);
              expect(m.fields.length).toBeGreaterThan(0);
              found.push(seq);
            }
          }
          const differs = i === at && differingFields(other, c).length > 0;
          // Once every rank made the call, every rank's verify sees what is true.
          for (const ch of checks) {
            const v = ch.verify(seq);
            if (differs && ch.rank === bad) expect(v).not.toBe(true);
            if (!differs) expect(v).toBe(true);
          }
          if (differs) expect(found).toContain(seq);
          else expect(found).not.toContain(seq);
          if (differs) return;
        }
      },
    );

  test.prop([
    fc.integer({ min: 2, max: 6 }).chain((n) =>
      fc.record({
        n: fc.constant(n),
        matrix: fc.array(fc.array(fc.oneof(fc.nat(3), fc.nat(1 << 20), fc.constant(2 ** 40 + 7)), { minLength: n, maxLength: n }), {
          minLength: n,
          maxLength: n,
        }),
        bad: fc.option(fc.record({ rank: fc.nat(n - 1), k: fc.nat(n - 1), side: fc.constantFrom('send', 'recv'), delta: fc.integer({ min: 1, max: 1000 }) }), {
          nil: undefined,
        }),
      }),
    ),
  ])(
    "alltoallv: counts that pair up agree; one rank's sendCounts[k] or recvCounts[k] off by any amount is found by every rank once every print is in",
    ({ n, matrix, bad }) => {
      const boards = sharedBoards(n);
      const checks = boards.map((b, r) => new CallCheck(r, n, b));
      // matrix[i][j]: what rank i sends rank j (its sendCounts[j], rank j's recvCounts[i]).
      const found: number[] = [];
      for (let r = 0; r < n; r++) {
        const send = matrix[r]!.slice();
        const recv = matrix.map((row) => row[r]!);
        if (bad?.rank === r) (bad.side === 'send' ? send : recv)[bad.k] += bad.delta;
        const [w1, w2] = countsWords(alltoallvShare(r, send, recv), undefined);
        const m = checks[r]!.made(1, encodePrint({ op: 'alltoallv', dtype: 'f32' })[0], w1, w2);
        if (m) found.push(r);
      }
      for (const ch of checks) {
        const v = ch.verify(1);
        if (bad === undefined) expect(v).toBe(true);
        else expect(v).toMatchObject({ seq: 1, fields: ['counts'] });
      }
      // The last rank to publish sees every print: it finds the difference before queueing anything.
      expect(found).toEqual(bad === undefined ? [] : [n - 1]);
    },
  );

  it('allgatherv and reduce-scatterv: different counts per rank hash apart (order counts too)', () => {
    const seen = new Set<number>();
    for (const c of [
      [1, 2, 3],
      [3, 2, 1],
      [1, 2, 4],
      [0, 0, 0],
      [0, 0],
      [6, 0, 0],
      [2 ** 40, 0, 0],
    ])
      seen.add(countsHash(c));
    expect(seen.size).toBe(7);
    const a = encodePrint({ op: 'allgatherv', dtype: 'u8', counts: countsHash([1, 2, 3]) });
    const b = encodePrint({ op: 'allgatherv', dtype: 'u8', counts: countsHash([1, 2, 4]) });
    expect(printsAgree(...a, ...b)).toBe(false);
    expect(differingFields(decodePrint(...a), decodePrint(...b))).toEqual(['counts']);
  });

  it('the last rank to make a call found every print then: its verify reads nothing more; the first reads them all', () => {
    const n = 4;
    const boards = sharedBoards(n);
    const reads = boards.map(() => 0);
    const counted = boards.map((b, r) => ({ ...b, read: (peer: number, seq: number, out: Uint32Array) => (reads[r]!++, b.read(peer, seq, out)) }));
    const checks = counted.map((b, r) => new CallCheck(r, n, b));
    const [w0, w1, w2] = encodePrint({ op: 'allreduce', dtype: 'f32', count: 16, redop: 'sum', inPlace: true, root: undefined } as Parameters<
      typeof encodePrint
    >[0]);
    for (const c of checks) expect(c.made(1, w0, w1, w2)).toBeUndefined();
    reads.fill(0);
    for (const c of checks) expect(c.verify(1)).toBe(true);
    expect(reads[n - 1]).toBe(0);
    expect(reads[0]).toBe(n - 1);
  });

  it('names the ranks that never made a call', () => {
    const boards = sharedBoards(3);
    const checks = boards.map((b, r) => new CallCheck(r, 3, b));
    checks[0]!.made(1, ...encodePrint({ op: 'barrier' }));
    checks[2]!.made(1, ...encodePrint({ op: 'barrier' }));
    expect(checks[0]!.verify(1)).toBe(false);
    expect(checks[0]!.missing(1)).toEqual([1]);
  });
});

describe('MessagePrintBoard', () => {
  it("sends the prints of one turn in one message, and keeps a peer's until the call completes here", async () => {
    const sent: Array<[number, number[]]> = [];
    const b = new MessagePrintBoard((first, words) => sent.push([first, words]));
    b.publish(1, 1, 2, 3);
    b.publish(2, 4, 5, 6);
    await Promise.resolve();
    expect(sent).toEqual([[1, [1, 2, 3, 4, 5, 6]]]);
    expect(b.arrive(1, 1, [7, 8, 9, 10, 11, 12])).toEqual([1, 2]);
    const out = new Uint32Array(3);
    expect(b.read(1, 2, out)).toBe(PrintRead.Found);
    expect([...out]).toEqual([10, 11, 12]);
    b.done(2);
    expect(b.read(1, 2, out)).toBe(PrintRead.Overwritten);
    expect(b.read(1, 3, out)).toBe(PrintRead.None);
  });

  it('refuses malformed batches and a peer too far ahead (bounded memory) with ProtocolError', () => {
    const b = new MessagePrintBoard(() => undefined, 4);
    expect(() => b.arrive(1, 1, [1, 2])).toThrow(expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }));
    expect(() => b.arrive(1, 0, [1, 2, 3])).toThrow(expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }));
    expect(() => b.arrive(1, 1, [1, 2, -3])).toThrow(expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }));
    expect(() => b.arrive(1, 1, 'x')).toThrow(expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }));
    expect(() => b.arrive(1, 1, Array(15).fill(1))).toThrow(expect.objectContaining({ code: 'SMCUDA_PROTOCOL' }));
  });
});
