/**
 * The memory kinds on a real GPU through the CLI: `smcuda demo --memory`
 * allocates VMM (one chunk, four chunks with every message across a chunk
 * boundary) and pool memory with the native driver and verifies every byte
 * (IPC off: staging, the path every kind has today), and `smcuda bench
 * --suite memory --smoke` imports each kind over the bench's descriptor
 * channel, times first imports, cache hits and raw copies over mappings of
 * each kind. Where no GPU is usable every case is reported as skipped, with
 * the reason. Needs compiled code: `npx tsc -p .` first.
 */
import { describe, expect, it } from 'vitest';
import { smcuda } from '../helpers/cli.js';
import { probeNative } from './native-probe.js';

const probe = await probeNative();

describe.skipIf(Boolean(probe.skip))(`memory kinds on the native driver${probe.skip ? ` (skipped: ${probe.skip})` : ''}`, () => {
  it.each(['vmm', 'vmm-chunked', 'pool'])(
    'smcuda demo --memory %s --ipc off verifies every byte',
    async (kind) => {
      const r = await smcuda(['demo', '--driver', 'native', '--json', '--memory', kind, '--ipc', 'off', '--sizes', '0,8,64K,16M', '--iters', '2']);
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout) as {
        verified: boolean;
        memory: { buffers: { kind: string; chunksTouched?: number }[]; largeMessages: { staging: number } };
      };
      expect(doc.verified).toBe(true);
      for (const b of doc.memory.buffers) expect(b.kind).toBe(kind === 'pool' ? 'pool' : 'vmm');
      if (kind === 'vmm-chunked') for (const b of doc.memory.buffers) expect(b.chunksTouched).toBeGreaterThanOrEqual(2);
      expect(doc.memory.largeMessages.staging).toBeGreaterThan(0);
    },
    120_000,
  );

  it('smcuda bench --suite memory --smoke: imports, hits and raw copies of every kind', async () => {
    const r = await smcuda(['bench', '--driver', 'native', '--suite', 'memory', '--smoke', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { figures: { name: string; value: number | null; skipped?: string }[]; series: { series: string; value: number }[] };
    for (const kind of ['legacy', 'vmm', 'vmm-chunked', 'pool']) {
      const imp = doc.figures.find((f) => f.name === `memory ${kind}: first import of an allocation`);
      const hit = doc.figures.find((f) => f.name === `memory ${kind}: cache hit (HandlePool lookupImport + release)`);
      expect(imp?.value).toBeGreaterThan(0);
      expect(hit?.value).toBeGreaterThan(0);
      expect(doc.series.some((p) => p.series === `raw cuMemcpyAsync, ${kind} memory (one GPU)` && p.value > 0)).toBe(true);
    }
  }, 300_000);
});
