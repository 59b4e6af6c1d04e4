/**
 * Collectives on the native driver: the shipped PTX kernels JIT-compiled by
 * the driver, verified element by element against the host reference
 * (smcuda demo --collectives), on one GPU (two ranks sharing it) and, where
 * two are visible, across two; a collective captured in a CUDA graph and
 * replayed; and the gradient-average example. Skipped, visibly, where no GPU
 * is usable or the driver cannot load modules.
 *
 * Bounded: every collective × dtype at the small sizes (0, 1, 1001 B,
 * 1 MiB), 64 MiB on a few op × dtype pairs only (the demo sweeps every pair
 * at 64 MiB: `smcuda demo --collectives`), each test with its own limit.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { probeNativeGpuDriven } from './native-probe.js';
import { DTYPES, REDUCE_OPS } from '../../src/kernels/dtypes.js';

const p = await probeNativeGpuDriven((g) => (g.modules ? undefined : `the native driver cannot load modules yet: ${g.reason ?? 'not supported'}`));
const skip = p.skip;
const run = promisify(execFile);
const MAIN = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;
const EXAMPLE = new URL('../../docs/examples/gradient-average.mjs', import.meta.url).pathname;
const GRAPH_RANK = new URL('./collective-graph-rank.mjs', import.meta.url).pathname;
const SMALL = '0,1,1001,1M';
const BIG = { sizes: '64M', ops: 'allreduce-sum,allreduce-avg,allgather,reduce-scatter', dtypes: 'f32,bf16' };

interface Report {
  verified: boolean;
  mismatches: string[];
  devices: { uuid: string }[];
  collectives: { op: string; dtype: string; size: number; algorithm: string; verified: boolean }[];
}

async function demo(ranks: number, visible: string, args: string[], timeoutMs: number): Promise<Report> {
  const { stdout } = await run(
    process.execPath,
    [MAIN, 'demo', '--collectives', '--driver', 'native', '--ranks', String(ranks), '--json', '--timeout', String(Math.floor(timeoutMs / 1000)), ...args],
    {
      timeout: timeoutMs + 10_000,
      maxBuffer: 64 << 20,
      env: { ...process.env, CUDA_VISIBLE_DEVICES: visible },
    },
  );
  return JSON.parse(stdout) as Report;
}

function verified(r: Report): void {
  expect(r.mismatches).toEqual([]);
  expect(r.collectives.length).toBeGreaterThan(0);
  expect(r.collectives.filter((c) => !c.verified)).toEqual([]);
  expect(r.verified).toBe(true);
}

/** Spawns `ranks` processes of collective-graph-rank.mjs; resolves with each one's JSON line. */
async function graphRanks(
  ranks: number,
  visible: string,
  env: Record<string, string>,
  timeoutMs: number,
): Promise<Array<{ rank: number; algorithm: string; verified: boolean; steps: string }>> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-graph-'));
  try {
    const outs = await Promise.all(
      [...Array(ranks).keys()].map((rank) =>
        run(process.execPath, [GRAPH_RANK], {
          timeout: timeoutMs,
          env: {
            ...process.env,
            ...env,
            CUDA_VISIBLE_DEVICES: visible,
            RANK: String(rank),
            WORLD_SIZE: String(ranks),
            LOCAL_RANK: String(rank),
            SMCUDA_RENDEZVOUS: dir,
          },
        }),
      ),
    );
    return outs.map((o) => JSON.parse(o.stdout.trim().split('\n').at(-1)!) as { rank: number; algorithm: string; verified: boolean; steps: string });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.skipIf(skip !== false)(`collectives on the native driver${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it('two ranks on one GPU: every collective × dtype at 0, 1, 1001 B and 1 MiB, and 64 MiB on a few pairs, verified', async () => {
    const small = await demo(2, '0', ['--sizes', SMALL], 60_000);
    verified(small);
    expect(new Set(small.devices.map((d) => d.uuid)).size).toBe(1);
    const big = await demo(2, '0', ['--sizes', BIG.sizes, '--ops', BIG.ops, '--dtypes', BIG.dtypes], 40_000);
    verified(big);
    expect(big.collectives.every((c) => c.size >= 32 << 20)).toBe(true);
  }, 110_000);

  it.skipIf(p.devices < 2)(
    'two ranks on two GPUs (small sizes and 64 MiB on a few pairs), and four ranks on two GPUs (small sizes), verified',
    async () => {
      const two = await demo(2, '0,1', ['--sizes', SMALL], 60_000);
      verified(two);
      expect(new Set(two.devices.map((d) => d.uuid)).size).toBe(2);
      verified(await demo(2, '0,1', ['--sizes', BIG.sizes, '--ops', BIG.ops, '--dtypes', BIG.dtypes], 40_000));
      const four = await demo(
        4,
        '0,1',
        ['--sizes', '1001,1M', '--ops', 'allreduce-sum,allreduce-max,broadcast,allgather,reduce-scatter,alltoall', '--dtypes', 'f32,f16,i64'],
        60_000,
      );
      verified(four);
      expect(new Set(four.devices.map((d) => d.uuid)).size).toBe(2);
    },
    170_000,
  );

  it('allreduce by the two-shot at every op × dtype, at sizes that split unevenly among parts and blocks (1001 B, 1 MiB + 4 KiB, 17 MiB + 12 B), verified', async () => {
    const r = await demo(
      2,
      p.devices >= 2 ? '0,1' : '0',
      ['--algorithm', 'two-shot', '--sizes', '1001,1052672,17825804', '--ops', REDUCE_OPS.map((o) => `allreduce-${o}`).join(',')],
      150_000,
    );
    verified(r);
    expect(new Set(r.collectives.map((c) => c.algorithm))).toEqual(new Set(['two-shot']));
    expect(new Set(r.collectives.map((c) => c.dtype)).size).toBe(DTYPES.length);
    // premul (factor 0.3) on every float dtype, the bitwise ops on every integer one
    expect(new Set(r.collectives.map((c) => c.op)).size).toBe(REDUCE_OPS.length);
  }, 160_000);

  it('allreduce by the LL one-shot at every op × dtype, one piece (8 B, 1001 B, 64 KiB) and in pieces (1 MiB + 12 B), verified', async () => {
    const r = await demo(
      2,
      p.devices >= 2 ? '0,1' : '0',
      ['--algorithm', 'one-shot-ll', '--sizes', '8,1001,65536,1048588', '--ops', REDUCE_OPS.map((o) => `allreduce-${o}`).join(',')],
      150_000,
    );
    verified(r);
    expect(new Set(r.collectives.map((c) => c.algorithm))).toEqual(new Set(['one-shot-ll']));
    expect(new Set(r.collectives.map((c) => c.dtype)).size).toBe(DTYPES.length);
  }, 160_000);

  it('allreduce captured in a CUDA graph, replayed with fresh inputs (eager calls between), every replay verified: one-shot, LL one-shot, two-shot and the copy-engine pipeline (6 chunks, forked and joined every 2 under capture)', async () => {
    const visible = p.devices >= 2 ? '0,1' : '0';
    for (const [algorithm, count] of [
      ['one-shot', 1000],
      ['one-shot-ll', 1000],
      ['two-shot', 3_000_000],
      ['ce-pipeline', 3_000_000],
    ] as const) {
      const rs = await graphRanks(2, visible, { ALGORITHM: algorithm, COUNT: String(count), REPLAYS: '6' }, 60_000);
      for (const r of rs) expect(r).toMatchObject({ algorithm, verified: true, steps: 'device' });
    }
  }, 190_000);

  it('the gradient-average example on the GPU', async () => {
    const { stdout } = await run(process.execPath, [EXAMPLE, '2'], { timeout: 60_000 });
    expect(stdout).toContain('gradient average: 2 ranks verified');
  }, 70_000);
});
