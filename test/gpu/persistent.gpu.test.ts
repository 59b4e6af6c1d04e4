/**
 * Persistent transfers on the native driver (issue 25): `smcuda demo --graph`
 * captures a persistent transfer each way between the ranks in one CUDA
 * graph, replays it and checks the bytes of the sampled replays — two ranks
 * on one GPU and, where two are visible, on two — and the graph-capture
 * example runs between two processes. Skipped, visibly, where no GPU is
 * usable or the driver lacks 64-bit stream memory operations or graphs.
 * test/gpu/acceptance/run-sanitizer-graph.sh runs the same demo under
 * compute-sanitizer.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { probeNativeGpuDriven } from './native-probe.js';

const p = await probeNativeGpuDriven((g) =>
  g.streamMemOps && g.memOps64 && g.graphs
    ? undefined
    : `the native driver has no 64-bit stream memory operations or graphs here: ${g.reason ?? 'not supported'}`,
);
const skip = p.skip;
const run = promisify(execFile);
const MAIN = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;
const EXAMPLE = new URL('../../docs/examples/graph-capture.mjs', import.meta.url).pathname;

interface GraphReport {
  verified: boolean;
  mismatches: string[];
  devices: { uuid: string }[];
  graph: { captured: boolean; replays: number; sampled: number; size: number; transfers: number; hostUsPerReplay: number };
}

async function demo(visible: string, replays: number, flags = 'memops'): Promise<GraphReport> {
  const { stdout } = await run(
    process.execPath,
    [MAIN, 'demo', '--graph', '--driver', 'native', '--ranks', '2', '--replays', String(replays), '--sizes', '1M', '--flags', flags, '--json'],
    {
      timeout: 120_000,
      maxBuffer: 16 << 20,
      env: { ...process.env, CUDA_VISIBLE_DEVICES: visible },
    },
  );
  return JSON.parse(stdout) as GraphReport;
}

describe.skipIf(skip !== false)(`persistent transfers on the native driver${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it('two ranks on one GPU: a transfer each way captured in one graph, replayed, the sampled replays verified', async () => {
    const r = await demo('0', 500);
    expect(r.mismatches).toEqual([]);
    expect(r.verified).toBe(true);
    expect(r.graph).toMatchObject({ captured: true, replays: 503, sampled: 3, size: 1 << 20, transfers: 2 });
    expect(r.graph.hostUsPerReplay).toBeGreaterThan(0);
  }, 120_000);

  it.skipIf(p.devices < 2)(
    'two ranks on two GPUs: the same, across',
    async () => {
      const r = await demo('0,1', 1000);
      expect(r.mismatches).toEqual([]);
      expect(r.verified).toBe(true);
      expect(new Set(r.devices.map((d) => d.uuid)).size).toBe(2);
      expect(r.graph.replays).toBe(1003);
    },
    120_000,
  );

  it.skipIf(p.devices < 2)(
    "flags: 'kernel' on two GPUs: the flag kernel JIT-compiled and replayed, the sampled replays verified",
    async () => {
      const r = await demo('0,1', 1000, 'kernel');
      expect(r.mismatches).toEqual([]);
      expect(r.verified).toBe(true);
      expect(r.graph.replays).toBe(1003);
    },
    120_000,
  );

  it('the graph-capture example between two processes', async () => {
    const { stdout } = await run(process.execPath, [EXAMPLE, '200'], { timeout: 120_000 });
    expect(stdout).toMatch(/rank0: 200 replays launched, [\d.]+ µs of host time per replay/);
    expect(stdout).not.toContain('rank0: simulated driver');
    for (const round of [1, 2, 3]) expect(stdout).toContain(`rank0: replay with fresh data ${round}: 65536 bytes, every byte checked`);
  }, 120_000);
});
