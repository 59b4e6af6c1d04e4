/**
 * Length-prefix framing for byte streams (the Unix socket channel): each
 * frame is a u32 little-endian byte count followed by that many bytes.
 *
 * FrameReader turns arbitrary chunks back into whole frames. A frame that
 * lies inside one chunk is handed on as a view of that chunk (no copy); a
 * frame split across chunks is assembled in one buffer of its exact size
 * (one copy). Lengths above the current limit are refused from the prefix
 * alone, before anything is allocated or buffered, so a peer cannot make this
 * process allocate 4 GiB; before authentication the limit is the handshake's
 * few hundred bytes (setLimit); after it, also what is left of the
 * endpoint's buffer budget (setRoom).
 */
import { PeerLimitError, ProtocolError } from '../errors.js';

export const LENGTH_PREFIX_BYTES = 4;
/** Default largest frame a channel accepts: 256 MiB. */
export const DEFAULT_MAX_FRAME_BYTES = 256 * 1024 * 1024;
/** The most a u32 prefix can announce. */
export const MAX_FRAME_BYTES_LIMIT = 0xffff_ffff;
export const FRAME_SIZE_ERROR_CODE = 'SMCUDA_PROTOCOL_FRAME_SIZE';

export function frameTooLarge(what: string, bytes: number, max: number): ProtocolError {
  return new ProtocolError(
    `${what} a control frame of ${bytes} bytes, above maxFrameBytes (${max}): raise maxFrameBytes on both sides, or send less inline (lower the eager limit).`,
    FRAME_SIZE_ERROR_CODE,
  );
}

export class FrameReader {
  /** Bytes of a length prefix split across chunks. */
  readonly #prefix = new Uint8Array(LENGTH_PREFIX_BYTES);
  #prefixHave = 0;
  /** The frame being assembled from several chunks, and how much of it is in. */
  #body: Uint8Array | null = null;
  #bodyHave = 0;
  #max: number;
  #tooLarge: (len: number, max: number) => ProtocolError = (len, max) => frameTooLarge('The peer announced', len, max);
  #room: (() => number) | undefined;
  /** Frames completed so far (a partial frame's progress is told apart from the next one by it). */
  framesDone = 0;

  constructor(
    maxFrameBytes: number,
    private readonly onFrame: (frame: Uint8Array) => void,
  ) {
    this.#max = maxFrameBytes;
  }

  /** From the next prefix on, lengths above `max` are refused with `tooLarge(len, max)` (default: frameTooLarge). */
  setLimit(max: number, tooLarge?: (len: number, max: number) => ProtocolError): void {
    this.#max = max;
    this.#tooLarge = tooLarge ?? ((len, m) => frameTooLarge('The peer announced', len, m));
  }

  /** From the next prefix on, a length above `room()` is refused too (PeerLimitError): the receiver's buffer budget. */
  setRoom(room: () => number): void {
    this.#room = room;
  }

  get limit(): number {
    return this.#max;
  }

  /** Bytes held of an incomplete frame (prefix included); 0 between frames. */
  get buffered(): number {
    return this.#body ? LENGTH_PREFIX_BYTES + this.#bodyHave : this.#prefixHave;
  }

  /** Consumes one chunk; calls onFrame for every frame it completes. Throws ProtocolError on an oversized length. */
  push(chunk: Uint8Array): void {
    const n = chunk.byteLength;
    let pos = 0;
    while (pos < n) {
      const body = this.#body;
      if (body) {
        const take = Math.min(n - pos, body.byteLength - this.#bodyHave);
        body.set(chunk.subarray(pos, pos + take), this.#bodyHave);
        this.#bodyHave += take;
        pos += take;
        if (this.#bodyHave === body.byteLength) {
          this.#body = null;
          this.framesDone++;
          this.onFrame(body);
        }
        continue;
      }
      let len: number;
      if (this.#prefixHave === 0 && n - pos >= LENGTH_PREFIX_BYTES) {
        // Fast path: the prefix is whole in this chunk.
        len = (chunk[pos]! | (chunk[pos + 1]! << 8) | (chunk[pos + 2]! << 16)) + chunk[pos + 3]! * 0x100_0000;
        pos += LENGTH_PREFIX_BYTES;
      } else {
        this.#prefix[this.#prefixHave++] = chunk[pos++]!;
        if (this.#prefixHave < LENGTH_PREFIX_BYTES) continue;
        this.#prefixHave = 0;
        const p = this.#prefix;
        len = (p[0]! | (p[1]! << 8) | (p[2]! << 16)) + p[3]! * 0x100_0000;
      }
      if (len > this.#max) throw this.#tooLarge(len, this.#max);
      if (this.#room !== undefined) {
        const room = this.#room();
        if (len > room) {
          throw new PeerLimitError(
            'SMCUDA_PEER_BUFFER_LIMIT',
            `The peer announced a frame of ${len} bytes; only ${Math.max(0, room)} bytes are left of maxBufferedBytes for what this endpoint holds for it (unmatched messages, frames out of order): refused before buffering any of it`,
          );
        }
      }
      if (n - pos >= len) {
        // The whole frame is in this chunk: hand on a view.
        const frame = chunk.subarray(pos, pos + len);
        pos += len;
        this.framesDone++;
        this.onFrame(frame);
      } else {
        // allocUnsafe: every byte is about to be overwritten.
        this.#body = Buffer.allocUnsafe(len);
        this.#bodyHave = 0;
      }
    }
  }
}

/** The 4-byte prefix of a frame of `length` bytes. */
export function lengthPrefix(length: number): Buffer {
  const b = Buffer.allocUnsafe(LENGTH_PREFIX_BYTES);
  b.writeUInt32LE(length, 0);
  return b;
}
