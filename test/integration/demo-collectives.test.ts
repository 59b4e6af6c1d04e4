/** `smcuda demo --collectives` as a user runs it, on the simulated driver: every op × dtype × size verified, JSON as documented. */
import { DTYPES, dtypeOpSupported, REDUCE_OPS } from '../../src/kernels/dtypes.js';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { DEMO_COLLECTIVE_OPS } from '../helpers/cli.js';

const run = promisify(execFile);
const MAIN = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;

describe('smcuda demo --collectives', () => {
  it('runs every collective × dtype × size among 3 ranks, allreduce with every reduction the dtype takes, and verifies every element', async () => {
    const { stdout } = await run(process.execPath, [MAIN, 'demo', '--collectives', '--driver', 'sim', '--ranks', '3', '--sizes', '0,1,1001,300K', '--json'], {
      timeout: 120_000,
      env: { ...process.env, SMCUDA_SIM: '' },
    });
    const r = JSON.parse(stdout) as {
      verified: boolean;
      ranks: number;
      driver: { kind: string };
      collectives: { op: string; dtype: string; size: number; algorithm: string; verified: boolean }[];
    };
    expect(r.verified).toBe(true);
    expect(r.driver.kind).toBe('sim');
    // Floats: 6 reductions (no bitwise), integers: 8 (no premul), then 5 other collectives, gather, scatter,
    // allgatherv, alltoallv and reduce-scatterv with sum (and premul, floats only); 4 sizes.
    const reductions = (d: string) => REDUCE_OPS.filter((o) => dtypeOpSupported(d as (typeof DTYPES)[number], o)).length;
    expect(DTYPES.map(reductions)).toEqual([6, 6, 6, 6, 8, 8, 8, 8, 8, 8, 6, 6]);
    const premul = (d: string) => (dtypeOpSupported(d as (typeof DTYPES)[number], 'premul') ? 1 : 0);
    expect(r.collectives).toHaveLength(DTYPES.reduce((t, d) => t + (reductions(d) + 5 + 5 + premul(d)) * 4, 0));
    expect(new Set(r.collectives.map((c) => c.op))).toEqual(new Set(DEMO_COLLECTIVE_OPS));
    // The calls with counts per rank ran at every size, by one-shot (device steps) on the simulated driver.
    for (const op of ['gather', 'scatter', 'allgatherv', 'alltoallv'])
      expect(r.collectives.filter((c) => c.op === op).every((c) => c.algorithm === 'one-shot' && c.verified)).toBe(true);
    expect(r.collectives.filter((c) => c.op === 'reduce-scatterv')).toHaveLength(DTYPES.reduce((t, d) => t + (1 + premul(d)) * 4, 0));
    expect(new Set(r.collectives.map((c) => c.dtype))).toEqual(
      new Set(['f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8', 'i8', 'u32', 'u64', 'f8e4m3', 'f8e5m2']),
    );
    // Every dtype × reduction pair ran (at 4 sizes), the refused ones did not.
    for (const d of DTYPES)
      for (const o of REDUCE_OPS)
        expect(r.collectives.filter((c) => c.dtype === d && c.op === `allreduce-${o}`).length, `${o} ${d}`).toBe(dtypeOpSupported(d, o) ? 4 : 0);
    expect(r.collectives.every((c) => c.verified)).toBe(true);
    // With 3 ranks allreduces up to 4 MiB are one-shot (one kernel a piece): 300 KiB included
    const big = r.collectives.filter((c) => c.op.startsWith('allreduce') && c.size > 256 * 1024);
    expect(big.length).toBe(DTYPES.reduce((t, d) => t + reductions(d), 0));
    expect(big.every((c) => c.algorithm === 'one-shot')).toBe(true);
    expect(r.collectives.find((c) => c.size === 0)).toMatchObject({ verified: true });
  }, 120_000);

  it("--algorithm forces allreduce's algorithm at every size (the other collectives keep theirs), --dtypes shows in the table; an unknown algorithm is a usage error", async () => {
    const { stdout } = await run(
      process.execPath,
      [
        MAIN,
        'demo',
        '--collectives',
        '--driver',
        'sim',
        '--algorithm',
        'two-shot',
        '--sizes',
        '1001,64K',
        '--ops',
        'allreduce-sum,allreduce-avg,broadcast',
        '--dtypes',
        'f32,i64,u8',
        '--json',
      ],
      { timeout: 60_000, env: { ...process.env, SMCUDA_SIM: '' } },
    );
    const r = JSON.parse(stdout) as { verified: boolean; collectives: { op: string; algorithm: string; verified: boolean }[] };
    expect(r.verified).toBe(true);
    expect(r.collectives).toHaveLength(3 * 3 * 2);
    for (const c of r.collectives) expect(c.algorithm, c.op).toBe(c.op === 'broadcast' ? 'one-shot' : 'two-shot');
    // The table names the dtypes that ran, not every dtype.
    const text = await run(
      process.execPath,
      [MAIN, 'demo', '--collectives', '--driver', 'sim', '--sizes', '1001', '--ops', 'allreduce-sum', '--dtypes', 'f32,u8'],
      { timeout: 60_000, env: { ...process.env, SMCUDA_SIM: '' } },
    );
    expect(text.stdout).toContain('2 ranks; dtypes f32 u8; sizes up to 1001 B per rank');
    const bad = await run(process.execPath, [MAIN, 'demo', '--collectives', '--driver', 'sim', '--algorithm', 'ring'], { timeout: 30_000 }).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect(bad).toMatchObject({ code: 2 });
    expect((bad as { stderr: string }).stderr).toContain("--algorithm takes one-shot, one-shot-ll, two-shot, ce-pipeline, staged, got 'ring'");
  }, 90_000);
});
