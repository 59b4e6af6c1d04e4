/**
 * The flight recorder's point-to-point half (p2p-flight.ts): each send and
 * receive is kept with its kind, peer and pair number, through made, its
 * peer's call known, finished or failed; the last `capacity` are kept, a
 * state change for one overwritten since is ignored, and a finished or
 * failed call never changes again.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { P2PFlightRecorder } from '../../../src/collectives/p2p-flight.js';

describe('P2PFlightRecorder', () => {
  it('records a send through agreed and finished, a receive through failed, with their times', () => {
    const r = new P2PFlightRecorder(8);
    const a = r.queued('send', 2, 1, 'bf16', 1024, 'device', 0x10n, 100);
    const b = r.queued('recv', 3, 7, 'f32', 5, 'staged', 0n, 110);
    r.agreed(a, 120);
    r.finished(a, 130);
    r.failed(b, 140);
    r.finished(b, 150); // a failed call stays failed
    r.agreed(a, 160); // and a finished one finished
    r.failed(0); // 0: a call never recorded (no slot holds it)
    expect(r.entries()).toEqual([
      {
        id: 1,
        kind: 'send',
        peer: 2,
        n: 1,
        dtype: 'bf16',
        count: 1024,
        path: 'device',
        stream: 0x10n,
        state: 'finished',
        queuedUs: 100,
        agreedUs: 120,
        finishedUs: 130,
      },
      { id: 2, kind: 'recv', peer: 3, n: 7, dtype: 'f32', count: 5, path: 'staged', stream: 0n, state: 'failed', queuedUs: 110, finishedUs: 140 },
    ]);
    expect(r.unfinished()).toEqual(['recv #7 from rank 3 (f32 × 5), failed']);
    expect(r.jsonLines().split('\n')[0]).toBe(
      '{"p2p":1,"kind":"send","peer":2,"n":1,"dtype":"bf16","count":1024,"path":"device","stream":"0x10","state":"finished","queuedUs":100,"agreedUs":120,"finishedUs":130}',
    );
  });

  test.prop([
    fc.integer({ min: 1, max: 16 }),
    fc.array(fc.tuple(fc.constantFrom('agreed', 'finished', 'failed'), fc.nat(40)), { maxLength: 60 }),
    fc.integer({ min: 0, max: 40 }),
  ])('keeps the last `capacity` calls in order; a change to an overwritten one is ignored', (capacity, changes, made) => {
    const r = new P2PFlightRecorder(capacity);
    const ids = Array.from({ length: made }, (_, i) => r.queued(i % 2 ? 'send' : 'recv', 1, i + 1, 'f32', i, 'device', 0n, i));
    const state = new Map<number, string>(ids.map((id) => [id, 'queued']));
    for (const [what, k] of changes) {
      const id = k + 1;
      if (what === 'agreed') r.agreed(id);
      else if (what === 'finished') r.finished(id);
      else r.failed(id);
      const was = state.get(id);
      if (was === undefined || id <= made - capacity) continue; // never made, or overwritten
      if (what === 'agreed' && was === 'queued') state.set(id, 'agreed');
      if (what !== 'agreed' && (was === 'queued' || was === 'agreed')) state.set(id, what);
    }
    const kept = ids.slice(Math.max(0, made - capacity));
    expect(r.recorded).toBe(made);
    expect(r.entries().map((e) => [e.id, e.n, e.state])).toEqual(kept.map((id) => [id, id, state.get(id)]));
  });
});
