/**
 * The one- and two-shot kernels read their inputs 16 bytes a load (reduce.cu's
 * VecIO): in the shipped PTX, each of those entries keeps at least two 16-byte
 * vector loads, one for the first rank's vector and one in the loop over the
 * others, for every dtype. nvcc once split them into element loads (VecIO took
 * its vector by reference), which left every result right and the 1 MiB
 * allreduce about 10 % slower: no other test can see that.
 */
import { describe, expect, it } from 'vitest';
import { DTYPES } from '../../../src/kernels/dtypes.js';
import { reducePtx } from '../../../src/kernels/reduce.ptx.js';

/** The body of one `.entry` of the PTX text, from its header to the closing brace at the line start. */
function entryBody(ptx: string, name: string): string {
  const start = ptx.indexOf(`.visible .entry ${name}(`);
  if (start < 0) throw new Error(`no entry ${name}`);
  const end = ptx.indexOf('\n}', start);
  return ptx.slice(start, end);
}

/** 16-byte loads: four 32-bit or two 64-bit lanes, any state space (generic included). */
const VECTOR_LOAD = /^\s*ld(\.\w+)*\.(v4\.(u32|f32|b32|s32)|v2\.(u64|f64|b64))\s/gm;

describe('the shipped reduce.ptx', () => {
  const ptx = reducePtx();
  for (const kind of ['oneshot', 'twoshot'] as const) {
    it(`smcuda_${kind}_<dtype> loads its inputs 16 bytes at a time, for every dtype`, () => {
      const counts = Object.fromEntries(DTYPES.map((d) => [d, entryBody(ptx, `smcuda_${kind}_${d}`).match(VECTOR_LOAD)?.length ?? 0]));
      for (const d of DTYPES) expect(counts[d], `smcuda_${kind}_${d}: ${JSON.stringify(counts)}`).toBeGreaterThanOrEqual(2);
    });
  }

  it('the check tells element loads from vector loads (it would have caught the split)', () => {
    expect('\tld.f32 \t%f1, [%rd2];\n\tld.f32 \t%f3, [%rd2+4];'.match(VECTOR_LOAD)).toBeNull();
    expect('\tld.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd2];\n\tld.global.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd3];'.match(VECTOR_LOAD)).toHaveLength(2);
  });
});
