/** pairedRuns: each smcuda run right after a run of its baseline, the figure their median (paired-runs.ts). */
import { describe, expect, it } from 'vitest';
import { pairedRuns } from '../../../src/bench/paired-runs.js';

describe('pairedRuns', () => {
  it('alternates baseline and measured runs, and summarises each side over its runs', async () => {
    const order: string[] = [];
    const base = [100, 120, 110, 90, 130];
    const ours = [80, 95, 60, 99, 85];
    let b = 0;
    let m = 0;
    const r = await pairedRuns(
      5,
      async () => {
        order.push(`b${b}`);
        return base[b++]!;
      },
      async () => {
        order.push(`m${m}`);
        return ours[m++]!;
      },
    );
    expect(order).toEqual(['b0', 'm0', 'b1', 'm1', 'b2', 'm2', 'b3', 'm3', 'b4', 'm4']);
    expect(r.values).toEqual(ours);
    expect(r.baselines).toEqual(base);
    expect(r.value).toMatchObject({ n: 5, median: 85, min: 60, max: 99 });
    expect(r.baseline).toMatchObject({ n: 5, median: 110, min: 90, max: 130 });
  });

  it('stops at the first failing run, with its error', async () => {
    let calls = 0;
    await expect(
      pairedRuns(
        3,
        async () => 1,
        async () => {
          if (++calls === 2) throw new Error('worker lost');
          return 1;
        },
      ),
    ).rejects.toThrow('worker lost');
    expect(calls).toBe(2);
  });
});
