/**
 * Device UUIDs on the wire: the 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'
 * string that DeviceInfo.uuid carries travels as its 16 raw bytes. The empty
 * string ("no device yet") travels as 16 zero bytes, so the all-zero UUID is
 * reserved and cannot be encoded.
 */
import { UUID_BYTES } from './frames.js';
import { ArgumentRangeError } from '../errors.js';

const UUID_PATTERN = /^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
/** Hyphen positions of the canonical form, counted in bytes (after 4, 6, 8 and 10 bytes). */
const GROUP_ENDS = [4, 6, 8, 10];
/** '00'..'ff', so that formatting is a table look-up per byte. */
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** 0..15 for a hex digit's char code (the caller has checked it is one). */
function hexValue(code: number): number {
  return code <= 0x39 ? code - 0x30 : (code | 0x20) - 0x57;
}

/** Whether `value` is a well-formed 'GPU-…' UUID (either case) or ''. */
export function isDeviceUuid(value: string): boolean {
  return value === '' || UUID_PATTERN.test(value);
}

/**
 * Writes `uuid` as 16 bytes into `out` at `offset`. Returns false (and writes
 * nothing) when `uuid` is neither '' nor a well-formed 'GPU-…' string, or is
 * the reserved all-zero UUID.
 */
export function writeDeviceUuid(uuid: string, out: Uint8Array, offset: number): boolean {
  if (uuid === '') {
    out.fill(0, offset, offset + UUID_BYTES);
    return true;
  }
  if (!UUID_PATTERN.test(uuid)) return false;
  // The pattern fixed every position: hex digits, with '-' at 12, 17, 22, 27 (after 'GPU-').
  let any = 0;
  let c = 4;
  for (let i = 0; i < UUID_BYTES; i++) {
    if (c === 12 || c === 17 || c === 22 || c === 27) c++;
    const b = (hexValue(uuid.charCodeAt(c)) << 4) | hexValue(uuid.charCodeAt(c + 1));
    c += 2;
    out[offset + i] = b;
    any |= b;
  }
  if (any === 0) {
    out.fill(0, offset, offset + UUID_BYTES);
    return false;
  }
  return true;
}

/** Reads 16 bytes at `offset` as a lower-case 'GPU-…' string; all zero → ''. */
export function readDeviceUuid(bytes: Uint8Array, offset: number): string {
  let any = 0;
  for (let i = 0; i < UUID_BYTES; i++) any |= bytes[offset + i]!;
  if (any === 0) return '';
  let s = 'GPU-';
  let g = 0;
  for (let i = 0; i < UUID_BYTES; i++) {
    if (i === GROUP_ENDS[g]) {
      s += '-';
      g++;
    }
    s += HEX[bytes[offset + i]!];
  }
  return s;
}

/** How many device UUIDs a UuidNames remembers: a peer names its own device and ours. */
const REMEMBERED = 8;

/**
 * readDeviceUuid and writeDeviceUuid with a memory, one per endpoint: a peer
 * names the same device in every RGET, and building the string afresh —
 * then hashing the new string again for each Map lookup keyed by it — cost
 * more per frame than the rest of its decoding (measured). Returns the same, already hashed, string for
 * the same 16 bytes.
 */
export class UuidNames {
  private readonly keys = new Uint8Array(REMEMBERED * UUID_BYTES);
  private readonly names: string[] = [];
  private next = 0;
  private readonly encoded = new Map<string, Uint8Array>();

  /** Encoding: the 16 bytes of a valid UUID string (remembered per string), or undefined when it is not one. */
  bytesOf(uuid: string): Uint8Array | undefined {
    let b = this.encoded.get(uuid);
    if (b === undefined) {
      b = new Uint8Array(UUID_BYTES);
      if (!writeDeviceUuid(uuid, b, 0)) return undefined;
      if (this.encoded.size >= REMEMBERED) this.encoded.delete(this.encoded.keys().next().value!);
      this.encoded.set(uuid, b);
    }
    return b;
  }

  read(bytes: Uint8Array, offset: number): string {
    const keys = this.keys;
    for (let e = 0; e < this.names.length; e++) {
      const k = e * UUID_BYTES;
      let i = 0;
      while (i < UUID_BYTES && keys[k + i] === bytes[offset + i]) i++;
      if (i === UUID_BYTES) return this.names[e]!;
    }
    const name = readDeviceUuid(bytes, offset);
    const e = this.next;
    this.next = (e + 1) % REMEMBERED;
    keys.set(bytes.subarray(offset, offset + UUID_BYTES), e * UUID_BYTES);
    this.names[e] = name;
    return name;
  }
}

/** The 16 raw bytes of `uuid` ('' → all zero). Throws RangeError on anything else. */
export function deviceUuidToBytes(uuid: string): Uint8Array {
  const out = new Uint8Array(UUID_BYTES);
  if (!writeDeviceUuid(uuid, out, 0)) {
    throw new ArgumentRangeError(`device UUID must be '' or 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (not all zero), got ${JSON.stringify(uuid)}`);
  }
  return out;
}

/** The 'GPU-…' string of 16 raw bytes (all zero → ''). */
export function deviceUuidFromBytes(bytes: Uint8Array): string {
  if (bytes.byteLength !== UUID_BYTES) throw new ArgumentRangeError(`a device UUID is ${UUID_BYTES} bytes, got ${bytes.byteLength}`);
  return readDeviceUuid(bytes, 0);
}
