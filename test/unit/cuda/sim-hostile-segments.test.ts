/**
 * The simulated driver's memory against absurd sizes and truncation (issue
 * 47, item 8): a 1 TiB sparse segment aborted the process (wrapping it as
 * one ArrayBuffer failed fatally in the addon), and an exporter truncating a
 * VMM chunk after the peer imported it made the importer's next touch a
 * SIGBUS. Each case runs in a child process (test/fixtures/
 * sim-hostile-segment.mjs), so a crash shows as a failed test.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const fixture = fileURLToPath(new URL('../../fixtures/sim-hostile-segment.mjs', import.meta.url));

function run(name: string): { threw?: { name: string; code: string; message: string }; ok?: boolean; truncate?: string; intact?: boolean } {
  const r = spawnSync(process.execPath, [fixture, name], { encoding: 'utf8', timeout: 20_000 });
  expect({ status: r.status, signal: r.signal, stderr: r.stderr.slice(-400) }).toEqual({ status: 0, signal: null, stderr: '' });
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as ReturnType<typeof run>;
}

describe('simulated device memory: sizes it cannot map, segments a peer could truncate', () => {
  it.each(['vmm-1tib', 'pool-1tib', 'import-1tib'])('%s: a typed CudaError before anything is mapped, never an abort', (name) => {
    const { threw } = run(name);
    expect(threw).toMatchObject({ name: 'CudaError' });
    expect(threw!.message).toMatch(/maps at most \d+ bytes as one range/);
  });

  it('an imported VMM chunk not sealed against shrinking is refused, not mapped', () => {
    const { threw } = run('import-unsealed');
    expect(threw).toMatchObject({ name: 'CudaError' });
    expect(threw!.message).toMatch(/chunk 0 is refused, not mapped: .*lacks the seals/);
  });

  it('the exporter truncating its chunk after the import: EPERM (sealed), and the importer reads its bytes intact', () => {
    expect(run('truncate-after-import')).toEqual({ ok: true, truncate: 'EPERM', intact: true });
  });
});
