/**
 * Loads the native addon once per process (it holds the only process-wide
 * state smcuda has: the dlopen'ed driver handle). When it cannot load, one
 * AddonLoadError lists every cause found and how to fix each — the addon
 * itself always loads where it was built, with or without CUDA; whether CUDA
 * is usable is a separate question (`cudaStatus()`).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { envAddonPath } from '../env.js';
import { AddonLoadError } from '../errors.js';
import type { NativeAddon } from './native-addon.js';

const require = createRequire(import.meta.url);

/** The package root: dist/src/cuda/addon.js -> ../../.. ; src/cuda/addon.ts -> ../.. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'CMakeLists.txt'))) return dir;
    dir = resolve(dir, '..');
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
}

let loaded: NativeAddon | undefined;

/** The addon, or throws AddonLoadError. `SMCUDA_ADDON` overrides the path. */
export function loadAddon(): NativeAddon {
  if (loaded) return loaded;
  const root = packageRoot();
  const fromEnv = envAddonPath();
  const candidates = fromEnv
    ? [fromEnv]
    : [join(root, 'build', 'Release', 'smcuda.node'), join(root, 'build', 'Debug', 'smcuda.node')];
  const causes: string[] = [];
  if (process.platform !== 'linux') {
    causes.push(`platform is ${process.platform}: smcuda supports Linux only (CUDA IPC and POSIX shared memory).`);
  }
  for (const file of candidates) {
    if (!existsSync(file)) continue;
    try {
      loaded = require(file) as NativeAddon;
      return loaded;
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      if (/NODE_MODULE_VERSION|was compiled against a different Node.js/.test(msg)) {
        causes.push(`${file} was built for another Node.js: run \`npm rebuild smcuda\` (or \`npm run build:native\` in a checkout). (${msg})`);
      } else if (/undefined symbol/.test(msg)) {
        causes.push(`${file} is incomplete or from another version: rebuild with \`npm run build:native\`. (${msg})`);
      } else if (/invalid ELF header|wrong ELF class/.test(msg)) {
        causes.push(`${file} was built for another machine architecture: rebuild here with \`npm run build:native\`. (${msg})`);
      } else {
        causes.push(`${file} failed to load: ${msg}`);
      }
    }
  }
  if (causes.length === 0 || !candidates.some((f) => existsSync(f))) {
    causes.push(
      `no built addon at ${candidates.join(' or ')}: the install step did not build it. ` +
        'Run `npm ci` (or `npm run build:native`); it needs cmake >= 3.15 and a C++17 compiler (g++), no CUDA toolkit. ' +
        'If the install ran with --ignore-scripts, run `npm rebuild smcuda`.',
    );
  }
  throw new AddonLoadError(causes);
}
