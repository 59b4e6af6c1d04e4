/**
 * Compiles each frame schema (schema.ts) into the source of one encode and
 * one decode function, JavaScript that calls the Writer/Reader primitives
 * field by field — the code a person would write for that frame, with the
 * ranges and sizes inlined as constants. The source is generated ahead of
 * time into codec.generated.ts (`npm run codec`; a test checks it is
 * current), never compiled at run time: no `new Function`, so the package
 * loads under `node --disallow-code-generation-from-strings` and CSP-like
 * policies.
 *
 * Why generated source and not a generic walk over the field list: a walk
 * (a loop with a switch on each field's kind, same primitives) measured
 * 1.5–2× slower on the hot frames — ns per call, best of 40 rounds, Node 20,
 * the 2-core development machine: encode RGET 1480 against 932, decode RGET
 * 1318 against 854, encode EAGER 8 B 823 against 405, decode EAGER 8 B 655
 * against 315. The generated functions run at the speed of the hand-written
 * codec they replaced (before → after: encode RGET 905 → 923, decode RGET
 * 854 → 905, encode EAGER 507 → 415, decode EAGER 333 → 299, encode FIN 461
 * → 282; within run-to-run noise, which swapping the order reverses).
 * src/bench/codec-microbench.ts measures them.
 * The source is built from the schema's constants only (field names are
 * checked to be identifiers), never from input.
 */
import { writeFileSync } from 'node:fs';
import type { Field, FrameSchema, Relation } from './schema.js';
import { FRAME_SCHEMAS, HEADER_BYTES, MAX_EAGER_BYTES, minBytes } from './schema.js';
import { FrameType, type Frame } from './frames.js';

/** What the generated code calls: supplied by codec.ts. */
export interface CodecPrimitives {
  Writer: new (type: FrameType, size: number) => unknown;
  checkInt(type: FrameType, field: string, v: unknown, min: number, max: number): number;
  checkBig(type: FrameType, field: string, v: unknown): bigint;
  checkBool(type: FrameType, field: string, v: unknown): boolean;
  checkBytes(type: FrameType, field: string, v: unknown, n: number): Uint8Array;
  checkOptional(type: FrameType, field: string, v: unknown, n: number, absent: null | undefined): Uint8Array | null | undefined;
  checkString(type: FrameType, field: string, v: unknown, min: number, max: number): number;
  checkEnum(type: FrameType, field: string, v: unknown, values: Record<string, string | number>, label: string): number;
  checkData(type: FrameType, field: string, v: unknown, min: number, max: number): Uint8Array;
  checkList(type: FrameType, field: string, v: unknown, min: number, max: number): number[];
  checkExtents(type: FrameType, field: string, v: unknown, min: number, max: number): Array<{ offset: number; size: number }>;
  encodeError(type: FrameType, field: string, problem: string): Error;
  decodeError(type: number, field: string, problem: string): Error;
}

export type FrameEncoder = (frame: Frame, uuids: { bytesOf(uuid: string): Uint8Array | undefined } | undefined) => Uint8Array;
export type FrameDecoder = (r: unknown) => Frame;

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * One frame's encoder and decoder, made from the codec's primitives (P) and
 * the schema's constants (K, constsOf): what codec.generated.ts holds per frame type.
 */
export type CodecFactory = (P: CodecPrimitives, K: readonly unknown[]) => [FrameEncoder, FrameDecoder];

/**
 * The values the generated code of `s` refers to by index as K[i] (enum
 * tables, the relation): they are objects of the schema, not source text.
 * The generator and the codec both take them from here, so the indexes agree.
 */
export function constsOf(s: FrameSchema): unknown[] {
  const list: unknown[] = [];
  for (const f of s.fields) if (f.kind === 'enum' && !list.includes(f.values)) list.push(f.values);
  if (s.relation) list.push(s.relation);
  return list;
}

/** Refers to the constants of constsOf by index. */
class Consts {
  constructor(private readonly list: readonly unknown[]) {}
  ref(v: unknown): string {
    const i = this.list.indexOf(v);
    if (i < 0) throw new Error('frame schema: a constant constsOf did not collect');
    return `K[${i}]`;
  }
}

function intRange(f: Extract<Field, { kind: 'u8' | 'u16' | 'u32' }>): [number, number] {
  const top = f.kind === 'u8' ? 0xff : f.kind === 'u16' ? 0xffff : 0xffff_ffff;
  return [f.min ?? 0, f.max ?? top];
}

function encoderSource(s: FrameSchema, K: Consts): string {
  const T = String(s.type);
  const check: string[] = [];
  const write: string[] = [];
  let fixed = HEADER_BYTES;
  const sizes: string[] = [];
  s.fields.forEach((f, i) => {
    const v = `v${i}`;
    const q = JSON.stringify(f.name);
    const get = `f.${f.name}`;
    switch (f.kind) {
      case 'u8':
      case 'u16':
      case 'u32': {
        const [min, max] = intRange(f);
        check.push(`const ${v} = P.checkInt(${T}, ${q}, ${get}${f.default !== undefined ? ` ?? ${f.default}` : ''}, ${min}, ${max});`);
        write.push(`w.${f.kind}(${v});`);
        break;
      }
      case 'u64':
        check.push(`const ${v} = P.checkInt(${T}, ${q}, ${get}, 0, ${MAX_SAFE});`);
        write.push(`w.u64(${v});`);
        break;
      case 'big':
        check.push(`const ${v} = P.checkBig(${T}, ${q}, ${get});`);
        write.push(`w.big(${v});`);
        break;
      case 'bool':
        check.push(`const ${v} = P.checkBool(${T}, ${q}, ${get});`);
        write.push(`w.u8(${v} ? 1 : 0);`);
        break;
      case 'enum':
        check.push(`const ${v} = P.checkEnum(${T}, ${q}, ${get}, ${K.ref(f.values)}, ${JSON.stringify(f.label)});`);
        write.push(`w.u8(${v});`);
        break;
      case 'bytes':
        check.push(`const ${v} = P.checkBytes(${T}, ${q}, ${get}, ${f.size});`);
        write.push(`w.raw(${v});`);
        break;
      case 'uuid':
        // The endpoint's UuidNames validates and converts a device's UUID once, not per frame.
        write.push(
          `{ const u = ${get}; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid(${q}, u); }`,
        );
        break;
      case 'string':
        // The common empty string (a FIN OK's message) skips the checks.
        check.push(`const ${v} = ${f.min === 0 ? `${get} === '' ? 0 : ` : ''}P.checkString(${T}, ${q}, ${get}, ${f.min}, ${f.max});`);
        sizes.push(v);
        write.push(`w.str(${get}, ${v});`);
        break;
      case 'data':
      case 'frame':
        check.push(`const ${v} = P.checkData(${T}, ${q}, ${get}, ${f.kind === 'frame' ? HEADER_BYTES : 0}, ${MAX_EAGER_BYTES});`);
        sizes.push(`${v}.byteLength`);
        write.push(`w.u32(${v}.byteLength);`, `w.raw(${v});`);
        break;
      case 'optional': {
        const absent = String(f.absent);
        check.push(`const ${v} = P.checkOptional(${T}, ${q}, ${get}, ${f.size}, ${absent});`);
        sizes.push(`(${v} === ${absent} ? 0 : ${f.size})`);
        write.push(`if (${v} === ${absent}) w.u8(0); else { w.u8(1); w.raw(${v}); }`);
        break;
      }
      case 'u64list':
        check.push(`const ${v} = P.checkList(${T}, ${q}, ${get}, ${f.min}, ${f.max});`);
        sizes.push(`8 * ${v}.length`);
        write.push(`w.u32(${v}.length);`, `for (let i = 0; i < ${v}.length; i++) w.u64(${v}[i]);`);
        break;
      case 'extents':
        check.push(`const ${v} = P.checkExtents(${T}, ${q}, ${get}, ${f.min}, ${f.max});`);
        sizes.push(`16 * ${v}.length`);
        write.push(`w.u16(${v}.length);`, `for (let i = 0; i < ${v}.length; i++) { w.u64(${v}[i].offset); w.u64(${v}[i].size); }`);
        break;
    }
    fixed += minBytes(f);
  });
  if (s.relation) check.push(`{ const bad = ${K.ref(s.relation)}(f, true); if (bad !== undefined) throw P.encodeError(${T}, bad.field, bad.problem); }`);
  return [...check, `const w = new P.Writer(${T}, ${[fixed, ...sizes].join(' + ')});`, ...write, 'return w.done();'].join('\n');
}

function decoderSource(s: FrameSchema, K: Consts): string {
  const T = String(s.type);
  const out: string[] = [];
  const props: string[] = [`type: ${T}`];
  const late: string[] = [];
  s.fields.forEach((f, i) => {
    const v = `v${i}`;
    const q = JSON.stringify(f.name);
    switch (f.kind) {
      case 'u8':
      case 'u16':
      case 'u32': {
        const [min, max] = intRange(f);
        out.push(`const ${v} = r.${f.kind}(${q});`);
        if (min > 0) out.push(`if (${v} < ${min}) throw P.decodeError(${T}, ${q}, 'must be at least ${min}, got ' + ${v});`);
        const top = f.kind === 'u8' ? 0xff : f.kind === 'u16' ? 0xffff : 0xffff_ffff;
        if (max < top) out.push(`if (${v} > ${max}) throw P.decodeError(${T}, ${q}, 'must be at most ${max}, got ' + ${v});`);
        break;
      }
      case 'u64':
        out.push(`const ${v} = r.u64(${q});`);
        break;
      case 'big':
        out.push(`const ${v} = r.big(${q});`);
        break;
      case 'bool':
        out.push(`const ${v} = r.bool(${q});`);
        break;
      case 'enum': {
        const names = Object.values(f.values)
          .filter((x) => typeof x === 'number')
          .join(', ');
        out.push(
          `const ${v} = r.u8(${q});`,
          `if (${K.ref(f.values)}[${v}] === undefined) throw P.decodeError(${T}, ${q}, ${JSON.stringify(`must be a ${f.label} (${names}), got `)} + ${v});`,
        );
        break;
      }
      case 'bytes':
        out.push(`const ${v} = r.copy(${q}, ${f.size});`);
        break;
      case 'uuid':
        out.push(`const ${v} = r.uuid(${q});`);
        break;
      case 'string':
        out.push(`const ${v} = r.str(${q}, ${f.min}, ${f.max});`);
        break;
      case 'data':
        out.push(`const ${v} = r.subview(${q}, r.u32(${JSON.stringify(`${f.name}.length`)}));`);
        break;
      case 'frame':
        out.push(
          `const n${i} = r.u32(${q});`,
          `if (n${i} < ${HEADER_BYTES}) throw P.decodeError(${T}, ${q}, 'must be a whole frame of at least ${HEADER_BYTES} bytes, got ' + n${i});`,
          `const ${v} = r.subview(${q}, n${i});`,
        );
        break;
      case 'optional':
        out.push(`const ${v} = r.bool(${JSON.stringify(`${f.name}.present`)}) ? r.copy(${q}, ${f.size}) : ${String(f.absent)};`);
        if (f.absent === undefined) {
          late.push(`if (${v} !== undefined) o.${f.name} = ${v};`);
          return;
        }
        break;
      case 'u64list': {
        const qn = JSON.stringify(`${f.name}.length`);
        out.push(
          `const n${i} = r.u32(${qn});`,
          `if (n${i} < ${f.min} || n${i} > ${f.max}) throw P.decodeError(${T}, ${qn}, 'must be ${f.min}..${f.max}, got ' + n${i});`,
          `const ${v} = new Array(n${i});`,
          `for (let i = 0; i < n${i}; i++) ${v}[i] = r.u64(${JSON.stringify(`${f.name}[]`)});`,
        );
        break;
      }
      case 'extents': {
        const qn = JSON.stringify(`${f.name}.length`);
        const qe = JSON.stringify(`${f.name}[]`);
        out.push(
          `const n${i} = r.u16(${qn});`,
          `if (n${i} < ${f.min} || n${i} > ${f.max}) throw P.decodeError(${T}, ${qn}, 'must be ${f.min}..${f.max}, got ' + n${i});`,
          `const ${v} = new Array(n${i});`,
          `for (let i = 0; i < n${i}; i++) { const offset = r.u64(${qe}); ${v}[i] = { offset, size: r.u64(${qe}) }; }`,
        );
        break;
      }
    }
    props.push(`${f.name}: ${v}`);
  });
  out.push(`const o = { ${props.join(', ')} };`, ...late);
  if (s.relation) out.push(`{ const bad = ${K.ref(s.relation)}(o, false); if (bad !== undefined) throw P.decodeError(${T}, bad.field, bad.problem); }`);
  out.push('return o;');
  return out.join('\n');
}

/** The generated source of one frame's encoder and decoder (function bodies; `f`, `uuids`, `r`, `P`, `K` in scope). */
export function frameSource(s: FrameSchema): { encode: string; decode: string } {
  for (const f of s.fields) if (!IDENT.test(f.name)) throw new Error(`frame schema: field name ${JSON.stringify(f.name)} is not an identifier`);
  const K = new Consts(constsOf(s));
  return { encode: encoderSource(s, K), decode: decoderSource(s, K) };
}

/**
 * A frame's fields by name and kind (and whether it has a relation): the
 * generated file records it per type, and the codec compares at load, so a
 * file left stale by a schema change fails loudly instead of encoding the old
 * layout. The test that regenerates the file catches every other change.
 */
export function layoutOf(s: FrameSchema): string {
  return s.fields.map((f) => `${f.name}:${f.kind}`).join(',') + (s.relation ? ' +relation' : '');
}

const indent = (body: string, pad: string): string =>
  body
    .split('\n')
    .map((l) => pad + l)
    .join('\n');

/** The text of codec.generated.ts: one CodecFactory per frame schema, by type number. */
export function codecModuleSource(schemas: readonly FrameSchema[] = FRAME_SCHEMAS): string {
  const parts = [
    '// @ts-nocheck: generated JavaScript; its types are the CodecFactory each function is declared as.',
    '/**',
    " * The frame codec's encoders and decoders, generated from src/wire/schema.ts by",
    ' * src/wire/compile.ts: do not edit; after changing the schema run `npm run codec`',
    ' * (test/unit/wire/codec-generated.test.ts fails while this file is stale).',
    ' */',
    "import type { CodecFactory } from './compile.js';",
  ];
  const names: string[] = [];
  const layouts: string[] = [];
  for (const s of schemas) {
    const name = FrameType[s.type];
    if (name === undefined || !IDENT.test(name)) throw new Error(`frame schema: type ${s.type} has no FrameType name`);
    const src = frameSource(s);
    names.push(`  ${s.type}: ${name},`);
    layouts.push(`  ${s.type}: ${JSON.stringify(layoutOf(s))},`);
    parts.push(
      '',
      `const ${name}: CodecFactory = (P, K) => [`,
      '  function encode(f, uuids) {',
      indent(src.encode, '    '),
      '  },',
      '  function decode(r) {',
      indent(src.decode, '    '),
      '  },',
      '];',
    );
  }
  parts.push(
    '',
    "/** Each frame type's CodecFactory, by type number. */",
    'export const CODEC_FACTORIES: Readonly<Record<number, CodecFactory>> = {',
    ...names,
    '};',
    '',
    '/** The layout (compile.ts layoutOf) each factory was generated from, by type number. */',
    'export const CODEC_LAYOUTS: Readonly<Record<number, string>> = {',
    ...layouts,
    '};',
    '',
  );
  return parts.join('\n');
}

/** Writes codec.generated.ts (`npm run codec`). */
export function writeCodecModule(path: string): void {
  writeFileSync(path, codecModuleSource());
}

export type { Relation };
