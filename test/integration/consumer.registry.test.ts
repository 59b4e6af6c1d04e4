/**
 * smcuda as a user gets it: `npm pack`, installed into a fresh project with
 * dev dependencies omitted and no cmake or compiler on PATH (so the prebuilt
 * addon must serve), then a strict TypeScript consumer type-checked with
 * NodeNext and with bundler resolution, a CommonJS require(), the README's
 * two-process transfer and `npx smcuda demo` on the simulated driver. Needs
 * the npm registry (the package's dependencies); nothing else from the network.
 */
import { execFile, execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registryUnreachable } from '../helpers/registry.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
const run = promisify(execFile);
/** Installing the packed package needs the registry (its dependencies); without it every test here skips, saying why. */
const OFFLINE = registryUnreachable();
const suite = OFFLINE ? describe.skip : describe;
const offline = OFFLINE ? ` (skipped: ${OFFLINE})` : '';

let dir = '';
let project = '';
let env: NodeJS.ProcessEnv = {};
let packed: { files: { path: string }[]; unpackedSize: number; filename: string };

/** A PATH holding node, npm, npx and sh (npm runs scripts with it) only: no cmake, g++, cc or make. */
function bareBin(into: string): string {
  const bin = join(into, 'bin');
  mkdirSync(bin);
  symlinkSync(process.execPath, join(bin, 'node'));
  symlinkSync('/bin/sh', join(bin, 'sh'));
  for (const tool of ['npm', 'npx']) {
    symlinkSync(realpathSync(execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim()), join(bin, tool));
  }
  return bin;
}

beforeAll(async () => {
  if (OFFLINE) return;
  dir = mkdtempSync(join(tmpdir(), 'smcuda-consumer-'));
  const out = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: ROOT, maxBuffer: 64 << 20 });
  packed = JSON.parse(out.stdout)[0];
  project = join(dir, 'app');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }, null, 2));
  env = { HOME: process.env.HOME, PATH: bareBin(dir), npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };
  await run('npm', ['install', '--omit=dev', '--prefer-offline', '--no-audit', '--no-fund', join(dir, packed.filename)], {
    cwd: project,
    env,
    timeout: 240_000,
  });
}, 300_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

suite(`the packed package${offline}`, () => {
  it('ships the prebuilt addons, LICENSE, what runs and its declarations, and no TypeScript sources, source maps, measurement history or build output', () => {
    const files = packed.files.map((f) => f.path);
    for (const f of [
      'LICENSE',
      'README.md',
      'prebuilds/linux-x64/smcuda.napi.glibc.node',
      'prebuilds/linux-arm64/smcuda.napi.glibc.node',
      'native/build-addon.mjs',
      'src/bench/nccl_allreduce.py',
      'dist/src/index.js',
      'dist/src/index.d.ts',
      'docs/benchmarks.md',
    ]) {
      expect(files, f).toContain(f);
    }
    expect(files.filter((f) => /^(test|build|bench)\/|docs\/bench\/(run-|scripts|profile)|\.map$|(?<!\.d)\.ts$/.test(f))).toEqual([]);
  });
});

suite(`installed into a fresh project, no compiler, dev dependencies omitted${offline}`, () => {
  it('has no cmake or compiler on this PATH, and no heavy optional peers installed', async () => {
    for (const tool of ['cmake', 'g++', 'c++', 'cc', 'make']) {
      await expect(run('sh', ['-c', `command -v ${tool}`], { env })).rejects.toThrow();
    }
    // cmake-js and node-addon-api serve source builds only: dev dependencies, not in a user's tree.
    for (const heavy of ['mermaid', 'playwright-core', 'vega', 'bun', 'deno', 'vitest', 'typescript', 'typedoc', 'cmake-js', 'node-addon-api']) {
      expect(existsSync(join(project, 'node_modules', heavy)), heavy).toBe(false);
    }
    expect(existsSync(join(project, 'node_modules/smcuda/build'))).toBe(false);
  });

  it("keeps the consumer's node_modules (smcuda, xstate, lru-cache) at most 12 MB", async () => {
    // The bytes of its files (as npm's unpacked size counts them), not the disk blocks they take,
    // which depend on the file system (4 KiB blocks add about 3 MB over ~1,000 small files).
    const { stdout } = await run('du', ['-sb', '--apparent-size', join(project, 'node_modules')]);
    const bytes = Number(stdout.split(/\s/)[0]);
    expect(bytes, `node_modules is ${(bytes / 1e6).toFixed(2)} MB`).toBeLessThanOrEqual(12 * 1000 * 1000);
  });

  it('loads the prebuilt addon', async () => {
    const { stdout } = await run(
      'node',
      [
        '--input-type=module',
        '-e',
        "import { openDriver } from 'smcuda'; const { kind, reason } = await openDriver({ driver: 'auto' }); console.log(kind, reason);",
      ],
      { cwd: project, env },
    );
    expect(stdout).toMatch(/^sim simulated driver/);
  });

  it('type-checks a strict TypeScript consumer with module NodeNext and with bundler resolution', async () => {
    copyFileSync(join(ROOT, 'test/fixtures/consumer.ts'), join(project, 'consumer.ts'));
    const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
    const common = {
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      target: 'ES2022',
      lib: ['ES2023'],
      types: ['node'],
      typeRoots: [join(ROOT, 'node_modules/@types')],
    };
    for (const [name, options] of [
      ['nodenext', { module: 'NodeNext', moduleResolution: 'NodeNext' }],
      ['bundler', { module: 'ESNext', moduleResolution: 'bundler' }],
      ['exact', { module: 'NodeNext', moduleResolution: 'NodeNext', exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true }],
    ] as const) {
      writeFileSync(join(project, `tsconfig.${name}.json`), JSON.stringify({ compilerOptions: { ...common, ...options }, files: ['consumer.ts'] }));
      const r = await run('node', [tsc, '-p', `tsconfig.${name}.json`], { cwd: project, env }).catch((e: { stdout: string }) => e);
      const out = 'code' in r ? r.stdout : '';
      // xstate's own declarations fail exactOptionalPropertyTypes: theirs, left out; smcuda's must pass.
      const ours =
        name === 'exact'
          ? out
              .split('\n')
              .filter((l) => /error TS\d+/.test(l) && !/node_modules\/(?!smcuda\/)/.test(l.replace(/^.*node_modules\/smcuda\//, 'node_modules/smcuda/')))
          : out
            ? [out]
            : [];
      expect(ours, `tsc (${name}):\n${out}`).toEqual([]);
    }
  }, 120_000);

  it.skipIf(!process.features.require_module)(
    `can be require()d from CommonJS${process.features.require_module ? '' : ' (skipped: this Node.js has no require(esm); 20.19+ / 22.12+)'}`,
    async () => {
      writeFileSync(
        join(project, 'consumer.cjs'),
        "const s = require('smcuda'); console.log(typeof s.Transport.create, typeof s.isDeviceBuffer, s.isDeviceBuffer({ ptr: 1n, length: 1 }));\n",
      );
      const { stdout } = await run('node', ['consumer.cjs'], { cwd: project, env });
      expect(stdout.trim()).toBe('function function true');
    },
  );

  it('installs the JavaScript with its declarations, and no source map that would point at an unshipped source', () => {
    const pkg = join(project, 'node_modules/smcuda');
    expect(existsSync(join(pkg, 'dist/src/endpoint.js'))).toBe(true);
    expect(existsSync(join(pkg, 'dist/src/endpoint.d.ts'))).toBe(true);
    expect(existsSync(join(pkg, 'dist/src/endpoint.js.map'))).toBe(false);
    expect(existsSync(join(pkg, 'src/endpoint.ts'))).toBe(false);
  });

  it('runs the README two-process example: device memory between two processes, every byte checked', async () => {
    copyFileSync(join(ROOT, 'docs/examples/two-process.mjs'), join(project, 'two-process.mjs'));
    const { stdout } = await run('node', ['two-process.mjs'], { cwd: project, env, timeout: 60_000 });
    expect(stdout).toMatch(/received 4194304 bytes by rget .* every byte checked/);
  }, 90_000);

  it('runs `npx smcuda demo` and `npx smcuda --version`', async () => {
    const demo = await run('npx', ['smcuda', 'demo', '--driver', 'sim', '--sizes', '8,64K,1M', '--iters', '1'], { cwd: project, env, timeout: 90_000 });
    expect(demo.stdout).toMatch(/verified: all \d+ messages byte-exact/);
    const version = await run('npx', ['smcuda', '--version'], { cwd: project, env });
    expect(version.stdout.trim()).toBe(PKG.version);
  }, 120_000);
});
