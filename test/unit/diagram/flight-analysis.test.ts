/**
 * Who is stuck: the ranks' flight records (written by FlightRecorder, read
 * back from their dump text) analysed together — a rank behind, ranks that
 * disagree on a call, every rank finished or stuck in one call — and the
 * reading of dumps (header detection, bad lines refused by line); sends and
 * receives not finished, each looked up in its peer's record.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { FlightRecorder } from '../../../src/collectives/flight-recorder.js';
import { P2PFlightRecorder } from '../../../src/collectives/p2p-flight.js';
import { analyzeFlights, isFlightText, parseFlightFile, renderFlightAnalysis, type FlightFile } from '../../../src/diagram/flight-analysis.js';

interface Call {
  op: string;
  dtype?: string;
  count?: number;
  root?: number;
  algorithm?: string;
}

const AR: Call = { op: 'allreduce', dtype: 'f32', count: 1048576, algorithm: 'two-shot' };
const SEC = 1e6;

/**
 * One rank's dump: `calls[i]` is call i+1; the first `finished` calls
 * finished, the next `inFlight` were made and not finished (`fail`: failed by
 * the abort, as a dump after an abort has them).
 */
function rankDump(
  rank: number,
  size: number,
  calls: readonly Call[],
  finished: number,
  inFlight = 0,
  opts: { fail?: boolean; capacity?: number; pid?: number; dumpAt?: number; cause?: string } = {},
): FlightFile {
  const r = new FlightRecorder({ capacity: opts.capacity ?? 1000 });
  let t = 1_000 * SEC;
  for (let i = 0; i < finished + inFlight; i++) {
    const c = calls[i]!;
    r.queued(i + 1, c.op, c.dtype, c.count, c.root, c.algorithm ?? 'one-shot', 0n, (t += 10));
    if (i < finished) r.finished(i + 1, (t += 10));
  }
  if (opts.fail) for (let i = finished; i < finished + inFlight; i++) r.failed(i + 1, t + 60 * SEC);
  const meta = { rank, size, pid: opts.pid ?? 1000 + rank, ...(opts.cause ? { cause: opts.cause } : {}) };
  const text = r.toJsonLines(meta, opts.dumpAt ?? t + 60 * SEC);
  return parseFlightFile(text, `flight.rank${rank}.${meta.pid}.jsonl`);
}

const same = (n: number, c: Call = AR): Call[] => Array.from({ length: n }, () => c);

describe('who is behind', () => {
  it('names the rank that never started the call the others wait in', () => {
    const calls = same(1234);
    const files = [0, 1, 3].map((r) => rankDump(r, 4, calls, 1233, 1, { fail: true, cause: `rank ${r}: aborted` }));
    files.splice(2, 0, rankDump(2, 4, calls, 1233, 0));
    const a = analyzeFlights(files);
    expect(a.verdict).toBe('behind');
    expect(a.lines[0]).toBe('rank 2 never started call 1234 (allreduce f32×1048576); ranks 0, 1, 3 are waiting in it (for up to 60.0 s)');
    expect(a.groups.map((g) => [g.seq, g.stage, g.ranks])).toEqual([
      [1234, 'not made', [2]],
      [1234, 'started', [0, 1, 3]],
    ]);
    expect(a.ranks.find((r) => r.rank === 0)).toMatchObject({ at: 1234, stage: 'started', failed: true, lastFinished: 1233, oldestSeq: 235, newestSeq: 1234 });
    expect(a.missing).toEqual([]);
  });

  it('says which rank is at an earlier call than the others', () => {
    const calls: Call[] = [...same(16), { op: 'broadcast', dtype: 'f32', count: 8, root: 0 }, AR];
    const a = analyzeFlights([rankDump(0, 3, calls, 17, 1), rankDump(1, 3, calls, 16, 1), rankDump(2, 3, calls, 17, 1)]);
    expect(a.verdict).toBe('behind');
    expect(a.lines[0]).toBe('rank 1 is at call 17 (broadcast f32×8 root 0) while ranks 0, 2 are at call 18 (allreduce f32×1048576)');
  });

  it('says which ranks finished and made no call since', () => {
    const calls = same(5);
    const a = analyzeFlights([rankDump(0, 2, calls, 3, 1), rankDump(1, 2, calls, 4, 0)]);
    expect(a.lines[0]).toBe('rank 0 is at call 4 (allreduce f32×1048576) while rank 1 finished call 4 and made no call since');
  });

  it('says when every rank finished the same calls', () => {
    const a = analyzeFlights([0, 1, 2].map((r) => rankDump(r, 3, same(5, { op: 'allreduce', dtype: 'f32', count: 10 }), 5)));
    expect(a.verdict).toBe('finished');
    expect(a.lines[0]).toBe('all 3 ranks finished every call up to call 5 (allreduce f32×10); none in flight');
  });

  it('says when every rank is in the same call and none finished it', () => {
    const a = analyzeFlights([0, 1].map((r) => rankDump(r, 2, same(3), 2, 1, { fail: true })));
    expect(a.verdict).toBe('stuck');
    expect(a.lines[0]).toMatch(/^every rank is in call 3 \(allreduce f32×1048576\) and none finished it \(for up to 60\.0 s\): no rank is behind/);
  });

  it('says when nothing was recorded', () => {
    const a = analyzeFlights([rankDump(0, 2, [], 0), rankDump(1, 2, [], 0)]);
    expect(a.verdict).toBe('empty');
    expect(a.lines[0]).toBe('no rank has made a call yet');
  });

  it('points at ranks with no record, and gives each cause once with its ranks', () => {
    const calls = same(3);
    const a = analyzeFlights([
      rankDump(0, 3, calls, 2, 1, { fail: true, cause: 'rank 1 lost' }),
      rankDump(2, 3, calls, 2, 1, { fail: true, cause: 'rank 1 lost' }),
    ]);
    expect(a.missing).toEqual([1]);
    expect(a.lines).toContain('no record from rank 1 (of 3): it may have died or hung before writing one — look there first');
    expect(a.lines).toContain('cause (ranks 0, 2): rank 1 lost');
  });

  it('reads the newest of two records of one rank, and notes records of different sizes', () => {
    const calls = same(4);
    const old = rankDump(0, 2, calls, 1, 0, { pid: 1, dumpAt: 5 });
    const newer = rankDump(0, 2, calls, 3, 1, { pid: 2, dumpAt: 2000 * SEC });
    const other = rankDump(1, 3, calls, 3, 1);
    const a = analyzeFlights([newer, old, other]);
    expect(a.ranks[0]!.pid).toBe(2);
    expect(a.notes).toContain('rank 0 has two records: flight.rank0.2.jsonl (newer) is read, flight.rank0.1.jsonl is not');
    expect(a.notes.some((n) => n.includes("disagree on the job's size (2, 3)"))).toBe(true);
    expect(a.size).toBe(3);
  });

  it('renders the findings then one line per rank', () => {
    const calls = same(3);
    const text = renderFlightAnalysis(analyzeFlights([rankDump(0, 2, calls, 2, 1, { fail: true }), rankDump(1, 2, calls, 2)]));
    expect(text).toContain('rank 1 never started call 3 (allreduce f32×1048576); rank 0 is waiting in it (for up to 60.0 s)\n');
    expect(text).toContain('\nper rank:\n');
    expect(text).toContain('  rank 0 (pid 1000): calls 1–3, last finished 2, in call 3 allreduce f32×1048576 by two-shot, started, failed, waited 60.0 s\n');
    expect(text).toContain('  rank 1 (pid 1001): calls 1–2, last finished 2, idle\n');
  });

  propTest.prop([fc.integer({ min: 2, max: 8 }), fc.integer({ min: 1, max: 40 }), fc.nat(), fc.nat(), fc.integer({ min: 1, max: 64 })])(
    'the one rank that did not make call j is named behind, the others in it, whatever the ring size',
    (size, k, victimSeed, jSeed, capacity) => {
      const victim = victimSeed % size;
      const j = 1 + (jSeed % k);
      const calls = same(k);
      const files = Array.from({ length: size }, (_, r) =>
        r === victim ? rankDump(r, size, calls, j - 1, 0, { capacity }) : rankDump(r, size, calls, j - 1, 1, { capacity, fail: r % 2 === 0 }),
      );
      const a = analyzeFlights(files);
      expect(a.verdict).toBe('behind');
      expect(a.groups[0]).toMatchObject({ seq: j, stage: 'not made', ranks: [victim] });
      expect(a.groups[1]!.ranks).toEqual([...Array(size).keys()].filter((r) => r !== victim));
      expect(a.lines[0]).toMatch(new RegExp(`^rank ${victim} never started call ${j} \\(allreduce f32×1048576\\); rank`));
    },
  );

  propTest.prop([fc.integer({ min: 2, max: 8 }), fc.integer({ min: 2, max: 40 }), fc.nat(), fc.nat()])(
    'the one rank still in call j while the others are in j + 1 is named behind, at j',
    (size, k, victimSeed, jSeed) => {
      const victim = victimSeed % size;
      const j = 1 + (jSeed % (k - 1));
      const files = Array.from({ length: size }, (_, r) => rankDump(r, size, same(k), r === victim ? j - 1 : j, 1, { fail: true }));
      const a = analyzeFlights(files);
      expect(a.verdict).toBe('behind');
      expect(a.groups.map((g) => [g.seq, g.stage, g.ranks])).toEqual([
        [j, 'started', [victim]],
        [j + 1, 'started', [...Array(size).keys()].filter((r) => r !== victim)],
      ]);
      expect(a.lines[0]).toMatch(new RegExp(`^rank ${victim} is at call ${j} \\(allreduce f32×1048576\\) while ranks? [\\d, ]+ (is|are) at call ${j + 1} \\(`));
    },
  );

  propTest.prop([fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 30 }), fc.integer({ min: 1, max: 50 })])(
    'ranks that finished the same calls are all finished',
    (size, k, capacity) => {
      const a = analyzeFlights(Array.from({ length: size }, (_, r) => rankDump(r, size, same(k), k, 0, { capacity })));
      expect(a.verdict).toBe(k === 0 ? 'empty' : 'finished');
      expect(a.groups).toHaveLength(1);
      expect(a.mismatch).toBeUndefined();
    },
  );
});

describe('ranks that disagree', () => {
  it('names the call and what each rank made', () => {
    const a = analyzeFlights([
      rankDump(0, 2, [...same(8), { op: 'allreduce', dtype: 'f32', count: 1000 }], 8, 1),
      rankDump(1, 2, [...same(8), { op: 'allreduce', dtype: 'i32', count: 1000 }], 8, 1),
    ]);
    expect(a.verdict).toBe('mismatch');
    expect(a.lines[0]).toBe('ranks disagree at call 9: rank 0 allreduce f32×1000, rank 1 allreduce i32×1000');
    expect(a.mismatch).toEqual({
      seq: 9,
      groups: [
        { ranks: [0], call: { op: 'allreduce', dtype: 'f32', count: 1000, algorithm: 'one-shot' } },
        { ranks: [1], call: { op: 'allreduce', dtype: 'i32', count: 1000, algorithm: 'one-shot' } },
      ],
    });
  });

  it('names the algorithm where it is all that differs, and the root of a rooted call', () => {
    const a = analyzeFlights([
      rankDump(0, 3, [{ ...AR, algorithm: 'one-shot' }], 0, 1),
      rankDump(1, 3, [{ ...AR, algorithm: 'two-shot' }], 0, 1),
      rankDump(2, 3, [{ ...AR, algorithm: 'one-shot' }], 0, 1),
    ]);
    expect(a.lines[0]).toBe('ranks disagree at call 1: ranks 0, 2 allreduce f32×1048576 by one-shot, rank 1 allreduce f32×1048576 by two-shot');
    const b = analyzeFlights([
      rankDump(0, 2, [{ op: 'broadcast', dtype: 'u8', count: 4, root: 0 }], 0, 1),
      rankDump(1, 2, [{ op: 'broadcast', dtype: 'u8', count: 4, root: 1 }], 0, 1),
    ]);
    expect(b.lines[0]).toBe('ranks disagree at call 1: rank 0 broadcast u8×4 root 0, rank 1 broadcast u8×4 root 1');
  });

  propTest.prop([fc.integer({ min: 2, max: 6 }), fc.integer({ min: 1, max: 30 }), fc.nat(), fc.nat(), fc.constantFrom('dtype', 'count', 'op')])(
    'a call one rank made differently is found at its seq, that rank alone in its group',
    (size, k, oddSeed, mSeed, field) => {
      const odd = oddSeed % size;
      const m = 1 + (mSeed % k);
      const calls = same(k);
      const changed = calls.map((c, i) =>
        i + 1 === m ? { ...c, ...(field === 'dtype' ? { dtype: 'i32' } : field === 'count' ? { count: 7 } : { op: 'allgather' }) } : c,
      );
      const a = analyzeFlights(Array.from({ length: size }, (_, r) => rankDump(r, size, r === odd ? changed : calls, m - 1, 1)));
      expect(a.verdict).toBe('mismatch');
      expect(a.mismatch!.seq).toBe(m);
      expect(a.mismatch!.groups.find((g) => g.ranks.includes(odd))!.ranks).toEqual([odd]);
    },
  );
});

describe('reading dumps', () => {
  it('tells a flight record from a trace by its first line', () => {
    expect(isFlightText(new FlightRecorder().toJsonLines({ rank: 0, size: 1, pid: 1 }))).toBe(true);
    expect(isFlightText('{"t":1,"pid":2,"self":"rank0","peer":"rank1","kind":"frame"}\n')).toBe(false);
    expect(isFlightText('')).toBe(false);
    expect(isFlightText('{not json\n')).toBe(false);
  });

  it('refuses a bad header, another format version and a bad line, naming the file and line', () => {
    const header = '{"format":"smcuda-flight/1","rank":0,"size":2,"pid":9,"timeUs":5}';
    const err = (text: string, match: RegExp) =>
      expect(() => parseFlightFile(text, 'f.jsonl')).toThrow(expect.objectContaining({ code: 'SMCUDA_TRACE_FORMAT', message: expect.stringMatching(match) }));
    err('{"t":1}\n', /^f\.jsonl:1: not a flight record header/);
    err(
      '{"format":"smcuda-flight/3","rank":0,"size":2,"pid":9,"timeUs":5}\n',
      /^f\.jsonl:1: flight record format smcuda-flight\/3, this smcuda reads smcuda-flight\/2/,
    );
    err(`${header}\n{"p2p":1,"kind":"put","peer":1,"n":1,"state":"queued","queuedUs":3}\n`, /^f\.jsonl:2: not a send or receive line/);
    err('{"format":"smcuda-flight/1","rank":2,"size":2,"pid":9,"timeUs":5}\n', /^f\.jsonl:1: the header needs rank, size \(rank < size\)/);
    err(`${header}\n{"seq":1,"op":"allreduce","state":"running","queuedUs":3}\n`, /^f\.jsonl:2: not a flight record line/);
    err(`${header}\n\n[1,2]\n`, /^f\.jsonl:3: not a flight record line/);
    expect(parseFlightFile(`${header}\n\n`, 'f.jsonl').calls).toEqual([]);
  });
});

/** A rank's sends and receives: each [kind, peer, n, state]; dumped at 100 s. */
function p2pDump(
  rank: number,
  size: number,
  calls: ReadonlyArray<['send' | 'recv', number, number, 'queued' | 'agreed' | 'finished' | 'failed']>,
  capacity = 1000,
): FlightFile {
  const p = new P2PFlightRecorder(capacity);
  let t = 1_000 * SEC;
  for (const [kind, peer, n, state] of calls) {
    const id = p.queued(kind, peer, n, 'f32', 8, 'device', 0n, (t += 10));
    if (state === 'agreed' || state === 'finished') p.agreed(id, (t += 10));
    if (state === 'finished') p.finished(id, (t += 10));
    if (state === 'failed') p.failed(id, (t += 10));
  }
  const text = new FlightRecorder().toJsonLines({ rank, size, pid: 1000 + rank }, 1_100 * SEC, p);
  return parseFlightFile(text, `flight.rank${rank}.jsonl`);
}

describe('sends and receives', () => {
  it("names the rank that never made the receive a send waits for, with the pair's last number there", () => {
    const a = analyzeFlights([
      p2pDump(0, 3, [
        ['send', 1, 1, 'finished'],
        ['send', 1, 2, 'queued'],
      ]),
      p2pDump(1, 3, [['recv', 0, 1, 'finished']]),
      p2pDump(2, 3, []),
    ]);
    expect(a.verdict).toBe('p2p');
    expect(a.p2p).toHaveLength(1);
    expect(a.p2p[0]).toMatchObject({ rank: 0, peerSide: 'not made', peerLast: 1 });
    expect(a.lines[0]).toBe(
      "rank 0's send #2 to rank 1 (f32 × 8) did not finish (waited 100.0 s): rank 1 never made its recv #2 from rank 0 (its last: #1) — look there first",
    );
    expect(renderFlightAnalysis(a)).toMatch(/rank 0 \(pid 1000\): no call recorded, none finished, idle; 2 sends and receives recorded, 1 not finished/);
  });

  it('a peer whose whole record has no call of that pair never made it; one made on both sides, neither finished, is said so', () => {
    const never = analyzeFlights([p2pDump(0, 2, [['recv', 1, 1, 'queued']]), p2pDump(1, 2, [['recv', 0, 1, 'finished']])]);
    expect(never.lines[0]).toMatch(/rank 0's recv #1 from rank 1 .*: rank 1 never made its send #1 to rank 0 \(none in that pair\)/);
    const both = analyzeFlights([p2pDump(0, 2, [['send', 1, 1, 'agreed']]), p2pDump(1, 2, [['recv', 0, 1, 'agreed']])]);
    expect(both.p2p.map((w) => w.peerSide)).toEqual(['in flight', 'in flight']);
    expect(both.lines[0]).toMatch(/rank 1 made its recv #1 from rank 0 too, and it did not finish either/);
  });

  it("without the peer's record it cannot tell, unless its own call saw the peer's print (then the peer made it)", () => {
    const a = analyzeFlights([
      p2pDump(0, 3, [
        ['send', 1, 1, 'queued'],
        ['send', 2, 1, 'agreed'],
      ]),
    ]);
    expect(a.p2p.map((w) => [w.call.peer, w.peerSide])).toEqual([
      [1, 'unknown'],
      [2, 'in flight'],
    ]);
    expect(a.lines[0]).toMatch(/rank 1's record does not say/);
    expect(a.missing).toEqual([1, 2]);
  });

  it('a rank behind in the collectives comes first; the sends and receives follow', () => {
    const calls = same(3);
    const files = [rankDump(0, 2, calls, 2, 1), rankDump(1, 2, calls, 2, 0)];
    const p = p2pDump(0, 2, [['send', 1, 1, 'queued']]);
    files[0] = { ...files[0]!, p2p: p.p2p };
    files[1]!.header.p2pRecorded = 0; // rank 1 made no send or receive
    const a = analyzeFlights(files);
    expect(a.verdict).toBe('behind');
    expect(a.lines[0]).toMatch(/^rank 1 never started call 3/);
    expect(a.lines[1]).toMatch(/^rank 0's send #1 to rank 1 .*rank 1 never made its recv #1 from rank 0 \(none in that pair\)/);
  });

  it('every send and receive finished and no collective: finished; a version 1 record reads with none', () => {
    expect(analyzeFlights([p2pDump(0, 2, [['send', 1, 1, 'finished']]), p2pDump(1, 2, [['recv', 0, 1, 'finished']])]).verdict).toBe('finished');
    const v1 = parseFlightFile(
      '{"format":"smcuda-flight/1","rank":0,"size":1,"pid":9,"timeUs":5}\n{"seq":1,"op":"barrier","algorithm":"x","state":"finished","queuedUs":3}\n',
    );
    expect(v1.p2p).toEqual([]);
    expect(v1.calls).toHaveLength(1);
  });
});
