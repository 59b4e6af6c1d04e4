/**
 * The prebuilt addons in prebuilds/ (native/build-addon.mjs --prebuild): which
 * one fits a machine, that the linux-x64 one loads and matches what the
 * sources build, that it needs no newer glibc than its manifest says and no
 * libstdc++, and that a load failure names a command that builds the addon.
 * That linux-arm64 loads under qemu-user is
 * test/integration/prebuild-arm64-qemu.registry.test.ts (it fetches an arm64
 * Node.js from the npm registry).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCommand } from '../../../src/cuda/addon.js';
import { prebuildFor } from '../../../src/cuda/prebuild.js';

const ROOT = new URL('../../..', import.meta.url).pathname;
const X64 = join(ROOT, 'prebuilds/linux-x64/smcuda.napi.glibc.node');
const ARM64 = join(ROOT, 'prebuilds/linux-arm64/smcuda.napi.glibc.node');

/** The exported function names of an addon, loaded in a fresh process. */
function exportsOf(file: string): string[] {
  return JSON.parse(
    execFileSync(process.execPath, ['-e', `console.log(JSON.stringify(Object.keys(require(${JSON.stringify(file)})).sort()))`], { encoding: 'utf8' }),
  );
}

function has(cmd: string, args = ['--version']): boolean {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

describe('prebuildFor', () => {
  const glibc = (version: string) => ({ libc: 'glibc' as const, version });
  it('picks linux-x64 and linux-arm64 on glibc >= the manifest', () => {
    expect(prebuildFor(ROOT, 'linux', 'x64', glibc('2.36')).file).toBe(X64);
    expect(prebuildFor(ROOT, 'linux', 'arm64', glibc('2.34')).file).toBe(ARM64);
  });
  it('says why none fits: older glibc, musl, another platform or arch', () => {
    expect(prebuildFor(ROOT, 'linux', 'x64', glibc('2.31')).why).toMatch(/needs glibc >= 2\.34, and this system has 2\.31/);
    expect(prebuildFor(ROOT, 'linux', 'x64', { libc: 'musl' }).why).toMatch(/musl/);
    expect(prebuildFor(ROOT, 'darwin', 'arm64', glibc('2.36')).why).toMatch(/no prebuilt addon for darwin-arm64/);
    expect(prebuildFor(ROOT, 'linux', 'ppc64', glibc('2.36')).why).toMatch(/no prebuilt addon for linux-ppc64/);
  });
});

describe('prebuilds/linux-x64', () => {
  it('loads here and exports what the sources build (else run `npm run build:prebuilds`)', () => {
    const built = join(ROOT, 'build/Release/smcuda.node');
    const prebuilt = exportsOf(X64);
    expect(prebuilt.length).toBeGreaterThan(40);
    if (existsSync(built))
      expect(prebuilt, 'the prebuilt addon is older than native/: run `npm run build:prebuilds` and commit prebuilds/').toEqual(exportsOf(built));
  });

  it.skipIf(!has('objdump'))(`needs no newer glibc than its manifest, and no libstdc++${has('objdump') ? '' : ' (skipped: no objdump)'}`, () => {
    for (const arch of ['x64', 'arm64']) {
      const manifest = JSON.parse(readFileSync(join(ROOT, `prebuilds/linux-${arch}/smcuda.json`), 'utf8'));
      const file = join(ROOT, `prebuilds/linux-${arch}`, manifest.file);
      const dump = execFileSync(arch === 'x64' || !has('aarch64-linux-gnu-objdump') ? 'objdump' : 'aarch64-linux-gnu-objdump', ['-T', file], {
        encoding: 'utf8',
      });
      const versions = [...dump.matchAll(/\(GLIBC_(\d+)\.(\d+)/g)].map((m) => Number(m[1]) * 1000 + Number(m[2]));
      const [major, minor] = manifest.glibc.split('.').map(Number);
      expect(Math.max(...versions)).toBe(major * 1000 + minor);
      expect(manifest.glibc).toBe('2.34');
      expect(dump).not.toMatch(/GLIBCXX_|CXXABI_/);
    }
  });
});

describe('a load failure names a command that builds the addon', () => {
  it('in a checkout: npm run build:native; in an installed package: its build script, relative to where the user stands', () => {
    expect(buildCommand(ROOT)).toBe('npm run build:native');
    const installed = '/srv/app/node_modules/smcuda';
    expect(buildCommand(installed, '/srv/app')).toBe('node node_modules/smcuda/native/build-addon.mjs --from-source');
    expect(buildCommand(installed, '/elsewhere')).toBe('node /srv/app/node_modules/smcuda/native/build-addon.mjs --from-source');
  });

  it('an addon for another architecture is reported as such, with the command', async () => {
    const r = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', `import { loadAddon } from ${JSON.stringify(join(ROOT, 'dist/src/cuda/addon.js'))}; loadAddon();`],
      {
        env: { ...process.env, SMCUDA_ADDON: ARM64 },
        encoding: 'utf8',
      },
    );
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('SMCUDA_ADDON_LOAD');
    expect(r.stderr).toContain('built for another machine architecture');
    expect(r.stderr).toContain('npm run build:native');
  });
});
