/**
 * The binary codec of control frames (frames.ts). Each frame's layout is its
 * schema (schema.ts), compiled ahead of time into one encoder and one decoder
 * per type (compile.ts writes codec.generated.ts; nothing is compiled from
 * strings at run time); docs/protocol.md's field tables are rendered from the
 * same schema. In brief:
 *
 *  - little-endian; a 4-byte header: magic 0x53 ('S'), WIRE_VERSION, type, flags (0);
 *  - then the fixed fields of the type, then at most one variable part last
 *    (HELLO: its peer id, then the 32-byte nonce and the features word);
 *  - u32 tag, u64 seq/offset/length (as JS numbers, ≤ Number.MAX_SAFE_INTEGER),
 *    u64 bigints, 16-byte device UUIDs, 64-byte IPC handles, u8 enums and booleans,
 *    u16-length UTF-8 strings, u32-length data.
 *
 * Decoding trusts nothing: every length, range, enum and string is checked
 * and any violation is a ProtocolError naming the frame type and field. A
 * frame with another wire version is refused with code
 * SMCUDA_PROTOCOL_VERSION. Encoding refuses frames that would not decode
 * (a bug on this side) with code SMCUDA_PROTOCOL_ENCODE.
 *
 * The per-message frames (EAGER, RGET, FIN, FINS, STAGE_*) are on the hot
 * path: one exact-size allocation (from Node's pool) per encode, and EAGER
 * data decoded as a view into the input (no copy).
 */
import { ProtocolError } from '../errors.js';
import { FrameType, UUID_BYTES, WIRE_VERSION, type Frame } from './frames.js';
import { copyBytes } from '../channel/bytes.js';
import { constsOf, type FrameDecoder, type FrameEncoder, layoutOf } from './compile.js';
import { CODEC_FACTORIES, CODEC_LAYOUTS } from './codec.generated.js';
import { FRAME_SCHEMAS, fieldOffset, HEADER_BYTES, minFrameBytes } from './schema.js';
import { readDeviceUuid, type UuidNames, writeDeviceUuid } from './uuid.js';

export const WIRE_MAGIC = 0x53;
export { HEADER_BYTES, MAX_EAGER_BYTES, MAX_PEER_ID_BYTES, MAX_SEGMENT_BYTES, MAX_STRING_BYTES } from './schema.js';
/** Largest job token, in UTF-8 bytes (it is an HMAC key and never travels; the limit is the one it had on the wire). */
export const MAX_TOKEN_BYTES = 256;

export const ENCODE_ERROR_CODE = 'SMCUDA_PROTOCOL_ENCODE';
export const VERSION_ERROR_CODE = 'SMCUDA_PROTOCOL_VERSION';

const TWO_32 = 0x1_0000_0000;
const MAX_U64 = (1n << 64n) - 1n;
/** High word of Number.MAX_SAFE_INTEGER (2^53 - 1). */
const MAX_SAFE_HIGH = 0x1f_ffff;

const utf8Decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const DECODE_HINT = 'The endpoint must be closed: the peer runs a different smcuda version or is broken.';
const ENCODE_HINT = 'This is a bug in the caller that built the frame; fix the value before sending.';

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/** The name of a frame type for messages, e.g. 'RGET', or 'type 99'. */
export function frameTypeName(type: number): string {
  return FrameType[type] ?? `type ${type}`;
}

function encodeError(type: FrameType, field: string, problem: string): ProtocolError {
  return new ProtocolError(`Cannot encode ${frameTypeName(type)} frame: '${field}' ${problem}. ${ENCODE_HINT}`, ENCODE_ERROR_CODE);
}

function show(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (value instanceof Uint8Array) return `${value.constructor.name}(${value.byteLength})`;
  return String(value);
}

function checkInt(type: FrameType, field: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw encodeError(type, field, `must be an integer in ${min}..${max}, got ${show(v)}`);
  }
  return v;
}

function checkBig(type: FrameType, field: string, v: unknown): bigint {
  if (typeof v !== 'bigint' || v < 0n || v > MAX_U64) throw encodeError(type, field, `must be a bigint in 0..2^64-1, got ${show(v)}`);
  return v;
}

function checkBool(type: FrameType, field: string, v: unknown): boolean {
  if (typeof v !== 'boolean') throw encodeError(type, field, `must be a boolean, got ${show(v)}`);
  return v;
}

/** An optional fixed-size field: `absent`, or exactly `n` bytes. */
function checkOptional(type: FrameType, field: string, v: unknown, n: number, absent: null | undefined): Uint8Array | null | undefined {
  if (v === absent) return absent;
  if (!(v instanceof Uint8Array) || v.byteLength !== n) {
    throw encodeError(type, field, `must be ${absent === undefined ? 'absent' : 'null'} or a Uint8Array of exactly ${n} bytes, got ${show(v)}`);
  }
  return v;
}

/** A u8 enum: one of `values`' numbers. */
function checkEnum(type: FrameType, field: string, v: unknown, values: Record<string, string | number>, label: string): number {
  const n = checkInt(type, field, v, 0, 255);
  if (values[n] === undefined) {
    throw encodeError(
      type,
      field,
      `must be a ${label} (${Object.values(values)
        .filter((x) => typeof x === 'number')
        .join(', ')}), got ${n}`,
    );
  }
  return n;
}

/** Length-prefixed bytes of min..max bytes. */
function checkData(type: FrameType, field: string, v: unknown, min: number, max: number): Uint8Array {
  if (!(v instanceof Uint8Array)) throw encodeError(type, field, `must be a Uint8Array, got ${show(v)}`);
  if (v.byteLength < min || v.byteLength > max) throw encodeError(type, field, `must be ${min}..${max} bytes, got ${v.byteLength}`);
  return v;
}

/** min..max {offset, size} pairs of safe integers. */
function checkExtents(type: FrameType, field: string, v: unknown, min: number, max: number): Array<{ offset: number; size: number }> {
  if (!Array.isArray(v) || v.length < min || v.length > max)
    throw encodeError(type, field, `must be an array of ${min}..${max} {offset, size}, got ${show(v)}`);
  for (const x of v as Array<{ offset?: unknown; size?: unknown } | null>) {
    if (typeof x !== 'object' || x === null) throw encodeError(type, `${field}[]`, `must be an {offset, size} object, got ${show(x)}`);
    checkInt(type, `${field}[].offset`, x.offset, 0, MAX_SAFE);
    checkInt(type, `${field}[].size`, x.size, 0, MAX_SAFE);
  }
  return v as Array<{ offset: number; size: number }>;
}

/** min..max safe integers. */
function checkList(type: FrameType, field: string, v: unknown, min: number, max: number): number[] {
  if (!Array.isArray(v) || v.length < min || v.length > max)
    throw encodeError(type, field, `must be an array of ${min}..${max} sequence numbers, got ${show(v)}`);
  for (const x of v) checkInt(type, `${field}[]`, x, 0, MAX_SAFE);
  return v as number[];
}

function checkBytes(type: FrameType, field: string, v: unknown, n: number): Uint8Array {
  if (!(v instanceof Uint8Array) || v.byteLength !== n) throw encodeError(type, field, `must be a Uint8Array of exactly ${n} bytes, got ${show(v)}`);
  return v;
}

/** Validates a string and returns its UTF-8 length. */
function checkString(type: FrameType, field: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'string') throw encodeError(type, field, `must be a string, got ${show(v)}`);
  // A lone surrogate would be replaced by U+FFFD and not round-trip.
  if (!(v as string & { isWellFormed(): boolean }).isWellFormed()) {
    throw encodeError(type, field, 'contains a lone UTF-16 surrogate (not valid Unicode)');
  }
  const n = Buffer.byteLength(v, 'utf8');
  if (n < min || n > max) throw encodeError(type, field, `must be ${min}..${max} UTF-8 bytes, got ${n}`);
  return n;
}

/**
 * Writes into an exact-size frame; the caller has validated every value.
 * The bytes come from Buffer.allocUnsafe: small frames are carved from
 * Node's shared pool (allocating an ArrayBuffer per frame would dominate the
 * cost of encoding), and every byte is written, so none is left stale. The
 * frame is handed out as a plain Uint8Array view (byteOffset may be non-zero).
 */
class Writer {
  readonly buf: Buffer;
  pos = HEADER_BYTES;

  constructor(
    readonly type: FrameType,
    size: number,
  ) {
    const buf = Buffer.allocUnsafe(size);
    this.buf = buf;
    buf[0] = WIRE_MAGIC;
    buf[1] = WIRE_VERSION;
    buf[2] = type;
    buf[3] = 0;
  }

  u8(v: number): void {
    this.buf[this.pos++] = v;
  }
  u16(v: number): void {
    const b = this.buf;
    b[this.pos] = v;
    b[this.pos + 1] = v >>> 8;
    this.pos += 2;
  }
  u32(v: number): void {
    putU32le(this.buf, this.pos, v);
    this.pos += 4;
  }
  /** A safe integer as u64: two u32 halves, no BigInt on the hot path. */
  u64(v: number): void {
    this.u32(v >>> 0);
    this.u32(Math.floor(v / TWO_32));
  }
  big(v: bigint): void {
    this.buf.writeBigUInt64LE(v, this.pos);
    this.pos += 8;
  }
  raw(src: Uint8Array): void {
    this.buf.set(src, this.pos);
    this.pos += src.byteLength;
  }
  uuid(field: string, uuid: unknown): void {
    if (typeof uuid !== 'string' || !writeDeviceUuid(uuid, this.buf, this.pos)) {
      throw encodeError(this.type, field, `must be '' or 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (not all zero), got ${show(uuid)}`);
    }
    this.pos += UUID_BYTES;
  }
  /** u16 length, then the UTF-8 bytes; `n` from checkString. */
  str(s: string, n: number): void {
    this.u16(n);
    if (n > 0) this.buf.write(s, this.pos, n, 'utf8');
    this.pos += n;
  }
  done(): Uint8Array {
    const b = this.buf;
    // Guards the size arithmetic of each encoder.
    if (this.pos !== b.byteLength) throw new Error(`codec bug: ${frameTypeName(this.type)} wrote ${this.pos} of ${b.byteLength} bytes`);
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  }
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const U32 = 0xffff_ffff;

/** SPILL without its inner frame: header, seq u32, inner length u32 (the inner frame follows). */
export function spillHead(seq: number, innerLength: number): Uint8Array {
  const T = FrameType.SPILL;
  const w = new Writer(T, SPILL_FIXED);
  w.u32(checkInt(T, 'seq', seq, 0, U32));
  w.u32(checkInt(T, 'frame', innerLength, HEADER_BYTES, U32));
  return w.done();
}

const SPILL_FIXED = minFrameBytes(FrameType.SPILL);
/** RGET without the optional event handle. */
const RGET_FIXED = minFrameBytes(FrameType.RGET);
/** Where RGET's tag (u32) and seq (u64) sit; what restampRget writes and RgetDecoder reads, and nothing else differs between re-sends. */
const RGET_TAG_AT = fieldOffset(FrameType.RGET, 'tag');
const RGET_SEQ_AT = fieldOffset(FrameType.RGET, 'seq');
const RGET_STAMP_END = RGET_SEQ_AT + 8;
if (RGET_TAG_AT + 4 !== RGET_SEQ_AT) throw new Error('codec: restampRget expects RGET tag and seq adjacent');

/**
 * An RGET re-sent from the same buffer differs from the last one only in its
 * tag and seq, so the sender keeps one encoding per exported pointer and
 * length (`ExportInfo.rget`) and stamps each send's tag and seq into a copy:
 * a fraction of what an RGET encode cost in a streaming profile on H200
 * (the BigInt writes and the checks of every field).
 * `template` must be an RGET without an event, as encodeFrame made it.
 */
export function restampRget(template: Uint8Array, tag: number, seq: number): Uint8Array {
  const T = FrameType.RGET;
  checkInt(T, 'tag', tag, 0, U32);
  checkInt(T, 'seq', seq, 0, MAX_SAFE);
  const b = copyBytes(template);
  putU32le(b, RGET_TAG_AT, tag);
  putU32le(b, RGET_SEQ_AT, seq >>> 0);
  putU32le(b, RGET_SEQ_AT + 4, Math.floor(seq / TWO_32));
  return b;
}

const PRIMITIVES = {
  Writer,
  checkInt,
  checkBig,
  checkBool,
  checkBytes,
  checkOptional,
  checkString,
  checkEnum,
  checkData,
  checkList,
  checkExtents,
  encodeError,
  decodeError,
};
/** The generated encoder and decoder of each frame type, by type number. */
const ENCODERS: FrameEncoder[] = [];
const DECODERS: FrameDecoder[] = [];
for (const s of FRAME_SCHEMAS) {
  const make = CODEC_FACTORIES[s.type];
  if (make === undefined || CODEC_LAYOUTS[s.type] !== layoutOf(s)) {
    throw new Error(`codec: src/wire/codec.generated.ts is stale for frame type ${FrameType[s.type]} (the schema changed): run npm run codec`);
  }
  [ENCODERS[s.type], DECODERS[s.type]] = make(PRIMITIVES as never, constsOf(s));
}
for (const t of Object.values(FrameType)) {
  if (typeof t === 'number' && DECODERS[t] === undefined) throw new Error(`codec: frame type ${FrameType[t]} has no schema`);
}

/**
 * Encodes one frame into a new Uint8Array of exactly its size (possibly a
 * view into Node's Buffer pool: mind byteOffset). Throws
 * ProtocolError (code SMCUDA_PROTOCOL_ENCODE) when a field is out of range,
 * so that nothing the peer would refuse ever leaves this process.
 * `uuids`: the encoding endpoint's UuidNames (a device UUID is then
 * validated and converted once per device, not per frame).
 */
export function encodeFrame(frame: Frame, uuids?: UuidNames): Uint8Array {
  const type = (frame as { type?: unknown }).type;
  const encode = typeof type === 'number' ? ENCODERS[type] : undefined;
  if (encode === undefined) throw new ProtocolError(`Cannot encode a frame of unknown type ${show(type)}. ${ENCODE_HINT}`, ENCODE_ERROR_CODE);
  return encode(frame, uuids);
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

function decodeError(type: number, field: string, problem: string): ProtocolError {
  return new ProtocolError(`Malformed ${frameTypeName(type)} frame: '${field}' ${problem}. ${DECODE_HINT}`);
}

/** A bounds-checked cursor over one frame. Every read names its field for errors. */
class Reader {
  pos = HEADER_BYTES;
  constructor(
    readonly bytes: Uint8Array,
    readonly type: number,
    private readonly uuids: UuidNames | undefined,
  ) {}

  need(field: string, n: number): void {
    const left = this.bytes.byteLength - this.pos;
    if (n > left) throw decodeError(this.type, field, `needs ${n} bytes at byte ${this.pos} but the frame has ${left} left (truncated)`);
  }
  u8(field: string): number {
    this.need(field, 1);
    return this.bytes[this.pos++]!;
  }
  u16(field: string): number {
    this.need(field, 2);
    const b = this.bytes;
    const p = this.pos;
    this.pos = p + 2;
    return b[p]! | (b[p + 1]! << 8);
  }
  u32(field: string): number {
    this.need(field, 4);
    const v = u32le(this.bytes, this.pos);
    this.pos += 4;
    return v;
  }
  /** A u64 that must be a safe integer. */
  u64(field: string): number {
    this.need(field, 8);
    const lo = u32le(this.bytes, this.pos);
    const hi = u32le(this.bytes, this.pos + 4);
    if (hi > MAX_SAFE_HIGH) throw decodeError(this.type, field, `is ${BigInt(hi) * BigInt(TWO_32) + BigInt(lo)}, above Number.MAX_SAFE_INTEGER`);
    this.pos += 8;
    return hi * TWO_32 + lo;
  }
  big(field: string): bigint {
    this.need(field, 8);
    // Two u32 halves, not a DataView: making the view cost more than the reads.
    const lo = u32le(this.bytes, this.pos);
    const hi = u32le(this.bytes, this.pos + 4);
    this.pos += 8;
    return hi === 0 ? BigInt(lo) : (BigInt(hi) << 32n) | BigInt(lo);
  }
  bool(field: string): boolean {
    const v = this.u8(field);
    if (v > 1) throw decodeError(this.type, field, `must be 0 or 1 (a boolean), got ${v}`);
    return v === 1;
  }
  /** A u32 with a lower bound (e.g. attempt ≥ 1). */
  u32min(field: string, min: number): number {
    const v = this.u32(field);
    if (v < min) throw decodeError(this.type, field, `must be at least ${min}, got ${v}`);
    return v;
  }
  /** A view of the next `n` bytes (no copy). */
  subview(field: string, n: number): Uint8Array {
    this.need(field, n);
    const v = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return v;
  }
  /** A copy of the next `n` bytes: for small fields the receiver keeps (handles). */
  copy(field: string, n: number): Uint8Array {
    this.need(field, n);
    const b = copyBytes(this.bytes.subarray(this.pos, this.pos + n));
    this.pos += n;
    return b;
  }
  uuid(field: string): string {
    this.need(field, UUID_BYTES);
    const s = this.uuids ? this.uuids.read(this.bytes, this.pos) : readDeviceUuid(this.bytes, this.pos);
    this.pos += UUID_BYTES;
    return s;
  }
  str(field: string, min: number, max: number): string {
    const n = this.u16(field);
    if (n < min || n > max) throw decodeError(this.type, field, `must be ${min}..${max} UTF-8 bytes, got ${n}`);
    if (n === 0) return '';
    this.need(field, n);
    let s: string;
    try {
      s = utf8Decoder.decode(this.bytes.subarray(this.pos, this.pos + n));
    } catch {
      throw decodeError(this.type, field, 'is not valid UTF-8');
    }
    this.pos += n;
    return s;
  }
  end(): void {
    const extra = this.bytes.byteLength - this.pos;
    if (extra !== 0) throw decodeError(this.type, '(end)', `is followed by ${extra} trailing bytes`);
  }
}

/** Where an RGET's offset field starts: RgetDecoder's key. */
const RGET_OFFSET_AT = fieldOffset(FrameType.RGET, 'offset');
/** RGETs an RgetDecoder remembers: a sender streaming from slices of one buffer cycles through as many offsets as it has sends outstanding. */
const RGETS_REMEMBERED = 16;

/**
 * The receiving side of restampRget: an RGET re-sent from the same buffer
 * differs from the one before only in its tag and seq, so each endpoint
 * keeps the last RGETs it decoded (by the low half of their offset, so a
 * sender cycling through slices of a buffer still hits), and a frame whose
 * other bytes are the same is that frame with the new tag and seq. One byte
 * comparison then stands for the field checks (the bytes are those of a
 * frame that passed them), the handle copy and the BigInt reads: about a
 * fifth of decodeFrame's time for an RGET on the 2-core development
 * machine.
 */
export class RgetDecoder {
  private readonly known = new Map<number, { bytes: Buffer; frame: Extract<Frame, { type: FrameType.RGET }> }>();

  /**
   * `bytes` may be a view of memory the peer can still write (a ring entry):
   * each byte is read once, and an RGET is copied before it is decoded, so
   * the frame remembered is the frame its bytes say.
   */
  decode(bytes: Uint8Array, uuids?: UuidNames): Frame {
    const n = bytes.byteLength;
    const key = n >= RGET_FIXED ? u32le(bytes, RGET_OFFSET_AT) : -1;
    const hit = key >= 0 ? this.known.get(key) : undefined;
    if (hit !== undefined) {
      const last = hit.bytes;
      // Compared here, not by Buffer.compare: two native calls cost more than the loop.
      if (last.byteLength === n && sameBytes(last, bytes, 0, RGET_TAG_AT) && sameBytes(last, bytes, RGET_STAMP_END, n)) {
        const hi = u32le(bytes, RGET_SEQ_AT + 4);
        // A seq above 2^53: decodeFrame below says so.
        if (hi <= MAX_SAFE_HIGH) return { ...hit.frame, tag: u32le(bytes, RGET_TAG_AT), seq: hi * TWO_32 + u32le(bytes, RGET_SEQ_AT) };
      }
    }
    if (n < HEADER_BYTES || bytes[2] !== FrameType.RGET) return decodeFrame(bytes, uuids);
    const copy = hit !== undefined && hit.bytes.byteLength === n ? hit.bytes : Buffer.allocUnsafe(n);
    copy.set(bytes);
    if (hit !== undefined) this.known.delete(key); // its bytes are being replaced: a frame that fails to decode leaves no stale entry
    const frame = decodeFrame(copy, uuids);
    if (frame.type === FrameType.RGET) {
      if (hit === undefined && this.known.size >= RGETS_REMEMBERED) this.known.clear();
      this.known.set(key, { bytes: copy, frame });
    }
    return frame;
  }
}

/** Whether a[from..to) and b[from..to) hold the same bytes (the caller has checked the lengths). */
function sameBytes(a: Uint8Array, b: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The little-endian u32 at `at` (the caller has checked the bounds). */
function u32le(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16)) + b[at + 3]! * 0x100_0000;
}

/** Writes `v` (0..2^32-1) as a little-endian u32 at `at` (the caller has checked the bounds). */
function putU32le(b: Uint8Array, at: number, v: number): void {
  b[at] = v;
  b[at + 1] = v >>> 8;
  b[at + 2] = v >>> 16;
  b[at + 3] = v >>> 24;
}

/** Reads the 4-byte header and returns the frame type; throws on any header fault. */
export function decodeFrameType(bytes: Uint8Array): FrameType {
  if (!(bytes instanceof Uint8Array)) throw new ProtocolError(`A control frame must be a Uint8Array, got ${show(bytes)}. ${DECODE_HINT}`);
  if (bytes.byteLength < HEADER_BYTES) {
    throw new ProtocolError(`Malformed control frame: ${bytes.byteLength} bytes is shorter than the ${HEADER_BYTES}-byte header. ${DECODE_HINT}`);
  }
  if (bytes[0] !== WIRE_MAGIC) {
    throw new ProtocolError(`Malformed control frame: magic byte is 0x${bytes[0]!.toString(16)}, expected 0x53 ('S'); the peer is not smcuda. ${DECODE_HINT}`);
  }
  if (bytes[1] !== WIRE_VERSION) {
    throw new ProtocolError(
      `The peer speaks smcuda wire version ${bytes[1]}, this process speaks ${WIRE_VERSION}: run the same smcuda version in every process of the job.`,
      VERSION_ERROR_CODE,
    );
  }
  const type = bytes[2]!;
  if (FrameType[type] === undefined) throw new ProtocolError(`Malformed control frame: unknown frame type ${type}. ${DECODE_HINT}`);
  if (bytes[3] !== 0) throw decodeError(type, 'flags', `must be 0, got ${bytes[3]}`);
  return type as FrameType;
}

/**
 * Decodes and validates one frame. Throws ProtocolError on anything that is
 * not exactly a valid frame (code SMCUDA_PROTOCOL_VERSION for another wire
 * version, SMCUDA_PROTOCOL otherwise).
 *
 * Aliasing: EAGER `data` is a view into `bytes` (no copy): keep `bytes`
 * unmodified while the data is in use. Handles are copied (64 bytes).
 *
 * `uuids`: the decoding endpoint's UuidNames, so a device UUID it has seen
 * before comes back as the same string (cheaper to decode and to look up).
 */
export function decodeFrame(bytes: Uint8Array, uuids?: UuidNames): Frame {
  const type = decodeFrameType(bytes);
  const r = new Reader(bytes, type, uuids);
  const frame = DECODERS[type]!(r);
  r.end();
  return frame;
}
