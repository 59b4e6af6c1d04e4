/**
 * Every call checked against every other rank's, always on, at no extra
 * round trip: each rank publishes its call's print (call-print.ts) before it
 * queues any work for the call, and compares it with the prints the other
 * ranks published for the same sequence number.
 *
 * The hard case, once. Rank 0 calls allreduce(f32 × 2M) while rank 1 calls
 * allreduce(f32 × 1M): each queues its steps on its stream and the two GPUs
 * wait for flags the other never writes (or worse, finish with the wrong
 * data). Both ranks publish before they queue, and both compare after they
 * publish, so whichever comes second sees the other's print and fails the
 * call before its GPU work exists; the abort it sends releases the first
 * rank's waits (device-sync.ts, poisoning). A call also compares again when
 * it completes (the other ranks published before their GPUs could have run
 * the call, so their prints are there by then) and when the watchdog finds it
 * stalled: a mismatch never resolves as a success, and never waits for the
 * timeout.
 *
 * Where prints live (a PrintBoard): in a table of shared memory every rank
 * maps (print-table.ts: a store and a few loads a call), or, where the ranks
 * share no memory (no descriptor channel between them), in control messages,
 * sent once per turn of the event loop for the calls made in it; a
 * completion then waits for the peers' prints of its call if they have not
 * arrived yet.
 */
import { decodePrint, differingFields, describePrint, isSummedPrint, printsAgree, sharesSumToZero, type CallPrint } from './call-print.js';

/** A peer's print of a call, as read from a board. */
export const PrintRead = {
  /** Not published yet (as far as this rank can see). */
  None: 0,
  Found: 1,
  /** The slot holds a later call's print: the peer is a whole table ahead, the call cannot be compared. */
  Overwritten: 2,
} as const;
export type PrintRead = (typeof PrintRead)[keyof typeof PrintRead];

/** Where the ranks' prints are published and read. */
export interface PrintBoard {
  /** Publishes this rank's print of call `seq`. */
  publish(seq: number, w0: number, w1: number, w2: number): void;
  /** Peer `peer`'s print of call `seq`, into out[0..2]. */
  read(peer: number, seq: number, out: Uint32Array): PrintRead;
  /**
   * Optional fast path: how many peers' prints of `seq` are in and equal to
   * this one word for word; -1 if one is in and differs (then compare peer by peer).
   */
  agreeing?(seq: number, w0: number, w1: number, w2: number): number;
  /** Call `seq` completed on this rank: prints up to it are no longer needed. */
  done(seq: number): void;
  close(): void;
}

/** Two ranks' different calls at the same sequence number. */
export interface Mismatch {
  seq: number;
  /** This rank and the peer whose print differs. */
  ranks: [number, number];
  fields: string[];
  mine: CallPrint;
  theirs: CallPrint;
}

/** The message every rank's error carries: both calls, the fields and what to do. */
export function mismatchMessage(m: Mismatch): string {
  const [a, b] = m.ranks;
  if (m.mine.op === 'alltoallv' && m.fields.length === 1 && m.fields[0] === 'counts')
    return `call #${m.seq} (alltoallv ${m.mine.dtype ?? ''}): the ranks' counts do not pair up (seen by rank ${a}): every rank's sendCounts[k] must equal rank k's recvCounts at the sender's index; check the counts each rank passes`;
  return `call #${m.seq} differs between ranks: rank ${a} made ${describePrint(m.mine)}, rank ${b} made ${describePrint(m.theirs)} (${m.fields.join(', ')} differ${m.fields.length === 1 ? 's' : ''}); every rank must make the same collective calls, with the same dtype, count${m.fields.includes('counts') ? ', counts per rank' : ''}, root and op, in the same order`;
}

export class CallCheck {
  /** This rank's own prints, by seq % window: [seq, w0, w1, w2]. */
  private readonly own: Uint32Array;
  private readonly window: number;
  private readonly scratch = new Uint32Array(3);
  /** Every peer's print, read for alltoallv's sum (summedMismatch). */
  private readonly others = new Uint32Array(3);
  /** By seq % window: the call whose every peer's print made() found and agreed with (verify has nothing left to read). */
  private readonly agreed: Uint32Array;

  constructor(
    readonly rank: number,
    readonly size: number,
    readonly board: PrintBoard,
    window = 4096,
  ) {
    this.window = window;
    this.own = new Uint32Array(window * 4);
    this.agreed = new Uint32Array(window);
  }

  /**
   * Publishes this rank's print of call `seq` and compares it with every
   * peer's print already published: a mismatch found here fails the call
   * before any of its work is queued.
   */
  made(seq: number, w0: number, w1: number, w2: number): Mismatch | undefined {
    const at = (seq % this.window) * 4;
    const own = this.own;
    own[at] = seq;
    own[at + 1] = w0;
    own[at + 2] = w1;
    own[at + 3] = w2;
    this.board.publish(seq, w0, w1, w2);
    const plain = !isSummedPrint(w0); // alltoallv's prints need every rank's (against's sum)
    const agreeing = plain ? (this.board.agreeing?.(seq, w0, w1, w2) ?? -1) : -1;
    // The later ranks to make a call find every print here: their verify() then costs one load.
    if (agreeing === this.size - 1) this.agreed[seq % this.window] = seq;
    // Every print in so far is this one: nothing to compare until the others come.
    if (agreeing >= 0) return undefined;
    let found = 0;
    const t = this.scratch;
    for (let k = 0; k < this.size; k++) {
      if (k === this.rank) continue;
      if (this.board.read(k, seq, t) !== PrintRead.Found) continue;
      found++;
      // The print just made is in hand: the common case (they agree) without against's lookups.
      if (plain && printsAgree(w0, w1, w2, t[0]!, t[1]!, t[2]!)) continue;
      const m = this.against(k, seq);
      if (m) return m;
    }
    if (found === this.size - 1) this.agreed[seq % this.window] = seq;
    return undefined;
  }

  /**
   * Call `seq` is complete on this rank: true if every peer's print agrees,
   * false while some peer's has not arrived (message boards only), or the
   * mismatch.
   */
  verify(seq: number): Mismatch | boolean {
    if (this.agreed[seq % this.window] === seq >>> 0) return true;
    const at = (seq % this.window) * 4;
    const own = this.own;
    // An earlier rank to make the call: by its completion every print is usually in (one pass).
    if (own[at] === seq >>> 0 && !isSummedPrint(own[at + 1]!) && this.board.agreeing?.(seq, own[at + 1]!, own[at + 2]!, own[at + 3]!) === this.size - 1)
      return true;
    for (let k = 0; k < this.size; k++) {
      if (k === this.rank) continue;
      const r = this.board.read(k, seq, this.scratch);
      if (r === PrintRead.None) return false;
      if (r === PrintRead.Found) {
        const m = this.against(k, seq);
        if (m) return m;
      }
    }
    return true;
  }

  /** The peers whose print of call `seq` this rank cannot see: they have not made it (or, by message, it is on its way). */
  missing(seq: number): number[] {
    const out: number[] = [];
    for (let k = 0; k < this.size; k++) if (k !== this.rank && this.board.read(k, seq, this.scratch) === PrintRead.None) out.push(k);
    return out;
  }

  /** A peer's print of `seq` (when it arrives by message): the mismatch, if this rank made that call already. */
  compare(peer: number, seq: number): Mismatch | undefined {
    if (this.board.read(peer, seq, this.scratch) !== PrintRead.Found) return undefined;
    return this.against(peer, seq);
  }

  /** This rank's print of call `seq`, if it is still in the window. */
  mine(seq: number): CallPrint | undefined {
    const at = (seq % this.window) * 4;
    if (this.own[at] !== seq) return undefined;
    return decodePrint(this.own[at + 1]!, this.own[at + 2]!, this.own[at + 3]!);
  }

  /** Compares scratch (peer `peer`'s print of `seq`) with this rank's own, if made. */
  private against(peer: number, seq: number): Mismatch | undefined {
    const at = (seq % this.window) * 4;
    const own = this.own;
    if (own[at] !== seq) return undefined; // not made here yet: the later of the two compares
    const t = this.scratch;
    if (printsAgree(own[at + 1]!, own[at + 2]!, own[at + 3]!, t[0]!, t[1]!, t[2]!))
      return isSummedPrint(own[at + 1]!) ? this.summedMismatch(peer, seq, at) : undefined;
    const mine = decodePrint(own[at + 1]!, own[at + 2]!, own[at + 3]!);
    const theirs = decodePrint(t[0]!, t[1]!, t[2]!);
    return { seq, ranks: [this.rank, peer], fields: differingFields(mine, theirs), mine, theirs };
  }

  /**
   * alltoallv: once every rank's print of `seq` is in, whether their shares add up to 0 (call-print.ts):
   * else some rank's sendCounts[k] is not rank k's recvCounts for it, which no pair of prints shows.
   */
  private summedMismatch(peer: number, seq: number, at: number): Mismatch | undefined {
    const own = this.own;
    const words: Array<[number, number]> = [[own[at + 2]!, own[at + 3]!]];
    const o = this.others;
    for (let k = 0; k < this.size; k++) {
      if (k === this.rank) continue;
      if (this.board.read(k, seq, o) !== PrintRead.Found || !isSummedPrint(o[0]!)) return undefined;
      words.push([o[1]!, o[2]!]);
    }
    if (sharesSumToZero(words)) return undefined;
    const mine = decodePrint(own[at + 1]!, own[at + 2]!, own[at + 3]!);
    this.board.read(peer, seq, o);
    return { seq, ranks: [this.rank, peer], fields: ['counts'], mine, theirs: decodePrint(o[0]!, o[1]!, o[2]!) };
  }
}
