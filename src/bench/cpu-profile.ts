/**
 * Where the time goes: self time per function from V8 CPU profiles
 * (`node --cpu-prof`; forked bench workers inherit the flag, so
 * `node --cpu-prof --cpu-prof-dir=DIR dist/src/cli/main.js bench …` profiles
 * both ranks). Used by `smcuda bench --profile-summary FILE…`.
 */
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  /** 'function (file:line)' */
  where: string;
  selfMs: number;
  /** Share of all samples, idle included. */
  percent: number;
}

export function selfTimes(profile: CpuProfile): SelfTime[] {
  const byNode = new Map(profile.nodes.map((n) => [n.id, n]));
  const totals = new Map<string, number>();
  let all = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    all += us;
    const f = byNode.get(id)?.callFrame;
    const where = f ? `${f.functionName || '(anonymous)'} (${f.url ? basename(f.url) : 'native'}${f.url ? `:${f.lineNumber + 1}` : ''})` : '(unknown)';
    totals.set(where, (totals.get(where) ?? 0) + us);
  });
  return [...totals.entries()]
    .map(([where, us]) => ({ where, selfMs: us / 1000, percent: all > 0 ? (100 * us) / all : 0 }))
    .sort((a, b) => b.selfMs - a.selfMs);
}

/** A text table of the `top` functions by self time in each profile file. */
export function summarizeProfiles(files: string[], top = 25): string {
  const out: string[] = [];
  for (const file of files) {
    const rows = selfTimes(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
    const busy = rows.filter((r) => r.where.startsWith('(idle)') === false && r.where.startsWith('(program)') === false);
    const busyMs = busy.reduce((s, r) => s + r.selfMs, 0);
    out.push(`${basename(file)}: ${busyMs.toFixed(0)} ms busy (idle and (program) excluded below)`);
    for (const r of busy.slice(0, top))
      out.push(`  ${r.selfMs.toFixed(1).padStart(9)} ms  ${((100 * r.selfMs) / busyMs).toFixed(1).padStart(5)} %  ${r.where}`);
    out.push('');
  }
  return out.join('\n');
}
