/**
 * The collectives suite's NCCL C-API anchor end to end, on the simulated
 * driver over the fake libnccl.so.2 (test/fixtures/fake-libnccl.c, with
 * FAKE_NCCL_PEERS_JOIN so that a communicator of two ranks is ready): the
 * group of its own, the id rank 0 makes reaching every rank, a blocking
 * communicator with multicast off, windows registered for the symmetric
 * kernels, every mode timed and listed as series, and the skips with their
 * reasons. Nothing here reduces anything: the real run is on a GPU.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANCHOR_BUFFERS, ANCHOR_MODES } from '../../../src/bench/nccl-anchor.js';
import { anchorSeriesName } from '../../../src/bench/nccl-anchor-figures.js';
import { buildFakeNccl, cc, type FakeNccl } from '../../helpers/fake-nccl.js';

const run = promisify(execFile);
const CLI = new URL('../../../dist/src/cli/main.js', import.meta.url).pathname;

interface Doc {
  series: Array<{ plot: string; series: string; size: number; value: number }>;
  notes: string[];
  figures: Array<{ name: string; skipped?: string }>;
  machine: { devices: Array<{ layout: string; rank: number }> };
}

async function bench(fake: FakeNccl, extra: string[] = [], env: Record<string, string> = {}): Promise<Doc> {
  const { stdout } = await run(process.execPath, [CLI, 'bench', '--smoke', '--json', '--driver', 'sim', '--suite', 'collectives', ...extra], {
    maxBuffer: 16 << 20,
    timeout: 120_000,
    env: { ...process.env, SMCUDA_NCCL_LIBRARY: fake.library, FAKE_NCCL_PEERS_JOIN: '1', FAKE_NCCL_LOG: fake.log, NCCL_NVLS_ENABLE: '1', ...env },
  });
  return JSON.parse(stdout) as Doc;
}

describe.skipIf(!cc)(`the NCCL C-API anchor over a fake libnccl.so.2${cc ? '' : ' (skipped: no C compiler)'}`, () => {
  let fake: FakeNccl;
  let old: FakeNccl;
  beforeAll(() => {
    fake = buildFakeNccl();
    old = buildFakeNccl(true);
  });
  afterAll(() => {
    fake?.remove();
    old?.remove();
  });

  it('two ranks in a group of their own: one id, a blocking communicator with multicast off, every kind of buffer and mode timed', async () => {
    const doc = await bench(fake);
    expect(doc.machine.devices.filter((d) => d.layout === 'nccl-anchor').map((d) => d.rank)).toEqual([0, 1]);
    expect(doc.notes.find((n) => n.includes('NCCL C API anchor:'))).toMatch(
      /NCCL 2\.27\.7 \(.*libnccl\.so\.2\), 2 ranks, one per GPU, NCCL_NVLS_ENABLE=0, blocking communicator; result not checked on the simulated driver$/,
    );
    const points = doc.series.filter((p) => p.plot === 'allreduce' && p.series.startsWith('NCCL C API'));
    const sizes = [...new Set(points.map((p) => p.size))].sort((a, b) => a - b);
    expect(sizes).toEqual([8, 16 << 10]); // the smoke sizes
    for (const b of ANCHOR_BUFFERS)
      for (const m of ANCHOR_MODES)
        for (const size of sizes) {
          const p = points.find((x) => x.series === anchorSeriesName(b, m, 100) && x.size === size);
          expect(p?.value, `${b} ${m} ${size}`).toBeGreaterThan(0);
        }

    const lines = fake.lines();
    // The id rank 0 made reached both ranks; NCCL saw multicast off although the caller's environment had it on.
    const inits = lines.filter((l) => l.startsWith('ncclCommInitRankConfig'));
    expect(inits.map((l) => l.match(/rank=(\d)/)![1]).sort()).toEqual(['0', '1']);
    for (const l of inits) expect(l).toMatch(/nranks=2 rank=\d id0=90 id127=37 .* blocking=1 /);
    expect(lines.filter((l) => l.startsWith('ncclEnv'))).toEqual(['ncclEnv NCCL_NVLS_ENABLE=0', 'ncclEnv NCCL_NVLS_ENABLE=0']);
    expect(lines.filter((l) => l.startsWith('ncclGetUniqueId'))).toHaveLength(1);
    // Windows: NCCL's memory, registered symmetric on both ranks at each size, then given back.
    for (const size of sizes) {
      expect(lines.filter((l) => l.startsWith('ncclMemAlloc') && l.includes(`size=${size} `))).toHaveLength(2);
      expect(lines.filter((l) => l.startsWith('ncclCommWindowRegister') && l.endsWith(`size=${size} flags=1`))).toHaveLength(2);
    }
    const count = (prefix: string) => lines.filter((l) => l.startsWith(prefix)).length;
    expect(count('ncclCommWindowDeregister')).toBe(count('ncclCommWindowRegister'));
    expect(count('ncclMemFree')).toBe(count('ncclMemAlloc'));
    expect(count('ncclCommDestroy')).toBe(2);
    // In place, f32 sum.
    expect(lines.filter((l) => l.startsWith('ncclAllReduce')).every((l) => /send=(0x[0-9a-f]+) recv=\1 count=\d+ dtype=7 op=0 /.test(l))).toBe(true);
    // Beside smcuda: listed, skipped on the simulator as smcuda's GPU figures are.
    expect(doc.figures.find((f) => f.name === 'allreduce f32 8 B, smcuda, stream time, against the NCCL C API')?.skipped).toMatch(/^GPU target/);
  });

  it('an NCCL without windows (2.17): the plain buffers only, the window said not available in that version', async () => {
    const doc = await bench(old);
    expect(doc.notes).toContain("collectives: NCCL C API anchor, symmetric window: not available in NCCL 2.17 (ncclCommWindowRegister is 2.27's)");
    const names = new Set(doc.series.filter((p) => p.series.startsWith('NCCL C API')).map((p) => p.series));
    expect(names).toEqual(new Set(ANCHOR_MODES.map((m) => anchorSeriesName('plain', m, 100))));
  });

  it('a window NCCL refuses: that configuration listed as failed, with NCCL’s error, the plain buffers measured and every window freed', async () => {
    const doc = await bench(fake, [], { FAKE_NCCL_WINDOW_FAIL: '5' });
    expect(doc.notes.find((n) => n.includes('symmetric window:'))).toMatch(
      /symmetric window: failed at every size; first 8 B \(window\): failed: .*SMCUDA_NCCL_INVALID_USAGE.*window registration refused/,
    );
    expect(doc.notes.filter((n) => n.includes('(window): failed'))).toHaveLength(1); // one line, not one per size
    const names = new Set(doc.series.filter((p) => p.series.startsWith('NCCL C API')).map((p) => p.series));
    expect(names).toEqual(new Set(ANCHOR_MODES.map((m) => anchorSeriesName('plain', m, 100))));
    const lines = fake.lines();
    expect(lines.filter((l) => l.startsWith('ncclMemFree')).length).toBe(lines.filter((l) => l.startsWith('ncclMemAlloc')).length);
  });

  it('more ranks than GPUs, or no NCCL to load: skipped with the reason, the rest of the suite runs', async () => {
    const three = await bench(fake, ['--ranks', '3']);
    expect(three.notes).toContain('collectives: NCCL C API anchor skipped: 3 ranks on 2 GPUs: NCCL cannot put two ranks of one communicator on one GPU');
    expect(three.machine.devices.some((d) => d.layout === 'nccl-anchor')).toBe(false);
    const none = await bench(fake, [], { SMCUDA_NCCL_LIBRARY: '/nonexistent/libnccl.so.2' });
    expect(none.notes.find((n) => n.includes('NCCL C API anchor skipped'))).toMatch(
      /libnccl\.so\.2 could not be loaded \(looked for SMCUDA_NCCL_LIBRARY=\/nonexistent/,
    );
    expect(none.series.some((p) => p.series.startsWith('host-staged'))).toBe(true);
  });
});
