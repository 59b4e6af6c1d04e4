/**
 * MatchQueues (src/matching.ts) on its own: MPI's matching rule per tag —
 * arrivals in send order, receives in post order — checked by example and
 * against a model (fast-check): a list of arrivals and a list of receives
 * per tag, paired front to front.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { MatchQueues } from '../../../src/matching.js';

describe('MatchQueues', () => {
  it('pairs an arrival with the oldest receive of its tag, and a receive with the oldest arrival', () => {
    const m = new MatchQueues<string, number>();
    expect(m.post(1, 'r1')).toBeUndefined();
    expect(m.post(1, 'r2')).toBeUndefined();
    expect(m.post(2, 'q1')).toBeUndefined();
    expect(m.arrive(1, 10)).toBe('r1');
    expect(m.arrive(2, 20)).toBe('q1');
    expect(m.arrive(1, 11)).toBe('r2');
    expect(m.arrive(1, 12)).toBeUndefined(); // waits, unexpected
    expect(m.arrive(1, 13)).toBeUndefined();
    expect(m.unexpectedCount).toBe(2);
    expect(m.post(1, 'r3')).toBe(12);
    expect(m.post(1, 'r4')).toBe(13);
    expect(m.post(3, 'z')).toBeUndefined();
    expect(m.postedCount).toBe(1);
    expect(m.unexpectedCount).toBe(0);
  });

  it('withdraws a posted receive only while it has not matched', () => {
    const m = new MatchQueues<string, number>();
    m.post(1, 'a');
    m.post(1, 'b');
    expect(m.unpost(1, 'a')).toBe(true);
    expect(m.unpost(1, 'a')).toBe(false);
    expect(m.unpost(2, 'b')).toBe(false); // another tag
    expect(m.arrive(1, 5)).toBe('b');
    expect(m.unpost(1, 'b')).toBe(false);
  });

  it('withdraws the first unexpected arrival of any tag that satisfies a predicate, keeping the others in order', () => {
    const m = new MatchQueues<string, { seq: number }>();
    for (const [tag, seq] of [[1, 1], [2, 2], [1, 3], [1, 4]] as const) m.arrive(tag, { seq });
    expect(m.withdrawArrival((a) => a.seq === 3)).toEqual({ seq: 3 });
    expect(m.withdrawArrival((a) => a.seq === 3)).toBeUndefined();
    expect(m.withdrawArrival((a) => a.seq === 2)).toEqual({ seq: 2 });
    expect(m.post(1, 'x')).toEqual({ seq: 1 });
    expect(m.post(1, 'y')).toEqual({ seq: 4 });
    expect(m.post(2, 'z')).toBeUndefined();
  });

  it('drain empties both queues and returns what was in them', () => {
    const m = new MatchQueues<string, number>();
    m.post(1, 'a');
    m.post(2, 'b');
    m.arrive(3, 30);
    const { posted, unexpected } = m.drain();
    expect(posted.sort()).toEqual(['a', 'b']);
    expect(unexpected).toEqual([30]);
    expect(m.postedCount + m.unexpectedCount).toBe(0);
    expect(m.arrive(1, 1)).toBeUndefined();
  });

  type Op = { kind: 'arrive'; tag: number } | { kind: 'post'; tag: number } | { kind: 'unpost'; tag: number; nth: number };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ kind: fc.constant('arrive' as const), tag: fc.integer({ min: 0, max: 2 }) }),
    fc.record({ kind: fc.constant('post' as const), tag: fc.integer({ min: 0, max: 2 }) }),
    fc.record({ kind: fc.constant('unpost' as const), tag: fc.integer({ min: 0, max: 2 }), nth: fc.nat(3) }),
  );

  propTest.prop([fc.array(op, { maxLength: 60 })])('matches as the model does: per tag, the k-th arrival meets the k-th receive not withdrawn', (ops) => {
    const m = new MatchQueues<number, number>();
    const model = new Map<number, { posted: number[]; unexpected: number[] }>();
    const q = (tag: number) => model.get(tag) ?? (model.set(tag, { posted: [], unexpected: [] }), model.get(tag)!);
    let id = 0;
    for (const o of ops) {
      const t = q(o.tag);
      if (o.kind === 'arrive') {
        const a = id++;
        const want = t.posted.length > 0 ? t.posted.shift() : (t.unexpected.push(a), undefined);
        expect(m.arrive(o.tag, a)).toBe(want);
      } else if (o.kind === 'post') {
        const r = id++;
        const want = t.unexpected.length > 0 ? t.unexpected.shift() : (t.posted.push(r), undefined);
        expect(m.post(o.tag, r)).toBe(want);
      } else if (o.kind === 'unpost') {
        const r = t.posted[o.nth];
        if (r === undefined) continue;
        t.posted.splice(o.nth, 1);
        expect(m.unpost(o.tag, r)).toBe(true);
      }
      // Only one of a tag's two queues is ever non-empty.
      expect(t.posted.length === 0 || t.unexpected.length === 0).toBe(true);
    }
    expect(m.postedCount).toBe([...model.values()].reduce((n, t) => n + t.posted.length, 0));
    expect(m.unexpectedCount).toBe([...model.values()].reduce((n, t) => n + t.unexpected.length, 0));
  });
});
