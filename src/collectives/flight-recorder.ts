/**
 * A flight recorder: each rank keeps its last N collective calls (default
 * 1000) so that, when a job hangs or aborts, every rank's dump says which
 * call it was in and how far it got, and `smcuda trace` can say which rank
 * is behind (src/diagram/flight-analysis.ts reads the dumps).
 *
 * Per call: seq, op, dtype, count, root, algorithm, stream, and when it was
 * queued (the caller made it), started (on the GPU, as the host sees it:
 * the later of queued and the previous call's completion, since calls run
 * in call order whatever their streams) and finished or failed.
 *
 * It sits on the hot path of every call, so the ring is preallocated
 * parallel typed arrays (no object per call) and the strings are kept as
 * small-integer codes; plain objects are made only by entries() and the
 * dumps. Times are wall-clock µs (performance.timeOrigin + performance.now(),
 * the trace's time base), so the ranks' records compare.
 */
import { closeSync, constants, lstatSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { AccessDeniedError, ArgumentRangeError, ArgumentTypeError } from '../errors.js';
import { refuseUnknownKeys } from '../option-keys.js';

export type FlightState = 'queued' | 'started' | 'finished' | 'failed';

/** One recorded call, as entries() returns it (oldest first). */
export interface FlightEntry {
  seq: number;
  op: string;
  dtype?: string;
  count?: number;
  root?: number;
  algorithm: string;
  stream: bigint;
  state: FlightState;
  /** When the call was made, wall-clock µs since the epoch. */
  queuedUs: number;
  /** When it started on the GPU as the host saw it: the later of queued and the previous call's completion. */
  startedUs?: number;
  /** When it finished or failed. */
  finishedUs?: number;
}

/** What a dump says about the rank that wrote it. */
export interface FlightMeta {
  rank: number;
  size: number;
  pid: number;
  /** Why the dump was written: the abort's or timeout's message. */
  cause?: string;
}

export interface FlightRecorderOptions {
  /** How many calls each rank keeps (default 1000). */
  capacity?: number;
}

/**
 * The `format` of a dump's header line (its first line): how readers tell a
 * flight record from a trace. Version 2 added the point-to-point lines (p2p-flight.ts).
 */
export const FLIGHT_FORMAT = 'smcuda-flight/2';

/** What a dump takes of the point-to-point recorder (p2p-flight.ts). */
export interface FlightLines {
  readonly recorded: number;
  jsonLines(): string;
}

export const DEFAULT_FLIGHT_CAPACITY = 1000;
const MAX_CAPACITY = 1 << 24;

const STATES: readonly FlightState[] = ['queued', 'started', 'finished', 'failed'];
const QUEUED = 0;
const STARTED = 1;
const FINISHED = 2;
const FAILED = 3;

const origin = performance.timeOrigin;

/** Wall-clock µs since the epoch, fractional (the trace's time base). */
export function flightNowUs(): number {
  return (origin + performance.now()) * 1000;
}

/** A performance.now() reading (ms) as the recorder's time: a caller that read the clock anyway passes this rather than have the recorder read it again. */
export function flightUs(perfNowMs: number): number {
  return (origin + perfNowMs) * 1000;
}

/**
 * Strings as small integers: code 0 is "none" (undefined). The last string
 * seen is checked first: a job calls one op, dtype and algorithm over and
 * over, and an identity check is cheaper than a Map lookup.
 */
class Codes {
  private readonly byName = new Map<string, number>();
  readonly names: (string | undefined)[] = [undefined];
  private last: string | undefined;
  private lastCode = 0;

  code(name: string | undefined): number {
    if (name === this.last) return this.lastCode;
    if (name === undefined) return 0;
    let c = this.byName.get(name);
    if (c === undefined) {
      // Past 65535 distinct names (never, from a Communicator) a name is recorded as "?".
      if (this.names.length > 0xffff) return this.code('?');
      c = this.names.length;
      this.names.push(name);
      this.byName.set(name, c);
    }
    this.last = name;
    this.lastCode = c;
    return c;
  }
}

export class FlightRecorder {
  readonly capacity: number;
  private readonly seqs: Float64Array;
  private readonly counts: Float64Array;
  private readonly roots: Int32Array;
  private readonly streams: BigUint64Array;
  private readonly queuedAt: Float64Array;
  private readonly startedAt: Float64Array;
  private readonly finishedAt: Float64Array;
  private readonly states: Uint8Array;
  private readonly opCodes: Uint16Array;
  private readonly dtypeCodes: Uint16Array;
  private readonly algCodes: Uint16Array;
  private readonly ops = new Codes();
  private readonly dtypes = new Codes();
  private readonly algorithms = new Codes();
  /** The slot of the newest entry (-1: none yet), and how many slots hold entries. */
  private newest = -1;
  private length = 0;
  /** Calls recorded since the start (those beyond capacity were overwritten). */
  private total = 0;
  /** Whether seqs were recorded in increasing order (then a lookup may bisect). */
  private increasing = true;

  constructor(options: FlightRecorderOptions = {}) {
    refuseUnknownKeys('FlightRecorder options', options, ['capacity']);
    const n = options.capacity ?? DEFAULT_FLIGHT_CAPACITY;
    if (typeof n !== 'number' || !Number.isInteger(n)) throw new ArgumentTypeError(`capacity must be an integer number of calls, got ${String(n)}`);
    if (n < 1 || n > MAX_CAPACITY) throw new ArgumentRangeError(`capacity must be from 1 to ${MAX_CAPACITY} calls, got ${n}`);
    this.capacity = n;
    this.seqs = new Float64Array(n);
    this.counts = new Float64Array(n);
    this.roots = new Int32Array(n);
    this.streams = new BigUint64Array(n);
    this.queuedAt = new Float64Array(n);
    this.startedAt = new Float64Array(n);
    this.finishedAt = new Float64Array(n);
    this.states = new Uint8Array(n);
    this.opCodes = new Uint16Array(n);
    this.dtypeCodes = new Uint16Array(n);
    this.algCodes = new Uint16Array(n);
  }

  /**
   * A call was made (before its work is queued). `root`: broadcast's and
   * reduce's, else undefined. `t`: when, in wall-clock µs (default now).
   * The call counts as started at once when the call before it has finished
   * (or there is none), else when that one finishes.
   */
  queued(
    seq: number,
    op: string,
    dtype: string | undefined,
    count: number | undefined,
    root: number | undefined,
    algorithm: string,
    stream: bigint,
    t = flightNowUs(),
  ): void {
    const cap = this.capacity;
    const prev = this.newest;
    const s = prev + 1 === cap ? 0 : prev + 1;
    if (this.length > 0 && !(seq > this.seqs[prev]!)) this.increasing = false;
    this.seqs[s] = seq;
    this.opCodes[s] = this.ops.code(op);
    this.dtypeCodes[s] = this.dtypes.code(dtype);
    this.counts[s] = count ?? NaN;
    this.roots[s] = root ?? -1;
    this.algCodes[s] = this.algorithms.code(algorithm);
    this.streams[s] = stream;
    this.queuedAt[s] = t;
    this.finishedAt[s] = NaN;
    const idle = this.length === 0 || this.states[prev]! >= FINISHED;
    this.states[s] = idle ? STARTED : QUEUED;
    this.startedAt[s] = idle ? t : NaN;
    this.newest = s;
    if (this.length < cap) this.length++;
    this.total++;
  }

  /** The call started on the GPU at `t` (default now), where the host knows better than the rule in queued(). */
  started(seq: number, t = flightNowUs()): void {
    const s = this.slotOf(seq);
    if (s < 0) return;
    // Kept within the call's queued and finished times (the host's readings may come in another order).
    const q = this.queuedAt[s]!;
    const end = this.finishedAt[s]!;
    this.startedAt[s] = t < q ? q : t > end ? end : t;
    if (this.states[s] === QUEUED) this.states[s] = STARTED;
  }

  /** The call completed (its stream reached its end) at `t` (default now); the call after it starts then. */
  finished(seq: number, t = flightNowUs()): void {
    const s = this.slotOf(seq);
    if (s < 0) return;
    this.end(s, FINISHED, t);
    if (s === this.newest) return;
    const next = s + 1 === this.capacity ? 0 : s + 1;
    if (this.states[next] === QUEUED) {
      this.states[next] = STARTED;
      const q = this.queuedAt[next]!;
      this.startedAt[next] = t > q ? t : q;
    }
  }

  /** The call failed (its own error, a timeout, or the communicator's abort) at `t` (default now). */
  failed(seq: number, t = flightNowUs()): void {
    const s = this.slotOf(seq);
    if (s >= 0) this.end(s, FAILED, t);
  }

  private end(s: number, state: number, t: number): void {
    const st = this.startedAt[s]!;
    // A finished call started, at the latest when it was queued if no start was seen; a start is never after the end.
    if (st > t) this.startedAt[s] = t;
    else if (state === FINISHED && Number.isNaN(st)) this.startedAt[s] = Math.min(this.queuedAt[s]!, t);
    this.states[s] = state;
    this.finishedAt[s] = t;
  }

  /** The slot holding `seq`, or -1 (never recorded, or overwritten since). */
  private slotOf(seq: number): number {
    const len = this.length;
    if (len === 0) return -1;
    const cap = this.capacity;
    const newestSeq = this.seqs[this.newest]!;
    // Calls are numbered 1, 2, 3…: the slot follows from the distance to the newest.
    const back = newestSeq - seq;
    if (back >= 0 && back < len && Number.isInteger(back)) {
      let s = this.newest - back;
      if (s < 0) s += cap;
      if (this.seqs[s] === seq) return s;
    }
    if (this.increasing) return this.bisect(seq);
    for (let i = 0; i < len; i++) {
      let s = this.newest - i;
      if (s < 0) s += cap;
      if (this.seqs[s] === seq) return s;
    }
    return -1;
  }

  /** Seqs increasing from the oldest slot to the newest (with gaps): binary search. */
  private bisect(seq: number): number {
    const cap = this.capacity;
    const oldest = this.length < cap ? 0 : (this.newest + 1) % cap;
    let lo = 0;
    let hi = this.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = (oldest + mid) % cap;
      const v = this.seqs[s]!;
      if (v === seq) return s;
      if (v < seq) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  /** How many calls were recorded since the start (older ones than the last `capacity` are gone). */
  get recorded(): number {
    return this.total;
  }

  /** The recorded calls, oldest first, as plain objects. */
  entries(): FlightEntry[] {
    const out: FlightEntry[] = [];
    const cap = this.capacity;
    const oldest = this.length < cap ? 0 : (this.newest + 1) % cap;
    for (let i = 0; i < this.length; i++) out.push(this.entryAt((oldest + i) % cap));
    return out;
  }

  private entryAt(s: number): FlightEntry {
    const e: FlightEntry = {
      seq: this.seqs[s]!,
      op: this.ops.names[this.opCodes[s]!] ?? '?',
      algorithm: this.algorithms.names[this.algCodes[s]!] ?? '?',
      stream: this.streams[s]!,
      state: STATES[this.states[s]!]!,
      queuedUs: this.queuedAt[s]!,
    };
    const dtype = this.dtypes.names[this.dtypeCodes[s]!];
    if (dtype !== undefined) e.dtype = dtype;
    if (!Number.isNaN(this.counts[s]!)) e.count = this.counts[s]!;
    if (this.roots[s]! >= 0) e.root = this.roots[s]!;
    if (!Number.isNaN(this.startedAt[s]!)) e.startedUs = this.startedAt[s]!;
    if (!Number.isNaN(this.finishedAt[s]!)) e.finishedUs = this.finishedAt[s]!;
    return e;
  }

  /**
   * One short paragraph for an error message: the last finished call and the
   * calls not finished (in flight or failed), with how long ago each was
   * queued or started. `nowUs`: the time "ago" is measured to (default now).
   */
  summary(nowUs = flightNowUs()): string {
    const all = this.entries();
    if (all.length === 0) return 'flight recorder: no call recorded yet';
    let lastDone: FlightEntry | undefined;
    for (const e of all) if (e.state === 'finished' && (lastDone === undefined || e.seq > lastDone.seq)) lastDone = e;
    const open = all.filter((e) => e.state !== 'finished');
    const parts = [lastDone ? `last finished call ${lastDone.seq} (${describeCall(lastDone)})` : `no call finished of the last ${all.length}`];
    const shown = open.slice(0, 4).map((e) => `${e.seq} ${describeCall(e)} ${stateWords(e, nowUs)}`);
    if (open.length > shown.length) shown.push(`${open.length - shown.length} more`);
    parts.push(open.length === 0 ? 'none in flight' : `not finished: ${shown.join('; ')}`);
    return `flight recorder: ${parts.join('; ')}`;
  }

  /**
   * The dump as text: a header line (rank, size, pid, time, cause), then one
   * JSON line per call, oldest first, then the sends' and receives' lines (`p2p`).
   */
  toJsonLines(meta: FlightMeta, nowUs = flightNowUs(), p2p?: FlightLines): string {
    checkMeta(meta);
    const head: Record<string, unknown> = {
      format: FLIGHT_FORMAT,
      rank: meta.rank,
      size: meta.size,
      pid: meta.pid,
      timeUs: Math.round(nowUs),
      capacity: this.capacity,
      recorded: this.total,
    };
    if (p2p) head.p2pRecorded = p2p.recorded;
    if (meta.cause !== undefined) head.cause = meta.cause;
    let text = `${JSON.stringify(head)}\n`;
    for (const e of this.entries()) text += `${JSON.stringify(entryJson(e))}\n`;
    return p2p ? text + p2p.jsonLines() : text;
  }

  /**
   * Writes the dump to `<dir>/flight.rank<r>.<pid>.jsonl` (a second dump of
   * the same rank and process: `.2`, `.3`…), created 0600, never through a
   * symbolic link and never over an existing file; `dir` is made (0700) if
   * missing. Returns the path. AccessDeniedError when it cannot be written.
   */
  dump(dir: string, meta: FlightMeta, p2p?: FlightLines): string {
    const text = this.toJsonLines(meta, flightNowUs(), p2p);
    ensureDir(dir);
    for (let n = 1; n <= 100; n++) {
      const path = join(dir, `flight.rank${meta.rank}.${meta.pid}${n === 1 ? '' : `.${n}`}.jsonl`);
      let fd: number;
      try {
        fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EEXIST') continue;
        throw new AccessDeniedError(`cannot write the flight record ${path}: ${(err as Error).message} (give a directory of your own)`);
      }
      try {
        writeSync(fd, text);
      } finally {
        closeSync(fd);
      }
      return path;
    }
    throw new AccessDeniedError(
      `cannot write a flight record of rank ${meta.rank} in ${dir}: 100 dumps of process ${meta.pid} are there already (remove old ones)`,
    );
  }
}

/**
 * Where a job's flight records go when its trace goes to `tracePath`: a
 * directory beside the trace file, named after it (/tmp/run.jsonl →
 * /tmp/run.flight), so that each traced job has its own.
 */
export function flightDirFor(tracePath: string): string {
  return join(dirname(tracePath), `${basename(tracePath).replace(/\.jsonl?$/, '')}.flight`);
}

/** "allreduce f32×1048576 root 0 by one-shot". */
export function describeCall(e: { op: string; dtype?: string; count?: number; root?: number; algorithm?: string }): string {
  let s = e.op;
  if (e.dtype !== undefined || e.count !== undefined) s += ` ${e.dtype ?? '?'}×${e.count ?? '?'}`;
  if (e.root !== undefined) s += ` root ${e.root}`;
  if (e.algorithm !== undefined) s += ` by ${e.algorithm}`;
  return s;
}

function stateWords(e: FlightEntry, nowUs: number): string {
  const since = (t: number) => `${((nowUs - t) / 1e6).toFixed(2)} s ago`;
  if (e.state === 'queued') return `queued ${since(e.queuedUs)}`;
  if (e.state === 'started') return `started ${since(e.startedUs ?? e.queuedUs)}`;
  return `failed ${since(e.finishedUs ?? e.queuedUs)}`;
}

/** An entry as its dump line: times rounded to whole µs, the stream in hex. */
function entryJson(e: FlightEntry): Record<string, unknown> {
  const o: Record<string, unknown> = { seq: e.seq, op: e.op };
  if (e.dtype !== undefined) o.dtype = e.dtype;
  if (e.count !== undefined) o.count = e.count;
  if (e.root !== undefined) o.root = e.root;
  o.algorithm = e.algorithm;
  o.stream = `0x${e.stream.toString(16)}`;
  o.state = e.state;
  o.queuedUs = Math.round(e.queuedUs);
  if (e.startedUs !== undefined) o.startedUs = Math.round(e.startedUs);
  if (e.finishedUs !== undefined) o.finishedUs = Math.round(e.finishedUs);
  return o;
}

function checkMeta(meta: FlightMeta): void {
  if (typeof meta !== 'object' || meta === null)
    throw new ArgumentTypeError(`the flight record's meta must be { rank, size, pid, cause? }, got ${String(meta)}`);
  const { rank, size, pid, cause } = meta;
  if (!Number.isInteger(size) || size < 1) throw new ArgumentRangeError(`size must be an integer ≥ 1, got ${String(size)}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) throw new ArgumentRangeError(`rank must be an integer from 0 to size - 1, got ${String(rank)}`);
  if (!Number.isInteger(pid) || pid < 0) throw new ArgumentRangeError(`pid must be a non-negative integer, got ${String(pid)}`);
  if (cause !== undefined && typeof cause !== 'string') throw new ArgumentTypeError(`cause must be a string, got ${typeof cause}`);
}

/** Makes `dir` (0700) if missing; an existing one must be a real directory of this uid, not a link. */
function ensureDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new AccessDeniedError(`cannot make the flight record directory ${dir}: ${(err as Error).message} (give a directory of your own)`);
  }
  const st = lstatSync(dir);
  const uid = process.getuid?.();
  const why = st.isSymbolicLink()
    ? 'is a symbolic link'
    : !st.isDirectory()
      ? 'is not a directory'
      : uid !== undefined && st.uid !== uid
        ? `belongs to uid ${st.uid}, not to this process (uid ${uid})`
        : undefined;
  if (why) throw new AccessDeniedError(`flight record directory ${dir} ${why}: refused (give a directory of your own)`);
}
