/**
 * Issue 16 item 12, revisited by issue 23: the control and staging rings are
 * sealed anonymous segments (memfd), not files in /dev/shm, so a small
 * /dev/shm (a container's default is 64 MiB) no longer limits them. Where
 * memory itself is short, creating a ring fails with a typed error that says
 * what to shrink — never a SIGBUS — and fails only the send that needed it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadAddon } from '../../../src/cuda/addon.js';
import { SmcudaError } from '../../../src/errors.js';
import { makePair } from '../../helpers/transport-pair.js';

const here = dirname(fileURLToPath(import.meta.url));

afterEach(() => vi.restoreAllMocks());

describe('no memory for a staging ring (injected ENOMEM)', () => {
  it('the staged send rejects with SMCUDA_SEGMENT_NO_MEMORY naming the staging option; the endpoint keeps working', async () => {
    const pair = await makePair({ a: { negotiation: { ipc: false } }, b: { negotiation: { ipc: false } } });
    const addon = loadAddon();
    const real = addon.sealedCreate.bind(addon);
    vi.spyOn(addon, 'sealedCreate').mockImplementation((label: string, bytes: number, seal?: boolean) => {
      if (label.includes('stg')) throw Object.assign(new Error('posix_fallocate failed: ENOMEM'), { code: 'ENOMEM', call: 'posix_fallocate' });
      return real(label, bytes, seal);
    });
    try {
      const n = 1024 * 1024;
      const ptr = pair.a.driver.memAlloc(n);
      const err = await pair.a.ep.send({ ptr, length: n }, { tag: 1 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(SmcudaError);
      const e = err as SmcudaError;
      expect(e.code).toBe('SMCUDA_SEGMENT_NO_MEMORY');
      expect(e.message).toMatch(/16\.0 MiB/); // the default ring: 4 MiB × 4 slots
      expect(e.message).toMatch(/staging: \{ chunkSize, slots \}/);
      expect((e.cause as { code?: string }).code).toBe('ENOMEM');
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
  it('the addon refuses a larger named segment at creation (ENOSPC, no SIGBUS); a 16 MiB staging ring works anyway: it is not in /dev/shm', () => {
    const script = `mount -t tmpfs -o size=8m tmpfs /dev/shm && exec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(here, '..', '..', 'fixtures', 'small-shm.mjs'))}`;
    const stdout = execFileSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], { encoding: 'utf8', timeout: 30_000 });
    const out = JSON.parse(stdout) as { shmBytes: number; addon: string; send: string; path: string; verified: boolean; after: number[] };
    expect(out.shmBytes).toBe(8 * 1024 * 1024);
    expect(out.addon).toBe('ENOSPC'); // the simulated driver's own named segments still live in /dev/shm
    expect(out.send).toBe('sent');
    expect(out.path).toBe('staging');
    expect(out.verified).toBe(true);
    expect(out.after).toEqual([7, 8, 9]);
  });
});
