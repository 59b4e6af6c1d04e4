/**
 * The installed package's version, read once from its package.json (dist/src
 * -> two levels up; src -> one): ranks of one job compare it at set-up.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

export function packageVersion(): string {
  if (cached !== undefined) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'smcuda' && pkg.version) return (cached = pkg.version);
    }
    dir = dirname(dir);
  }
  throw new Error('smcuda: cannot find the package.json of smcuda above this file');
}
