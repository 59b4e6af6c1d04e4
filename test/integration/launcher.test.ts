/**
 * `smcuda run`: N ranks of a script on the simulated driver, joined by
 * Communicator.fromEnv through what the launcher sets; output prefixed by
 * rank; a failing rank stops the job with its exit code; SIGINT to the
 * launcher stops every rank; nothing is left behind either way.
 * Fixtures import dist/: build first (`npx tsc -p .`).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { findRuntime } from '../../src/cli/runtimes.js';
import { CLI, smcuda } from '../helpers/cli.js';
import { processExists, rankLines, runSummary } from '../helpers/run-output.js';

const RANK = fileURLToPath(new URL('../fixtures/run-rank.mjs', import.meta.url));
const COMM_RANK = fileURLToPath(new URL('../fixtures/comm-rank.mjs', import.meta.url));
const SIM_UUID = (i: number) => `GPU-5170a11e-000${i}-4000-8000-00000000000${i}`;

interface RankLine {
  rank: number;
  ok?: boolean;
  env?: Record<string, string | undefined>;
  argv?: string[];
  device?: string;
  pid?: number;
  dir?: string;
}

/** Why `name` cannot run here ('' where it can): its test then shows as skipped, with the reason. */
function runtimeMissing(name: 'bun' | 'deno'): string {
  try {
    findRuntime(name);
    return '';
  } catch (err) {
    return (err as Error).message;
  }
}

describe('smcuda run', () => {
  it('4 ranks join by Communicator.fromEnv and verify an allreduce; every line prefixed; the token by environment only; nothing left', async () => {
    const r = await smcuda(['run', '-n', '4', '--json', RANK, '--lr', '0.1']);
    expect(r.code, r.stderr).toBe(0);
    const lines = rankLines<RankLine>(r.stdout);
    const oks = [0, 1, 2, 3].map((k) => lines.get(k)?.[0]);
    const token = oks[0]!.env!.SMCUDA_TOKEN!;
    expect(token).toMatch(/^[0-9a-f]{48}$/);
    for (const [k, l] of oks.entries()) {
      expect(l).toMatchObject({ rank: k, ok: true, argv: ['--lr', '0.1'] });
      expect(l!.env).toMatchObject({
        RANK: String(k),
        LOCAL_RANK: String(k),
        WORLD_SIZE: '4',
        LOCAL_WORLD_SIZE: '4',
        SMCUDA_TOKEN: token,
        SMCUDA_RENDEZVOUS: oks[0]!.env!.SMCUDA_RENDEZVOUS,
      });
      expect(l!.device).toBe(SIM_UUID(k % 2)); // LOCAL_RANK % the two simulated devices
    }
    // stderr lines, and each rank's last line that had no newline
    for (let k = 0; k < 4; k++) {
      expect(r.stderr).toContain(`[${k}] stderr of rank ${k}\n`);
      expect(r.stdout).toContain(`[${k}] unterminated ${k}\n`);
    }
    for (const line of r.stdout.trimEnd().split('\n').slice(0, -1)) expect(line).toMatch(/^\[[0-3]\] /);
    const s = runSummary(r.stdout);
    expect(s).toMatchObject({ size: 4, exitCode: 0, firstFailure: null, interrupted: null, rendezvousRemoved: true });
    expect(s.ranks.map((x) => [x.rank, x.exitCode, x.signal])).toEqual([0, 1, 2, 3].map((k) => [k, 0, null]));
    for (const x of s.ranks) expect(x.durationMs).toBeGreaterThanOrEqual(0);
    expect(existsSync(oks[0]!.env!.SMCUDA_RENDEZVOUS!)).toBe(false);
  }, 60_000);

  it('--devices: rank i on entry i % length, every rank seeing all the listed devices', async () => {
    const r = await smcuda(['run', '-n', '4', '--devices', '1,1,0,0', RANK]);
    expect(r.code, r.stderr).toBe(0);
    const lines = rankLines<RankLine>(r.stdout);
    expect([0, 1, 2, 3].map((k) => lines.get(k)![0]!.device)).toEqual([SIM_UUID(1), SIM_UUID(1), SIM_UUID(0), SIM_UUID(0)]);
    for (let k = 0; k < 4; k++) expect(lines.get(k)![0]!.env!.CUDA_VISIBLE_DEVICES!.split(',').sort()).toEqual(['0', '1']);
  }, 60_000);

  it('one rank exits 3: the launcher exits 3, the others are stopped (SIGTERM, then SIGKILL for one that ignores it), the rendezvous removed', async () => {
    const started = Date.now();
    const r = await smcuda(['run', '-n', '4', '--grace', '300', '--json', RANK], { RUN_MODE: 'fail', FAIL_RANK: '2' });
    expect(r.code, r.stderr).toBe(3);
    // 2 × grace after the failure, plus four processes' start: well inside this bound
    expect(Date.now() - started).toBeLessThan(15_000);
    const s = runSummary(r.stdout);
    expect(s.firstFailure).toBe(2);
    expect(s.exitCode).toBe(3);
    const by = new Map(s.ranks.map((x) => [x.rank, x]));
    expect(by.get(2)).toMatchObject({ exitCode: 3, signal: null, stoppedBy: null });
    expect(by.get(0)).toMatchObject({ signal: 'SIGKILL', stoppedBy: 'SIGKILL' }); // ignored SIGTERM
    for (const k of [1, 3]) expect(by.get(k)).toMatchObject({ signal: 'SIGTERM', stoppedBy: 'SIGTERM' });
    expect(r.stdout).toContain('[0] ignoring SIGTERM');
    expect(r.stderr).toMatch(/rank 2 \(pid \d+\) failed first: exit code 3/);
    const lines = rankLines<RankLine>(r.stdout);
    for (let k = 0; k < 4; k++) expect(processExists(lines.get(k)![0]!.pid!)).toBe(false);
    expect(existsSync(lines.get(0)![0]!.dir!)).toBe(false);
  }, 60_000);

  it('a rank killed mid-allreduce: the communicators of the others abort and they exit by themselves, well inside the grace; exit 137', async () => {
    const started = Date.now();
    const r = await smcuda(['run', '-n', '3', '--grace', '30000', '--json', COMM_RANK], { COMM_MODE: 'die', SMCUDA_SIM: '' });
    expect(r.code, r.stderr).toBe(137); // 128 + SIGKILL
    expect(Date.now() - started).toBeLessThan(25_000); // before the grace ran out: nobody was signalled
    const s = runSummary(r.stdout);
    expect(s).toMatchObject({ firstFailure: 2, exitCode: 137 });
    expect(s.ranks[2]).toMatchObject({ signal: 'SIGKILL', stoppedBy: null });
    for (const k of [0, 1]) {
      expect(s.ranks[k]).toMatchObject({ signal: null, stoppedBy: null }); // ended by itself
      expect(r.stdout).toMatch(new RegExp(`^\\[${k}\\] \\{"rank":${k},"error":\\{"code":"SMCUDA_COMM_ABORTED"`, 'm'));
    }
  }, 60_000);

  it('SIGINT to the launcher stops every rank and leaves nothing: exit 130, no rank alive, rendezvous removed', async () => {
    const child = spawn(process.execPath, [CLI, 'run', '-n', '4', '--grace', '2000', RANK], {
      env: { ...process.env, RUN_MODE: 'wait' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c));
    // 'close', not 'exit': only then has its last stderr line been read.
    const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    const ready = new Promise<void>((resolve) =>
      child.stdout.on('data', (c: Buffer) => {
        stdout += c;
        if (rankLines<RankLine>(stdout).size === 4) resolve();
      }),
    );
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        ready,
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`ranks not ready in 30 s: ${stdout} ${stderr}`)), 30_000))),
      ]);
    } catch (err) {
      child.kill('SIGTERM'); // the launcher stops its ranks
      throw err;
    } finally {
      clearTimeout(timer);
    }
    const lines = rankLines<RankLine>(stdout);
    const pids = [0, 1, 2, 3].map((k) => lines.get(k)![0]!.pid!);
    for (const pid of pids) expect(processExists(pid)).toBe(true);
    const interrupted = Date.now();
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(Date.now() - interrupted).toBeLessThan(5_000); // the ranks die of the forwarded SIGINT, well before the SIGKILL
    for (const pid of pids) expect(processExists(pid)).toBe(false);
    expect(existsSync(lines.get(0)![0]!.dir!)).toBe(false);
    expect(stderr).toContain('SIGINT: stopping ranks');
  }, 60_000);

  it('--rendezvous: an existing directory is used and kept', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-run-test-'));
    try {
      const r = await smcuda(['run', '-n', '2', '--rendezvous', dir, '--json', RANK]);
      expect(r.code, r.stderr).toBe(0);
      expect(rankLines<RankLine>(r.stdout).get(1)![0]!.env!.SMCUDA_RENDEZVOUS).toBe(dir);
      expect(runSummary(r.stdout)).toMatchObject({ rendezvous: dir, rendezvousRemoved: false });
      expect(existsSync(dir)).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  for (const name of ['bun', 'deno'] as const) {
    const missing = runtimeMissing(name);
    it.skipIf(missing !== '')(
      `--runtime ${name}: 4 ranks verify the allreduce${missing ? ` (skipped: ${missing})` : ''}`,
      async () => {
        const r = await smcuda(['run', '-n', '4', '--runtime', name, '--json', RANK]);
        expect(r.code, r.stderr).toBe(0);
        const lines = rankLines<RankLine>(r.stdout);
        for (let k = 0; k < 4; k++) expect(lines.get(k)![0]).toMatchObject({ rank: k, ok: true });
        expect(runSummary(r.stdout)).toMatchObject({ runtime: name, exitCode: 0 });
      },
      90_000,
    );
  }

  it('--help, and wrong usage is exit 2 with what to do', async () => {
    const help = await smcuda(['run', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('usage: smcuda run -n N');
    for (const [args, says] of [
      [['run', RANK], 'give the number of ranks'],
      [['run', '-n', '2'], 'give the script'],
      [['run', '-n', '0', RANK], '-n/--ranks takes an integer from 1'],
      [['run', '-n', '-3', RANK], '-n/--ranks takes an integer from 1'],
      [['run', '-n', '2', '--grace', 'soon', RANK], '--grace takes an integer'],
      [['run', '-n', '2', '--runtime', 'rhino', RANK], '--runtime takes node, bun, deno'],
      [['run', '--devices', '0,,1', RANK], '--devices takes a comma-separated list'],
      [['run', '-n', '2', '--bogus', RANK], "Unknown option '--bogus'"],
      [['run', '-n', '2', '/nonexistent/train.mjs'], 'script /nonexistent/train.mjs not found'],
    ] as const) {
      const r = await smcuda([...args]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toContain(says);
    }
  }, 60_000);
});
