/**
 * `smcuda run` on the native driver (issue 44): four ranks on the visible
 * GPU(s) (sharing one where only one is visible: under MPS where the caller
 * started it, required when SMCUDA_EXPECT_MPS is set).
 *
 *  - docs/examples/tensor-data-parallel.mjs as the docs run it (`smcuda run
 *    -n 4`): every rank verifies every element of its tensor group's sum and
 *    its data group's average, on the CUDA driver; exit 0, rendezvous removed.
 *  - One rank SIGKILLed by the test (not by itself) while the four loop
 *    verified allreduces (./run-kill-rank.mjs): the launcher exits 137 naming
 *    it; the survivors' communicators abort with SMCUDA_PEER_LOST naming it,
 *    and they exit 0 by themselves, well inside the grace (nobody signalled);
 *    nothing is left: no rank process or process group, no rendezvous
 *    directory, no /dev/shm segment owned by a rank; and a fresh job on the
 *    same GPUs verifies (the kill left no GPU or MPS server faulted).
 *
 * Compiled code (dist/): `npx tsc -p .` first. Skipped, visibly, where no
 * GPU is usable or the driver cannot load modules (the allreduce kernels).
 * RUN_LAUNCHER_DRIVER=sim runs the same on the simulated driver (what checks
 * this harness without a GPU).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { mpsStatus } from '../../src/cli/mps.js';
import type { RunReport } from '../../src/cli/run.js';
import { parseSegmentName } from '../../src/segment-owner.js';
import { CLI, smcuda } from '../helpers/cli.js';
import { processExists, rankLines, runSummary } from '../helpers/run-output.js';
import { itChecksMps } from './mps-check.js';
import { probeNativeGpuDriven } from './native-probe.js';

const DRIVER = process.env.RUN_LAUNCHER_DRIVER === 'sim' ? 'sim' : 'native';
const p =
  DRIVER === 'sim'
    ? { devices: 2, skip: false as const }
    : await probeNativeGpuDriven((g) => (g.modules ? undefined : `the native driver cannot load modules: ${g.reason ?? 'not supported'}`));
const EXAMPLE = fileURLToPath(new URL('../../docs/examples/tensor-data-parallel.mjs', import.meta.url));
const KILL_RANK = fileURLToPath(new URL('./run-kill-rank.mjs', import.meta.url));
/** The ranks' driver: the example takes 'auto' (native where a GPU is usable); on the simulator, a fresh simulated world. */
const ENV: Record<string, string> = { RUN_LAUNCHER_DRIVER: DRIVER, ...(DRIVER === 'sim' ? { SMCUDA_SIM: '' } : {}) };
const DRIVER_WORDS = DRIVER === 'sim' ? 'simulated' : 'CUDA';
/** The launcher's grace: survivors that exit by themselves do so long before it runs out. */
const GRACE_MS = 20_000;
const KILLED = 2;

interface RankLine {
  rank: number;
  pid?: number;
  ready?: boolean;
  dir?: string;
  device?: string;
  error?: { code: string; causeCode: string; failedRank: number; failedPid?: number };
  calls?: number;
  wrong?: boolean;
}

/** Entries of /dev/shm that name one of `pids` as their owner (src/segment-owner.ts), or hold `-<pid>-` at all. */
function segmentsOf(pids: number[]): string[] {
  return readdirSync('/dev/shm').filter((n) => pids.includes(parseSegmentName(n)?.owner.pid ?? -1) || pids.some((pid) => n.includes(`-${pid}-`)));
}

/** The example under `smcuda run -n 4`, every rank's verification line checked. */
async function example(elements: number, steps: number): Promise<RunReport> {
  const r = await smcuda(['run', '-n', '4', '--json', EXAMPLE, String(elements), String(steps)], ENV);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout).toMatch(new RegExp(`^\\[0\\] tensor × data parallel: 4 ranks on the ${DRIVER_WORDS} driver$`, 'm'));
  const groupsOf = (k: number) => `tensor group \\[${k & ~1},${k | 1}\\] sum by \\S+, data group \\[${k & 1},${(k & 1) + 2}\\] avg by \\S+`;
  for (let k = 0; k < 4; k++)
    expect(r.stdout).toMatch(new RegExp(`^\\[${k}\\] rank ${k}/4: ${groupsOf(k)}: ${steps} steps of ${elements} f32, every element checked$`, 'm'));
  const s = runSummary(r.stdout);
  expect(s).toMatchObject({ size: 4, exitCode: 0, firstFailure: null, interrupted: null, rendezvousRemoved: true });
  expect(s.ranks.map((x) => [x.rank, x.exitCode, x.signal])).toEqual([0, 1, 2, 3].map((k) => [k, 0, null]));
  expect(existsSync(s.rendezvous)).toBe(false);
  return s;
}

/** `smcuda run -n 4` of run-kill-rank.mjs; once every rank verified its first allreduce and is looping, rank KILLED is SIGKILLed. */
async function runAndKill(): Promise<{ code: number | null; stdout: string; stderr: string; held: number; killedAt: number; endedAt: number }> {
  const child = spawn(process.execPath, [CLI, 'run', '-n', '4', '--grace', String(GRACE_MS), '--json', KILL_RANK], {
    env: { ...process.env, ...ENV },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = new Promise<void>((resolve) =>
    child.stdout.on('data', (c: Buffer) => {
      stdout += c;
      const lines = rankLines<RankLine>(stdout);
      if ([0, 1, 2, 3].every((k) => lines.get(k)?.some((l) => l.ready))) resolve();
    }),
  );
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      ready,
      exited.then((code) => Promise.reject(new Error(`the job exited (${code}) before every rank was ready: ${stdout} ${stderr}`))),
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`ranks not ready in 60 s: ${stdout} ${stderr}`)), 60_000))),
    ]);
  } catch (err) {
    child.kill('SIGTERM'); // the launcher stops its ranks
    await exited;
    throw err;
  } finally {
    clearTimeout(timer);
  }
  // A few loops in: the ranks are in (or between) allreduces.
  await new Promise((r) => setTimeout(r, 300));
  const lines = rankLines<RankLine>(stdout);
  const victim = lines.get(KILLED)!.find((l) => l.ready)!.pid!;
  // What the ranks hold in /dev/shm now (the simulator's device memory; none may be named on the native driver).
  const held = segmentsOf([0, 1, 2, 3].map((k) => lines.get(k)!.find((l) => l.ready)!.pid!)).length;
  process.kill(victim, 'SIGKILL');
  const killedAt = Date.now();
  const code = await exited;
  return { code, stdout, stderr, held, killedAt, endedAt: Date.now() };
}

describe.skipIf(p.skip !== false)(`smcuda run on the ${DRIVER} driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  itChecksMps(DRIVER, 'the four ranks', p.devices > 1 ? `${p.devices} GPUs visible` : undefined);

  it(`smcuda run -n 4 docs/examples/tensor-data-parallel.mjs: every rank verifies every element of both groups, on the ${DRIVER_WORDS} driver; exit 0, rendezvous removed`, async () => {
    const t0 = performance.now();
    await example(65536, 3);
    console.log(
      `run-launcher [${DRIVER}, ${p.devices} GPU(s), MPS ${mpsStatus().active ? 'on' : 'off'}] tensor-data-parallel: ${Math.round(performance.now() - t0)} ms`,
    );
  }, 120_000);

  it(`smcuda run -n 4, rank ${KILLED} SIGKILLed mid-loop of verified allreduces: exit 137, the survivors abort (SMCUDA_PEER_LOST naming it) and exit 0 by themselves, no process, rendezvous or /dev/shm segment left; then a fresh job verifies`, async () => {
    const r = await runAndKill();
    expect(r.code, r.stderr).toBe(137); // 128 + SIGKILL
    const s = runSummary(r.stdout);
    expect(s).toMatchObject({ size: 4, exitCode: 137, firstFailure: KILLED, interrupted: null, rendezvousRemoved: true });
    expect(r.stderr).toMatch(new RegExp(`rank ${KILLED} \\(pid \\d+\\) failed first: killed by SIGKILL`));
    const lines = rankLines<RankLine>(r.stdout);
    const ready = [0, 1, 2, 3].map((k) => lines.get(k)!.find((l) => l.ready)!);
    const pids = ready.map((l) => l.pid!);
    expect(s.ranks.map((x) => x.pid)).toEqual(pids);
    expect(s.ranks[KILLED]).toMatchObject({ signal: 'SIGKILL', stoppedBy: null });
    const survivors = [0, 1, 2, 3].filter((k) => k !== KILLED);
    for (const k of survivors) {
      // Ended by itself, cleanly: the launcher signalled nobody.
      expect(s.ranks[k], r.stderr).toMatchObject({ exitCode: 0, signal: null, stoppedBy: null });
      const end = lines.get(k)!.find((l) => l.error);
      expect(end, `rank ${k}: ${r.stdout}`).toMatchObject({
        wrong: false,
        error: { code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_PEER_LOST', failedRank: KILLED, failedPid: pids[KILLED] },
      });
      expect(end!.calls).toBeGreaterThan(0);
    }
    // The survivors' communicators learn of the death and the job ends long before the grace (or a call's timeout).
    const afterKillMs = r.endedAt - r.killedAt;
    expect(afterKillMs).toBeLessThan(10_000);
    // Nothing left behind: no rank process or process group (each rank leads its own), no rendezvous, no segments.
    for (const pid of pids) {
      expect(processExists(pid), `rank pid ${pid}`).toBe(false);
      expect(processExists(-pid), `process group ${pid}`).toBe(false);
    }
    expect(existsSync(s.rendezvous)).toBe(false);
    expect(existsSync(ready[0]!.dir!)).toBe(false);
    expect(segmentsOf(pids)).toEqual([]);
    const devices = new Set(ready.map((l) => l.device));
    console.log(
      `run-launcher [${DRIVER}, ${devices.size} GPU(s) used, MPS ${mpsStatus().active ? 'on' : 'off'}] rank ${KILLED} killed: job ended ${afterKillMs} ms after, survivors' calls before: ${survivors.map((k) => lines.get(k)!.find((l) => l.error)!.calls).join(', ')}, /dev/shm segments the ranks held: ${r.held}, swept by the launcher: ${s.sweptSegments}`,
    );
    // A fresh job on the same GPUs: the kill left no GPU (or MPS server) faulted.
    await example(10007, 2);
  }, 150_000);
});
