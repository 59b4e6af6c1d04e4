/**
 * Who is stuck: the flight records of a job's ranks (src/collectives/
 * flight-recorder.ts writes one per rank) read together. Every rank makes
 * the same calls in the same order, so a hang is one of: ranks that made
 * different calls at the same seq (a mismatch), a rank that never made the
 * call the others wait in (behind), or every rank in the same call with
 * none finishing it (stuck together). Sends and receives pair up instead
 * (the n-th send from A to B with B's n-th receive from A): each one not
 * finished is looked up in its peer's record (p2pWaits). Pure functions:
 * `smcuda trace` reads the files and prints what these return.
 */
import { FLIGHT_FORMAT, describeCall, type FlightState } from '../collectives/flight-recorder.js';
import { describeP2P, type P2PFlightState } from '../collectives/p2p-flight.js';
import { TraceFormatError } from './trace-records.js';

/** One call of a dump (the JSON form of a FlightEntry: the stream in hex). */
export interface FlightCall {
  seq: number;
  op: string;
  dtype?: string;
  count?: number;
  root?: number;
  algorithm?: string;
  stream?: string;
  state: FlightState;
  queuedUs: number;
  startedUs?: number;
  finishedUs?: number;
}

export interface FlightHeader {
  format: string;
  rank: number;
  size: number;
  pid: number;
  /** When the dump was written, wall-clock µs. */
  timeUs: number;
  cause?: string;
  capacity?: number;
  recorded?: number;
  /** Sends and receives recorded since the start (version 2). */
  p2pRecorded?: number;
}

/** One send or receive of a dump (the JSON form of a P2PFlightEntry). */
export interface P2PFlightCall {
  p2p: number;
  kind: 'send' | 'recv';
  peer: number;
  n: number;
  dtype?: string;
  count?: number;
  path?: string;
  stream?: string;
  state: P2PFlightState;
  queuedUs: number;
  agreedUs?: number;
  finishedUs?: number;
}

export interface FlightFile {
  source: string;
  header: FlightHeader;
  calls: FlightCall[];
  /** Its sends and receives (none in a version 1 record). */
  p2p: P2PFlightCall[];
}

/**
 * A send or receive not finished on `rank`, and what its peer's record says
 * of the matching call: 'not made' (the peer's record goes that far in that
 * pair and has no such call: the peer is behind), 'in flight' (made there,
 * not finished either), 'finished' there, or 'unknown' (no record from the
 * peer, or the call is older than what it kept).
 */
export interface P2PWait {
  rank: number;
  call: P2PFlightCall;
  peerSide: 'not made' | 'in flight' | 'finished' | 'unknown';
  /** The peer's last matching-kind call number in this pair, where its record has one. */
  peerLast?: number;
  /** From when it was made to its failure, else to the dump, µs. */
  waitedUs: number;
}

/** What a call is, as ranks must agree on it. */
export interface CallSig {
  op: string;
  dtype?: string;
  count?: number;
  root?: number;
  algorithm?: string;
}

/**
 * Where a rank is: `at`, its oldest call not finished, and how far it got
 * in it ('not made': every call it made finished, and `at` is the next).
 * A call that failed (the communicator aborted) counts where it was then.
 */
export interface RankPosition {
  rank: number;
  pid: number;
  source: string;
  dumpedUs: number;
  cause?: string;
  /** The oldest and newest seq in its record (undefined: no call recorded). */
  oldestSeq?: number;
  newestSeq?: number;
  lastFinished?: number;
  at: number;
  stage: 'not made' | 'queued' | 'started';
  /** Whether the call at `at` failed. */
  failed: boolean;
  call?: CallSig;
  /** From the start (else the queueing) of the call at `at` to its failure, else to the dump, µs. */
  waitedUs?: number;
  /** Sends and receives in its record. */
  p2pCalls: number;
}

export interface RankGroup {
  seq: number;
  stage: RankPosition['stage'];
  ranks: number[];
  call?: CallSig;
}

export interface FlightAnalysis {
  /** The job's size (from the headers). */
  size: number;
  ranks: RankPosition[];
  /** Ranks of the job with no record. */
  missing: number[];
  /** The earliest call the ranks' records disagree on. */
  mismatch?: { seq: number; groups: Array<{ ranks: number[]; call: CallSig }> };
  /** The sends and receives not finished, oldest first, each with what its peer's record says. */
  p2p: P2PWait[];
  /** The ranks grouped by position, furthest behind first (one group: all at the same place). */
  groups: RankGroup[];
  /**
   * 'mismatch': ranks made different calls; 'behind': some ranks are
   * further back than others; 'stuck': every rank is in the same call and
   * none finished it; 'p2p': the collectives are all finished (or none was
   * made) and sends or receives are not; 'finished': every rank finished
   * every call it made, the same calls, and every send and receive; 'empty':
   * nothing recorded.
   */
  verdict: 'mismatch' | 'behind' | 'stuck' | 'p2p' | 'finished' | 'empty';
  /** The findings in words, most telling first. */
  lines: string[];
  /** What limits them: ranks without a record, records that overlap, ignored duplicates. */
  notes: string[];
}

const STATES: readonly string[] = ['queued', 'started', 'finished', 'failed'];
const P2P_STATES: readonly string[] = ['queued', 'agreed', 'finished', 'failed'];
/** The formats this reader takes: version 1 has no point-to-point lines. */
const FORMATS: readonly string[] = ['smcuda-flight/1', FLIGHT_FORMAT];
/** How many of the sends and receives not finished are told in words (the rest counted). */
const P2P_LINES = 6;

/** Whether `text` is a flight record: its first line is a flight header. */
export function isFlightText(text: string): boolean {
  const nl = text.indexOf('\n');
  const first = (nl < 0 ? text : text.slice(0, nl)).trim();
  if (!first.startsWith('{')) return false;
  try {
    const v = JSON.parse(first) as { format?: unknown };
    return typeof v.format === 'string' && v.format.startsWith('smcuda-flight/');
  } catch {
    return false;
  }
}

/** Parses a dump; a bad header or line is a TraceFormatError naming the source and line. */
export function parseFlightFile(text: string, source = 'flight record'): FlightFile {
  const lines = text.split('\n');
  const bad = (i: number, what: string) => new TraceFormatError(`${source}:${i + 1}: ${what}: ${(lines[i] ?? '').slice(0, 120)}`);
  const header = parseJson(lines[0] ?? '') as Partial<FlightHeader> | undefined;
  if (!header || typeof header.format !== 'string' || !header.format.startsWith('smcuda-flight/'))
    throw bad(0, `not a flight record header (a JSON object with format "${FLIGHT_FORMAT}")`);
  if (!FORMATS.includes(header.format))
    throw bad(0, `flight record format ${header.format}, this smcuda reads ${FLIGHT_FORMAT} (read it with the smcuda that wrote it)`);
  if (
    !isCount(header.rank) ||
    !isCount(header.size) ||
    header.size < 1 ||
    header.rank >= header.size ||
    !isCount(header.pid) ||
    typeof header.timeUs !== 'number'
  ) {
    throw bad(0, 'the header needs rank, size (rank < size), pid and timeUs');
  }
  const calls: FlightCall[] = [];
  const p2p: P2PFlightCall[] = [];
  for (let i = 1; i < lines.length; i++) {
    if (lines[i]!.trim() === '') continue;
    const c = parseJson(lines[i]!) as (Partial<FlightCall> & Partial<P2PFlightCall>) | undefined;
    if (c && 'p2p' in c) {
      if (!isP2PLine(c)) throw bad(i, 'not a send or receive line (a JSON object with p2p, kind, peer, n, state and queuedUs)');
      p2p.push(c);
    } else if (c && isCallLine(c)) calls.push(c);
    else throw bad(i, 'not a flight record line (a JSON object with seq, op, state and queuedUs)');
  }
  return { source, header: header as FlightHeader, calls, p2p };
}

function isCallLine(c: Partial<FlightCall>): c is FlightCall {
  return typeof c.seq === 'number' && typeof c.op === 'string' && inState(c, STATES);
}

function isP2PLine(c: Partial<P2PFlightCall>): c is P2PFlightCall {
  return typeof c.p2p === 'number' && (c.kind === 'send' || c.kind === 'recv') && isCount(c.peer) && typeof c.n === 'number' && inState(c, P2P_STATES);
}

/** A state of `states`, and when it was made. */
function inState(c: { state?: unknown; queuedUs?: unknown }, states: readonly string[]): boolean {
  return typeof c.state === 'string' && states.includes(c.state) && typeof c.queuedUs === 'number';
}

function parseJson(line: string): unknown {
  try {
    const v: unknown = JSON.parse(line);
    return v && typeof v === 'object' && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

/** The ranks' records read together (one file per rank; of several for one rank, the newest dump counts). */
export function analyzeFlights(files: readonly FlightFile[]): FlightAnalysis {
  const notes: string[] = [];
  const byRank = new Map<number, FlightFile>();
  for (const f of files) {
    const had = byRank.get(f.header.rank);
    if (had === undefined) byRank.set(f.header.rank, f);
    else {
      const [keep, drop] = f.header.timeUs > had.header.timeUs ? [f, had] : [had, f];
      byRank.set(f.header.rank, keep);
      notes.push(`rank ${f.header.rank} has two records: ${keep.source} (newer) is read, ${drop.source} is not`);
    }
  }
  const chosen = [...byRank.values()].sort((a, b) => a.header.rank - b.header.rank);
  const sizes = [...new Set(chosen.map((f) => f.header.size))];
  if (sizes.length > 1) notes.push(`the records disagree on the job's size (${sizes.join(', ')}): records of different jobs? the largest is taken`);
  const size = Math.max(0, ...sizes);
  const missing: number[] = [];
  for (let r = 0; r < size; r++) if (!byRank.has(r)) missing.push(r);
  const ranks = chosen.map(position);
  const mismatch = findMismatch(chosen);
  const groups = groupPositions(ranks);
  const p2p = p2pWaits(chosen, byRank);
  const noCall = ranks.every((r) => r.newestSeq === undefined);
  const collectivesDone = noCall || (groups.length === 1 && groups[0]!.stage === 'not made');
  const verdict: FlightAnalysis['verdict'] = mismatch
    ? 'mismatch'
    : !collectivesDone
      ? groups.length > 1
        ? 'behind'
        : 'stuck'
      : p2p.length > 0
        ? 'p2p'
        : noCall && chosen.every((f) => f.p2p.length === 0)
          ? 'empty'
          : 'finished';
  const lines: string[] = [];
  if (mismatch) lines.push(mismatchWords(mismatch));
  // Where the collectives are all done, the sends and receives are what is stuck: told first.
  if (verdict === 'p2p') lines.push(...p2pWords(p2p));
  if (ranks.length > 0 && !(noCall && verdict !== 'empty')) lines.push(positionWords(groups, ranks, callsBySeq(chosen)));
  if (verdict !== 'p2p') lines.push(...p2pWords(p2p));
  if (missing.length > 0)
    lines.push(
      `no record from ${ranksWord(missing)} (of ${size}): ${missing.length === 1 ? 'it' : 'they'} may have died or hung before writing one — look there first`,
    );
  for (const [cause, rs] of causes(chosen)) lines.push(`cause (${ranksWord(rs)}): ${cause}`);
  return { size, ranks, missing, ...(mismatch ? { mismatch } : {}), p2p, groups, verdict, lines, notes };
}

/** Every send and receive not finished, with what its peer's record says of the matching call. */
function p2pWaits(files: readonly FlightFile[], byRank: ReadonlyMap<number, FlightFile>): P2PWait[] {
  const out: P2PWait[] = [];
  for (const f of files) {
    const rank = f.header.rank;
    for (const c of f.p2p) {
      if (c.state === 'finished') continue;
      const end = c.state === 'failed' && c.finishedUs !== undefined ? c.finishedUs : f.header.timeUs;
      const w: P2PWait = { rank, call: c, peerSide: 'unknown', waitedUs: end - c.queuedUs };
      const other = byRank.get(c.peer);
      if (other) {
        const want = c.kind === 'send' ? 'recv' : 'send';
        const pair = other.p2p.filter((o) => o.kind === want && o.peer === rank);
        const match = pair.find((o) => o.n === c.n);
        // The peer's record holds every call it made since the start when it dropped none.
        const whole = (other.header.p2pRecorded ?? Number.POSITIVE_INFINITY) <= other.p2p.length;
        if (pair.length > 0) w.peerLast = Math.max(...pair.map((o) => o.n));
        if (match) w.peerSide = match.state === 'finished' ? 'finished' : 'in flight';
        else if (whole || (w.peerLast !== undefined && w.peerLast < c.n)) w.peerSide = 'not made';
      }
      // Its print arrived here: the peer made the call, whatever its record kept.
      if (c.state === 'agreed' && (w.peerSide === 'not made' || w.peerSide === 'unknown')) w.peerSide = 'in flight';
      out.push(w);
    }
  }
  return out.sort((a, b) => a.call.queuedUs - b.call.queuedUs || a.rank - b.rank);
}

/** "rank 1's send #5 to rank 2 (f32 × 1024) waited 12.3 s: rank 2 never made its recv #5 from rank 1 (its last: #4)". */
function p2pWords(waits: readonly P2PWait[]): string[] {
  const lines = waits.slice(0, P2P_LINES).map((w) => {
    const c = w.call;
    const theirs = `${c.kind === 'send' ? 'recv' : 'send'} #${c.n} ${c.kind === 'send' ? 'from' : 'to'} rank ${w.rank}`;
    const head = `rank ${w.rank}'s ${describeP2P(c)} ${c.state === 'failed' ? 'failed' : 'did not finish'} (waited ${(w.waitedUs / 1e6).toFixed(1)} s)`;
    const why =
      w.peerSide === 'not made'
        ? `rank ${c.peer} never made its ${theirs}${w.peerLast !== undefined ? ` (its last: #${w.peerLast})` : ' (none in that pair)'} — look there first`
        : w.peerSide === 'in flight'
          ? `rank ${c.peer} made its ${theirs} too, and it did not finish either (look at the GPUs and the cause)`
          : w.peerSide === 'finished'
            ? `rank ${c.peer}'s ${theirs} finished there`
            : `rank ${c.peer}'s record does not say (no record from it, or the call is older than it kept)`;
    return `${head}: ${why}`;
  });
  if (waits.length > P2P_LINES) lines.push(`and ${waits.length - P2P_LINES} more sends and receives not finished`);
  return lines;
}

function sigOf(c: FlightCall): CallSig {
  const s: CallSig = { op: c.op };
  if (c.dtype !== undefined) s.dtype = c.dtype;
  if (c.count !== undefined) s.count = c.count;
  if (c.root !== undefined) s.root = c.root;
  if (c.algorithm !== undefined) s.algorithm = c.algorithm;
  return s;
}

function position(f: FlightFile): RankPosition {
  const calls = [...f.calls].sort((a, b) => a.seq - b.seq);
  const h = f.header;
  const p: RankPosition = { rank: h.rank, pid: h.pid, source: f.source, dumpedUs: h.timeUs, at: 1, stage: 'not made', failed: false, p2pCalls: f.p2p.length };
  if (h.cause !== undefined) p.cause = h.cause;
  if (calls.length === 0) return p;
  p.oldestSeq = calls[0]!.seq;
  p.newestSeq = calls.at(-1)!.seq;
  const finished = calls.filter((c) => c.state === 'finished');
  if (finished.length > 0) p.lastFinished = finished.at(-1)!.seq;
  const open = calls.find((c) => c.state !== 'finished');
  if (!open) {
    p.at = p.newestSeq + 1;
    return p;
  }
  p.at = open.seq;
  p.stage = open.startedUs !== undefined || open.state === 'started' ? 'started' : 'queued';
  p.failed = open.state === 'failed';
  p.call = sigOf(open);
  // A failed call waited until it failed (the abort), else until the dump.
  p.waitedUs = (p.failed && open.finishedUs !== undefined ? open.finishedUs : h.timeUs) - (open.startedUs ?? open.queuedUs);
  return p;
}

const STAGE_ORDER = { 'not made': 0, queued: 1, started: 2 } as const;

/** Ranks grouped by (call, stage), furthest behind first. */
function groupPositions(ranks: readonly RankPosition[]): RankGroup[] {
  const groups: RankGroup[] = [];
  const sorted = [...ranks].sort((a, b) => a.at - b.at || STAGE_ORDER[a.stage] - STAGE_ORDER[b.stage] || a.rank - b.rank);
  for (const r of sorted) {
    const g = groups.at(-1);
    if (g && g.seq === r.at && g.stage === r.stage) g.ranks.push(r.rank);
    else groups.push({ seq: r.at, stage: r.stage, ranks: [r.rank], ...(r.call ? { call: r.call } : {}) });
  }
  return groups;
}

/** The earliest seq whose call differs between ranks that both recorded it. */
function findMismatch(files: readonly FlightFile[]): FlightAnalysis['mismatch'] {
  const bySeq = new Map<number, Array<{ rank: number; call: CallSig }>>();
  for (const f of files)
    for (const c of f.calls) {
      let l = bySeq.get(c.seq);
      if (!l) bySeq.set(c.seq, (l = []));
      l.push({ rank: f.header.rank, call: sigOf(c) });
    }
  for (const seq of [...bySeq.keys()].sort((a, b) => a - b)) {
    const groups = new Map<string, { ranks: number[]; call: CallSig }>();
    for (const { rank, call } of bySeq.get(seq)!) {
      const key = JSON.stringify([call.op, call.dtype, call.count, call.root, call.algorithm]);
      const g = groups.get(key);
      if (g) g.ranks.push(rank);
      else groups.set(key, { ranks: [rank], call });
    }
    if (groups.size > 1) return { seq, groups: [...groups.values()].map((g) => ({ ranks: g.ranks.sort((a, b) => a - b), call: g.call })) };
  }
  return undefined;
}

/** "ranks disagree at call 9: rank 0 allreduce f32×1000, rank 1 allreduce i32×1000". */
function mismatchWords(m: NonNullable<FlightAnalysis['mismatch']>): string {
  // The algorithm is named only where it is what differs.
  const sameShape = new Set(m.groups.map((g) => callWords({ ...g.call, algorithm: undefined }))).size < m.groups.length;
  const word = (c: CallSig) => callWords(sameShape ? c : { ...c, algorithm: undefined });
  return `ranks disagree at call ${m.seq}: ${m.groups.map((g) => `${ranksWord(g.ranks)} ${word(g.call)}`).join(', ')}`;
}

/** Each seq's call, from whichever rank recorded it. */
function callsBySeq(files: readonly FlightFile[]): Map<number, CallSig> {
  const m = new Map<number, CallSig>();
  for (const f of files) for (const c of f.calls) if (!m.has(c.seq)) m.set(c.seq, sigOf(c));
  return m;
}

function positionWords(groups: readonly RankGroup[], ranks: readonly RankPosition[], calls: ReadonlyMap<number, CallSig>): string {
  const first = groups[0]!;
  const callAt = (seq: number) => {
    const c = calls.get(seq);
    return c ? `call ${seq} (${callWords({ ...c, algorithm: undefined })})` : `call ${seq}`;
  };
  const waited = (g: RankGroup) => {
    const us = Math.max(...ranks.filter((r) => g.ranks.includes(r.rank) && r.waitedUs !== undefined).map((r) => r.waitedUs!));
    return Number.isFinite(us) ? ` (for up to ${(us / 1e6).toFixed(1)} s)` : '';
  };
  if (groups.length === 1) {
    if (first.stage === 'not made' && first.seq === 1) return 'no rank has made a call yet';
    if (first.stage === 'not made')
      return `${ranks.length === 1 ? 'the rank' : `all ${ranks.length} ranks`} finished every call up to ${callAt(first.seq - 1)}; none in flight`;
    return `every rank is in ${callAt(first.seq)} and none finished it${waited(first)}: no rank is behind; the call itself did not complete (look at the GPUs and the cause)`;
  }
  const rest = groups.slice(1).map((g) => {
    if (g.seq === first.seq)
      return `${ranksWord(g.ranks)} ${g.ranks.length === 1 ? 'is' : 'are'} ${g.stage === 'queued' ? 'queued in it' : 'waiting in it'}${waited(g)}`;
    if (g.stage === 'not made') return `${ranksWord(g.ranks)} finished call ${g.seq - 1} and made no call since`;
    return `${ranksWord(g.ranks)} ${g.ranks.length === 1 ? 'is' : 'are'} at ${callAt(g.seq)}`;
  });
  const who = ranksWord(first.ranks);
  const head =
    first.stage === 'not made'
      ? `${who} never started ${callAt(first.seq)}`
      : `${who} ${first.ranks.length === 1 ? 'is' : 'are'} at ${callAt(first.seq)}${first.stage === 'queued' ? ', queued' : ''}`;
  const sep = groups[1]!.seq === first.seq ? '; ' : ' while ';
  return head + sep + rest.join('; ');
}

function callWords(c: CallSig): string {
  return describeCall(c);
}

/** "rank 2" / "ranks 0, 1, 3". */
export function ranksWord(ranks: readonly number[]): string {
  return ranks.length === 1 ? `rank ${ranks[0]}` : `ranks ${ranks.join(', ')}`;
}

/** Distinct causes, with the ranks that gave each. */
function causes(files: readonly FlightFile[]): Map<string, number[]> {
  const m = new Map<string, number[]>();
  for (const f of files) {
    const c = f.header.cause;
    if (c === undefined) continue;
    const l = m.get(c);
    if (l) l.push(f.header.rank);
    else m.set(c, [f.header.rank]);
  }
  return m;
}

/** The analysis as text: the findings, then one line per rank. */
export function renderFlightAnalysis(a: FlightAnalysis): string {
  const out = [...a.lines];
  if (a.notes.length > 0) out.push(...a.notes.map((n) => `note: ${n}`));
  out.push('', 'per rank:');
  for (const r of a.ranks) {
    const span = r.newestSeq === undefined ? 'no call recorded' : `calls ${r.oldestSeq}–${r.newestSeq}`;
    const done = r.lastFinished === undefined ? 'none finished' : `last finished ${r.lastFinished}`;
    const where =
      r.stage === 'not made'
        ? 'idle'
        : `in call ${r.at} ${describeCall(r.call ?? { op: '?' })}, ${r.stage}${r.failed ? ', failed' : ''}${r.waitedUs !== undefined ? `, waited ${(r.waitedUs / 1e6).toFixed(1)} s` : ''}`;
    const open = a.p2p.filter((w) => w.rank === r.rank).length;
    const p2p = r.p2pCalls > 0 ? `; ${r.p2pCalls} sends and receives recorded, ${open === 0 ? 'all finished' : `${open} not finished`}` : '';
    out.push(`  rank ${r.rank} (pid ${r.pid}): ${span}, ${done}, ${where}${p2p}`);
  }
  return `${out.join('\n')}\n`;
}
