/**
 * Device UUIDs on the wire: the 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'
 * string that DeviceInfo.uuid carries travels as its 16 raw bytes. The empty
 * string ("no device yet") travels as 16 zero bytes, so the all-zero UUID is
 * reserved and cannot be encoded.
 */
import { UUID_BYTES } from './frames.js';

const UUID_PATTERN = /^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
/** Hyphen positions of the canonical form, counted in bytes (after 4, 6, 8 and 10 bytes). */
const GROUP_ENDS = [4, 6, 8, 10];
/** '00'..'ff', so that formatting is a table look-up per byte. */
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

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
  const hex = uuid.slice(4).replaceAll('-', '');
  let any = 0;
  for (let i = 0; i < UUID_BYTES; i++) {
    const b = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
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

/** The 16 raw bytes of `uuid` ('' → all zero). Throws RangeError on anything else. */
export function deviceUuidToBytes(uuid: string): Uint8Array {
  const out = new Uint8Array(UUID_BYTES);
  if (!writeDeviceUuid(uuid, out, 0)) {
    throw new RangeError(`device UUID must be '' or 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (not all zero), got ${JSON.stringify(uuid)}`);
  }
  return out;
}

/** The 'GPU-…' string of 16 raw bytes (all zero → ''). */
export function deviceUuidFromBytes(bytes: Uint8Array): string {
  if (bytes.byteLength !== UUID_BYTES) throw new RangeError(`a device UUID is ${UUID_BYTES} bytes, got ${bytes.byteLength}`);
  return readDeviceUuid(bytes, 0);
}
