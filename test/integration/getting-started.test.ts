/**
 * docs/getting-started.md runs as written: every `smcuda run -n N FILE`
 * command on the page runs the js block whose first line names FILE, saved
 * under that name in a project where `smcuda` is installed (a node_modules
 * link to this checkout), with the compiled `smcuda` command; every rank
 * must succeed and print what the page says. On the simulated driver here.
 * Imports dist/: build first (`npx tsc -p .`).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { smcuda } from '../helpers/cli.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PAGE = readFileSync(join(ROOT, 'docs/getting-started.md'), 'utf8');

/** The page's fenced blocks of one language, in order. */
function blocks(lang: string): string[] {
  return [...PAGE.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, 'gm'))].map((m) => m[1]!);
}

/** The js blocks by the file their first line names (`// train.mjs: …`). */
const files = new Map(blocks('js').map((b) => [/^\/\/ (\S+\.mjs)\b/.exec(b)?.[1] ?? '', b]));
/** The `smcuda run -n N FILE` commands of the sh blocks. */
const runs = blocks('sh').flatMap((b) => [...b.matchAll(/^smcuda run -n (\d+) (\S+\.mjs)$/gm)].map((m) => ({ ranks: Number(m[1]), file: m[2]! })));

const project = mkdtempSync(join(tmpdir(), 'smcuda-getting-started-'));
mkdirSync(join(project, 'node_modules'));
symlinkSync(ROOT, join(project, 'node_modules', 'smcuda'), 'dir');
afterAll(() => rmSync(project, { recursive: true, force: true }));

/** Runs a command of the page; returns each rank's lines (without the `[r] ` prefix). */
async function runPage(ranks: number, file: string): Promise<Map<number, string[]>> {
  const code = files.get(file);
  expect(code, `no js block of getting-started.md starts with "// ${file}"`).toBeDefined();
  writeFileSync(join(project, file), code!);
  const r = await smcuda(['run', '-n', String(ranks), join(project, file)], { SMCUDA_SIM: '' });
  expect(r.code, `${file}:\n${r.stdout}\n${r.stderr}`).toBe(0);
  const lines = new Map<number, string[]>();
  for (const m of r.stdout.matchAll(/^\[(\d+)\] (.*)$/gm)) lines.set(Number(m[1]), [...(lines.get(Number(m[1])) ?? []), m[2]!]);
  return lines;
}

describe('docs/getting-started.md', () => {
  it('has the two commands, each with its file', () => {
    expect(runs).toEqual([
      { ranks: 2, file: 'allreduce.mjs' },
      { ranks: 4, file: 'train.mjs' },
    ]);
    for (const { file } of runs) expect([...files.keys()]).toContain(file);
  });

  it('allreduce.mjs: smcuda run → fromEnv → allreduce → close prints what the page shows, on every rank', async () => {
    const lines = await runPage(2, 'allreduce.mjs');
    const shown = blocks('text')[0]!.trim().split('\n');
    expect([...lines.entries()].flatMap(([r, ls]) => ls.map((l) => `[${r}] ${l}`)).sort()).toEqual(shown);
  }, 120_000);

  it('train.mjs: a training loop of 4 ranks (broadcast, allreduce avg, allgather, point to point) in at most 60 lines, every value checked', async () => {
    expect(files.get('train.mjs')!.trimEnd().split('\n').length).toBeLessThanOrEqual(60);
    const lines = await runPage(4, 'train.mjs');
    for (let r = 0; r < 4; r++) expect(lines.get(r)).toEqual([expect.stringMatching(new RegExp(`^rank ${r}: 3 steps, parameters equal on every rank \\(`))]);
  }, 120_000);
});
