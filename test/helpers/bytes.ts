/**
 * Byte checks shared by the tests. The test data itself (patternBytes,
 * checksum) is the library's one pattern, src/cli/demo-pattern.ts, which the
 * .mjs fixtures import from dist/.
 */
export { checksum, patternBytes } from '../../src/cli/demo-pattern.js';

/** Byte equality that stays fast on MiB-sized buffers (vitest's deep equality walks every element). */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}
