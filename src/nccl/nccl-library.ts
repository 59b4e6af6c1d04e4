/**
 * Where libnccl.so.2 is looked for, in order, without running Python:
 *   1. SMCUDA_NCCL_LIBRARY (a file, or a directory holding libnccl.so.2),
 *      alone when set, as SMCUDA_ADDON is;
 *   2. `libnccl.so.2` by name: the loader's paths (LD_LIBRARY_PATH, the
 *      ld.so cache: a system package such as libnccl2);
 *   3. PyTorch's NCCL wheel (nvidia-nccl-cu12/cu13): nvidia/nccl/lib in
 *      the site-packages of the active virtualenv or conda environment, the
 *      user's, pyenv's versions and the system's Pythons.
 * Listing a few known folders costs a few readdir calls; running python3
 * to ask it would cost a process start, on a path that only a failure takes.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { type Env, envNccl } from '../env.js';

export const NCCL_SONAME = 'libnccl.so.2';

export interface NcclSearch {
  /** What to hand dlopen, in order. */
  candidates: string[];
  /** Where it looked, in words, for the error that lists it. */
  looked: string[];
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function list(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** The Python prefixes worth a look: the active environments first, then the usual installs. */
export function pythonPrefixes(active: readonly string[], home: string = homedir()): string[] {
  const pyenv = join(home, '.pyenv', 'versions');
  const prefixes = [
    ...active,
    join(home, '.local'),
    ...list(pyenv).map((v) => join(pyenv, v)),
    join(home, 'miniconda3'),
    join(home, 'anaconda3'),
    '/opt/conda',
    '/usr/local',
    '/usr',
  ];
  return [...new Set(prefixes)];
}

/** site-packages and dist-packages folders under a prefix (lib/python3.*), and Debian's /usr/lib/python3/dist-packages. */
export function sitePackages(prefix: string): string[] {
  const out: string[] = [];
  for (const lib of ['lib', 'lib64']) {
    for (const py of list(join(prefix, lib))
      .filter((n) => /^python3(\.\d+)?$/.test(n))
      .sort()) {
      for (const site of ['site-packages', 'dist-packages']) {
        const dir = join(prefix, lib, py, site);
        if (isDir(dir)) out.push(dir);
      }
    }
  }
  return out;
}

/** The candidates and what was looked at, from the environment given (process.env by default). */
export function ncclSearch(env?: Env, home?: string): NcclSearch {
  const { library, pythonPrefixes: active } = envNccl(env);
  if (library !== undefined) {
    const file = isDir(library) ? join(library, NCCL_SONAME) : library;
    return { candidates: [file], looked: [`SMCUDA_NCCL_LIBRARY=${library}${file === library ? '' : ` (${file})`}, and nowhere else since it is set`] };
  }
  const looked = [`${NCCL_SONAME} through the loader (LD_LIBRARY_PATH, /etc/ld.so.cache)`];
  const candidates = [NCCL_SONAME];
  const sites = pythonPrefixes(active, home).flatMap(sitePackages);
  const wheels = sites.map((s) => join(s, 'nvidia', 'nccl', 'lib', NCCL_SONAME)).filter((f) => existsSync(f));
  candidates.push(...wheels);
  looked.push(
    sites.length === 0
      ? "PyTorch's nvidia/nccl/lib: no Python site-packages found (VIRTUAL_ENV, CONDA_PREFIX, ~/.local, ~/.pyenv, conda, /usr/local, /usr)"
      : `PyTorch's nvidia/nccl/lib in ${sites.length} site-packages (${sites.join(', ')}): ${wheels.length === 0 ? 'none has it' : `found ${wheels.join(', ')}`}`,
  );
  return { candidates, looked };
}
