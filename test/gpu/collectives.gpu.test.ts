/**
 * Collectives on the native driver: the shipped PTX kernels JIT-compiled by
 * the driver, every collective × dtype × size verified element by element
 * (smcuda demo --collectives), on one GPU (two ranks sharing it) and, where
 * two are visible, across two; and the gradient-average example. Skipped,
 * visibly, where no GPU is usable or the driver cannot load modules yet.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { probeNative } from './native-probe.js';

const p = await probeNative();
let skip = p.skip;
if (skip === false) {
  const d = p.make!();
  try {
    d.init();
    const g = d.gpuDrivenStatus();
    if (!g.modules) skip = `the native driver cannot load modules yet: ${g.reason ?? 'not supported'}`;
  } finally {
    d.close();
  }
}
const run = promisify(execFile);
const MAIN = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;
const EXAMPLE = new URL('../../docs/examples/gradient-average.mjs', import.meta.url).pathname;

interface Report {
  verified: boolean;
  mismatches: string[];
  devices: { uuid: string }[];
  collectives: { op: string; dtype: string; size: number; algorithm: string; verified: boolean }[];
}

async function demo(ranks: number, visible: string): Promise<Report> {
  const { stdout } = await run(process.execPath, [MAIN, 'demo', '--collectives', '--driver', 'native', '--ranks', String(ranks), '--json'], {
    timeout: 600_000,
    maxBuffer: 64 << 20,
    env: { ...process.env, CUDA_VISIBLE_DEVICES: visible },
  });
  return JSON.parse(stdout) as Report;
}

describe.skipIf(skip !== false)(`collectives on the native driver${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it('two ranks on one GPU: every collective × dtype × size (up to 64 MiB) verified, bit for bit against the host reference', async () => {
    const r = await demo(2, '0');
    expect(r.mismatches).toEqual([]);
    expect(r.verified).toBe(true);
    expect(new Set(r.devices.map((d) => d.uuid)).size).toBe(1);
    expect(r.collectives.some((c) => c.size >= 64 << 20)).toBe(true);
  }, 600_000);

  it.skipIf(p.devices < 2)('four ranks on two GPUs: every collective verified', async () => {
    const r = await demo(4, '0,1');
    expect(r.mismatches).toEqual([]);
    expect(r.verified).toBe(true);
    expect(new Set(r.devices.map((d) => d.uuid)).size).toBe(2);
  }, 600_000);

  it('the gradient-average example on the GPU', async () => {
    const { stdout } = await run(process.execPath, [EXAMPLE, '2'], { timeout: 120_000 });
    expect(stdout).toContain('gradient average: 2 ranks verified');
  }, 120_000);
});
