/**
 * A killed process its parent has not reaped yet (a zombie) still answers
 * kill(pid, 0) and still has /proc/<pid>/stat, but maps nothing: its
 * segments are leftovers, so ownerAlive says no. (The survivors of a killed
 * rank sweep at once, often before its parent reaps it.)
 */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ownerAlive, processStartTime } from '../../../src/segment-owner.js';

describe('ownerAlive', () => {
  it('a zombie is not alive; a running process is', async () => {
    // `sleep 0.2` exits once its parent has exec'd `sleep 3`, which never reaps it. (With `sleep 0` the
    // shell could reap it before its exec: /proc/<pid> was gone, once in a CI run.)
    const sh = spawn('/bin/sh', ['-c', 'sleep 0.2 & echo $!; exec sleep 3'], { stdio: ['ignore', 'pipe', 'ignore'] });
    try {
      const pid = Number(await new Promise<string>((resolve) => sh.stdout.once('data', (b: Buffer) => resolve(b.toString().trim()))));
      let start: number | undefined;
      for (let i = 0; i < 200; i++) {
        start = processStartTime(pid);
        const { readFileSync } = await import('node:fs');
        if (/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'latin1'))) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(start).toBeDefined();
      expect(ownerAlive({ pid, start: start!, boot: '', pidns: 0 })).toBe(false);
      expect(ownerAlive({ pid: sh.pid!, start: processStartTime(sh.pid!)!, boot: '', pidns: 0 })).toBe(true);
    } finally {
      sh.kill('SIGKILL');
    }
  });
});
