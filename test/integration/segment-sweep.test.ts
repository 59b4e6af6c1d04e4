/**
 * Issue 16 item 9: shared-memory segments of processes that die without
 * cleaning up (SIGKILL; a staged send never granted) are swept when a
 * Transport is created — and only those: never a live process's, never
 * another boot's, namespace's or user's.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Transport } from '../../src/index.js';
import { spawnPeer, type WorkerClient } from '../helpers/child.js';
import { localOwner, parseSegmentName, processStartTime, segmentName, sweepDeadSegments } from '../../src/segment-owner.js';

const children: WorkerClient[] = [];

afterEach(async () => {
  for (const c of children.splice(0)) await c.kill();
});

/** Starts the fixture; resolves with its pid and the segments it made once they exist. */
async function owner(): Promise<{ child: WorkerClient; pid: number; owned: string[] }> {
  const child = await spawnPeer<{ pid: number; owned: string[] }>('segment-owner.mjs');
  children.push(child);
  return { child, ...child.ready };
}

async function kill(child: WorkerClient): Promise<void> {
  await child.kill();
}

const inShm = (names: string[]) => names.filter((n) => existsSync(join('/dev/shm', n)));

describe('segment names carry their owner', () => {
  it('round-trip through parseSegmentName, with pid, start time, boot id and pid namespace', () => {
    const name = segmentName('stg', 'abc123');
    const p = parseSegmentName(name)!;
    expect(p.kind).toBe('stg');
    expect(p.owner).toEqual(localOwner());
    expect(p.owner.pid).toBe(process.pid);
    expect(p.owner.start).toBe(processStartTime(process.pid));
    expect(parseSegmentName('/smcuda-stg-123-abcdef')).toBeUndefined(); // an old-style name: never judged
  });
});

describe('sweeping the segments of dead owners', () => {
  it("a live process's segments are never swept; once it is SIGKILLed, Transport.create removes them", async () => {
    const { child, pid, owned } = await owner();
    expect(owned.map((n) => parseSegmentName(n)?.kind).sort()).toEqual(['ctl', 'sim', 'stg']);
    expect(sweepDeadSegments().filter((n) => owned.includes(n))).toEqual([]);
    const t0 = await Transport.create({ driver: 'sim', lazyDevice: true });
    await t0.close();
    expect(inShm(owned)).toEqual(owned); // alive: all still there

    await kill(child);
    expect(inShm(owned)).toEqual(owned); // SIGKILL ran no exit hook
    const t = await Transport.create({ driver: 'sim', lazyDevice: true });
    await t.close();
    expect(inShm(owned)).toEqual([]);
    expect(readdirSync('/dev/shm').filter((n) => n.includes(`-${pid}-`) && n.startsWith('smcuda-'))).toEqual([]);
  });

  describe('in a directory of made-up names', () => {
    let dir: string;
    afterEach(() => rmSync(dir, { recursive: true, force: true }));

    function make(name: string): string {
      writeFileSync(join(dir, name.slice(1)), '');
      return name.slice(1);
    }

    it('judges only this boot, this pid namespace, this uid, and sees through pid reuse', () => {
      dir = mkdtempSync(join(tmpdir(), 'smcuda-sweep-'));
      const me = localOwner();
      const parent = { ...me, pid: process.ppid, start: processStartTime(process.ppid)! };
      const deadPid = 2 ** 22 + 7; // above pid_max's default ceiling on this kernel family: no such process
      const live = make(segmentName('ctl', 'live0000', parent));
      const reused = make(segmentName('ctl', 'reused00', { ...parent, start: (parent.start + 1) >>> 0 }));
      const dead = make(segmentName('stg', 'dead0000', { ...me, pid: deadPid }));
      const otherBoot = make(segmentName('stg', 'boot0000', { ...me, pid: deadPid, boot: me.boot === '00000001' ? '00000002' : '00000001' }));
      const otherNs = make(segmentName('stg', 'pidns000', { ...me, pid: deadPid, pidns: me.pidns + 1 }));
      const otherUid = make(segmentName('sim', 'm1-00000000', { ...me, pid: deadPid }));
      const foreign = make('/smcuda-stg-99999999-notours');
      const unrelated = make('/something-else');
      const canChown = process.getuid?.() === 0;
      if (canChown) chownSync(join(dir, otherUid), 65534, 65534);

      const removed = sweepDeadSegments({ dir }).sort();
      expect(removed).toEqual([dead, reused, ...(canChown ? [] : [otherUid])].sort());
      const left = readdirSync(dir).sort();
      expect(left).toEqual([live, otherBoot, otherNs, ...(canChown ? [otherUid] : []), foreign, unrelated].sort());
    });
  });
});

const canUnsharePid = process.getuid?.() === 0 && spawnSync('unshare', ['--pid', '--fork', 'true']).status === 0;

describe.skipIf(!canUnsharePid)('in a pid namespace without its own /proc (unshare --pid --fork, host /proc)', () => {
  it("a live owner's segment is never swept (its pid means another process in /proc); once it is SIGKILLed, it is", () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-pidns-'));
    try {
      const fixture = fileURLToPath(new URL('../fixtures/pidns-sweep.mjs', import.meta.url));
      const stdout = execFileSync('unshare', ['--pid', '--fork', process.execPath, fixture, dir], { encoding: 'utf8', timeout: 30_000 });
      const out = JSON.parse(stdout) as {
        pid: number;
        ownerPid: number;
        procSelf: string;
        sweptWhileAlive: string[];
        keptWhileAlive: boolean;
        sweptAfterDeath: string[];
        goneAfterDeath: boolean;
      };
      expect(out.pid).toBe(1); // the namespace's first process
      expect(out.procSelf).not.toBe('1'); // /proc is the host's: it names us by the host's pid
      expect(out.sweptWhileAlive).toEqual([]);
      expect(out.keptWhileAlive).toBe(true);
      expect(out.sweptAfterDeath).toHaveLength(1);
      expect(out.goneAfterDeath).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
