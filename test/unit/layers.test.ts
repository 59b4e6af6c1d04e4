/**
 * The layer rule of docs/architecture.md: a module imports modules of its
 * own layer or of layers below it, never above. The layers are read from
 * the table between `<!-- layers:begin -->` and `<!-- layers:end -->`
 * (so the document and this check cannot drift apart), the imports from
 * every .ts file under src/, machines/ and cache/ (static, re-exports,
 * side-effect and dynamic imports, type-only ones included: a type
 * dependency is a dependency).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const doc = readFileSync(join(root, 'docs/architecture.md'), 'utf8');

interface Layer {
  rank: number;
  name: string;
  modules: string[];
}

/** The table's rows, top layer first (rank 0). */
function parseLayers(markdown: string): Layer[] {
  const m = /<!-- layers:begin -->([\s\S]*?)<!-- layers:end -->/.exec(markdown);
  if (!m) throw new Error('docs/architecture.md has no layer table');
  const rows = m[1]!.split('\n').filter((l) => l.startsWith('|') && !/^\|\s*(-+|layer)\s*\|/.test(l));
  return rows.map((row, rank) => {
    const cells = row.split('|').map((c) => c.trim());
    return { rank, name: cells[1]!, modules: [...cells[2]!.matchAll(/`([^`]+)`/g)].map((x) => x[1]!) };
  });
}

/** `from -> to` pairs the document allows to go up. */
function parseExceptions(markdown: string): Set<string> {
  return new Set([...markdown.matchAll(/<!-- layers:exceptions (.*?) -->/g)].map((x) => x[1]!.trim()));
}

/** The layer of a file: its most specific module entry (a file, or the longest folder prefix). */
function layerOf(layers: Layer[], file: string): Layer | undefined {
  let best: { layer: Layer; len: number } | undefined;
  for (const layer of layers) {
    for (const mod of layer.modules) {
      const hit = mod.endsWith('/') ? file.startsWith(mod) : file === mod;
      if (hit && (!best || mod.length > best.len)) best = { layer, len: mod.length };
    }
  }
  return best?.layer;
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(root, dir))) {
    const rel = `${dir}/${name}`;
    if (statSync(join(root, rel)).isDirectory()) out.push(...sources(rel));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

/** Relative import specifiers of a TypeScript source, resolved to repository paths (.js → .ts). */
function importsOf(file: string, text: string): string[] {
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\s[^;]*?\sfrom\s+['"]([^'"]+)['"]/gm),
    ...text.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((x) => x[1]!);
  return specs
    .filter((s) => s.startsWith('.'))
    .map((s) => normalize(join(dirname(file), s)).replace(/\.js$/, '.ts'))
    .map((p) => (p.endsWith('.ts') ? p : `${p}/index.ts`));
}

function violations(layers: Layer[], exceptions: Set<string>, files: Array<{ file: string; text: string }>): string[] {
  const bad: string[] = [];
  for (const { file, text } of files) {
    const from = layerOf(layers, file);
    if (!from) continue;
    for (const target of importsOf(file, text)) {
      const to = layerOf(layers, target);
      if (!to || to.rank >= from.rank) continue;
      if (exceptions.has(`${file} -> ${target}`)) continue;
      bad.push(`${file} (${from.name}) imports ${target} (${to.name}, above it)`);
    }
  }
  return bad;
}

describe('layers (docs/architecture.md)', () => {
  const layers = parseLayers(doc);
  const exceptions = parseExceptions(doc);
  const files = ['src', 'machines', 'cache'].flatMap(sources).map((file) => ({ file, text: readFileSync(join(root, file), 'utf8') }));

  it('the table names the layers top to bottom, and every module entry exists', () => {
    expect(layers.map((l) => l.name)).toEqual([
      'Tools',
      'API',
      'Collectives',
      'Transport',
      'Endpoint',
      'Data paths',
      'Endpoint services',
      'GPU runtime',
      'Protocol',
      'Drivers',
      'Base',
    ]);
    for (const l of layers) for (const m of l.modules) expect(statSync(join(root, m)), m).toBeTruthy();
  });

  it('places every source file in a layer', () => {
    expect(files.filter((f) => !layerOf(layers, f.file)).map((f) => f.file)).toEqual([]);
  });

  it('no import goes up a layer (but the documented exceptions)', () => {
    expect(violations(layers, exceptions, files)).toEqual([]);
    for (const e of exceptions) {
      const [from, to] = e.split(' -> ');
      expect(files.find((f) => f.file === from)?.text, `${e} is no longer an import: drop it from the document`).toSatisfy((t: string) =>
        importsOf(from!, t).includes(to!),
      );
    }
  });

  it('catches an import that goes the wrong way (of every kind)', () => {
    const planted = [
      { file: 'src/cuda/driver.ts', text: "import { Endpoint } from '../endpoint.js';" },
      { file: 'src/paths/eager.ts', text: "export { x } from '../endpoint-link.js';" },
      { file: 'cache/handle-pool.ts', text: "import type { Frame } from '../src/paths/data-path.js';" },
      { file: 'src/wire/codec.ts', text: "const m = await import('../transport.js');" },
      { file: 'src/errors.ts', text: "import './cuda/index.js';" },
    ];
    const found = violations(layers, exceptions, planted);
    expect(found).toHaveLength(5);
    expect(found[0]).toBe('src/cuda/driver.ts (Drivers) imports src/endpoint.ts (Endpoint, above it)');
    expect(
      violations(layers, exceptions, [
        { file: 'src/endpoint.ts', text: "import { MatchQueues } from './matching.js';\nimport { x } from './paths/index.js';" },
      ]),
    ).toEqual([]);
  });
});
