/**
 * The call prints of every rank in one table of shared memory (a sealed
 * segment rank 0 makes and passes to every rank on its descriptor channel):
 * publishing a print is three stores and an atomic one, reading a peer's a
 * few loads (call-check.ts says what they are for).
 *
 * Row r belongs to rank r, which alone writes it: `window` entries of four
 * 32-bit words [seq, w0, w1, w2], call `seq` at entry seq % window. The seq
 * word is written last (Atomics.store) and read first and again after the
 * others: a reader never takes half of one call's print with half of
 * another's. A peer a whole window ahead has overwritten the entry: that
 * call reads as Overwritten and is not compared (call-check.ts).
 */
import { createSealedSegment, mapPeerSegment, type MappedSegment } from '../channel/sealed-segment.js';
import { PrintRead, type PrintBoard } from './call-check.js';

/** Entries per rank: a window of 4096 calls, fewer for large jobs (the table stays at most 4 MiB). */
export function printWindow(size: number): number {
  return Math.max(64, Math.min(4096, 2 ** Math.floor(Math.log2((4 << 20) / (16 * size)))));
}

/** Bytes of the table of `size` ranks. */
export function printTableBytes(size: number): number {
  return size * printWindow(size) * 16;
}

export class SharedPrintTable implements PrintBoard {
  private readonly words: Int32Array;
  readonly window: number;

  constructor(
    private readonly segment: MappedSegment,
    readonly rank: number,
    readonly size: number,
  ) {
    this.window = printWindow(size);
    const b = segment.bytes;
    this.words = new Int32Array(b.buffer, b.byteOffset, size * this.window * 4);
  }

  publish(seq: number, w0: number, w1: number, w2: number): void {
    const w = this.words;
    const at = (this.rank * this.window + (seq % this.window)) * 4;
    w[at + 1] = w0 | 0;
    w[at + 2] = w1 | 0;
    w[at + 3] = w2 | 0;
    Atomics.store(w, at, seq | 0);
  }

  read(peer: number, seq: number, out: Uint32Array): PrintRead {
    const w = this.words;
    const at = (peer * this.window + (seq % this.window)) * 4;
    const s = Atomics.load(w, at) >>> 0;
    if (s !== seq >>> 0) return s !== 0 && s > seq >>> 0 ? PrintRead.Overwritten : PrintRead.None;
    out[0] = w[at + 1]! >>> 0;
    out[1] = w[at + 2]! >>> 0;
    out[2] = w[at + 3]! >>> 0;
    return Atomics.load(w, at) >>> 0 === seq >>> 0 ? PrintRead.Found : PrintRead.Overwritten;
  }

  /**
   * How many other ranks' prints of call `seq` are in and equal to this one
   * word for word, in one pass over the rows; -1 as soon as one is in and
   * differs in any word (the caller then compares peer by peer, which tells
   * what differs). Each row's seq is read atomically first, so its words are
   * read after they were written; unlike read(), seq is not read again after
   * them (an atomic load costs several plain ones): a peer that overwrote
   * the entry meanwhile is a whole window ahead, a call read() reports as
   * Overwritten and the check leaves uncompared either way.
   */
  agreeing(seq: number, w0: number, w1: number, w2: number): number {
    const w = this.words;
    const stride = this.window * 4;
    const s = seq | 0;
    const a = w0 | 0;
    const b = w1 | 0;
    const c = w2 | 0;
    let n = 0;
    for (let k = 0, at = (seq % this.window) * 4; k < this.size; k++, at += stride) {
      if (k === this.rank || Atomics.load(w, at) !== s) continue;
      if (w[at + 1] !== a || w[at + 2] !== b || w[at + 3] !== c) return -1;
      n++;
    }
    return n;
  }

  done(): void {}

  close(): void {
    this.segment.close();
  }
}

/** What sharing a table needs of the endpoints (Endpoint's internal calls). */
export interface TableEndpoint {
  sendCallTable(seg: MappedSegment): Promise<void>;
  takeCallTable(taker: (seg: { fd: number; bytes: number }) => void): void;
}

/**
 * Rank 0 makes the table and passes it to every rank; the others map it
 * (sealed and of the size a job of `size` ranks needs, else refused).
 */
export async function sharePrintTable(rank: number, size: number, endpoints: ReadonlyMap<number, TableEndpoint>): Promise<SharedPrintTable> {
  const bytes = printTableBytes(size);
  if (rank === 0) {
    const seg = createSealedSegment(bytes, 'call table');
    try {
      // One descriptor for every peer: kept open until the last pass settled.
      let left = endpoints.size;
      const settled = () => {
        if (--left === 0) seg.releaseFd();
      };
      const lend = (): MappedSegment => ({
        bytes: seg.bytes,
        fd: seg.fd,
        releaseFd: () => undefined,
        lendFd: () => ({ fd: seg.fd!, settled }),
        close: () => undefined,
      });
      await Promise.all([...endpoints.values()].map((ep) => ep.sendCallTable(lend())));
    } catch (err) {
      seg.close();
      throw err;
    }
    return new SharedPrintTable(seg, rank, size);
  }
  const got = await new Promise<{ fd: number; bytes: number }>((resolve) => endpoints.get(0)!.takeCallTable(resolve));
  return new SharedPrintTable(mapPeerSegment(got.fd, bytes, 'the call table of rank 0'), rank, size);
}
