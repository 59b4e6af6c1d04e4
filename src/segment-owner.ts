/**
 * Who owns a shared-memory segment, written into its name, and the sweep that
 * removes the segments of owners that are gone.
 *
 * A segment lives in /dev/shm until someone unlinks it. Its owner unlinks it
 * when done (or the peer does, once it has it mapped), and an exit hook
 * catches the rest — but a process killed with SIGKILL, or one that dies with
 * a staged send not yet granted, runs no code: its segments would stay for
 * good. So every segment name says who made it:
 *
 *   /smcuda-<kind>-<pid>-<start>.<boot>.<pidns>-<rest>
 *
 *   kind   sim (simulated device memory); ctl and stg (control and staging rings)
 *          come only from older versions, whose rings had names: rings are
 *          sealed anonymous segments now (src/channel/sealed-segment.ts)
 *   pid    the owner's pid
 *   start  the owner's start time (/proc/<pid>/stat field 22, clock ticks, mod 2^32):
 *          a pid reused by a later process has another start time
 *   boot   the first 8 hex digits of /proc/sys/kernel/random/boot_id
 *   pidns  the inode of the owner's pid namespace (/proc/self/ns/pid)
 *
 * and `sweepDeadSegments` (run by Transport.create, as Open MPI cleans stale
 * session directories) unlinks a segment only when all of these hold: the
 * name has this exact form, it was made on this boot and in this pid
 * namespace (so the pid means what it says here: a process in a container
 * that shares /dev/shm with other namespaces never judges their owners), the
 * file belongs to this uid, and its owner is gone — kill(pid, 0) says ESRCH,
 * or the pid now belongs to a process with another start time. The start
 * time is read from /proc only where /proc is this pid namespace's own
 * (/proc/self is our pid): in a pid namespace that sees the host's /proc,
 * /proc/<pid> is another process, so there only ESRCH proves an owner dead
 * (issue 23 finding 11: a live owner's segment was unlinked there).
 */
import { lstatSync, readdirSync, readFileSync, readlinkSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';

export type SegmentKind = 'ctl' | 'stg' | 'sim';

/** The owner stamp of a segment name. */
export interface SegmentOwner {
  pid: number;
  /** Start time in clock ticks since boot, mod 2^32. */
  start: number;
  /** 8 hex digits of the boot id. */
  boot: string;
  /** Inode of the pid namespace. */
  pidns: number;
}

export interface ParsedSegmentName {
  kind: SegmentKind;
  owner: SegmentOwner;
  rest: string;
}

const NAME = /^\/?smcuda-(ctl|stg|sim)-(\d{1,10})-(\d{1,10})\.([0-9a-f]{8})\.(\d{1,20})-([A-Za-z0-9-]{1,64})$/;

/** Start time of `pid` (clock ticks since boot, mod 2^32), or undefined if it cannot be read (gone). */
export function processStartTime(pid: number | 'self', proc = '/proc'): number | undefined {
  return processStat(pid, proc)?.start;
}

/** State (field 3: R, S, Z, …) and start time of `pid`, or undefined if it cannot be read (gone). */
function processStat(pid: number | 'self', proc = '/proc'): { state: string; start: number | undefined } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`${proc}/${pid}/stat`, 'latin1');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces and ')': cut after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const start = Number(fields[19]); // field 22 overall; fields[0] is field 3
  return { state: fields[0] ?? '', start: Number.isFinite(start) ? start % 2 ** 32 : undefined };
}

/** This boot's id, 8 hex digits ('' where the kernel does not say). */
function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').replaceAll('-', '').slice(0, 8).toLowerCase();
  } catch {
    return '';
  }
}

function pidNamespace(): number {
  try {
    const m = /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

// Facts about this process that cannot change while it runs: read once.
let self: SegmentOwner | undefined;

/** This process's owner stamp. */
export function localOwner(): SegmentOwner {
  self ??= {
    pid: process.pid,
    start: processStartTime('self') ?? 0,
    boot: bootId() || '00000000',
    pidns: pidNamespace(),
  };
  return self;
}

/** `/smcuda-<kind>-<pid>-<start>.<boot>.<pidns>-<rest>`; `rest` makes it unique among the owner's segments. */
export function segmentName(kind: SegmentKind, rest: string, owner: SegmentOwner = localOwner()): string {
  return `/smcuda-${kind}-${owner.pid}-${owner.start >>> 0}.${owner.boot}.${owner.pidns}-${rest}`;
}

/** A fresh name for a segment this process creates. */
export function newSegmentName(kind: Exclude<SegmentKind, 'sim'>): string {
  return segmentName(kind, Math.random().toString(36).slice(2, 10).padEnd(8, '0'));
}

/** The parts of a name made by segmentName, or undefined for any other name. */
export function parseSegmentName(name: string): ParsedSegmentName | undefined {
  const m = NAME.exec(name);
  if (!m) return undefined;
  return {
    kind: m[1] as SegmentKind,
    owner: { pid: Number(m[2]), start: Number(m[3]), boot: m[4]!, pidns: Number(m[5]) },
    rest: m[6]!,
  };
}

/** kill(pid, 0) says no such process (ESRCH): proof that it is gone. */
function noSuchProcess(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    // EPERM: a process of another user has this pid.
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** Whether `proc` shows this process's pid namespace: its `self` is our pid (not so where a pid namespace sees the host's /proc). */
export function procIsOurs(proc = '/proc'): boolean {
  try {
    return readlinkSync(`${proc}/self`) === String(process.pid);
  } catch {
    return false;
  }
}

/**
 * Is the process that stamped `owner` still running? (Same boot and
 * namespace assumed.) True unless its death is proven: ESRCH, or — where
 * `proc` is this namespace's own — another start time for its pid.
 */
export function ownerAlive(owner: SegmentOwner, proc = '/proc'): boolean {
  if (noSuchProcess(owner.pid)) return false;
  // Without our own /proc, /proc/<pid> is some other process: its start time proves nothing.
  if (!procIsOurs(proc)) return true;
  const stat = processStat(owner.pid, proc);
  if (stat?.start === undefined) return !noSuchProcess(owner.pid); // unreadable: dead only if it exited between the two looks
  // A zombie (killed, not yet reaped by its parent) maps nothing any more: its segments are leftovers.
  if (stat.state === 'Z' || stat.state === 'X') return false;
  return stat.start === owner.start;
}

export interface SweepOptions {
  /** Where POSIX shared memory lives (shm_open's directory on Linux). */
  dir?: string;
  /** Where procfs is mounted (default /proc). */
  proc?: string;
  /** Only these kinds (default: all). */
  kinds?: readonly SegmentKind[];
}

/**
 * Unlinks the segments of dead owners (see the file comment for the rules);
 * returns their names, without the leading '/'. Never throws: a directory it
 * cannot read, or an entry removed meanwhile, is skipped.
 */
export function sweepDeadSegments(options: SweepOptions = {}): string[] {
  const dir = options.dir ?? '/dev/shm';
  const me = localOwner();
  const removed: string[] = [];
  // Without a boot id or namespace to compare, no owner can be judged.
  if (me.boot === '00000000' || me.pidns === 0 || me.start === 0) return removed;
  const uid = typeof process.getuid === 'function' ? process.getuid() : -1;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  for (const name of names) {
    const p = parseSegmentName(name);
    if (!p) continue;
    if (options.kinds && !options.kinds.includes(p.kind)) continue;
    const o = p.owner;
    if (o.boot !== me.boot || o.pidns !== me.pidns) continue;
    if (o.pid === me.pid) continue; // ours: we unlink our own
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      if (!st.isFile() || st.uid !== uid) continue;
      if (ownerAlive(o, options.proc)) continue;
      unlinkSync(path);
      removed.push(name);
    } catch {
      // gone meanwhile, or not ours to remove
    }
  }
  return removed;
}
