/** The supervisor of `smcuda run`'s ranks, with plain shell commands as ranks. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Job, signalStatus, type RankSpec } from '../../../src/cli/run-job.js';

function sh(rank: number, script: string): RankSpec {
  return { rank, command: '/bin/sh', args: ['-c', script], env: { PATH: process.env.PATH } };
}

function sinks(): {
  out: { stdout: { write(c: Uint8Array | string): void }; stderr: { write(c: Uint8Array | string): void } };
  stdout(): string;
  stderr(): string;
} {
  const o: Buffer[] = [];
  const e: Buffer[] = [];
  return {
    out: { stdout: { write: (c) => o.push(Buffer.from(c)) }, stderr: { write: (c) => e.push(Buffer.from(c)) } },
    stdout: () => Buffer.concat(o).toString(),
    stderr: () => Buffer.concat(e).toString(),
  };
}

/** Running (a zombie waiting for a reaper that is not us has ended: an orphan's reaper may be slow). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('run-job', () => {
  it('signal statuses are 128 + the number, as shells say', () => {
    expect(signalStatus('SIGINT')).toBe(130);
    expect(signalStatus('SIGKILL')).toBe(137);
    expect(signalStatus('SIGTERM')).toBe(143);
  });

  it('a rank killed by a signal fails with 128 + its number; the others are stopped with their own children', async () => {
    const s = sinks();
    // rank 1 starts a grandchild and prints its pid: the group signal must stop it too
    const job = new Job([sh(0, 'sleep 0.2; kill -USR1 $$'), sh(1, 'sleep 30 & echo $!; wait')], 100, s.out);
    const started = Date.now();
    const r = await job.run();
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(r).toMatchObject({ firstFailure: 0, interrupted: null, exitCode: 128 + 10 });
    expect(r.ranks[0]).toMatchObject({ exitCode: null, signal: 'SIGUSR1', stoppedBy: null });
    expect(r.ranks[1]).toMatchObject({ signal: 'SIGTERM', stoppedBy: 'SIGTERM' });
    const grandchild = Number(/^\[1\] (\d+)$/m.exec(s.stdout())![1]);
    // the group's SIGTERM reached it as it reached the rank: give it the moment it takes to die
    for (let i = 0; i < 40 && alive(grandchild); i++) await new Promise((r) => setTimeout(r, 50));
    expect(alive(grandchild)).toBe(false);
  }, 20_000);

  it("an executable that cannot start is 127, and says why on the rank's stderr", async () => {
    const s = sinks();
    const r = await new Job([{ rank: 0, command: '/nonexistent/runtime', args: [], env: {} }, sh(1, 'exit 0')], 100, s.out).run();
    expect(r).toMatchObject({ firstFailure: 0, exitCode: 127 });
    expect(s.stderr()).toMatch(/^\[0\] smcuda run: cannot start \/nonexistent\/runtime: .*ENOENT/m);
  }, 20_000);

  it("all succeed: 0; the first failure's code wins over later ones", async () => {
    expect((await new Job([sh(0, 'exit 0'), sh(1, 'echo hi')], 100, sinks().out).run()).exitCode).toBe(0);
    const r = await new Job([sh(0, 'sleep 0.5; exit 4'), sh(1, 'exit 5')], 2_000, sinks().out).run();
    expect(r).toMatchObject({ firstFailure: 1, exitCode: 5 });
    expect(r.ranks[0]).toMatchObject({ exitCode: 4, stoppedBy: null }); // exited by itself within the grace
  }, 20_000);

  it('interrupt: forwarded; one that ignores it is killed after the grace; the exit code is 128 + the signal', async () => {
    const s = sinks();
    const job = new Job([sh(0, 'sleep 30'), sh(1, "trap '' INT; echo trapped; sleep 30")], 300, s.out);
    const done = job.run();
    for (let i = 0; i < 100 && !s.stdout().includes('trapped'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(job.livePids()).toHaveLength(2);
    job.interrupt('SIGINT');
    const r = await done;
    expect(r).toMatchObject({ firstFailure: null, interrupted: 'SIGINT', exitCode: 130 });
    expect(r.ranks[0]).toMatchObject({ signal: 'SIGINT', stoppedBy: 'SIGINT' });
    expect(r.ranks[1]).toMatchObject({ signal: 'SIGKILL', stoppedBy: 'SIGKILL' });
  }, 20_000);
});
