/**
 * Loads the native addon once per process (it holds the only process-wide
 * state smcuda has: the dlopen'ed driver handle). When it cannot load, one
 * AddonLoadError lists every cause found and how to fix each (the command
 * given is one that works from where the user stands). The addon itself loads
 * with or without CUDA; whether CUDA is usable is a separate question
 * (`cudaStatus()`).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { envAddonPath } from '../env.js';
import { AddonLoadError } from '../errors.js';
import type { NativeAddon } from './native-addon.js';
import { prebuildFor } from './prebuild.js';

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

/** The command that builds the addon from source for whoever reads the error: a checkout's npm script, else the package's own build script. */
export function buildCommand(root: string, cwd: string = process.cwd()): string {
  if (existsSync(join(root, '.git'))) return 'npm run build:native';
  const rel = relative(cwd, join(root, 'native', 'build-addon.mjs'));
  const script = rel.startsWith('..') || isAbsolute(rel) ? join(root, 'native', 'build-addon.mjs') : rel;
  return `node ${script} --from-source`;
}

/**
 * The addon, or throws AddonLoadError. Looked for, in order (as node-gyp-build
 * does): `SMCUDA_ADDON` alone when set; an addon built from source
 * (build/Release, build/Debug); the prebuilt addon for this platform, arch and
 * libc (prebuilds/, see prebuild.ts).
 */
export function loadAddon(): NativeAddon {
  if (loaded) return loaded;
  const root = packageRoot();
  const build = buildCommand(root);
  const needs = 'it needs cmake >= 3.15 and a C++17 compiler (Debian/Ubuntu: apt-get install -y cmake g++), no CUDA toolkit';
  const fromEnv = envAddonPath();
  const causes: string[] = [];
  if (process.platform !== 'linux') {
    causes.push(`platform is ${process.platform}: smcuda supports Linux only (CUDA IPC and POSIX shared memory).`);
  }
  let candidates: string[];
  if (fromEnv) {
    candidates = [fromEnv];
    if (!existsSync(fromEnv)) causes.push(`SMCUDA_ADDON=${fromEnv} does not exist: unset it to use the package's own addon.`);
  } else {
    candidates = [join(root, 'build', 'Release', 'smcuda.node'), join(root, 'build', 'Debug', 'smcuda.node')].filter((f) => existsSync(f));
    const prebuilt = prebuildFor(root);
    if (prebuilt.file) candidates.push(prebuilt.file);
    else if (candidates.length === 0) causes.push(`${prebuilt.why}, and none was built from source: run \`${build}\` (${needs}).`);
  }
  for (const file of candidates) {
    if (!existsSync(file)) continue;
    try {
      loaded = require(file) as NativeAddon;
      return loaded;
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      if (/GLIBC_\d/.test(msg)) {
        causes.push(`${file} needs a newer glibc than this system has: build from source with \`${build}\` (${needs}). (${msg})`);
      } else if (/NODE_MODULE_VERSION|was compiled against a different Node.js/.test(msg)) {
        causes.push(`${file} was built for another Node.js: rebuild it with \`${build}\`. (${msg})`);
      } else if (/undefined symbol/.test(msg)) {
        causes.push(`${file} is incomplete or from another version: rebuild it with \`${build}\`. (${msg})`);
      } else if (/invalid ELF header|wrong ELF class|cannot open shared object file: No such file|Exec format error/.test(msg)) {
        causes.push(`${file} was built for another machine architecture: build one here with \`${build}\` (${needs}). (${msg})`);
      } else {
        causes.push(`${file} failed to load: ${msg}. Building from source may help: \`${build}\` (${needs}).`);
      }
    }
  }
  throw new AddonLoadError(causes);
}
