/**
 * Reading what `smcuda run --json` printed: the ranks' JSON lines (each
 * prefixed `[r] ` by the launcher) and the summary (the last line); and
 * whether a process is still there (the launcher tests check that nothing
 * is left behind).
 */
import type { RunReport } from '../../src/cli/run.js';

/** The JSON lines each rank printed, by rank. */
export function rankLines<T>(stdout: string): Map<number, T[]> {
  const out = new Map<number, T[]>();
  for (const line of stdout.split('\n')) {
    const m = /^\[(\d+)\] (\{.*\})$/.exec(line);
    if (!m) continue;
    const r = Number(m[1]);
    out.set(r, [...(out.get(r) ?? []), JSON.parse(m[2]!) as T]);
  }
  return out;
}

/** The --json summary: stdout's last line. */
export function runSummary(stdout: string): RunReport {
  return JSON.parse(stdout.trimEnd().split('\n').at(-1)!) as RunReport;
}

/** Whether a process (or, negative, a process group) still exists (EPERM: it does, another user's). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
