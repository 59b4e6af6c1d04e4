/**
 * The shipped declarations (dist/**.d.ts) type-check in the strictest
 * consumer: strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess,
 * skipLibCheck off, importing every entry point (test/fixtures/consumer.ts).
 * Offline: the consumer project links this checkout as node_modules/smcuda
 * (test/integration/consumer.registry.test.ts does the same from the
 * registry with the packed package). Errors inside third-party declarations
 * (xstate's under exactOptionalPropertyTypes) are theirs, not smcuda's, and
 * are left out.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, expect, it } from 'vitest';

const ROOT = new URL('../..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'smcuda-strict-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('dist/**.d.ts pass a consumer with exactOptionalPropertyTypes, every entry point imported', async () => {
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(ROOT, join(dir, 'node_modules/smcuda'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'strict-consumer', private: true, type: 'module' }));
  copyFileSync(join(ROOT, 'test/fixtures/consumer.ts'), join(dir, 'consumer.ts'));
  const compilerOptions = {
    strict: true,
    exactOptionalPropertyTypes: true,
    noUncheckedIndexedAccess: true,
    noImplicitOverride: true,
    skipLibCheck: false,
    noEmit: true,
    target: 'ES2022',
    lib: ['ES2023'],
    types: ['node'],
    typeRoots: [join(ROOT, 'node_modules/@types')],
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
  };
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['consumer.ts'] }));
  const r = await promisify(execFile)(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], {
    cwd: dir,
    maxBuffer: 16 << 20,
  }).catch((e: { stdout: string }) => e);
  const out = 'stdout' in r ? r.stdout : '';
  // One diagnostic per line that starts with a path; its continuation lines are indented.
  const ours = out
    .split('\n')
    .filter((l) => /^\S.*error TS\d+/.test(l) && !/node_modules\/(?!smcuda\/)/.test(l.replace(/^.*?node_modules\/smcuda\//, 'node_modules/smcuda/')));
  expect(ours, out).toEqual([]);
}, 120_000);
