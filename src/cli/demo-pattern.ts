/**
 * The one test-data pattern: `smcuda demo` and `smcuda soak` fill their
 * messages with it, and so do the tests and their child-process fixtures
 * (which import it from dist/). In the demo each message's bytes are a
 * function of (phase, size, iteration, source rank, destination rank), so a
 * message delivered to the wrong place, in the wrong order, or partly is
 * caught byte for byte.
 */

export function seedOf(phase: number, sizeIndex: number, iter: number, src: number, dst: number): number {
  return ((phase * 7919 + sizeIndex * 104729 + iter * 1299709 + src * 15485863 + dst * 32452843) | 0) >>> 0;
}

/** Fills `out` with the pattern of `seed` (32-bit words; the tail bytes too). */
export function fillPattern(out: Uint8Array, seed: number): void {
  const words = Math.floor(out.byteLength / 4);
  const view = out.byteOffset % 4 === 0 ? new Uint32Array(out.buffer, out.byteOffset, words) : undefined;
  let x = seed | 1;
  for (let i = 0; i < words; i++) {
    // xorshift32: cheap, and neighbouring words differ
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    if (view) view[i] = x >>> 0;
    else new DataView(out.buffer, out.byteOffset).setUint32(i * 4, x >>> 0, true);
  }
  for (let i = words * 4; i < out.byteLength; i++) out[i] = (seed + i) & 0xff;
}

/** Index of the first byte that differs from the pattern, or -1. */
export function checkPattern(data: Uint8Array, seed: number, scratch: Uint8Array): number {
  const expected = scratch.subarray(0, data.byteLength);
  fillPattern(expected, seed);
  if (Buffer.from(data.buffer, data.byteOffset, data.byteLength).equals(Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength))) return -1;
  for (let i = 0; i < data.byteLength; i++) if (data[i] !== expected[i]) return i;
  return -1;
}

/** `n` fresh bytes of the pattern of `seed`. */
export function patternBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  fillPattern(out, seed);
  return out;
}

/** A 32-bit rolling checksum: what a process reports of bytes it received, instead of the bytes. */
export function checksum(bytes: Uint8Array): number {
  let s = 0;
  for (let i = 0; i < bytes.length; i++) s = (s * 31 + bytes[i]!) >>> 0;
  return s;
}

/** `smcuda demo --graph`: replays checked with fresh data each (the back-to-back ones are checked once, at the end). */
export const GRAPH_SAMPLED_REPLAYS = 3;
