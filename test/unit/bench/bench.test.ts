/**
 * `smcuda bench` in smoke mode, as CI runs it: on the simulated driver, with
 * tiny sizes, it must finish, print a JSON document of the documented shape,
 * and write the plots. Figure values are never asserted: benchmarks are not
 * timed tests (speed lives in `smcuda bench` runs on a GPU machine).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { FIG, MEMORY_FIG } from '../../../src/bench/suites.js';

const run = promisify(execFile);
const CLI = new URL('../../../dist/src/cli/main.js', import.meta.url).pathname;
const out = mkdtempSync(join(tmpdir(), 'smcuda-bench-test-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function cli(args: string[]) {
  return run(process.execPath, [CLI, 'bench', ...args], { maxBuffer: 16 << 20, timeout: 60_000 });
}

describe('smcuda bench --smoke on the simulated driver', () => {
  it("--suite collectives: the host-staged allreduce of seed 003 (pinned beside pageable) measured; smcuda's GPU figures listed as skipped, with the reason; NCCL named in a note", async () => {
    const { stdout } = await cli(['--smoke', '--json', '--driver', 'sim', '--suite', 'collectives']);
    const doc = JSON.parse(stdout);
    const figs = doc.figures.filter((f: { suite: string }) => f.suite === 'collectives');
    const staged = figs.find((f: { name: string }) => /^host-staged allreduce avg of .* pinned$/.test(f.name));
    expect(staged.value).toBeGreaterThan(0);
    expect(staged.baseline).toBeGreaterThan(0);
    expect(staged.baselineName).toMatch(/pageable/);
    // smcuda's figures hold GPU targets: on the simulator (host memcpy) they are skipped, saying so.
    const smcuda = figs.filter((f: { name: string }) => /smcuda/.test(f.name));
    expect(smcuda.length).toBeGreaterThanOrEqual(5);
    for (const f of smcuda) expect(f.skipped).toMatch(/simulated driver/);
    expect(smcuda.find((f: { name: string }) => f.name.startsWith('gradient average')).target.text).toMatch(/100×/);
    expect(doc.notes.some((n: string) => /NCCL baseline/.test(n))).toBe(true);
  });

  it('prints a JSON document where every figure has name, value, unit, baseline, ratio, target and met, and writes SVG plots', async () => {
    const { stdout } = await cli(['--smoke', '--json', '--driver', 'sim', '--out', out]);
    const doc = JSON.parse(stdout);
    expect(doc.tool).toBe('smcuda bench');
    expect(doc.machine.driver).toBe('sim');
    expect(typeof doc.machine.node).toBe('string');
    expect(doc.machine.devices.length).toBeGreaterThanOrEqual(2);
    expect(doc.figures.length).toBeGreaterThan(5);
    for (const f of doc.figures) {
      for (const key of ['name', 'value', 'unit', 'baseline', 'ratio', 'target', 'met']) expect(f, `${f.name} lacks ${key}`).toHaveProperty(key);
      expect(typeof f.name).toBe('string');
      expect(typeof f.unit).toBe('string');
      if (f.skipped) {
        expect(f.value).toBeNull();
        expect(f.met).toBeNull();
      } else {
        expect(typeof f.value).toBe('number');
      }
      if (f.target) expect(['value', 'ratio']).toContain(f.target.on);
    }
    // The simulator's headline is measured beside its raw socket baseline, with its target.
    const headline = doc.figures.find((f: { name: string }) => f.name.startsWith('8 B message: transport cost'));
    expect(headline.skipped).toBeUndefined();
    expect(typeof headline.baseline).toBe('number');
    expect(headline.target).not.toBeNull();
    // GPU targets are listed, skipped with a reason.
    expect(doc.figures.some((f: { skipped?: string }) => typeof f.skipped === 'string' && f.skipped.length > 0)).toBe(true);
    expect(doc.series.some((p: { plot: string }) => p.plot === 'bandwidth')).toBe(true);
    expect(doc.series.some((p: { plot: string }) => p.plot === 'latency')).toBe(true);

    // Issue 27's suites: measured on the simulator too (their targets hold only on a GPU), and the native floor
    // beside the latency figures.
    const byName = (n: string) => doc.figures.find((f: { name: string }) => f.name === n);
    for (const spec of [FIG.bidirectional, FIG.allToAll, FIG.firstSend, FIG.firstSendPrepared, FIG.floor(8)]) {
      const f = byName(spec.name);
      expect(f, spec.name).toBeDefined();
      expect(typeof f.value).toBe('number');
      expect(f.target).toBeNull();
    }
    expect(byName(FIG.allToAll.name).details).toMatchObject({ ranks: 8, devices: 2 });
    // Throughput figures that move with the machine: the median of several runs, each after a run of its baseline.
    for (const spec of [FIG.bidirectional, FIG.allToAll]) {
      const f = byName(spec.name);
      expect(f.details.runs, spec.name).toBeGreaterThanOrEqual(2);
      expect(f.details.runsGBs).toHaveLength(f.details.runs);
      expect(f.details.rawRunsGBs).toHaveLength(f.details.runs);
      expect(f.stats.n).toBe(f.details.runs);
      expect(f.value).toBe(f.stats.median);
      expect(f.baseline).toBe(f.details.rawStats.median);
    }
    expect(byName(FIG.allToAll.name).details.perRank).toHaveLength(byName(FIG.allToAll.name).details.runs);
    expect(byName(FIG.firstSendPrepared.name).details.each.every((e: { stateAtSend: string }) => e.stateAtSend === 'OK')).toBe(true);
    expect(headline.floor.value).toBe(byName(FIG.floor(8).name).value);
    for (const kind of ['legacy', 'vmm', 'vmm-chunked', 'pool'] as const)
      expect(byName(MEMORY_FIG.import(kind, 'memory-across').name).value).toBeGreaterThan(0);

    expect(doc.files).toEqual(['bench.json', 'bandwidth.svg', 'latency.svg']);
    expect(JSON.parse(readFileSync(join(out, 'bench.json'), 'utf8')).figures.length).toBe(doc.figures.length);
    for (const name of ['bandwidth.svg', 'latency.svg']) {
      const svg = readFileSync(join(out, name), 'utf8');
      expect(svg.startsWith('<svg')).toBe(true);
      expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
    }
  });

  it('runs only the suites asked for and prints a table', async () => {
    const { stdout } = await cli(['--smoke', '--driver', 'sim', '--suite', 'negotiation']);
    expect(stdout).toMatch(/first GPU send → endpoint OK, control round trips/);
    expect(stdout).not.toMatch(/bandwidth, 16 MiB/);
  });

  it('the memory suite: per kind a transfer figure beside its raw copy, a first import beside cuIpcOpenMemHandle, and a cache hit', async () => {
    const { stdout } = await cli(['--smoke', '--json', '--driver', 'sim', '--suite', 'memory']);
    const doc = JSON.parse(stdout);
    const kinds = ['legacy', 'vmm', 'vmm-chunked', 'pool'];
    const byName = new Map(doc.figures.map((f: { name: string }) => [f.name, f]));
    expect(doc.figures.every((f: { suite: string }) => f.suite === 'memory')).toBe(true);
    expect(doc.figures).toHaveLength(3 * kinds.length);
    const legacyImport = byName.get('memory legacy: first import of an allocation') as { value: number };
    for (const kind of kinds) {
      const transfer = byName.get(`memory ${kind}: one GPU, two processes, 256 MiB`) as Record<string, unknown>;
      expect(transfer).toMatchObject({
        unit: 'GB/s',
        baselineName: `raw cuMemcpyAsync over an already open ${kind} mapping`,
        target: { on: 'ratio', bound: 0.95 },
      });
      // On the simulator it is skipped: a GPU target, or (until the endpoint sends this kind) the endpoint's error.
      expect(transfer.skipped).toMatch(kind === 'legacy' ? /simulated driver/ : /simulated driver|smcuda could not send/);
      const imp = byName.get(`memory ${kind}: first import of an allocation`) as {
        value: number;
        baseline: number;
        baselineName: string;
        details: Record<string, unknown>;
      };
      expect(imp.value).toBeGreaterThan(0);
      expect(imp.baseline).toBe(legacyImport.value);
      expect(imp.baselineName).toBe('one cuIpcOpenMemHandle (memory legacy)');
      if (kind === 'pool') expect(imp.details.poolImportUs).toBeGreaterThan(0);
      const hit = byName.get(`memory ${kind}: cache hit (HandlePool lookupImport + release)`) as { value: number; baseline: number; target: { bound: number } };
      expect(hit.value).toBeGreaterThan(0);
      expect(hit.baseline).toBe(imp.value);
      expect(hit.target.bound).toBe(1);
      // The raw copy over an open mapping of the kind is measured in the same run.
      expect(doc.series.some((p: { series: string; value: number }) => p.series === `raw cuMemcpyAsync, ${kind} memory (one GPU)` && p.value > 0)).toBe(true);
    }
  });

  it('refuses bad usage with exit code 2', async () => {
    await expect(cli(['--suite', 'nope'])).rejects.toMatchObject({ code: 2 });
    await expect(cli(['--sizes', '0'])).rejects.toMatchObject({ code: 2 });
  });
  it('a worker that crashes (SIGSEGV in a driver call) costs only the rest of its suite: what it measured is listed, the rest skipped with the cause, and the next suite runs', async () => {
    // The pool kind's first import crashes the importing worker, as memory-across's did on 2 × H200.
    const env = { ...process.env, SMCUDA_SIM: JSON.stringify({ faults: { crashOn: { call: 'cuMemPoolImportPointer' } } }) };
    const { stdout } = await run(process.execPath, [CLI, 'bench', '--smoke', '--json', '--driver', 'sim', '--suite', 'memory-across,first-send'], {
      maxBuffer: 16 << 20,
      timeout: 60_000,
      env,
    });
    const doc = JSON.parse(stdout);
    const byName = new Map<string, { value: number | null; skipped?: string }>(doc.figures.map((f: { name: string }) => [f.name, f]));
    expect(byName.get(MEMORY_FIG.import('legacy', 'memory-across').name)!.value).toBeGreaterThan(0);
    expect(byName.get(MEMORY_FIG.import('vmm-chunked', 'memory-across').name)!.value).toBeGreaterThan(0);
    const pool = byName.get(MEMORY_FIG.import('pool', 'memory-across').name)!;
    expect(pool.value).toBeNull();
    expect(pool.skipped).toMatch(/memory-across failed: .*SIGSEGV/);
    expect(doc.notes.some((n: string) => /memory-across failed: .*worker 1 exited with SIGSEGV/.test(n))).toBe(true);
    expect(byName.get(FIG.firstSend.name)!.value).toBeGreaterThan(0);
  });
});
