/**
 * Ctrl-C on `smcuda demo` and `smcuda soak` (a real SIGINT to the command's
 * process): the workers stop, every shared-memory segment they made and the
 * socket folder are removed, and the command exits 130 saying so.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseSegmentName } from '../../src/segment-owner.js';
import { CLI } from '../helpers/cli.js';

async function interrupt(args: string[], readyLine: RegExp): Promise<{ code: number | null; stderr: string; held: number }> {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  // 'close', not 'exit': only then has its last stderr line been read.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${readyLine} within 60 s; stdout: ${stdout}; stderr: ${stderr}`)), 60_000);
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      if (readyLine.test(stdout)) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  // Interrupt once the workers hold segments (so there is something to clean up).
  for (let i = 0; i < 200 && workerSegments(child.pid!).length === 0; i++) await new Promise((r) => setTimeout(r, 50));
  const held = workerSegments(child.pid!).length;
  child.kill('SIGINT');
  return { code: await exited, stderr, held };
}

/** Segments in /dev/shm whose owner is a child of `parent`. */
function workerSegments(parent: number): string[] {
  return readdirSync('/dev/shm').filter((n) => {
    const pid = parseSegmentName(n)?.owner.pid;
    if (pid === undefined) return false;
    try {
      return Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]) === parent;
    } catch {
      return false;
    }
  });
}

function leftBehind(stderr: string): { pids: number[]; dir: string; segments: string[] } {
  const m = /interrupted: \d+ worker\(s\) stopped \(pid ([\d, ]+)\), \d+ shared-memory segment\(s\) and the socket folder (\S+) removed/.exec(stderr);
  expect(m, stderr).not.toBeNull();
  const pids = m![1]!.split(', ').map(Number);
  const segments = readdirSync('/dev/shm').filter((n) => pids.includes(parseSegmentName(n)?.owner.pid ?? -1));
  return { pids, dir: m![2]!, segments };
}

describe('Ctrl-C cleans up', () => {
  it('smcuda demo: workers stopped, segments and socket folder removed, exit 130', async () => {
    // Long enough to be interrupted in the middle: big messages, many iterations.
    const r = await interrupt(['demo', '--driver', 'sim', '--sizes', '8,4M', '--iters', '100000', '--timeout', '120'], /buffers:/);
    expect(r.code).toBe(130);
    expect(r.stderr).toMatch(/smcuda demo: SIGINT: stopping the workers/);
    const left = leftBehind(r.stderr);
    expect(left.pids).toHaveLength(2);
    expect(r.held, 'the workers held segments when interrupted').toBeGreaterThan(0);
    expect(left.segments).toEqual([]);
    expect(existsSync(left.dir)).toBe(false);
  }, 90_000);

  it('smcuda soak: the same', async () => {
    const r = await interrupt(['soak', '100000000', '--driver', 'sim', '--ranks', '2', '--timeout', '120'], /messages between/);
    expect(r.code).toBe(130);
    const left = leftBehind(r.stderr);
    expect(left.pids.length).toBeGreaterThan(1);
    expect(r.held, 'the workers held segments when interrupted').toBeGreaterThan(0);
    expect(left.segments).toEqual([]);
    expect(existsSync(left.dir)).toBe(false);
  }, 90_000);
});
