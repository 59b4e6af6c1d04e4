/**
 * One job, three runtimes: `smcuda demo --runtime node,bun,deno` on the
 * simulated driver, rank i under the i-th runtime; every endpoint reaches OK
 * and every byte is verified. Bun and Deno are dev dependencies (npm ships
 * their executables), found in node_modules/.bin.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { findRuntime, RuntimeNotFoundError } from '../../src/cli/runtimes.js';
import { smcuda } from '../helpers/cli.js';

const WARM_UP = fileURLToPath(new URL('../fixtures/data-path-warm-up.mjs', import.meta.url));

describe('smcuda demo --runtime', () => {
  it('runs ranks under node, bun and deno in one job, all endpoints OK, every byte verified', async () => {
    const r = await smcuda(['demo', '--driver', 'sim', '--runtime', 'node,bun,deno', '--ranks', '3', '--sizes', '0,8,64K,1M', '--iters', '2', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.devices.map((d: { runtime: string }) => d.runtime.split(' ')[0])).toEqual(['node', 'bun', 'deno']);
    expect(report.verified).toBe(true);
    expect(report.mismatches).toEqual([]);
    expect(report.endpoints).toHaveLength(6);
    for (const e of report.endpoints) expect(e.negotiation.state).toBe('OK');
    // device messages crossed between runtimes by RGET once the endpoints were OK
    expect(report.endpoints.some((e: { received: { rget: { messages: number } } }) => e.received.rget.messages > 0)).toBe(true);
  }, 120_000);

  it('round robin: four ranks over two runtimes', async () => {
    const r = await smcuda(['demo', '--driver', 'sim', '--runtime', 'bun,node', '--ranks', '4', '--sizes', '8,64K', '--iters', '1', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.devices.map((d: { runtime: string }) => d.runtime.split(' ')[0])).toEqual(['bun', 'node', 'bun', 'node']);
    expect(report.verified).toBe(true);
  }, 120_000);

  // Transport.create runs it under every runtime where the driver is native (no GPU here: the fixture calls it).
  it.each(['bun', 'deno'] as const)(
    'the data-path warm-up runs under %s: one message by EAGER, one by RGET',
    async (name) => {
      const rt = findRuntime(name);
      const { stdout } = await promisify(execFile)(rt.command, [...rt.args, WARM_UP], { timeout: 60_000 });
      expect(JSON.parse(stdout)).toEqual({ eager: 1, rget: 1 });
    },
    90_000,
  );

  it('says which runtime is missing and how to install it', async () => {
    expect(() => findRuntime('deno', { PATH: '/nonexistent' }, ['/'])).toThrow(RuntimeNotFoundError);
    expect(() => findRuntime('deno', { PATH: '/nonexistent' }, ['/'])).toThrow(/npm install deno/);
    expect(findRuntime('deno', { PATH: '/nonexistent' }).command).toMatch(/node_modules\/\.bin\/deno$/); // the dev dependency
    const r = await smcuda(['demo', '--runtime', 'node,rhino']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--runtime takes node, bun, deno');
  });
});
