/**
 * The shared table of call prints (print-table.ts): a rank reads what a peer
 * published for a call, nothing for a call not published yet, and a call a
 * whole window behind as overwritten; ranks checking through one table find
 * a mismatch as through any board.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import type { MappedSegment } from '../../../src/channel/sealed-segment.js';
import { CallCheck, PrintRead } from '../../../src/collectives/call-check.js';
import { encodePrint } from '../../../src/collectives/call-print.js';
import { printTableBytes, printWindow, SharedPrintTable } from '../../../src/collectives/print-table.js';

function segment(bytes: number): MappedSegment {
  return { bytes: new Uint8Array(bytes), fd: undefined, releaseFd: () => undefined, lendFd: () => undefined, close: () => undefined };
}

describe('SharedPrintTable', () => {
  it('sizes: a window of 4096 calls for small jobs, at most 4 MiB for large ones', () => {
    expect(printWindow(2)).toBe(4096);
    expect(printWindow(8)).toBe(4096);
    expect(printTableBytes(4096)).toBeLessThanOrEqual(4 << 20);
    expect(printWindow(4096)).toBe(64);
  });

  it('a peer reads what a rank published, None before, Overwritten a window later', () => {
    const seg = segment(printTableBytes(2));
    const [a, b] = [new SharedPrintTable(seg, 0, 2), new SharedPrintTable(seg, 1, 2)];
    const out = new Uint32Array(3);
    expect(b.read(0, 1, out)).toBe(PrintRead.None);
    a.publish(1, 7, 8, 9);
    expect(b.read(0, 1, out)).toBe(PrintRead.Found);
    expect([...out]).toEqual([7, 8, 9]);
    a.publish(1 + a.window, 1, 2, 3);
    expect(b.read(0, 1, out)).toBe(PrintRead.Overwritten);
    expect(b.read(0, 1 + a.window, out)).toBe(PrintRead.Found);
  });

  const word = fc.integer({ min: 0, max: 2 ** 32 - 1 });
  test.prop([
    fc.integer({ min: 2, max: 8 }).chain((n) =>
      fc.record({
        n: fc.constant(n),
        rank: fc.nat(n - 1),
        seq: fc.integer({ min: 1, max: 2 ** 32 - 1 }),
        mine: fc.tuple(word, word, word),
        // What each peer did for call seq: the same print, one word flipped by a bit, nothing yet, or the call a window earlier.
        peers: fc.array(fc.oneof(fc.constant('same'), fc.tuple(fc.nat(2), fc.nat(31)), fc.constant('none'), fc.constant('earlier')), {
          minLength: n,
          maxLength: n,
        }),
      }),
    ),
  ])('agreeing: how many peers published this call with the same three words, -1 if one published it with others', ({ n, rank, seq, mine, peers }) => {
    const seg = segment(printTableBytes(n));
    const tables = [...Array(n).keys()].map((r) => new SharedPrintTable(seg, r, n));
    const window = tables[0]!.window;
    let same = 0;
    let differs = false;
    for (const [k, did] of peers.entries()) {
      if (k === rank || did === 'none') continue;
      if (did === 'same') {
        tables[k]!.publish(seq, ...mine);
        same++;
      } else if (did === 'earlier') {
        if (seq > window) tables[k]!.publish(seq - window, ...mine); // not this call: not counted
      } else {
        const w = [...mine] as [number, number, number];
        w[did[0]] = (w[did[0]]! ^ (1 << did[1])) >>> 0;
        tables[k]!.publish(seq, ...w);
        differs = true;
      }
    }
    expect(tables[rank]!.agreeing(seq, ...mine)).toBe(differs ? -1 : same);
  });

  it('ranks checking through one table: agreeing calls verify, a differing one is found by the later rank', () => {
    const seg = segment(printTableBytes(3));
    const checks = [0, 1, 2].map((r) => {
      const t = new SharedPrintTable(seg, r, 3);
      return new CallCheck(r, 3, t, t.window);
    });
    const f32 = encodePrint({ op: 'allreduce', dtype: 'f32', count: 1000, redop: 'sum' });
    const i32 = encodePrint({ op: 'allreduce', dtype: 'i32', count: 1000, redop: 'sum' });
    for (const c of checks) expect(c.made(1, ...f32)).toBeUndefined();
    for (const c of checks) expect(c.verify(1)).toBe(true);
    expect(checks[0]!.made(2, ...f32)).toBeUndefined();
    expect(checks[1]!.made(2, ...i32)).toMatchObject({ seq: 2, ranks: [1, 0], fields: ['dtype'] });
    expect(checks[0]!.verify(2)).toMatchObject({ seq: 2, fields: ['dtype'] }); // rank 0, completing call 2, finds it too
    expect(checks[0]!.missing(2)).toEqual([2]); // rank 2 has not made call 2
  });
});
