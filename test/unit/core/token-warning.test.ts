/**
 * Issue 23 finding 18: the default token is '' and any same-user process
 * authenticates with it. Decision: the CLI makes a fresh token for every job
 * it starts (demo, soak, bench), and the library warns once per process
 * (`SMCUDA_NO_TOKEN`) when a Transport is created without one. Each case runs
 * in a fresh process (the warning is once per process), on compiled code.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const transportJs = fileURLToPath(new URL('../../../dist/src/transport.js', import.meta.url));
const cli = fileURLToPath(new URL('../../../dist/src/cli/main.js', import.meta.url));

function warningsOf(createOptions: string): string[] {
  const script = `
    const { Transport } = await import(${JSON.stringify(transportJs)});
    const seen = [];
    process.on('warning', (w) => seen.push(w.code ?? w.name));
    for (let i = 0; i < 3; i++) await (await Transport.create({ driver: 'sim', ...${createOptions} })).close();
    await new Promise((r) => setImmediate(r));
    process.stdout.write(JSON.stringify(seen));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 });
  return JSON.parse(out) as string[];
}

describe('a transport without a job token', () => {
  it('warns once per process, with code SMCUDA_NO_TOKEN (three transports, one warning)', () => {
    expect(warningsOf('{}').filter((c) => c === 'SMCUDA_NO_TOKEN')).toHaveLength(1);
    expect(warningsOf("{ token: '' }").filter((c) => c === 'SMCUDA_NO_TOKEN')).toHaveLength(1);
  });

  it('with a token: no warning', () => {
    expect(warningsOf("{ token: 'a5f0c3e1d2b4968778695a4b3c2d1e0f' }")).toEqual([]);
  });

  it('smcuda demo gives its ranks a token of their own: none of its processes warns', () => {
    const r = spawnSync(process.execPath, [cli, 'demo', '--driver', 'sim', '--ranks', '2', '--sizes', '8', '--iters', '1', '--json'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status).toBe(0);
    expect(r.stderr).not.toMatch(/SMCUDA_NO_TOKEN|without a job token/);
  });
});
