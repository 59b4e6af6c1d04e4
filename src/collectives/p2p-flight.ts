/**
 * The flight recorder's point-to-point half: each rank keeps its last N
 * sends and receives (comm.send, comm.recv, comm.batch), beside its last N
 * collective calls (flight-recorder.ts), and both go into the rank's dump.
 *
 * Sends and receives have no place in the collectives' sequence: they pair
 * up by their number in the sequence of one ordered pair (the n-th send
 * from rank A to rank B is B's n-th receive from A, p2p-match.ts), and they
 * run concurrently. So each is recorded with its kind, peer and pair
 * number, when it was made, when its peer's matching call was known here
 * (its print arrived and agreed: the peer made it), and when it finished or
 * failed. `smcuda trace` pairs the ranks' records by (kind, peers, number)
 * and says which matching call was never made (src/diagram/flight-analysis.ts).
 *
 * Recorded by number, not by object: parallel typed arrays, a call's id
 * (counted from 1 on this rank) at slot id % capacity.
 */
import { DTYPES, type DType } from '../kernels/dtypes.js';
import { flightNowUs } from './flight-recorder.js';

export type P2PFlightState = 'queued' | 'agreed' | 'finished' | 'failed';

/** One recorded send or receive, as entries() returns it (oldest first). */
export interface P2PFlightEntry {
  /** This rank's count of its sends and receives, from 1. */
  id: number;
  kind: 'send' | 'recv';
  /** The rank sent to or received from. */
  peer: number;
  /** Its number in the pair's sequence: the n-th send from a rank to `peer` is `peer`'s n-th receive from it. */
  n: number;
  dtype: DType;
  count: number;
  path: 'device' | 'staged';
  stream: bigint;
  /** 'agreed': the peer's matching call is made (its print arrived and agrees), not finished yet. */
  state: P2PFlightState;
  /** When it was made, wall-clock µs since the epoch. */
  queuedUs: number;
  /** When the peer's matching call was known here. */
  agreedUs?: number;
  /** When it finished or failed. */
  finishedUs?: number;
}

const STATES: readonly P2PFlightState[] = ['queued', 'agreed', 'finished', 'failed'];
const QUEUED = 0;
const AGREED = 1;
const FINISHED = 2;
const FAILED = 3;

export class P2PFlightRecorder {
  readonly capacity: number;
  private readonly ids: Float64Array;
  private readonly sends: Uint8Array;
  private readonly peers: Int32Array;
  private readonly ns: Float64Array;
  private readonly dtypes: Uint8Array;
  private readonly counts: Float64Array;
  private readonly staged: Uint8Array;
  private readonly streams: BigUint64Array;
  private readonly states: Uint8Array;
  private readonly queuedAt: Float64Array;
  private readonly agreedAt: Float64Array;
  private readonly finishedAt: Float64Array;
  private total = 0;

  /** `capacity`: checked by the caller (FlightRecorder's rules). */
  constructor(capacity: number) {
    this.capacity = capacity;
    this.ids = new Float64Array(capacity);
    this.sends = new Uint8Array(capacity);
    this.peers = new Int32Array(capacity);
    this.ns = new Float64Array(capacity);
    this.dtypes = new Uint8Array(capacity);
    this.counts = new Float64Array(capacity);
    this.staged = new Uint8Array(capacity);
    this.streams = new BigUint64Array(capacity);
    this.states = new Uint8Array(capacity);
    this.queuedAt = new Float64Array(capacity);
    this.agreedAt = new Float64Array(capacity);
    this.finishedAt = new Float64Array(capacity);
  }

  /** How many sends and receives were recorded since the start (older ones than the last `capacity` are gone). */
  get recorded(): number {
    return this.total;
  }

  /** A send or receive was made (its pair number known): returns its id, for the calls below. */
  queued(kind: 'send' | 'recv', peer: number, n: number, dtype: DType, count: number, path: 'device' | 'staged', stream: bigint, t = flightNowUs()): number {
    const id = ++this.total;
    const s = id % this.capacity;
    this.ids[s] = id;
    this.sends[s] = kind === 'send' ? 1 : 0;
    this.peers[s] = peer;
    this.ns[s] = n;
    this.dtypes[s] = DTYPES.indexOf(dtype);
    this.counts[s] = count;
    this.staged[s] = path === 'staged' ? 1 : 0;
    this.streams[s] = stream;
    this.states[s] = QUEUED;
    this.queuedAt[s] = t;
    this.agreedAt[s] = NaN;
    this.finishedAt[s] = NaN;
    return id;
  }

  /** The peer's matching call is known to be made (its print arrived and agrees). */
  agreed(id: number, t = flightNowUs()): void {
    const s = this.slotOf(id);
    if (s < 0 || this.states[s] !== QUEUED) return;
    this.states[s] = AGREED;
    this.agreedAt[s] = t;
  }

  finished(id: number, t = flightNowUs()): void {
    this.end(id, FINISHED, t);
  }

  /** It failed: its own error, a timeout, or the communicator's abort. */
  failed(id: number, t = flightNowUs()): void {
    this.end(id, FAILED, t);
  }

  private end(id: number, state: number, t: number): void {
    const s = this.slotOf(id);
    if (s < 0 || this.states[s]! >= FINISHED) return;
    this.states[s] = state;
    this.finishedAt[s] = t;
  }

  /** The slot of `id`, or -1 (never recorded, or overwritten since). */
  private slotOf(id: number): number {
    if (!(id >= 1)) return -1;
    const s = id % this.capacity;
    return this.ids[s] === id ? s : -1;
  }

  /** The recorded sends and receives, oldest first, as plain objects. */
  entries(): P2PFlightEntry[] {
    const out: P2PFlightEntry[] = [];
    const first = Math.max(1, this.total - this.capacity + 1);
    for (let id = first; id <= this.total; id++) out.push(this.entryAt(id % this.capacity));
    return out;
  }

  /** Those not finished (in flight or failed), in words: "send #3 to rank 2 (f32 × 1024), rank 2's recv not made yet". */
  unfinished(): string[] {
    const words = (e: P2PFlightEntry) =>
      e.state === 'queued'
        ? `rank ${e.peer}'s ${e.kind === 'send' ? 'recv' : 'send'} not made yet`
        : e.state === 'agreed'
          ? `made on both ranks, not finished`
          : 'failed';
    return this.entries()
      .filter((e) => e.state !== 'finished')
      .map((e) => `${describeP2P(e)}, ${words(e)}`);
  }

  /** The flight recorder's summary's continuation: "; sends and receives not finished: …" (the first four), or nothing. */
  summary(): string {
    const open = this.unfinished();
    if (open.length === 0) return '';
    return `; sends and receives not finished: ${open.slice(0, 4).join('; ')}${open.length > 4 ? `; ${open.length - 4} more` : ''}`;
  }

  /** One JSON line per entry, oldest first (the dump's point-to-point lines: each has `p2p`, its id). */
  jsonLines(): string {
    let text = '';
    for (const e of this.entries()) text += `${JSON.stringify(entryJson(e))}\n`;
    return text;
  }

  private entryAt(s: number): P2PFlightEntry {
    const e: P2PFlightEntry = {
      id: this.ids[s]!,
      kind: this.sends[s] === 1 ? 'send' : 'recv',
      peer: this.peers[s]!,
      n: this.ns[s]!,
      dtype: DTYPES[this.dtypes[s]!]!,
      count: this.counts[s]!,
      path: this.staged[s] === 1 ? 'staged' : 'device',
      stream: this.streams[s]!,
      state: STATES[this.states[s]!]!,
      queuedUs: this.queuedAt[s]!,
    };
    if (!Number.isNaN(this.agreedAt[s]!)) e.agreedUs = this.agreedAt[s]!;
    if (!Number.isNaN(this.finishedAt[s]!)) e.finishedUs = this.finishedAt[s]!;
    return e;
  }
}

/** "send #3 to rank 2 (f32 × 1024)". */
export function describeP2P(e: { kind: string; n: number; peer: number; dtype?: string; count?: number }): string {
  return `${e.kind} #${e.n} ${e.kind === 'send' ? 'to' : 'from'} rank ${e.peer} (${e.dtype ?? '?'} × ${e.count ?? '?'})`;
}

/** An entry as its dump line: times rounded to whole µs, the stream in hex. */
function entryJson(e: P2PFlightEntry): Record<string, unknown> {
  const o: Record<string, unknown> = { p2p: e.id, kind: e.kind, peer: e.peer, n: e.n, dtype: e.dtype, count: e.count, path: e.path };
  o.stream = `0x${e.stream.toString(16)}`;
  o.state = e.state;
  o.queuedUs = Math.round(e.queuedUs);
  if (e.agreedUs !== undefined) o.agreedUs = Math.round(e.agreedUs);
  if (e.finishedUs !== undefined) o.finishedUs = Math.round(e.finishedUs);
  return o;
}
