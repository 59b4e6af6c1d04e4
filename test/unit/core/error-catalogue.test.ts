/**
 * docs/errors.md lists every SMCUDA_* error code the sources can raise, with
 * its meaning, likely cause and fix; and nothing that no longer exists.
 * Environment variables (src/env.ts) share the prefix and are not codes.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CHILD_CONFIG_VARIABLES, ENV_OVERRIDES } from '../../../src/env.js';

const CATALOGUE = 'docs/errors.md';
const HOW_TO_ADD =
  `Add each missing code to ${CATALOGUE} under the section it belongs to, as\n` +
  '  ### `SMCUDA_NEW_CODE`\n' +
  '  `TheErrorClass`. What it means. Likely cause: …. Fix: ….\n' +
  `(or, if it is an environment variable, add it to ENV_OVERRIDES in src/env.ts and to "Not error codes" in ${CATALOGUE})`;

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return tsFiles(p);
    return p.endsWith('.ts') && !p.endsWith('.d.ts') ? [p] : [];
  });
}

function codesInSources(): Map<string, string> {
  const env = new Set<string>([...ENV_OVERRIDES.map((e) => e.name), ...CHILD_CONFIG_VARIABLES]);
  const found = new Map<string, string>(); // code → first file that names it
  for (const root of ['src', 'machines', 'cache']) {
    for (const file of tsFiles(root)) {
      for (const m of readFileSync(file, 'utf8').matchAll(/\bSMCUDA_[A-Z0-9_]*[A-Z0-9]\b/g)) {
        if (!env.has(m[0]) && !found.has(m[0])) found.set(m[0], file);
      }
    }
  }
  // The native addon's codes are the quoted ones (its macros share the prefix but are no codes).
  for (const name of readdirSync('native').filter((n) => /\.(cc|h)$/.test(n))) {
    const file = join('native', name);
    for (const m of readFileSync(file, 'utf8').matchAll(/"(SMCUDA_[A-Z0-9_]*[A-Z0-9])"/g)) {
      if (!env.has(m[1]!) && !found.has(m[1]!)) found.set(m[1]!, file);
    }
  }
  return found;
}

describe(CATALOGUE, () => {
  const text = readFileSync(CATALOGUE, 'utf8');
  const entries = new Map<string, string>();
  const sections = text.split(/^### /m).slice(1);
  for (const s of sections) {
    const m = /^`(SMCUDA_[A-Z0-9_]+)`\n([\s\S]*)$/.exec(s);
    if (m) entries.set(m[1]!, m[2]!.split(/^## /m)[0]!.trim());
  }

  it('has an entry for every code in src/, machines/, cache/ and the native addon', () => {
    const missing = [...codesInSources()].filter(([code]) => !entries.has(code)).map(([code, file]) => `${code} (first named in ${file})`);
    expect(missing, `error codes missing from ${CATALOGUE}:\n  ${missing.join('\n  ')}\n${HOW_TO_ADD}`).toEqual([]);
  });

  it('has no entry for a code the sources no longer have', () => {
    const codes = codesInSources();
    const stale = [...entries.keys()].filter((c) => !codes.has(c));
    expect(stale, `remove these from ${CATALOGUE} (no source names them any more)`).toEqual([]);
  });

  it('each entry says what to do (a fix), in a few sentences', () => {
    for (const [code, body] of entries) {
      expect(body.length, `${code}: the entry is empty`).toBeGreaterThan(60);
      expect(body, `${code}: say the fix (or that it is a bug to report)`).toMatch(/fix|report|handle it|instead/i);
    }
  });

  it('lists the environment variables it leaves out as not codes', () => {
    const notCodes = text.split('## Not error codes')[1] ?? '';
    for (const name of [...ENV_OVERRIDES.map((e) => e.name).filter((n) => n.startsWith('SMCUDA_')), ...CHILD_CONFIG_VARIABLES]) {
      expect(notCodes, `${name}: add it to "Not error codes" in ${CATALOGUE}`).toContain(`\`${name}\``);
    }
  });
});
