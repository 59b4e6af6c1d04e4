/**
 * The flight recorder: its ring (wraps at capacity, entries oldest first,
 * lookups by seq with and without gaps), the states and times of a call,
 * the summary for error messages, and the dump (format, mode 0600, never
 * over a file or through a link).
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FLIGHT_FORMAT, FlightRecorder, flightDirFor, flightNowUs, flightUs, type FlightEntry } from '../../../src/collectives/flight-recorder.js';

const tmp = mkdtempSync(join(tmpdir(), 'smcuda-flight-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Records `n` allreduce calls 1..n, each finished 10 µs after it was queued at 100·seq. */
function recordFinished(r: FlightRecorder, from: number, to: number): void {
  for (let s = from; s <= to; s++) {
    r.queued(s, 'allreduce', 'f32', s * 10, undefined, 'one-shot', 0n, s * 100);
    r.finished(s, s * 100 + 10);
  }
}

describe('the ring', () => {
  it('keeps the last N calls, oldest first, after wrapping', () => {
    const r = new FlightRecorder({ capacity: 5 });
    recordFinished(r, 1, 12);
    const e = r.entries();
    expect(e.map((x) => x.seq)).toEqual([8, 9, 10, 11, 12]);
    expect(e.every((x) => x.state === 'finished' && x.count === x.seq * 10)).toBe(true);
    expect(r.recorded).toBe(12);
  });

  it('holds fewer than N calls in order before it wraps, and none at first', () => {
    const r = new FlightRecorder({ capacity: 5 });
    expect(r.entries()).toEqual([]);
    recordFinished(r, 1, 3);
    expect(r.entries().map((x) => x.seq)).toEqual([1, 2, 3]);
  });

  it('defaults to 1000 calls', () => {
    const r = new FlightRecorder();
    expect(r.capacity).toBe(1000);
    recordFinished(r, 1, 1001);
    expect(r.entries()[0]!.seq).toBe(2);
    expect(r.entries()).toHaveLength(1000);
  });

  it('records every field: op, dtype, count, root, algorithm, stream; undefined ones stay out', () => {
    const r = new FlightRecorder();
    r.queued(1, 'broadcast', 'bf16', 8, 3, 'staged', 0x7f00_0000_1234n, 50);
    r.queued(2, 'barrier', undefined, undefined, undefined, 'staged', 0xffff_ffff_ffff_ffffn, 60);
    const [a, b] = r.entries();
    expect(a).toEqual({
      seq: 1,
      op: 'broadcast',
      dtype: 'bf16',
      count: 8,
      root: 3,
      algorithm: 'staged',
      stream: 0x7f00_0000_1234n,
      state: 'started',
      queuedUs: 50,
      startedUs: 50,
    });
    expect(b).toEqual({ seq: 2, op: 'barrier', algorithm: 'staged', stream: 0xffff_ffff_ffff_ffffn, state: 'queued', queuedUs: 60 });
  });

  it('finds calls by seq when seqs skip numbers (calls refused before they were recorded)', () => {
    const r = new FlightRecorder({ capacity: 4 });
    for (const s of [1, 2, 5, 9, 10, 14]) r.queued(s, 'allreduce', 'f32', 1, undefined, 'one-shot', 0n, s);
    for (const s of [5, 9, 10, 14]) r.finished(s, s + 100);
    expect(r.entries().map((x) => [x.seq, x.state])).toEqual([
      [5, 'finished'],
      [9, 'finished'],
      [10, 'finished'],
      [14, 'finished'],
    ]);
  });

  it('ignores started/finished/failed of a seq it does not hold (never recorded, or overwritten)', () => {
    const r = new FlightRecorder({ capacity: 2 });
    recordFinished(r, 1, 3);
    r.queued(4, 'allreduce', 'f32', 1, undefined, 'one-shot', 0n, 400);
    const before = r.entries();
    r.finished(1, 1);
    r.failed(99, 1);
    r.started(-5, 1);
    expect(r.entries()).toEqual(before);
  });

  it('finds seqs recorded out of order', () => {
    const r = new FlightRecorder({ capacity: 8 });
    for (const s of [3, 1, 2]) r.queued(s, 'reduce', 'i32', 1, 0, 'one-shot', 0n, s);
    r.failed(1, 10);
    expect(r.entries().map((x) => [x.seq, x.state])).toEqual([
      [3, 'started'],
      [1, 'failed'],
      [2, 'queued'],
    ]);
  });

  it('refuses a capacity that is not a whole number of calls from 1, and unknown option keys', () => {
    expect(() => new FlightRecorder({ capacity: 0 })).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
    expect(() => new FlightRecorder({ capacity: 2 ** 30 })).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
    expect(() => new FlightRecorder({ capacity: 1.5 })).toThrow(expect.objectContaining({ code: 'SMCUDA_INVALID_ARG_TYPE' }));
    expect(() => new FlightRecorder({ capacity: '10' as unknown as number })).toThrow(expect.objectContaining({ code: 'SMCUDA_INVALID_ARG_TYPE' }));
    expect(() => new FlightRecorder({ size: 10 } as never)).toThrow(
      expect.objectContaining({ code: 'SMCUDA_CONFIG', message: expect.stringContaining('size') }),
    );
  });

  /** A model of the ring: the last N calls by seq, with the state each call was last given. */
  propTest.prop([
    fc.integer({ min: 1, max: 8 }),
    fc.array(
      fc.oneof(
        fc.constant({ kind: 'queue' as const }),
        fc.record({ kind: fc.constantFrom('finish' as const, 'fail' as const, 'start' as const), back: fc.nat({ max: 12 }) }),
      ),
      { maxLength: 60 },
    ),
  ])('matches a model of the last N calls under any interleaving of calls', (cap, steps) => {
    const r = new FlightRecorder({ capacity: cap });
    const model: Array<{ seq: number; state: FlightEntry['state'] }> = [];
    let seq = 0;
    let t = 0;
    for (const step of steps) {
      t += 1;
      if (step.kind === 'queue') {
        seq++;
        const idle = model.length === 0 || model.at(-1)!.state === 'finished' || model.at(-1)!.state === 'failed';
        model.push({ seq, state: idle ? 'started' : 'queued' });
        if (model.length > cap) model.shift();
        r.queued(seq, 'allreduce', 'f32', 4, undefined, 'two-shot', 0n, t);
        continue;
      }
      const target = seq - step.back;
      const i = model.findIndex((m) => m.seq === target);
      if (step.kind === 'start') {
        r.started(target, t);
        if (i >= 0 && model[i]!.state === 'queued') model[i]!.state = 'started';
      } else if (step.kind === 'finish') {
        r.finished(target, t);
        if (i >= 0) {
          model[i]!.state = 'finished';
          if (i + 1 < model.length && model[i + 1]!.state === 'queued') model[i + 1]!.state = 'started';
        }
      } else {
        r.failed(target, t);
        if (i >= 0) model[i]!.state = 'failed';
      }
    }
    const got = r.entries();
    expect(got.map((e) => ({ seq: e.seq, state: e.state }))).toEqual(model);
    for (const e of got) {
      // Times never run backwards within a call.
      if (e.startedUs !== undefined) expect(e.startedUs).toBeGreaterThanOrEqual(e.queuedUs);
      if (e.finishedUs !== undefined && e.startedUs !== undefined) expect(e.finishedUs).toBeGreaterThanOrEqual(e.startedUs);
      if (e.state === 'queued') expect(e.startedUs).toBeUndefined();
      if (e.state === 'finished') expect(e.startedUs).toBeDefined();
    }
  });
});

describe('states and times', () => {
  it('starts a call at once when nothing is in flight, else when the call before it finishes', () => {
    const r = new FlightRecorder();
    r.queued(1, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 100);
    r.queued(2, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 110);
    r.queued(3, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 120);
    expect(r.entries().map((e) => e.state)).toEqual(['started', 'queued', 'queued']);
    r.finished(1, 150);
    const [a, b, c] = r.entries();
    expect(a).toMatchObject({ state: 'finished', startedUs: 100, finishedUs: 150 });
    expect(b).toMatchObject({ state: 'started', startedUs: 150 });
    expect(c!.state).toBe('queued');
  });

  it('takes the later of queued and the previous completion as the start', () => {
    const r = new FlightRecorder();
    r.queued(1, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 100);
    r.queued(2, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 200);
    // Completion seen by the host before the next call's queue time (clock readings in another order).
    r.finished(1, 150);
    expect(r.entries()[1]).toMatchObject({ state: 'started', startedUs: 200 });
  });

  it('lets the caller say when a call started, and keeps started ≤ finished', () => {
    const r = new FlightRecorder();
    r.queued(1, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 100);
    r.queued(2, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 110);
    r.started(2, 130);
    expect(r.entries()[1]).toMatchObject({ state: 'started', startedUs: 130 });
    r.started(1, 500);
    r.finished(1, 300);
    expect(r.entries()[0]).toMatchObject({ state: 'finished', startedUs: 300, finishedUs: 300 });
  });

  it('a queued call that fails never started; a call after a failed one starts at once', () => {
    const r = new FlightRecorder();
    r.queued(1, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 100);
    r.queued(2, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 110);
    r.failed(2, 120);
    r.failed(1, 121);
    expect(r.entries()[1]).toEqual(expect.objectContaining({ state: 'failed', finishedUs: 120 }));
    expect(r.entries()[1]!.startedUs).toBeUndefined();
    r.queued(3, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n, 130);
    expect(r.entries()[2]).toMatchObject({ state: 'started', startedUs: 130 });
  });

  it('reads the clock itself when no time is given, on the trace time base (µs since the epoch)', () => {
    const r = new FlightRecorder();
    const before = flightNowUs();
    r.queued(1, 'allreduce', 'f32', 4, undefined, 'one-shot', 0n);
    r.finished(1);
    const after = flightNowUs();
    const e = r.entries()[0]!;
    expect(e.queuedUs).toBeGreaterThanOrEqual(before);
    expect(e.finishedUs).toBeLessThanOrEqual(after);
    expect(Math.abs(before / 1000 - Date.now())).toBeLessThan(5000);
    expect(flightUs(1000)).toBeCloseTo((performance.timeOrigin + 1000) * 1000, 3);
  });
});

describe('summary', () => {
  it('names the last finished call and the calls not finished, with their state', () => {
    const r = new FlightRecorder();
    recordFinished(r, 1, 16);
    r.queued(17, 'allreduce', 'f32', 1048576, undefined, 'two-shot', 0n, 1_000_000);
    r.queued(18, 'broadcast', 'i32', 8, 2, 'one-shot', 0n, 1_500_000);
    const s = r.summary(3_000_000);
    expect(s).toBe(
      'flight recorder: last finished call 16 (allreduce f32×160 by one-shot); not finished: 17 allreduce f32×1048576 by two-shot started 2.00 s ago; 18 broadcast i32×8 root 2 by one-shot queued 1.50 s ago',
    );
  });

  it('says so when nothing is recorded, nothing finished, or nothing is in flight; lists at most four open calls', () => {
    const r = new FlightRecorder();
    expect(r.summary()).toBe('flight recorder: no call recorded yet');
    for (let s = 1; s <= 6; s++) r.queued(s, 'barrier', undefined, undefined, undefined, 'staged', 0n, 0);
    r.failed(1, 1);
    const s = r.summary(2e6);
    expect(s).toMatch(
      /^flight recorder: no call finished of the last 6; not finished: 1 barrier by staged failed 2\.00 s ago; 2 barrier by staged queued 2\.00 s ago; /,
    );
    expect(s).toMatch(/; 2 more$/);
    const done = new FlightRecorder();
    recordFinished(done, 1, 2);
    expect(done.summary()).toBe('flight recorder: last finished call 2 (allreduce f32×20 by one-shot); none in flight');
  });
});

describe('dumps', () => {
  const meta = { rank: 2, size: 4, pid: 4242, cause: 'rank 2: allreduce #17 did not complete within 60000 ms' };

  it('is a header line (format, rank, size, pid, time, cause) then one JSON line per call, oldest first', () => {
    const r = new FlightRecorder({ capacity: 3 });
    recordFinished(r, 1, 4);
    r.queued(5, 'reduce', 'f64', 2, 1, 'staged', 0xabcn, 555.4);
    const lines = r
      .toJsonLines(meta, 9_999_999.6)
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines[0]).toEqual({ format: FLIGHT_FORMAT, rank: 2, size: 4, pid: 4242, timeUs: 10_000_000, capacity: 3, recorded: 5, cause: meta.cause });
    expect(lines.slice(1).map((l) => l.seq)).toEqual([3, 4, 5]);
    expect(lines[3]).toEqual({
      seq: 5,
      op: 'reduce',
      dtype: 'f64',
      count: 2,
      root: 1,
      algorithm: 'staged',
      stream: '0xabc',
      state: 'started',
      queuedUs: 555,
      startedUs: 555,
    });
    expect(lines[1]).toEqual({
      seq: 3,
      op: 'allreduce',
      dtype: 'f32',
      count: 30,
      algorithm: 'one-shot',
      stream: '0x0',
      state: 'finished',
      queuedUs: 300,
      startedUs: 300,
      finishedUs: 310,
    });
  });

  it('writes <dir>/flight.rank<r>.<pid>.jsonl, mode 0600, making the directory 0700; a second dump gets .2', () => {
    const dir = join(tmp, 'job1', 'flight');
    const r = new FlightRecorder();
    recordFinished(r, 1, 2);
    const path = r.dump(dir, meta);
    expect(path).toBe(join(dir, 'flight.rank2.4242.jsonl'));
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(readFileSync(path, 'utf8')).toBe(r.toJsonLines(meta, JSON.parse(readFileSync(path, 'utf8').split('\n')[0]!).timeUs));
    const again = r.dump(dir, meta);
    expect(again).toBe(join(dir, 'flight.rank2.4242.2.jsonl'));
    expect(readFileSync(path, 'utf8').split('\n')).toHaveLength(4);
  });

  it('never writes through a symbolic link, nor into a linked directory', () => {
    const dir = join(tmp, 'links');
    mkdirSync(dir);
    const victim = join(tmp, 'victim.txt');
    writeFileSync(victim, 'mine');
    symlinkSync(victim, join(dir, 'flight.rank2.4242.jsonl'));
    const r = new FlightRecorder();
    // The link's name counts as taken (O_EXCL): the dump goes to the next name, the link's target is untouched.
    expect(r.dump(dir, meta)).toBe(join(dir, 'flight.rank2.4242.2.jsonl'));
    expect(readFileSync(victim, 'utf8')).toBe('mine');
    expect(lstatSync(join(dir, 'flight.rank2.4242.jsonl')).isSymbolicLink()).toBe(true);
    const linkedDir = join(tmp, 'linked-dir');
    symlinkSync(dir, linkedDir);
    expect(() => r.dump(linkedDir, meta)).toThrow(expect.objectContaining({ code: 'SMCUDA_ACCESS_DENIED', message: expect.stringContaining('symbolic link') }));
  });

  it('refuses a directory path that is a file, and meta that is not a rank of the job', () => {
    const file = join(tmp, 'a-file');
    writeFileSync(file, '');
    const r = new FlightRecorder();
    expect(() => r.dump(file, meta)).toThrow(expect.objectContaining({ code: 'SMCUDA_ACCESS_DENIED' }));
    expect(() => r.toJsonLines({ rank: 4, size: 4, pid: 1 })).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
    expect(() => r.toJsonLines({ rank: 0, size: 0, pid: 1 })).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
    expect(() => r.toJsonLines({ rank: 0, size: 1, pid: -1 })).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
    expect(() => r.toJsonLines({ rank: 0, size: 1, pid: 1, cause: 5 as never })).toThrow(expect.objectContaining({ code: 'SMCUDA_INVALID_ARG_TYPE' }));
    expect(() => r.toJsonLines(null as never)).toThrow(expect.objectContaining({ code: 'SMCUDA_INVALID_ARG_TYPE' }));
  });

  it('puts a job traced to /tmp/run.jsonl in /tmp/run.flight', () => {
    expect(flightDirFor('/tmp/run.jsonl')).toBe('/tmp/run.flight');
    expect(flightDirFor('/tmp/jobs/trace')).toBe('/tmp/jobs/trace.flight');
  });
});
