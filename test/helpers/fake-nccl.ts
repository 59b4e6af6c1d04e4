/**
 * Builds test/fixtures/fake-libnccl.c into a temporary libnccl.so.2 (the
 * NCCL 2.27-like one, or with `old` an NCCL 2.17 without the optional entry
 * points), for tests that load it through SMCUDA_NCCL_LIBRARY. `skip` says
 * why it cannot be built here (no C compiler).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadAddon } from '../../src/cuda/addon.js';
import type { NativeShm } from '../../src/cuda/native-addon.js';

const root = join(import.meta.dirname, '..', '..');

export const cc = ['cc', 'gcc'].find((c) => {
  try {
    execFileSync(c, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
});

/** The addon's host-memory calls: the fake NCCL reads and writes host memory at its real address (bufferAddress). */
export const shm = (() => {
  try {
    return loadAddon() as unknown as NativeShm;
  } catch {
    return undefined;
  }
})();

/** Why the fake NCCL tests cannot run here, or false. */
export const fakeNcclSkip = !cc ? 'no C compiler to build the fake libnccl' : !shm ? 'the native addon does not load' : false;

export interface FakeNccl {
  dir: string;
  library: string;
  /** Where the fake logs its calls (FAKE_NCCL_LOG). */
  log: string;
  /** The log's lines so far. */
  lines(): string[];
  remove(): void;
}

export function buildFakeNccl(old = false): FakeNccl {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-fake-nccl-'));
  const library = join(dir, 'libnccl.so.2');
  execFileSync(cc!, ['-shared', '-fPIC', '-O1', ...(old ? ['-DFAKE_NCCL_OLD'] : []), '-o', library, join(root, 'test', 'fixtures', 'fake-libnccl.c')]);
  const log = join(dir, 'calls.log');
  return {
    dir,
    library,
    log,
    lines: () => {
      try {
        return readFileSync(log, 'utf8')
          .trim()
          .split('\n')
          .filter((l) => l !== '');
      } catch {
        return [];
      }
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
