/**
 * Whether the npm registry answers from this machine. Tests that download
 * from it live in test/integration/, carry `.registry.` in their file name,
 * and skip visibly (with this reason) where it does not answer.
 */
import { spawnSync } from 'node:child_process';

let cached: string | null | undefined;

/** null when the registry answers `npm ping` within 20 s; otherwise why not. */
export function registryUnreachable(): string | null {
  if (cached !== undefined) return cached;
  const r = spawnSync('npm', ['ping', '--no-audit', '--no-fund'], { encoding: 'utf8', timeout: 20_000 });
  cached =
    r.status === 0
      ? null
      : `the npm registry did not answer \`npm ping\` (${r.error?.message ?? (r.stderr || '').trim().split('\n').pop() ?? `exit ${r.status}`})`;
  return cached;
}
