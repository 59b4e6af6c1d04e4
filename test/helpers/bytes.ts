/**
 * Test data and byte checks shared by the tests. The .mjs fixtures that
 * child processes run cannot import TypeScript: test/fixtures/peer-data.mjs
 * carries a copy of `patternBytes` (as `fill`) and `checksum`; keep them
 * identical.
 */

/** `n` bytes of the xorshift pattern of `seed`. */
export function patternBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed | 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/** A 32-bit rolling checksum (what the fixtures report instead of the bytes). */
export function checksum(bytes: Uint8Array): number {
  let s = 0;
  for (let i = 0; i < bytes.length; i++) s = (s * 31 + bytes[i]!) >>> 0;
  return s;
}

/** Byte equality that stays fast on MiB-sized buffers (vitest's deep equality walks every element). */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}
