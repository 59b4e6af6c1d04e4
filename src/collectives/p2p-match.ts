/**
 * Which send matches which receive, and whether they agree. As NCCL: the
 * n-th send from rank A to rank B is the n-th receive on B from A (a
 * sequence per ordered pair, counted apart from the collectives' calls, so
 * point to point never shifts the collectives' call check). Each rank tells
 * the peer the count and dtype of each send or receive it makes (a control
 * message, its "print"), and compares the peer's with its own: the later of
 * the two sees both. Until the peer's print arrived and agrees, a call
 * cannot complete; where they differ, both ranks fail (the communicator
 * aborts with SMCUDA_P2P_MISMATCH): never a wrong answer.
 */
import { P2PMismatchError, ProtocolError } from '../errors.js';
import type { DType } from '../kernels/dtypes.js';

export type P2PKind = 'send' | 'recv';

/** What a rank tells its peer of one of its calls (control message 'pp'). */
export interface P2PPrint {
  /** The sender's own kind of call: a send to this rank, or a receive from it. */
  kind: P2PKind;
  /** Its place in the pair's sequence (1 for the first). */
  n: number;
  count: number;
  dtype: DType;
}

/** Peers' prints held for calls this rank has not made yet, per peer, at most (an honest peer is never this far ahead). */
export const MAX_HELD_PRINTS = 1 << 20;

const other = (k: P2PKind): P2PKind => (k === 'send' ? 'recv' : 'send');

export class P2PMatch {
  /** The last n used, by kind then peer. */
  private readonly last: Record<P2PKind, number[]>;
  /** This rank's calls not yet agreed, by `${kind}:${peer}` then n. */
  private readonly own = new Map<string, Map<number, { count: number; dtype: DType }>>();
  /** Peers' prints not yet matched, keyed by the kind of this rank's matching call. */
  private readonly theirs = new Map<string, Map<number, { count: number; dtype: DType }>>();
  private readonly held: number[];

  constructor(
    readonly rank: number,
    readonly size: number,
  ) {
    this.last = { send: new Array<number>(size).fill(0), recv: new Array<number>(size).fill(0) };
    this.held = new Array<number>(size).fill(0);
  }

  /**
   * Records this rank's call: its n in the pair's sequence, the print to
   * tell the peer, and whether the peer's print, if there, agrees (true),
   * has not arrived (false) or differs (the error).
   */
  made(kind: P2PKind, peer: number, count: number, dtype: DType): { n: number; print: P2PPrint; agreed: boolean | P2PMismatchError } {
    const n = ++this.last[kind][peer]!;
    const key = `${kind}:${peer}`;
    const t = this.theirs.get(key)?.get(n);
    if (t !== undefined) {
      this.theirs.get(key)!.delete(n);
      this.held[peer]!--;
      return { n, print: { kind, n, count, dtype }, agreed: this.compare(kind, peer, n, { count, dtype }, t) };
    }
    let m = this.own.get(key);
    if (!m) this.own.set(key, (m = new Map()));
    m.set(n, { count, dtype });
    return { n, print: { kind, n, count, dtype }, agreed: false };
  }

  /**
   * A peer's print arrived: the matching call of this rank (its kind, n)
   * and whether it agrees, or undefined where this rank has not made that
   * call yet (the print is held for it).
   */
  arrive(peer: number, p: P2PPrint): { kind: P2PKind; n: number; agreed: true | P2PMismatchError } | undefined {
    const kind = other(p.kind);
    const key = `${kind}:${peer}`;
    const mine = this.own.get(key)?.get(p.n);
    if (mine !== undefined) {
      this.own.get(key)!.delete(p.n);
      return { kind, n: p.n, agreed: this.compare(kind, peer, p.n, mine, p) };
    }
    if (p.n <= this.last[kind][peer]!) throw new ProtocolError(`rank ${peer} sent a second print of its ${p.kind} #${p.n}`);
    if (++this.held[peer]! > MAX_HELD_PRINTS)
      throw new ProtocolError(`rank ${peer} made more than ${MAX_HELD_PRINTS} sends and receives this rank has not matched yet`);
    let m = this.theirs.get(key);
    if (!m) this.theirs.set(key, (m = new Map()));
    if (m.has(p.n)) throw new ProtocolError(`rank ${peer} sent a second print of its ${p.kind} #${p.n}`);
    m.set(p.n, { count: p.count, dtype: p.dtype });
    return undefined;
  }

  /** Whether this rank's call `kind` #n with `peer` still waits for the peer's print. */
  waiting(kind: P2PKind, peer: number, n: number): boolean {
    return this.own.get(`${kind}:${peer}`)?.has(n) ?? false;
  }

  private compare(
    kind: P2PKind,
    peer: number,
    n: number,
    mine: { count: number; dtype: DType },
    theirs: { count: number; dtype: DType },
  ): true | P2PMismatchError {
    const fields = [...(mine.dtype !== theirs.dtype ? ['dtype'] : []), ...(mine.count !== theirs.count ? ['count'] : [])];
    if (fields.length === 0) return true;
    const [s, r] = kind === 'send' ? [this.rank, peer] : [peer, this.rank];
    const [sp, rp] = kind === 'send' ? [mine, theirs] : [theirs, mine];
    return new P2PMismatchError(
      `rank ${s}'s send #${n} to rank ${r} is ${sp.dtype} × ${sp.count}, but rank ${r}'s receive #${n} from rank ${s} is ${rp.dtype} × ${rp.count} (${fields.join(' and ')} differ${fields.length === 1 ? 's' : ''}): the n-th send from a rank to a peer is the peer's n-th receive from it, and both must have the same count and dtype`,
      n,
      [s, r],
      fields,
    );
  }
}
