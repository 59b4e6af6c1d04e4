/**
 * The one test-data pattern (src/cli/demo-pattern.ts) that the demo, soak,
 * the tests and their child-process fixtures all use.
 */
import { describe, expect, it } from 'vitest';
import { checkPattern, checksum, fillPattern, patternBytes, seedOf } from '../../../src/cli/demo-pattern.js';

describe('the test-data pattern', () => {
  it('patternBytes is fillPattern into fresh memory, the same at any alignment and length', () => {
    for (const n of [0, 1, 3, 4, 5, 1023, 4096]) {
      const want = patternBytes(n, 42);
      const backing = new Uint8Array(n + 1);
      const unaligned = backing.subarray(1);
      fillPattern(unaligned, 42);
      expect(Buffer.compare(unaligned, want), `length ${n}`).toBe(0);
    }
  });

  it('different seeds give different bytes; checkPattern finds the first wrong byte', () => {
    expect(Buffer.compare(patternBytes(64, seedOf(0, 0, 0, 0, 1)), patternBytes(64, seedOf(0, 0, 0, 1, 0)))).not.toBe(0);
    const data = patternBytes(1000, 9);
    const scratch = new Uint8Array(1000);
    expect(checkPattern(data, 9, scratch)).toBe(-1);
    data[617] ^= 1;
    expect(checkPattern(data, 9, scratch)).toBe(617);
    expect(checkPattern(patternBytes(1000, 11), 9, scratch)).toBeGreaterThanOrEqual(0);
  });

  it('checksum tells one byte apart and is order-sensitive', () => {
    const a = patternBytes(256, 3);
    const b = Uint8Array.from(a);
    b[100] ^= 0x80;
    expect(checksum(a)).not.toBe(checksum(b));
    expect(checksum(Uint8Array.of(1, 2))).not.toBe(checksum(Uint8Array.of(2, 1)));
    expect(checksum(new Uint8Array(0))).toBe(0);
  });
});
