/**
 * A single-producer, single-consumer ring of control frames in a shared
 * memory segment: one direction of a ShmChannel. The consumer creates the
 * segment and reads it; the peer maps it and writes.
 *
 * Layout (little-endian; header fields on their own 64-byte lines so the two
 * sides do not share a cache line):
 *
 *   byte   0  u32 magic 'SMR1'
 *   byte   4  u32 capacity (data bytes, a power of two)
 *   byte  64  u32 tail  — bytes ever written (producer; wraps at 2^32)
 *   byte 128  u32 head  — bytes ever consumed (consumer)
 *   byte 192  u32 bell  — 1: the consumer is watching or a DOORBELL is on its
 *                         way, so the producer need not ring; 0: ring it
 *   byte 256  data[capacity]
 *
 * An entry is u32 length, u32 seq, then the frame, padded to 8 bytes. An
 * entry never wraps: where it would not fit before the end of the data, the
 * producer writes the length 0xFFFFFFFF (skip to the start) instead.
 *
 * Trust: the producer is another process. The consumer keeps its own head
 * (the shared copy is only published for the producer), checks every entry
 * against the space the producer claims to have written, and copies each
 * frame out before handing it on, so a peer scribbling on the segment can
 * corrupt only its own frames, which then fail to decode.
 *
 * Ordering: positions are published with Atomics.store (a sequentially
 * consistent store: the entry's bytes are visible before the new tail), and
 * the doorbell protocol (shm-channel.ts) relies on each side's store then
 * load of the other's word not being reordered, which Atomics gives.
 */
import { ArgumentRangeError, ProtocolError } from '../errors.js';

export const RING_MAGIC = 0x31524d53; // 'SMR1'
export const RING_HEADER_BYTES = 256;
const I_MAGIC = 0;
const I_CAPACITY = 1;
const I_TAIL = 16;
const I_HEAD = 32;
const I_BELL = 48;
const ENTRY_HEADER = 8;
const SKIP = 0xffff_ffff;

/** Segment bytes for a ring of `capacity` data bytes. */
export function ringSegmentBytes(capacity: number): number {
  return RING_HEADER_BYTES + capacity;
}

function checkCapacity(capacity: number): void {
  if (!Number.isInteger(capacity) || capacity < 4096 || capacity > 1 << 30 || (capacity & (capacity - 1)) !== 0) {
    throw new ArgumentRangeError(`ring capacity must be a power of two in 4096..2^30, got ${capacity}`);
  }
}

const align8 = (n: number) => (n + 7) & ~7;

/** The consumer side: created over a fresh segment, whose header it writes. */
export class RingReader {
  readonly capacity: number;
  private readonly words: Int32Array;
  private readonly data: Uint8Array;
  private readonly dataWords: Uint32Array;
  private readonly mask: number;
  /** Authoritative consumer position (the shared copy is for the producer). */
  private head = 0;
  /** The size of the entry peek() returned, as peekSeq() checked it. */
  private peeked = 0;

  constructor(bytes: Uint8Array, capacity: number) {
    checkCapacity(capacity);
    if (bytes.byteLength < ringSegmentBytes(capacity) || bytes.byteOffset % 8 !== 0) {
      throw new ArgumentRangeError(`ring segment of ${bytes.byteLength} bytes is too small for capacity ${capacity}`);
    }
    this.capacity = capacity;
    this.mask = capacity - 1;
    this.words = new Int32Array(bytes.buffer, bytes.byteOffset, RING_HEADER_BYTES / 4);
    this.data = new Uint8Array(bytes.buffer, bytes.byteOffset + RING_HEADER_BYTES, capacity);
    this.dataWords = new Uint32Array(bytes.buffer, bytes.byteOffset + RING_HEADER_BYTES, capacity / 4);
    this.words[I_CAPACITY] = capacity;
    Atomics.store(this.words, I_TAIL, 0);
    Atomics.store(this.words, I_HEAD, 0);
    Atomics.store(this.words, I_BELL, 0);
    Atomics.store(this.words, I_MAGIC, RING_MAGIC);
  }

  /** Whether an entry is waiting (one shared load: cheap enough to spin on). */
  get ready(): boolean {
    return Atomics.load(this.words, I_TAIL) !== (this.head | 0);
  }

  /**
   * The next entry's sequence number (u32), or -1 when the ring is empty.
   * Skip markers are consumed on the way. Throws ProtocolError on a corrupt
   * ring; the caller checks the sequence itself.
   */
  peekSeq(): number {
    for (;;) {
      const avail = (Atomics.load(this.words, I_TAIL) - this.head) >>> 0;
      if (avail === 0) return -1;
      if (avail > this.capacity || avail % 8 !== 0) throw this.corrupt(`the producer claims ${avail} unread bytes`);
      const at = this.head & this.mask;
      const len = this.dataWords[at >>> 2]!;
      if (len === SKIP) {
        const skip = this.capacity - at;
        if (skip > avail) throw this.corrupt('a skip marker past the written bytes');
        this.advance(skip);
        continue;
      }
      if (at + ENTRY_HEADER + len > this.capacity || align8(ENTRY_HEADER + len) > avail) {
        throw this.corrupt(`an entry of ${len} bytes past the written bytes or the end of the ring`);
      }
      return this.dataWords[(at >>> 2) + 1]!;
    }
  }

  /**
   * The next entry's bytes where they lie (call after peekSeq() ≥ 0): no
   * copy. They stay put until consume(); the producer may still scribble on
   * them (a broken or hostile one), so read each byte once.
   */
  peek(): Uint8Array {
    const at = this.head & this.mask;
    const len = this.dataWords[at >>> 2]!;
    this.peeked = align8(ENTRY_HEADER + len);
    return this.data.subarray(at + ENTRY_HEADER, at + ENTRY_HEADER + len);
  }

  /** Frees the entry peek() returned. */
  consume(): void {
    this.advance(this.peeked);
    this.peeked = 0;
  }

  /** 1: the producer need not ring the doorbell (we are watching, or one is coming). */
  setBell(v: 0 | 1): void {
    Atomics.store(this.words, I_BELL, v);
  }

  private advance(n: number): void {
    this.head = (this.head + n) >>> 0;
    Atomics.store(this.words, I_HEAD, this.head | 0);
  }

  private corrupt(what: string): ProtocolError {
    return new ProtocolError(`control ring is corrupt: ${what}; the peer process is broken or hostile`, 'SMCUDA_PROTOCOL');
  }
}

/** The producer side, over the peer's segment. */
export class RingWriter {
  readonly capacity: number;
  /** Largest frame that goes into the ring; larger ones travel as SPILL frames. */
  readonly maxFrame: number;
  private readonly words: Int32Array;
  private readonly data: Uint8Array;
  private readonly dataWords: Uint32Array;
  private readonly mask: number;
  private tail = 0;

  constructor(bytes: Uint8Array, capacity: number, maxFrame: number) {
    checkCapacity(capacity);
    if (bytes.byteLength < ringSegmentBytes(capacity) || bytes.byteOffset % 8 !== 0) {
      throw new ProtocolError(`ring segment of ${bytes.byteLength} bytes is too small for the offered capacity ${capacity}`);
    }
    this.words = new Int32Array(bytes.buffer, bytes.byteOffset, RING_HEADER_BYTES / 4);
    if (this.words[I_MAGIC] !== RING_MAGIC || this.words[I_CAPACITY] !== capacity) {
      throw new ProtocolError('the offered segment is not a control ring of the offered capacity');
    }
    this.capacity = capacity;
    this.mask = capacity - 1;
    this.maxFrame = Math.min(maxFrame, capacity / 4);
    this.tail = Atomics.load(this.words, I_TAIL) >>> 0;
    this.data = new Uint8Array(bytes.buffer, bytes.byteOffset + RING_HEADER_BYTES, capacity);
    this.dataWords = new Uint32Array(bytes.buffer, bytes.byteOffset + RING_HEADER_BYTES, capacity / 4);
  }

  /**
   * Writes one frame made of `parts` (total `length` bytes) with `seq`.
   * Returns false, writing nothing, when the ring lacks the space.
   */
  tryWrite(seq: number, parts: readonly Uint8Array[], length: number): boolean {
    const need = align8(ENTRY_HEADER + length);
    const used = (this.tail - (Atomics.load(this.words, I_HEAD) >>> 0)) >>> 0;
    if (used > this.capacity) return false; // a consumer that lies about its head gets no more frames here
    let free = this.capacity - used;
    let at = this.tail & this.mask;
    let skip = 0;
    if (at + need > this.capacity) {
      skip = this.capacity - at;
      if (skip + need > free) return false;
      this.dataWords[at >>> 2] = SKIP;
      at = 0;
      free -= skip;
    }
    if (need > free) return false;
    const w = at >>> 2;
    this.dataWords[w] = length;
    this.dataWords[w + 1] = seq >>> 0;
    let p = at + ENTRY_HEADER;
    for (const part of parts) {
      this.data.set(part, p);
      p += part.byteLength;
    }
    this.tail = (this.tail + skip + need) >>> 0;
    Atomics.store(this.words, I_TAIL, this.tail | 0);
    return true;
  }

  /** After a write: true when the consumer must be woken (a DOORBELL), claiming the bell so later writes do not ring too. */
  needsDoorbell(): boolean {
    return Atomics.load(this.words, I_BELL) === 0 && Atomics.exchange(this.words, I_BELL, 1) === 0;
  }
}
