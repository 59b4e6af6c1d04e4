/**
 * The docs that ship in the package say nothing that leads nowhere: every
 * relative link in README.md and docs/**.md resolves to a file in the packed
 * file list (`npm pack --dry-run`: so never to the unshipped test/ tree),
 * with its #anchor a heading of the target; and every test file the docs
 * name exists in this checkout.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const packed: string[] = (
  JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { encoding: 'utf8', maxBuffer: 64 << 20 }))[0].files as { path: string }[]
).map((f) => f.path);
const shipped = new Set(packed);
const docs = packed.filter((p) => p.endsWith('.md'));

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[`*_~]/g, (c) => (c === '_' ? '_' : ''))
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

const anchorCache = new Map<string, Set<string>>();
function anchors(file: string): Set<string> {
  let known = anchorCache.get(file);
  if (known === undefined) anchorCache.set(file, (known = readAnchors(file)));
  return known;
}

function readAnchors(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '');
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of text.matchAll(/<a (?:name|id)="([^"]+)"/g)) out.add(m[1]!);
  return out;
}

/** Relative links outside code: [text](target) and [ref]: target. */
function links(file: string): string[] {
  const text = readFileSync(file, 'utf8')
    .replace(/^```[\s\S]*?^```/gm, '')
    .replace(/`[^`\n]*`/g, '');
  const out: string[] = [];
  for (const m of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push(m[1]!);
  for (const m of text.matchAll(/^\[[^\]]+\]:\s+(\S+)/gm)) out.push(m[1]!);
  return out.filter((l) => !/^[a-z][a-z0-9+.-]*:/i.test(l) && !l.startsWith('//'));
}

describe('shipped docs', () => {
  it('are in the package (README.md and docs/)', () => {
    expect(docs).toContain('README.md');
    expect(docs).toContain('docs/errors.md');
    // The generated API reference stays in the repository (linked from the README by URL): it
    // would put a consumer's node_modules over 10 MB; the shipped .d.ts carry the same doc comments.
    expect(docs.some((d) => d.startsWith('docs/api/'))).toBe(false);
  });

  it('link only to files the package ships, and to headings that exist', () => {
    const broken: string[] = [];
    for (const doc of docs) {
      for (const link of links(doc)) {
        const [path, anchor] = link.split('#') as [string, string | undefined];
        const target = path === '' ? doc : normalize(join(dirname(doc), decodeURIComponent(path))).replace(/\/$/, '');
        const isDir = packed.some((p) => p.startsWith(`${target}/`));
        if (!shipped.has(target) && !isDir) {
          broken.push(
            `${doc}: ${link} → ${target} is not in the package${target.startsWith('test/') ? ' (tests are not shipped: name the file in text, or link the docs)' : ''}`,
          );
          continue;
        }
        if (anchor && target.endsWith('.md') && !anchors(target).has(anchor)) broken.push(`${doc}: ${link} → no heading #${anchor} in ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('name only test files that exist', () => {
    const stale: string[] = [];
    for (const doc of docs) {
      for (const m of readFileSync(doc, 'utf8').matchAll(/\btest\/[\w./-]+\.(?:ts|mjs|js|c)\b/g)) {
        if (!existsSync(m[0])) stale.push(`${doc}: ${m[0]}`);
      }
    }
    expect(stale).toEqual([]);
  });

  it('cite no file that does not exist (ANCHORS.md is not part of smcuda)', () => {
    for (const doc of docs) expect(readFileSync(doc, 'utf8'), doc).not.toMatch(/ANCHORS\.md/);
  });
});
