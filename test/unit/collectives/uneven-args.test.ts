/**
 * The checks of counts and displacements per rank (uneven-args.ts): what
 * they take, what they refuse and with which typed error, the packed
 * default, the extent a call reaches and the blocks that may not overlap.
 */
import { describe, expect, it } from 'vitest';
import { checkDisjoint, displsArg, extentOf, perRankArg } from '../../../src/collectives/uneven-args.js';

describe('counts and displacements per rank', () => {
  it('takes arrays and typed arrays of non-negative integers, one per rank', () => {
    expect(perRankArg('counts', [0, 3, 5], 3)).toEqual([0, 3, 5]);
    expect(perRankArg('counts', new Int32Array([1, 2]), 2)).toEqual([1, 2]);
    expect(perRankArg('counts', new Uint32Array([7]), 1)).toEqual([7]);
    expect(perRankArg('counts', [2 ** 40], 1)).toEqual([2 ** 40]);
  });

  it.each([
    ['a number', 3, 'SMCUDA_INVALID_ARG_TYPE'],
    ['null', null, 'SMCUDA_INVALID_ARG_TYPE'],
    ['a string', '1,2', 'SMCUDA_INVALID_ARG_TYPE'],
    ['a BigInt64Array', new BigInt64Array(2), 'SMCUDA_INVALID_ARG_TYPE'],
    ['too short', [1], 'SMCUDA_OUT_OF_RANGE'],
    ['too long', [1, 2, 3], 'SMCUDA_OUT_OF_RANGE'],
    ['a negative count', [1, -1], 'SMCUDA_OUT_OF_RANGE'],
    ['a fraction', [1, 0.5], 'SMCUDA_OUT_OF_RANGE'],
    ['NaN', [1, Number.NaN], 'SMCUDA_OUT_OF_RANGE'],
    ['past 2^53', [1, 2 ** 53], 'SMCUDA_OUT_OF_RANGE'],
    ['a bigint entry', [1, 2n], 'SMCUDA_OUT_OF_RANGE'],
  ])('refuses %s with %s, naming the argument', (_, v, code) => {
    expect(() => perRankArg('sendCounts', v, 2)).toThrow(expect.objectContaining({ code, message: expect.stringContaining('sendCounts') }));
  });

  it('displacements default to packed (the sums of the counts before each); given ones are checked', () => {
    expect(displsArg('displs', undefined, [3, 0, 4, 1])).toEqual([0, 3, 3, 7]);
    expect(displsArg('displs', [9, 0], [1, 2])).toEqual([9, 0]);
    expect(() => displsArg('recvDispls', [0, -2], [1, 2])).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
  });

  it('the extent reaches the end of the last block with a count (a zero-count block anywhere reaches nothing)', () => {
    expect(extentOf('displs', [3, 0, 4], [10, 1000, 0], 4)).toBe(13);
    expect(extentOf('displs', [0, 0], [5, 9], 8)).toBe(0);
    expect(() => extentOf('displs', [1], [2 ** 52], 8)).toThrow(expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }));
  });

  it('blocks a call writes must not overlap; zero-count blocks and touching blocks may', () => {
    expect(() => checkDisjoint('displs', [3, 0, 4], [0, 1, 3])).not.toThrow();
    expect(() => checkDisjoint('displs', [3, 4], [4, 0])).not.toThrow();
    expect(() => checkDisjoint('recvDispls', [3, 4], [0, 2])).toThrow(
      expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE', message: expect.stringMatching(/rank 0's block .* rank 1's .* overlap/) }),
    );
  });
});
