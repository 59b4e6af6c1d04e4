/**
 * Node.js, Bun and Deno ranks in one job on the native driver: the addon's
 * CUDA calls, CUDA IPC between processes of different runtimes, every byte
 * verified. Skipped (with the reason) where no GPU is usable.
 */
import { describe, expect, it } from 'vitest';
import { smcuda } from '../helpers/cli.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();

describe(`smcuda demo --driver native --runtime node,bun,deno${probe.skip ? ` (skipped: ${probe.skip})` : ''}`, () => {
  it.skipIf(Boolean(probe.skip))('all endpoints OK by CUDA IPC, every byte verified', async () => {
    const r = await smcuda(['demo', '--driver', 'native', '--runtime', 'node,bun,deno', '--ranks', '3', '--sizes', '8,64K,16M', '--iters', '2', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.driver.kind).toBe('native');
    expect(report.devices.map((d: { runtime: string }) => d.runtime.split(' ')[0])).toEqual(['node', 'bun', 'deno']);
    expect(report.verified).toBe(true);
    for (const e of report.endpoints) expect(e.negotiation.state).toBe('OK');
    expect(report.endpoints.every((e: { received: { rget: { messages: number } } }) => e.received.rget.messages > 0)).toBe(true);
  }, 180_000);
});
