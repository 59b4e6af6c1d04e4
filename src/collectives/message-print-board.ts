/**
 * Call prints (call-check.ts) carried by control messages, for ranks that
 * share no memory: the prints of the calls made in one turn of the event
 * loop go to every peer in one message (a training step's calls, made back
 * to back, cost one message per peer, not one per call). A peer's prints
 * are kept until this rank's call of the same number completes; a peer
 * that runs further ahead than `maxAhead` calls is cut off (a rank's memory
 * is never the peer's to grow without bound).
 */
import { ProtocolError } from '../errors.js';
import { PrintRead, type PrintBoard } from './call-check.js';

export class MessagePrintBoard implements PrintBoard {
  /** Peers' prints by peer, then seq: [w0, w1, w2]. */
  private readonly prints = new Map<number, Map<number, [number, number, number]>>();
  private batchFirst = 0;
  private batch: number[] = [];
  private flushing = false;
  /** Prints of calls up to this one are dropped. */
  private doneUpTo = 0;

  constructor(
    /** Sends `words` (three per call, from call `first` on) to every peer. */
    private readonly send: (first: number, words: number[]) => void,
    private readonly maxAhead = 1 << 16,
  ) {}

  publish(seq: number, w0: number, w1: number, w2: number): void {
    if (this.batch.length > 0 && seq !== this.batchFirst + this.batch.length / 3) this.flush();
    if (this.batch.length === 0) this.batchFirst = seq;
    this.batch.push(w0, w1, w2);
    if (!this.flushing) {
      this.flushing = true;
      queueMicrotask(this.flush);
    }
  }

  private readonly flush = (): void => {
    this.flushing = false;
    if (this.batch.length === 0) return;
    const words = this.batch;
    this.batch = [];
    this.send(this.batchFirst, words);
  };

  /**
   * A peer's prints arrived: stores them and returns the calls they are of.
   * Throws ProtocolError for a malformed batch or a peer too far ahead.
   */
  arrive(peer: number, first: unknown, words: unknown): number[] {
    if (!Number.isSafeInteger(first) || (first as number) < 1 || !Array.isArray(words) || words.length % 3 !== 0 || words.length === 0) {
      throw new ProtocolError(`rank ${peer} sent a malformed call print message`);
    }
    let m = this.prints.get(peer);
    if (!m) this.prints.set(peer, (m = new Map()));
    const seqs: number[] = [];
    for (let i = 0; i < words.length; i += 3) {
      const w = [words[i], words[i + 1], words[i + 2]];
      if (!w.every((x) => Number.isInteger(x) && x >= 0 && x <= 0xffffffff)) throw new ProtocolError(`rank ${peer} sent a malformed call print`);
      const seq = (first as number) + i / 3;
      if (seq <= this.doneUpTo) continue;
      m.set(seq, w as [number, number, number]);
      seqs.push(seq);
    }
    if (m.size > this.maxAhead)
      throw new ProtocolError(`rank ${peer} is more than ${this.maxAhead} calls ahead of this rank's completed calls: it is making calls no other rank makes`);
    return seqs;
  }

  read(peer: number, seq: number, out: Uint32Array): PrintRead {
    const w = this.prints.get(peer)?.get(seq);
    if (!w) return seq <= this.doneUpTo ? PrintRead.Overwritten : PrintRead.None;
    out[0] = w[0];
    out[1] = w[1];
    out[2] = w[2];
    return PrintRead.Found;
  }

  done(seq: number): void {
    if (seq <= this.doneUpTo) return;
    for (const m of this.prints.values()) for (let s = this.doneUpTo + 1; s <= seq; s++) m.delete(s);
    this.doneUpTo = seq;
  }

  close(): void {
    this.prints.clear();
    this.batch = [];
  }
}
