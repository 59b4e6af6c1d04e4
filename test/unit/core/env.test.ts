/**
 * Environment overrides (src/env.ts): each one takes effect, a malformed
 * value is a ConfigError naming it, options given in code win, and the list
 * is complete — no other environment read in the library, the native
 * layer's getenv calls are listed, and docs/debugging.md and `smcuda --help`
 * show exactly this list.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { findChromium } from '../../../src/diagram/chromium.js';
import { CHILD_CONFIG_VARIABLES, ENV_OVERRIDES, envAddonPath, envTracePath, envTransportDefaults } from '../../../src/env.js';
import { ConfigError } from '../../../src/errors.js';
import { resolveOptions } from '../../../src/options.js';

const ROOT = new URL('../../..', import.meta.url).pathname;

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('overrides of TransportOptions', () => {
  const cases = [
    { name: 'SMCUDA_DEVICE_EAGER_LIMIT', value: '4096', option: 'deviceEagerLimit', want: 4096, given: 1 },
    { name: 'SMCUDA_NEGOTIATION_EAGER_LIMIT', value: '0', option: 'negotiationEagerLimit', want: 0, given: 65536 },
    { name: 'SMCUDA_COMPLETION_SPIN_US', value: '0', option: 'completionSpinUs', want: 0, given: 7 },
    { name: 'SMCUDA_CONTROL_SPIN_US', value: '1000', option: 'controlSpinUs', want: 1000, given: 3 },
    { name: 'SMCUDA_CONTROL_RING', value: '0', option: 'controlRing', want: false, given: true },
  ] as const;

  for (const c of cases) {
    it(`${c.name} sets ${c.option}; the option in code wins; empty is unset`, () => {
      const fallback = resolveOptions()[c.option];
      vi.stubEnv(c.name, c.value);
      expect(resolveOptions()[c.option]).toBe(c.want);
      expect(resolveOptions({ [c.option]: c.given })[c.option]).toBe(c.given);
      vi.stubEnv(c.name, '');
      expect(resolveOptions()[c.option]).toBe(fallback);
    });

    it(`${c.name}: a malformed value is a ConfigError naming it`, () => {
      for (const bad of ['-1', 'abc', '1e3', '2.5']) {
        vi.stubEnv(c.name, bad);
        expect(() => resolveOptions()).toThrow(ConfigError);
        expect(() => resolveOptions()).toThrow(c.name);
      }
    });
  }

  it('SMCUDA_CONTROL_RING takes 1 as on, and nothing but 0 or 1', () => {
    vi.stubEnv('SMCUDA_CONTROL_RING', '1');
    expect(resolveOptions().controlRing).toBe(true);
    vi.stubEnv('SMCUDA_CONTROL_RING', '2');
    expect(() => resolveOptions()).toThrow(/SMCUDA_CONTROL_RING must be 0 or 1/);
  });

  it('SMCUDA_POLL_SPIN_US (read by the native completion thread) is checked when a Transport resolves its options', () => {
    vi.stubEnv('SMCUDA_POLL_SPIN_US', '500');
    expect(() => resolveOptions()).not.toThrow();
    vi.stubEnv('SMCUDA_POLL_SPIN_US', '20ms');
    expect(() => resolveOptions()).toThrow(/SMCUDA_POLL_SPIN_US must be a non-negative integer/);
  });

  it('envTransportDefaults reads the environment it is given', () => {
    expect(envTransportDefaults({ SMCUDA_CONTROL_SPIN_US: '5', SMCUDA_CONTROL_RING: '0' })).toEqual({ controlSpinUs: 5, controlRing: false });
    expect(envTransportDefaults({})).toEqual({});
  });
});

describe('other overrides', () => {
  it('SMCUDA_TRACE and SMCUDA_ADDON: set, empty, unset', () => {
    expect(envTracePath({ SMCUDA_TRACE: '/tmp/run.jsonl' })).toBe('/tmp/run.jsonl');
    expect(envTracePath({ SMCUDA_TRACE: '' })).toBeUndefined();
    expect(envTracePath({})).toBeUndefined();
    expect(envAddonPath({ SMCUDA_ADDON: '/opt/smcuda.node' })).toBe('/opt/smcuda.node');
    expect(envAddonPath({})).toBeUndefined();
  });

  it('SMCUDA_CHROMIUM: an existing file is used, a missing one is not', () => {
    expect(findChromium({ SMCUDA_CHROMIUM: process.execPath })).toBe(process.execPath);
    expect(findChromium({ SMCUDA_CHROMIUM: '/nonexistent/chromium' })).toBeUndefined();
  });

  it('SMCUDA_SIM_VISIBLE and SMCUDA_SIM shape the simulated world (from process.env by default)', () => {
    vi.stubEnv('SMCUDA_SIM_VISIBLE', '1');
    const d = new SimulatedCudaDriver();
    try {
      d.init();
      expect(d.deviceCount()).toBe(1);
    } finally {
      d.close();
    }
    vi.stubEnv('SMCUDA_SIM_VISIBLE', '');
    vi.stubEnv('SMCUDA_SIM', '{"peerAccess":');
    expect(() => new SimulatedCudaDriver()).toThrow(ConfigError);
  });
});

describe('the list is complete and shown', () => {
  function files(dir: string, ext: string): string[] {
    const out: string[] = [];
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) out.push(...files(p, ext));
      else if (p.endsWith(ext)) out.push(p);
    }
    return out;
  }

  it('library code reads the environment only through src/env.ts (the CLI and its child-process plumbing aside)', () => {
    const readers: string[] = [];
    for (const f of [...files(join(ROOT, 'src'), '.ts'), ...files(join(ROOT, 'machines'), '.ts'), ...files(join(ROOT, 'cache'), '.ts')]) {
      const rel = f.slice(ROOT.length);
      // worker-group.ts and nccl-torch.ts hand the environment on to the processes they start; nccl-anchor-rank.ts
      // sets NCCL's own NCCL_NVLS_ENABLE for the NCCL it loads in its process (multicast off, as every anchor runs)
      if (
        rel === 'src/env.ts' ||
        rel.startsWith('src/cli/') ||
        rel === 'src/bench/worker-group.ts' ||
        rel === 'src/bench/nccl-torch.ts' ||
        rel === 'src/bench/nccl-anchor-rank.ts'
      )
        continue;
      const code = readFileSync(f, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
      if (/process\.env\b/.test(code)) readers.push(rel);
    }
    expect(readers).toEqual([]);
  });

  it('every variable the native layer reads is listed', () => {
    const listed = new Set(ENV_OVERRIDES.map((e) => e.name));
    for (const f of files(join(ROOT, 'native'), '.cc')) {
      for (const m of readFileSync(f, 'utf8').matchAll(/getenv\("([A-Z_]+)"\)/g)) expect(listed, `${f}: ${m[1]}`).toContain(m[1]);
    }
  });

  it('every SMCUDA_ variable the CLI reads is listed (or is child-process plumbing)', () => {
    const known = new Set([...ENV_OVERRIDES.map((e) => e.name), ...CHILD_CONFIG_VARIABLES]);
    for (const f of files(join(ROOT, 'src', 'cli'), '.ts')) {
      for (const m of readFileSync(f, 'utf8').matchAll(/process\.env\.([A-Z_]+)/g)) expect(known, `${f}: ${m[1]}`).toContain(m[1]);
    }
  });

  it("docs/debugging.md's table is ENV_OVERRIDES", () => {
    const doc = readFileSync(join(ROOT, 'docs', 'debugging.md'), 'utf8');
    const table = doc.slice(doc.indexOf('<!-- env-table'), doc.indexOf('<!-- /env-table -->'));
    const rows = table.split('\n').filter((l) => l.startsWith('| `'));
    expect(rows).toEqual(ENV_OVERRIDES.map((e) => `| \`${e.name}\` | ${e.value} | ${e.default} | ${e.effect} |`));
  });

  it('smcuda --help lists every variable', async () => {
    const cli = join(ROOT, 'dist', 'src', 'cli', 'main.js');
    const { stdout } = await promisify(execFile)(process.execPath, [cli, '--help']);
    for (const e of ENV_OVERRIDES) expect(stdout).toContain(e.name);
  });
});
