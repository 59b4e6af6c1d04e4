/**
 * Removes simulator segments left in /dev/shm by processes that died without
 * running their exit hook (SIGKILL, a crash). Segment names carry the owner's
 * pid (ipc-handle.ts), so a segment whose owner is gone is garbage.
 *
 * Never run automatically: in a container with its own pid namespace that
 * shares /dev/shm with others, a live owner elsewhere looks dead from here.
 * Call it from test set-up or tooling that knows the machine is its own.
 */
import { readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { SIM_SHM_PREFIX } from './ipc-handle.js';

/** Unlinks the segments of dead owners; returns their names (without the leading '/'). */
export function sweepSimSegments(dir = '/dev/shm'): string[] {
  const prefix = SIM_SHM_PREFIX.slice(1);
  const pattern = new RegExp(`^${prefix}(\\d+)-`);
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed; // no /dev/shm here: nothing to sweep
  }
  for (const name of names) {
    const m = pattern.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || isAlive(pid)) continue;
    try {
      unlinkSync(join(dir, name));
      removed.push(name);
    } catch {
      // removed meanwhile by someone else
    }
  }
  return removed;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'; // exists, owned by another user
  }
}
