/**
 * The TCP store's frames (tcp-store-server.ts, tcp-store.ts): each is
 *
 *   u32 LE length of what follows | u8 type | u32 LE request id | payload
 *
 * with keys as u16 LE length + UTF-8 and values as u32 LE length + bytes.
 * The handshake (request id 0):
 *
 *   store  → client  SERVER_HELLO {version u8, nonce 32}
 *   client → store   CLIENT_HELLO {version u8, nonce 32, proof 32}
 *   store  → client  SERVER_PROOF {proof 32}, or AUTH_FAIL {u8: 0 wrong
 *                    proof, 1 another version} and close
 *
 * Requests: SET {key, value}, GET {key}, ADD {key, i64 delta}, WAIT {u32
 * timeout ms, u32 count, keys}. Replies: OK, VALUE {u8 present, value},
 * COUNT {i64}, TIMEOUT, ERROR {u8 kind (1: over a limit), u16-prefixed
 * UTF-8 reason}.
 *
 * then requests (SET, GET, ADD, WAIT) each answered by one reply with the
 * request's id (OK, VALUE, COUNT, TIMEOUT, ERROR), WAIT's when its keys are
 * all set or its time is up, so replies may come out of order.
 */
import { ProtocolError } from '../errors.js';

export const STORE_VERSION = 1;
export const STORE_NONCE_BYTES = 32;
export const FRAME_HEADER_BYTES = 9;

export enum StoreFrame {
  SERVER_HELLO = 1,
  CLIENT_HELLO = 2,
  SERVER_PROOF = 3,
  AUTH_FAIL = 4,
  SET = 10,
  GET = 11,
  ADD = 12,
  WAIT = 13,
  OK = 20,
  VALUE = 21,
  COUNT = 22,
  TIMEOUT = 23,
  ERROR = 24,
}

/** The whole CLIENT_HELLO frame: the only frame a connection may send before it is authenticated. */
export const CLIENT_HELLO_BYTES = FRAME_HEADER_BYTES + 1 + STORE_NONCE_BYTES + 32;
/** The whole SERVER_HELLO and SERVER_PROOF frames. */
export const SERVER_HELLO_BYTES = FRAME_HEADER_BYTES + 1 + STORE_NONCE_BYTES;
export const SERVER_PROOF_BYTES = FRAME_HEADER_BYTES + 32;

/** A frame's bytes: header and payload parts. */
export function encodeFrame(type: StoreFrame, id: number, parts: readonly Uint8Array[] = []): Buffer {
  const length = 5 + parts.reduce((n, p) => n + p.byteLength, 0);
  const out = Buffer.allocUnsafe(4 + length);
  out.writeUInt32LE(length, 0);
  out.writeUInt8(type, 4);
  out.writeUInt32LE(id >>> 0, 5);
  let at = FRAME_HEADER_BYTES;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

export function u8(v: number): Uint8Array {
  return Uint8Array.of(v);
}

export function u32(v: number): Uint8Array {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(v >>> 0, 0);
  return b;
}

export function i64(v: bigint): Uint8Array {
  const b = Buffer.allocUnsafe(8);
  b.writeBigInt64LE(v, 0);
  return b;
}

/** A key: u16 length + UTF-8. */
export function keyBytes(key: string): Uint8Array {
  const k = Buffer.from(key, 'utf8');
  const b = Buffer.allocUnsafe(2 + k.byteLength);
  b.writeUInt16LE(k.byteLength, 0);
  k.copy(b, 2);
  return b;
}

/** A value: u32 length + bytes. */
export function valueBytes(v: Uint8Array): Uint8Array[] {
  return [u32(v.byteLength), v];
}

/** A frame's header, once its 9 bytes are in. */
export interface FrameHeader {
  /** Bytes of the whole frame, header included. */
  total: number;
  type: number;
  id: number;
}

export function readHeader(b: Buffer): FrameHeader | undefined {
  if (b.byteLength < FRAME_HEADER_BYTES) return undefined;
  return { total: 4 + b.readUInt32LE(0), type: b.readUInt8(4), id: b.readUInt32LE(5) };
}

/** Reads a payload field by field; a short or overlong payload is a ProtocolError. */
export class PayloadReader {
  #at = 0;
  constructor(readonly b: Buffer) {}

  #need(n: number, what: string): void {
    if (this.#at + n > this.b.byteLength) throw new ProtocolError(`store frame too short for its ${what}`);
  }

  u8(): number {
    this.#need(1, 'byte');
    return this.b.readUInt8(this.#at++);
  }

  u32(): number {
    this.#need(4, 'u32');
    const v = this.b.readUInt32LE(this.#at);
    this.#at += 4;
    return v;
  }

  i64(): bigint {
    this.#need(8, 'i64');
    const v = this.b.readBigInt64LE(this.#at);
    this.#at += 8;
    return v;
  }

  bytes(n: number, what = 'bytes'): Buffer {
    this.#need(n, what);
    const v = this.b.subarray(this.#at, this.#at + n);
    this.#at += n;
    return v;
  }

  key(): string {
    this.#need(2, 'key length');
    const n = this.b.readUInt16LE(this.#at);
    this.#at += 2;
    return this.bytes(n, 'key').toString('utf8');
  }

  value(): Buffer {
    return this.bytes(this.u32(), 'value');
  }

  end(): void {
    if (this.#at !== this.b.byteLength) throw new ProtocolError(`store frame has ${this.b.byteLength - this.#at} bytes past its fields`);
  }
}
