/**
 * `smcuda bench --suite graph,collectives --smoke` on the simulated driver,
 * as CI runs it: both suites finish; the graph suite lists every figure, and
 * where the driver lacks stream memory operations each is skipped with that
 * reason; the collectives suite measures seed 003's staging (verified on
 * every rank), lists smcuda's figures (the Communicator) as skipped on
 * the simulator (they are GPU figures), and says why NCCL (through PyTorch and through its C API) was not run.
 * Values are never asserted.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { openDriver } from '../../../src/cuda/open-driver.js';
import { GRAPH_FIG, GRAPH_FIGURES } from '../../../src/bench/graph-figures.js';
import { COLLECTIVE_FIG } from '../../../src/bench/collective-figures.js';

const run = promisify(execFile);
const CLI = new URL('../../../dist/src/cli/main.js', import.meta.url).pathname;

interface Fig {
  name: string;
  suite: string;
  value: number | null;
  baseline: number | null;
  skipped?: string;
  target: unknown;
  details?: Record<string, unknown>;
}

describe('bench --suite graph,collectives --smoke on the simulated driver', () => {
  it('lists every figure of both suites, measured or skipped with a reason', async () => {
    const { driver } = await openDriver({ driver: 'sim' });
    const status = driver.gpuDrivenStatus();
    driver.close();
    const { stdout } = await run(process.execPath, [CLI, 'bench', '--smoke', '--json', '--driver', 'sim', '--suite', 'graph,collectives'], {
      maxBuffer: 16 << 20,
      timeout: 120_000,
    });
    const doc = JSON.parse(stdout) as { figures: Fig[]; series: Array<{ plot: string; series: string; size: number; value: number }>; notes: string[] };
    expect(new Set(doc.figures.map((f) => f.suite))).toEqual(new Set(['graph', 'collectives']));
    for (const f of doc.figures) {
      if (f.skipped) {
        expect(f.value, f.name).toBeNull();
        expect(f.skipped.length, f.name).toBeGreaterThan(0);
      } else expect(typeof f.value, f.name).toBe('number');
    }
    const byName = new Map(doc.figures.map((f) => [f.name, f]));

    // graph: all of it listed; smcuda's persistent transfers measured on the simulator too, without their GPU targets
    const graphNames = [
      GRAPH_FIG.rawHost(8).name,
      GRAPH_FIG.rawGraph(8).name,
      GRAPH_FIG.rawHost(1 << 20).name,
      GRAPH_FIG.rawGraph(1 << 20).name,
      GRAPH_FIG.rawReplayHost.name,
      ...GRAPH_FIGURES.map((s) => s.name),
      GRAPH_FIG.nativeFloor.name,
    ];
    expect(
      doc.figures
        .filter((f) => f.suite === 'graph')
        .map((f) => f.name)
        .sort(),
    ).toEqual([...graphNames].sort());
    for (const s of GRAPH_FIGURES) {
      const f = byName.get(s.name)!;
      if (status.streamMemOps && status.graphs) {
        expect(f.skipped, s.name).toBeUndefined();
        expect(f.value, s.name).toBeGreaterThan(0);
        expect(f.target, s.name).toBeNull();
      } else expect(f.skipped).toBeTruthy();
    }
    if (!status.streamMemOps) {
      for (const name of graphNames.filter((n) => n !== GRAPH_FIG.nativeFloor.name))
        expect(byName.get(name)!.skipped, name).toMatch(/^the sim driver has no stream memory operations/);
    }

    // collectives: seed 003's staging measured and verified; smcuda skipped; NCCL's absence explained
    const staged = doc.figures.find((f) => f.name.startsWith('host-staged allreduce avg of'))!;
    expect(staged.skipped).toBeUndefined();
    expect(typeof staged.baseline).toBe('number');
    expect(staged.details).toMatchObject({ verified: true, ranks: 2 });
    expect(byName.get(COLLECTIVE_FIG.gradient.name)!.skipped).toMatch(/^GPU target/); // the Communicator is plugged in; its figures are GPU figures
    expect(doc.notes.some((n) => /NCCL baseline not run on the simulated driver/.test(n))).toBe(true);
    expect(doc.notes.some((n) => /NCCL C API anchor skipped: the simulated driver has no GPU for NCCL/.test(n))).toBe(true);
    expect(doc.notes.some((n) => /wrong averages/.test(n))).toBe(false);
    const series = new Set(doc.series.filter((p) => p.plot === 'allreduce').map((p) => p.series));
    expect(series).toEqual(new Set(['host-staged as seed 003, pageable', 'host-staged as seed 003, pinned']));
  });

  it('--ranks 3: the collectives suite runs its own group of three workers over the visible devices, and verifies on every rank', async () => {
    const { stdout } = await run(process.execPath, [CLI, 'bench', '--smoke', '--json', '--driver', 'sim', '--suite', 'collectives', '--ranks', '3'], {
      maxBuffer: 16 << 20,
      timeout: 120_000,
    });
    const doc = JSON.parse(stdout) as { figures: Fig[]; notes: string[]; machine: { devices: Array<{ layout: string; rank: number }> } };
    expect(doc.machine.devices.filter((d) => d.layout === 'collectives').map((d) => d.rank)).toEqual([0, 1, 2]);
    const staged = doc.figures.find((f) => f.name.startsWith('host-staged allreduce avg of'))!;
    expect(staged.details).toMatchObject({ verified: true, ranks: 3 });
    expect(doc.notes).toContain('collectives: 3 ranks on 2 GPUs');
  });

  it('refuses --ranks outside 1..64 with exit code 2', async () => {
    const err = await run(process.execPath, [CLI, 'bench', '--driver', 'sim', '--suite', 'collectives', '--ranks', '0']).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect(err).toMatchObject({ code: 2 });
    expect((err as { stderr: string }).stderr).toMatch(/--ranks must be an integer from 1 to 64/);
  });
});
