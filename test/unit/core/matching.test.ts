/**
 * MatchQueues (src/matching.ts) on its own: MPI's matching rule per tag —
 * arrivals in send order, receives in post order — checked by example and
 * against a model (fast-check): a list of arrivals and a list of receives
 * per tag, paired front to front; and, with wildcards (ANY_TAG receives, a
 * rival queue of any-source receives), against one list of receives in post
 * order and one of arrivals in arrival order.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { ANY_TAG, MatchQueues, nextOrder, type RivalReceives } from '../../../src/matching.js';

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
    for (const [tag, seq] of [
      [1, 1],
      [2, 2],
      [1, 3],
      [1, 4],
    ] as const)
      m.arrive(tag, { seq });
    expect(m.withdrawArrival((a) => a.seq === 3)).toEqual({ seq: 3 });
    expect(m.withdrawArrival((a) => a.seq === 3)).toBeUndefined();
    expect(m.withdrawArrival((a) => a.seq === 2)).toEqual({ seq: 2 });
    expect(m.post(1, 'x')).toEqual({ seq: 1 });
    expect(m.post(1, 'y')).toEqual({ seq: 4 });
    expect(m.post(2, 'z')).toBeUndefined();
  });

  it('drainKeeping empties the posted receives and the arrivals it is not told to keep; the kept stay in order', () => {
    const m = new MatchQueues<string, number>();
    m.post(1, 'a');
    m.post(2, 'b');
    m.arrive(3, 30);
    m.arrive(4, 41);
    m.arrive(4, 40);
    m.arrive(4, 43);
    const { posted, dropped } = m.drainKeeping((a) => a % 2 === 1);
    expect(posted.sort()).toEqual(['a', 'b']);
    expect(dropped.sort()).toEqual([30, 40]);
    expect(m.postedCount).toBe(0);
    expect(m.unexpectedCount).toBe(2);
    expect(m.post(ANY_TAG, 'x')).toBe(41);
    expect(m.post(4, 'y')).toBe(43);
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

  it('ANY_TAG: a receive takes the earliest arrival of any tag; an arrival the earliest-posted receive that matches', () => {
    const m = new MatchQueues<string, string>();
    m.arrive(2, 'a2');
    m.arrive(1, 'a1');
    expect(m.probe(ANY_TAG)).toBe('a2');
    expect(m.probe(1)).toBe('a1');
    expect(m.post(ANY_TAG, 'r')).toBe('a2');
    expect(m.post(ANY_TAG, 'r')).toBe('a1');
    expect(m.probe(ANY_TAG)).toBeUndefined();
    expect(m.post(ANY_TAG, 'any')).toBeUndefined();
    expect(m.post(5, 'five')).toBeUndefined();
    expect(m.arrive(5, 'x')).toBe('any'); // posted first
    expect(m.arrive(5, 'y')).toBe('five');
    expect(m.post(ANY_TAG, 'gone')).toBeUndefined();
    expect(m.unpost(ANY_TAG, 'gone')).toBe(true);
    expect(m.unpost(ANY_TAG, 'gone')).toBe(false);
    expect(m.postedCount).toBe(0);
  });

  // The model: receives in one post order (each local or the rival's, with a tag or ANY_TAG), arrivals in arrival order.
  type WildOp =
    | { kind: 'arrive'; tag: number }
    | { kind: 'post'; tag: number; rival: boolean }
    | { kind: 'unpost'; nth: number }
    | { kind: 'probe'; tag: number };
  const wildTag = fc.oneof(fc.integer({ min: 0, max: 2 }), fc.constant(ANY_TAG));
  const wildOp: fc.Arbitrary<WildOp> = fc.oneof(
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('arrive' as const), tag: fc.integer({ min: 0, max: 2 }) }) },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('post' as const), tag: wildTag, rival: fc.boolean() }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('unpost' as const), nth: fc.nat(4) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('probe' as const), tag: wildTag }) },
  );

  propTest.prop([fc.array(wildOp, { maxLength: 80 })])(
    'with wildcards and a rival queue, matches as the model does: the earliest-posted matching receive, the earliest matching arrival',
    (ops) => {
      const m = new MatchQueues<number, number>();
      type R = { id: number; tag: number; rival: boolean; order: number };
      const rivalQ: R[] = [];
      const rival: RivalReceives<number> = {
        firstOrder: (tag) => rivalQ.find((r) => r.tag === ANY_TAG || r.tag === tag)?.order ?? Infinity,
        take: (tag) => {
          const i = rivalQ.findIndex((r) => r.tag === ANY_TAG || r.tag === tag);
          return rivalQ.splice(i, 1)[0]!.id;
        },
      };
      const posted: R[] = []; // the model: every receive waiting, in post order
      const unexpected: { id: number; tag: number }[] = [];
      const takes = (r: { tag: number }, tag: number) => r.tag === ANY_TAG || r.tag === tag;
      let id = 0;
      for (const o of ops) {
        if (o.kind === 'arrive') {
          const a = id++;
          const i = posted.findIndex((r) => takes(r, o.tag));
          const want = i >= 0 ? posted.splice(i, 1)[0]!.id : (unexpected.push({ id: a, tag: o.tag }), undefined);
          expect(m.arrive(o.tag, a, rival)).toBe(want);
        } else if (o.kind === 'post') {
          const r = id++;
          const i = unexpected.findIndex((a) => takes(o, a.tag));
          const want = i >= 0 ? unexpected.splice(i, 1)[0]!.id : undefined;
          if (o.rival) {
            // The transport's any-source receive: it looks at the arrivals first, then waits in its own queue.
            const got = m.probe(o.tag);
            expect(got).toBe(want);
            if (got !== undefined) expect(m.post(o.tag, r)).toBe(got);
            else {
              const entry = { id: r, tag: o.tag, rival: true, order: nextOrder() };
              rivalQ.push(entry);
              posted.push(entry);
            }
          } else {
            const got = m.post(o.tag, r);
            expect(got).toBe(want);
            if (got === undefined) posted.push({ id: r, tag: o.tag, rival: false, order: 0 });
          }
        } else if (o.kind === 'unpost') {
          const r = posted[o.nth];
          if (r === undefined) continue;
          posted.splice(o.nth, 1);
          if (r.rival) rivalQ.splice(rivalQ.indexOf(r), 1);
          else expect(m.unpost(r.tag, r.id)).toBe(true);
        } else {
          expect(m.probe(o.tag)).toBe(unexpected.find((a) => takes(o, a.tag))?.id);
        }
      }
      expect(m.postedCount).toBe(posted.filter((r) => !r.rival).length);
      expect(m.unexpectedCount).toBe(unexpected.length);
    },
  );
});
