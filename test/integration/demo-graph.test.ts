/**
 * `smcuda demo --graph` as a user runs it, on the simulated driver: every
 * pair of ranks makes a persistent transfer each way, each rank captures its
 * transfers in one CUDA graph and replays it; the bytes of the sampled
 * replays are checked and the JSON says what the graph did.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const CLI = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;

interface GraphJson {
  driver: { kind: string };
  graph: { captured: boolean; replays: number; sampled: number; size: number; transfers: number; hostUsPerReplay: number; seconds: number };
  phases: unknown[];
  verified: boolean;
  mismatches: string[];
}

async function demo(args: string[]): Promise<GraphJson> {
  const { stdout } = await run(process.execPath, [CLI, 'demo', '--driver', 'sim', '--json', '--graph', ...args], { maxBuffer: 16 << 20, timeout: 120_000 });
  return JSON.parse(stdout) as GraphJson;
}

describe('smcuda demo --graph', () => {
  it('3 ranks: 6 persistent transfers captured, replayed, the sampled replays verified', async () => {
    const r = await demo(['--ranks', '3', '--replays', '40', '--sizes', '256K']);
    expect(r.driver.kind).toBe('sim');
    expect(r.verified).toBe(true);
    expect(r.mismatches).toEqual([]);
    expect(r.phases).toEqual([]);
    expect(r.graph).toMatchObject({ captured: true, replays: 43, sampled: 3, size: 256 * 1024, transfers: 6 });
    expect(r.graph.hostUsPerReplay).toBeGreaterThan(0);
  });

  it('--flags kernel: the flag operations run in the flag kernel, the sampled replays verified', async () => {
    const r = await demo(['--ranks', '2', '--replays', '20', '--sizes', '64K', '--flags', 'kernel']);
    expect(r.verified).toBe(true);
    expect(r.mismatches).toEqual([]);
    expect(r.graph).toMatchObject({ captured: true, replays: 23, transfers: 2 });
  });

  it('refuses a bad --replays with exit code 2', async () => {
    const err = await run(process.execPath, [CLI, 'demo', '--driver', 'sim', '--graph', '--replays', '0']).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(2);
    expect((err as { stderr: string }).stderr).toContain('--replays must be a positive integer');
  });
});
