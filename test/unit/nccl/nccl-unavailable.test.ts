/**
 * Where NCCL is absent (CI, any machine without it): loadNccl fails with one
 * NcclUnavailableError that lists where it looked, why each candidate
 * failed and what to install; the search reads the environment it is given;
 * and nothing else in smcuda needs NCCL (the package's entry does not load
 * src/nccl/: test/integration/lean-import.test.ts).
 * Its own file: a test file runs in its own process, and NCCL once loaded
 * stays loaded in that process.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { envNccl } from '../../../src/env.js';
import { NcclUnavailableError, SmcudaError } from '../../../src/errors.js';
import { ncclSearch, pythonPrefixes, sitePackages } from '../../../src/nccl/nccl-library.js';
import { loadNccl } from '../../../src/nccl/nccl.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-nccl-search-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function thrown(f: () => unknown): NcclUnavailableError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(NcclUnavailableError);
    return err as NcclUnavailableError;
  }
  throw new Error('expected loadNccl to throw');
}

describe('loadNccl without NCCL', () => {
  it('SMCUDA_NCCL_LIBRARY naming a missing file: SMCUDA_NCCL_UNAVAILABLE, which says where it looked, why, and what to install', () => {
    const missing = join(dir, 'nope', 'libnccl.so.2');
    const err = thrown(() => loadNccl({ env: { SMCUDA_NCCL_LIBRARY: missing } }));
    expect(err).toBeInstanceOf(SmcudaError);
    expect(err.code).toBe('SMCUDA_NCCL_UNAVAILABLE');
    expect(err.looked).toEqual([`SMCUDA_NCCL_LIBRARY=${missing}, and nowhere else since it is set`]);
    expect(err.message).toContain('everything else in smcuda works without it');
    expect(err.message).toContain(`${missing}: ${missing}: cannot open shared object file`);
    expect(err.message).toContain('pip install nvidia-nccl-cu12');
    expect(err.message).toContain('SMCUDA_NCCL_LIBRARY=/path/to/libnccl.so.2');
  });

  it('a library that is not NCCL is refused by name of the entry point it lacks', () => {
    const notNccl = join(dir, 'not-nccl.so');
    writeFileSync(notNccl, 'not an ELF file');
    const err = thrown(() => loadNccl({ env: { SMCUDA_NCCL_LIBRARY: notNccl } }));
    expect(err.message).toMatch(/not-nccl\.so: .*(invalid ELF header|file too short)/);
    // libm is a real shared library without NCCL's entry points
    const libm = ['/lib/x86_64-linux-gnu/libm.so.6', '/lib/aarch64-linux-gnu/libm.so.6', '/usr/lib64/libm.so.6'].find((f) => existsSync(f));
    if (libm) {
      const e2 = thrown(() => loadNccl({ env: { SMCUDA_NCCL_LIBRARY: libm } }));
      expect(e2.message).toContain(`${libm}: loaded, but it has no ncclGetVersion: not an NCCL of 2.14 or newer`);
    }
  });

  it('unset: the loader by name, then the NCCL wheels of the Python environments it finds', () => {
    const err = thrown(() => loadNccl({ env: {} }));
    expect(err.looked[0]).toBe('libnccl.so.2 through the loader (LD_LIBRARY_PATH, /etc/ld.so.cache)');
    expect(err.looked[1]).toMatch(/^PyTorch's nvidia\/nccl\/lib/);
    expect(err.message).toMatch(/libnccl\.so\.2: libnccl\.so\.2: cannot open shared object file/);
  });
});

describe('the search', () => {
  it("finds PyTorch's wheel in a virtualenv's site-packages (VIRTUAL_ENV first), and a directory in SMCUDA_NCCL_LIBRARY", () => {
    const venv = join(dir, 'venv');
    const lib = join(venv, 'lib', 'python3.12', 'site-packages', 'nvidia', 'nccl', 'lib');
    mkdirSync(lib, { recursive: true });
    writeFileSync(join(lib, 'libnccl.so.2'), '');
    const home = join(dir, 'home');
    mkdirSync(join(home, '.pyenv', 'versions', '3.11.7'), { recursive: true });
    expect(pythonPrefixes([venv], home).slice(0, 3)).toEqual([venv, join(home, '.local'), join(home, '.pyenv', 'versions', '3.11.7')]);
    expect(sitePackages(venv)).toEqual([join(venv, 'lib', 'python3.12', 'site-packages')]);
    const s = ncclSearch({ VIRTUAL_ENV: venv }, home);
    expect(s.candidates).toEqual(['libnccl.so.2', join(lib, 'libnccl.so.2')]);
    expect(s.looked[1]).toContain(`found ${join(lib, 'libnccl.so.2')}`);
    expect(ncclSearch({ SMCUDA_NCCL_LIBRARY: lib }).candidates).toEqual([join(lib, 'libnccl.so.2')]);
    expect(envNccl({ SMCUDA_NCCL_LIBRARY: '', VIRTUAL_ENV: venv, CONDA_PREFIX: '/opt/c' })).toEqual({ pythonPrefixes: [venv, '/opt/c'] });
  });

  it('an addon without the NCCL binding (an older prebuilt one) is one typed error that says to rebuild', () => {
    const err = thrown(() => loadNccl({ addon: {}, env: {} }));
    expect(err.code).toBe('SMCUDA_NCCL_UNAVAILABLE');
    expect(err.message).toContain('npm run build:native');
  });
});
