/**
 * The reference of `smcuda demo --collectives --nodes` (hierarchical-cases.ts):
 * where the order of a reduction cannot change its result (integers, exact
 * float sums, min and max) it equals one node's reference, block for block,
 * so its indexing is that of the calls; and the cases NCCL cannot reduce
 * between nodes are the ones left out over NCCL.
 */
import { describe, expect, it } from 'vitest';
import { collectiveCases, expectedOutput } from '../../../src/cli/collective-cases.js';
import { engineReduces, expectedHierarchical } from '../../../src/cli/hierarchical-cases.js';

describe('the hierarchical reference', () => {
  it('equals one node’s wherever the order cannot matter: every rank, every op, integers and min/max, 2 × 2 and 3 × 1', () => {
    for (const [ranks, nodes] of [
      [4, 2],
      [3, 3],
    ] as const) {
      const cases = collectiveCases([1, 301], ranks).filter(
        (c) => ['i32', 'i64', 'u8', 'u32'].includes(c.dtype) || c.reduce === 'min' || c.reduce === 'max' || c.reduce === undefined,
      );
      expect(cases.length).toBeGreaterThan(50);
      for (const c of cases)
        for (let r = 0; r < ranks; r++) {
          if (c.reduce === 'avg' || c.reduce === 'premul') continue; // their order is the point: checked below
          expect(expectedHierarchical(c, r, ranks, nodes), `${c.op} ${c.reduce ?? ''} ${c.dtype} ×${c.count} rank ${r}`).toEqual(expectedOutput(c, r, ranks));
        }
    }
  });

  it('avg: sums at both levels and divides once by the world (the socket engine); over NCCL averages at both levels', () => {
    const [c] = collectiveCases([4096], 4).filter((x) => x.op === 'allreduce' && x.reduce === 'avg' && x.dtype === 'i32');
    // Integers: one division of the whole sum, as one node's average.
    expect(expectedHierarchical(c!, 0, 4, 2)).toEqual(expectedOutput(c!, 0, 4));
    const [f] = collectiveCases([4096], 2).filter((x) => x.op === 'allreduce' && x.reduce === 'avg' && x.dtype === 'f32');
    // Two nodes of one rank, f32 halves: the average of two is exact both ways.
    expect(expectedHierarchical(f!, 1, 2, 2, 'nccl')).toEqual(expectedOutput(f!, 1, 2));
  });

  it('over NCCL, leaves out the bitwise reductions and the integer average, and nothing over the socket engine', () => {
    const cases = collectiveCases([1], 4);
    const left = cases.filter((c) => !engineReduces('nccl', c)).map((c) => `${c.reduce} ${c.dtype}`);
    expect(left.every((x) => /^(band|bor|bxor) |^avg (i|u)/.test(x))).toBe(true);
    expect(left).toContain('avg i32');
    expect(left).toContain('bxor u64');
    expect(cases.every((c) => engineReduces('sockets', c))).toBe(true);
  });
});
