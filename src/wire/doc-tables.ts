/**
 * docs/protocol.md's per-frame field tables, rendered from the frame schema
 * (schema.ts). Each table sits between `<!-- frame-table NAME -->` and
 * `<!-- /frame-table -->`; the prose around it is the document's own.
 * `npm run protocol-tables` rewrites them; test/unit/wire/wire-schema.test.ts fails
 * when the committed document is out of step with the schema.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { FrameType } from './frames.js';
import { fixedBytes, HEADER_BYTES, schemaOf, type Field } from './schema.js';

const MAX_SAFE_TEXT = '≤ 2^53 − 1';

interface Row {
  size: string;
  type: string;
  field: string;
  meaning: string;
  validation: string;
}

function joinRule(base: string, rule: string | undefined): string {
  return [base, rule].filter((x): x is string => x !== undefined && x !== '' && x !== '—').join('; ') || '—';
}

function intValidation(f: Extract<Field, { kind: 'u8' | 'u16' | 'u32' }>): string {
  const top = f.kind === 'u8' ? 0xff : f.kind === 'u16' ? 0xffff : 0xffff_ffff;
  const min = f.min ?? 0;
  const max = f.max ?? top;
  if (min > 0 && max < top) return `${min}..${max}`;
  if (min > 0) return `≥ ${min}`;
  if (max < top) return `≤ ${max}`;
  return '—';
}

/** The table rows of one field (a length prefix or presence byte is a row of its own). */
function rowsOf(f: Field): Row[] {
  const one = (size: number | string, type: string, validation: string): Row[] => [
    { size: String(size), type, field: f.name, meaning: f.doc, validation: joinRule(validation, f.rule) },
  ];
  switch (f.kind) {
    case 'u8':
    case 'u16':
    case 'u32':
      return one(fixedBytes(f)!, f.kind, intValidation(f));
    case 'u64':
      return one(8, 'u64 (number)', MAX_SAFE_TEXT);
    case 'big':
      return one(8, 'u64 (bigint)', '—');
    case 'bool':
      return one(1, 'bool', '0 or 1');
    case 'enum':
      return one(1, 'u8', `a known ${f.label}`);
    case 'uuid':
      return one(16, 'uuid', '—');
    case 'bytes':
      return one(f.size, f.label ?? 'bytes', `exactly ${f.size}`);
    case 'string':
      return one(`2 + ${f.sizeVar}`, 'string', `${f.min}..${f.max} bytes`);
    case 'data':
    case 'frame': {
      const V = f.sizeVar;
      return [
        { size: '4', type: 'u32', field: `${f.name}.length`, meaning: V, validation: f.kind === 'frame' ? `≥ ${HEADER_BYTES}; ≤ bytes left` : '≤ bytes left' },
        { size: V, type: 'bytes', field: f.name, meaning: f.doc, validation: joinRule(`exactly ${V} bytes, nothing after`, f.rule) },
      ];
    }
    case 'optional':
      return [
        { size: '1', type: 'bool', field: `${f.name}.present`, meaning: `1: ${f.name} follows`, validation: '0 or 1' },
        { size: String(f.size), type: f.label, field: f.name, meaning: f.doc, validation: joinRule(`only if ${f.name}.present`, f.rule) },
      ];
    case 'u64list': {
      const V = f.sizeVar;
      return [
        { size: '4', type: 'u32', field: `${f.name}.length`, meaning: `${V}, how many follow`, validation: `${f.min}..${f.max}` },
        { size: `8·${V}`, type: `u64 (number) × ${V}`, field: f.name, meaning: f.doc, validation: joinRule(`each ${MAX_SAFE_TEXT}`, f.rule) },
      ];
    }
    case 'extents': {
      const V = f.sizeVar;
      return [
        { size: '2', type: 'u16', field: `${f.name}.length`, meaning: `${V}, how many follow`, validation: `${f.min}..${f.max}` },
        { size: `16·${V}`, type: `(u64 offset, u64 size) × ${V}`, field: f.name, meaning: f.doc, validation: joinRule(`each ${MAX_SAFE_TEXT}`, f.rule) },
      ];
    }
  }
}

/** The wire size of the rows of one field, as the offset of what follows adds it. */
function advance(f: Field): { bytes: number; term?: string } {
  const n = fixedBytes(f);
  if (n !== undefined) return { bytes: n };
  switch (f.kind) {
    case 'string':
      return { bytes: 2, term: f.sizeVar };
    case 'data':
    case 'frame':
      return { bytes: 4, term: f.sizeVar };
    case 'u64list':
      return { bytes: 4, term: `8·${f.sizeVar}` };
    case 'extents':
      return { bytes: 2, term: `16·${f.sizeVar}` };
    case 'optional':
      return { bytes: 1, term: `(${f.size} if ${f.name}.present)` };
    default:
      return { bytes: 0 };
  }
}

/** The markdown field table of frame `type`: offset, size, type, field, meaning, validation. */
export function frameTable(type: FrameType): string {
  const lines = ['| offset | size | type | field | meaning | validation |', '| ------ | ---- | ---- | ----- | ------- | ---------- |'];
  let at = HEADER_BYTES;
  const terms: string[] = [];
  const offset = (extra: number) => [String(at + extra), ...terms].join(' + ');
  const fields = schemaOf(type).fields;
  if (fields.length === 0) return `No fields: the frame is its ${HEADER_BYTES}-byte header.`;
  for (const f of fields) {
    const rows = rowsOf(f);
    // A length prefix or presence byte is the first row; the bytes it counts start after it.
    rows.forEach((r, i) => {
      const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
      lines.push(`| ${offset(i === 0 ? 0 : minPrefix(f))} | ${r.size} | ${r.type} | ${r.field} | ${cell(r.meaning)} | ${cell(r.validation)} |`);
    });
    const a = advance(f);
    at += a.bytes;
    if (a.term !== undefined) terms.push(a.term);
  }
  return lines.join('\n');
}

/** Bytes of the prefix row of a two-row field (length or presence). */
function minPrefix(f: Field): number {
  return f.kind === 'optional' ? 1 : f.kind === 'extents' ? 2 : 4;
}

const BLOCK = /<!-- frame-table ([A-Z_]+) -->\n[\s\S]*?<!-- \/frame-table -->/g;

/**
 * `markdown` with every frame-table block's content rendered afresh from the
 * schema. Throws on a block naming no frame type.
 */
export function renderFrameTables(markdown: string): string {
  return markdown.replace(BLOCK, (_, name: string) => {
    const type = FrameType[name as keyof typeof FrameType];
    if (type === undefined) throw new Error(`frame-table block names no frame type: ${name}`);
    return `<!-- frame-table ${name} -->\n${frameTable(type)}\n<!-- /frame-table -->`;
  });
}

/** The frame types that have a table block in `markdown`. */
export function framesWithTables(markdown: string): string[] {
  return [...markdown.matchAll(BLOCK)].map((m) => m[1]!);
}

/** Rewrites the tables of the document at `path` (docs/protocol.md); returns whether it changed. */
export function writeFrameTables(path: string): boolean {
  const before = readFileSync(path, 'utf8');
  const after = renderFrameTables(before);
  if (after !== before) writeFileSync(path, after);
  return after !== before;
}
