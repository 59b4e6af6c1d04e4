/**
 * Groups across real processes on the simulated driver: a rank SIGKILLed
 * while the world, its tensor group and its data group all have calls in
 * flight aborts every communicator on every live rank (its own groups with
 * it as the lost rank, the others through their parent), within bounded
 * time, with no wrong result; and docs/examples/tensor-data-parallel.mjs run
 * as the docs say, `smcuda run -n 4`, verifies every element.
 * Compiled code only (dist/): `npm test` builds first.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { smcuda } from '../../helpers/cli.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/split-rank.mjs', import.meta.url));
const EXAMPLE = fileURLToPath(new URL('../../../docs/examples/tensor-data-parallel.mjs', import.meta.url));

interface Report {
  rank: number;
  errors: Record<'world' | 'tensor' | 'data', { code: string; causeCode: string; failedRank: number }>;
  ms: Record<'world' | 'tensor' | 'data', number>;
  calls: Record<'world' | 'tensor' | 'data', number>;
  wrong: boolean;
  closeMs: number;
}

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

function runRanks(size: number): Promise<Array<{ code: number | null; signal: NodeJS.Signals | null; out: Report | undefined; stderr: string }>> {
  const d = mkdtempSync(join(tmpdir(), 'smcuda-split-'));
  dir = d;
  return Promise.all(
    [...Array(size).keys()].map(
      (rank) =>
        new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: Report | undefined; stderr: string }>((resolve) => {
          const { SMCUDA_TOKEN: _t, ...env } = process.env;
          const child = spawn(process.execPath, [FIXTURE], {
            env: { ...env, RANK: String(rank), WORLD_SIZE: String(size), SMCUDA_RENDEZVOUS: d, SMCUDA_SIM: '' },
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          let stdout = '';
          let stderr = '';
          child.stdout.on('data', (b) => (stdout += b));
          child.stderr.on('data', (b) => (stderr += b));
          child.on('exit', (code, signal) => {
            const line = stdout.trim().split('\n').pop();
            resolve({ code, signal, out: line ? (JSON.parse(line) as Report) : undefined, stderr });
          });
        }),
    ),
  );
}

describe('groups across processes', () => {
  it('a rank killed while the world and both its groups have calls in flight: every communicator of every live rank aborts, in bounded time, no wrong result', async () => {
    const exits = await runRanks(4);
    expect(exits[3]!.signal).toBe('SIGKILL');
    for (const e of exits.slice(0, 3)) {
      expect(e.code, e.stderr).toBe(0);
      const r = e.out!;
      expect(r.wrong).toBe(false);
      for (const name of ['world', 'tensor', 'data'] as const) {
        expect(r.errors[name], `rank ${r.rank}, ${name}`).toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_PEER_LOST' });
        // Killed 300 ms in: each loop ends within seconds of it, not at the 30 s timeout.
        expect(r.ms[name], `rank ${r.rank}, ${name}`).toBeLessThan(300 + 5000);
        expect(r.calls[name], `rank ${r.rank}, ${name}: calls completed before the kill`).toBeGreaterThan(0);
      }
      expect(r.errors.world.failedRank).toBe(3);
      // Rank 3 is rank 1 of tensor group {2,3} and of data group {1,3}.
      if (r.rank === 2) expect(r.errors.tensor.failedRank).toBe(1);
      if (r.rank === 1) expect(r.errors.data.failedRank).toBe(1);
      expect(r.closeMs).toBeLessThan(5000);
    }
    expect(readdirSync(dir!).filter((f) => !f.startsWith('r3.'))).toEqual([]);
  }, 60_000);

  it('docs/examples/tensor-data-parallel.mjs under `smcuda run -n 4` verifies every element of both groups on every rank', async () => {
    const r = await smcuda(['run', '-n', '4', EXAMPLE, '10007', '2'], { SMCUDA_SIM: '' });
    expect(r.code, r.stderr).toBe(0);
    const groupsOf = (k: number) => `tensor group \\[${k & ~1},${k | 1}\\] sum by \\S+, data group \\[${k & 1},${(k & 1) + 2}\\] avg by \\S+`;
    expect(r.stdout).toMatch(/^\[0\] tensor × data parallel: 4 ranks on the (simulated|CUDA) driver$/m);
    for (let k = 0; k < 4; k++)
      expect(r.stdout).toMatch(new RegExp(`^\\[${k}\\] rank ${k}/4: ${groupsOf(k)}: 2 steps of 10007 f32, every element checked$`, 'm'));
  }, 120_000);
});
