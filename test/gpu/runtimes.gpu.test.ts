/**
 * Node.js, Bun and Deno ranks in one job on the native driver: the addon's
 * CUDA calls, CUDA IPC between processes of different runtimes, every byte
 * verified. Skipped (with the reason) where no GPU is usable, or where bun or
 * deno is not installed or does not run.
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findRuntime } from '../../src/cli/runtimes.js';
import { smcuda } from '../helpers/cli.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();

/** Why bun or deno cannot start a rank here, or undefined when both run. */
function runtimesMissing(): string | undefined {
  const missing: string[] = [];
  for (const name of ['bun', 'deno'] as const) {
    try {
      const { command } = findRuntime(name);
      execFileSync(command, ['--version'], { stdio: 'ignore', timeout: 30_000 });
    } catch (err) {
      missing.push(`${name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  return missing.length > 0 ? `needs bun and deno (npm install bun deno): ${missing.join('; ')}` : undefined;
}

// probe.skip is false where a GPU is usable (not undefined): only then ask for the runtimes.
const skip = probe.skip !== false ? probe.skip : runtimesMissing();

describe(`smcuda demo --driver native --runtime node,bun,deno${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it.skipIf(Boolean(skip))(
    'all endpoints OK by CUDA IPC, every byte verified',
    async () => {
      const r = await smcuda(['demo', '--driver', 'native', '--runtime', 'node,bun,deno', '--ranks', '3', '--sizes', '8,64K,16M', '--iters', '2', '--json']);
      expect(r.code, r.stderr).toBe(0);
      const report = JSON.parse(r.stdout);
      expect(report.driver.kind).toBe('native');
      expect(report.devices.map((d: { runtime: string }) => d.runtime.split(' ')[0])).toEqual(['node', 'bun', 'deno']);
      expect(report.verified).toBe(true);
      for (const e of report.endpoints) expect(e.negotiation.state).toBe('OK');
      expect(report.endpoints.every((e: { received: { rget: { messages: number } } }) => e.received.rget.messages > 0)).toBe(true);
    },
    180_000,
  );
});
