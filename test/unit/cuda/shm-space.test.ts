/**
 * Issue 16 item 12: a /dev/shm too small for a ring or a staging segment (a
 * container's default is 64 MiB) fails with ShmSpaceError that names
 * /dev/shm, its size and free space and the option to shrink — never a
 * SIGBUS — and fails only the send that needed it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../../../src/cuda/addon.js';
import type { NativeAddon } from '../../../src/cuda/native-addon.js';
import { ShmSpaceError } from '../../../src/errors.js';
import { makePair } from '../../helpers/transport-pair.js';

const here = dirname(fileURLToPath(import.meta.url));

/** The real addon, except that creating a segment whose name contains `match` fails with ENOSPC. */
function fullShm(match: string): NativeAddon {
  const real = loadAddon();
  return new Proxy(real, {
    get(target, prop, receiver) {
      if (prop === 'shmCreate') {
        return (name: string, bytes: number) => {
          if (name.includes(match)) {
            throw Object.assign(new Error(`posix_fallocate('${name}') failed: ENOSPC (No space left on device)`), { code: 'ENOSPC', call: 'posix_fallocate' });
          }
          return target.shmCreate(name, bytes);
        };
      }
      return Reflect.get(target, prop, receiver) as unknown;
    },
  });
}

describe('a full /dev/shm (injected ENOSPC)', () => {
  it('a staged send rejects with ShmSpaceError naming /dev/shm, its size and the staging option; the endpoint keeps working', async () => {
    const pair = await makePair({ a: { negotiation: { ipc: false } }, b: { negotiation: { ipc: false } }, simA: { shm: fullShm('-stg-') } });
    try {
      const n = 1024 * 1024;
      const ptr = pair.a.driver.memAlloc(n);
      const err = await pair.a.ep.send({ ptr, length: n }, { tag: 1 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ShmSpaceError);
      const e = err as ShmSpaceError;
      expect(e.code).toBe('SMCUDA_SHM_FULL');
      expect(e.dir).toBe('/dev/shm');
      expect(e.requested).toBe(16 * 1024 * 1024); // the default ring: 4 MiB × 4 slots
      expect(e.size).toBeGreaterThan(0);
      expect(e.message).toMatch(/\/dev\/shm has no room for 16\.0 MiB/);
      expect(e.message).toMatch(/MiB in all, .* free/);
      expect(e.message).toMatch(/staging: \{ chunkSize, slots \}/);
      expect(e.message).toMatch(/--shm-size/);
      expect((e.cause as { code?: string }).code).toBe('ENOSPC');
      // The failed send used no sequence number: later messages arrive.
      const r = pair.b.ep.recv({ tag: 2 });
      await pair.a.ep.send(new Uint8Array([1, 2, 3]), { tag: 2 });
      expect(Array.from((await r).data as Uint8Array)).toEqual([1, 2, 3]);
      expect(pair.a.ep.closed).toBe(false);
    } finally {
      await pair.close();
    }
  });
});

const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['-m', 'true']).status === 0;

describe.skipIf(!canUnshare)('a real 8 MiB tmpfs as /dev/shm (private mount namespace)', () => {
  it('the addon refuses a larger segment at creation (ENOSPC, no SIGBUS); a 16 MiB staging ring fails with ShmSpaceError; the endpoint keeps working', () => {
    const script = `mount -t tmpfs -o size=8m tmpfs /dev/shm && exec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(here, '..', '..', 'fixtures', 'small-shm.mjs'))}`;
    const stdout = execFileSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], { encoding: 'utf8', timeout: 30_000 });
    const out = JSON.parse(stdout) as {
      shmBytes: number;
      addon: string;
      send: { name: string; code: string; message: string; size: number; free: number; requested: number };
      after: number[];
    };
    expect(out.shmBytes).toBe(8 * 1024 * 1024);
    expect(out.addon).toBe('ENOSPC');
    expect(out.send.name).toBe('ShmSpaceError');
    expect(out.send.code).toBe('SMCUDA_SHM_FULL');
    expect(out.send.size).toBe(8 * 1024 * 1024);
    expect(out.send.requested).toBe(16 * 1024 * 1024);
    expect(out.send.message).toMatch(/\/dev\/shm has no room for 16\.0 MiB .*8\.0 MiB in all/);
    expect(out.after).toEqual([7, 8, 9]);
  });
});
