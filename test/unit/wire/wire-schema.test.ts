/**
 * The frame schema (src/wire/schema.ts) against everything made from it: the
 * compiled codec (every frame of every type round-trips; decoding refuses
 * truncated, oversized and garbage input with a ProtocolError and nothing
 * else), the RGET fast path's offsets, the TypeScript view in frames.ts, and
 * docs/protocol.md's field tables.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import {
  decodeFrame,
  deviceUuidFromBytes,
  encodeFrame,
  FRAME_SCHEMAS,
  fieldOffset,
  FrameType,
  HandleKind,
  minFrameBytes,
  WIRE_VERSION,
  type Field,
  type Frame,
  type FrameSchema,
} from '../../../src/wire/index.js';
import { framesWithTables, frameTable, renderFrameTables } from '../../../src/wire/doc-tables.js';
import { ProtocolError } from '../../../src/errors.js';

const PROTOCOL_MD = new URL('../../../docs/protocol.md', import.meta.url).pathname;

/** Integers biased to small values, so that relations between fields (offset + length ≤ allocSize) hold often. */
const int = (min: number, max: number) => fc.oneof(fc.integer({ min, max: Math.min(max, min + 1000) }), fc.integer({ min, max }));
const utf8 = (minBytes: number, maxBytes: number) =>
  fc
    .string({ unit: 'binary', minLength: minBytes, maxLength: Math.min(Math.floor(maxBytes / 4), 64) })
    .filter((s) => Buffer.byteLength(s) >= minBytes && Buffer.byteLength(s) <= maxBytes);
const uuid = fc.oneof(
  fc.constant(''),
  fc
    .uint8Array({ minLength: 16, maxLength: 16 })
    .filter((b) => b.some((x) => x !== 0))
    .map(deviceUuidFromBytes),
);

/** Every valid value of one field, from its schema alone. */
function fieldArb(f: Field): fc.Arbitrary<unknown> {
  switch (f.kind) {
    case 'u8':
    case 'u16':
    case 'u32': {
      const top = f.kind === 'u8' ? 0xff : f.kind === 'u16' ? 0xffff : 0xffff_ffff;
      return int(f.min ?? 0, f.max ?? top);
    }
    case 'u64':
      return int(0, Number.MAX_SAFE_INTEGER);
    case 'big':
      return fc.bigInt({ min: 0n, max: (1n << 64n) - 1n });
    case 'bool':
      return fc.boolean();
    case 'enum':
      return fc.constantFrom(...Object.values(f.values).filter((v) => typeof v === 'number'));
    case 'uuid':
      return uuid;
    case 'bytes':
      return fc.uint8Array({ minLength: f.size, maxLength: f.size });
    case 'string':
      return utf8(f.min, f.max);
    case 'data':
      return fc.uint8Array({ maxLength: 100 });
    case 'frame':
      return fc.uint8Array({ minLength: 4, maxLength: 100 });
    case 'optional':
      return fc.option(fc.uint8Array({ minLength: f.size, maxLength: f.size }), { nil: f.absent });
    case 'u64list':
      return fc.array(int(0, Number.MAX_SAFE_INTEGER), { minLength: f.min, maxLength: Math.min(f.max, 20) });
    case 'extents':
      // Contiguous from 0, as an FD_OFFER's chunks must be (see FIXUPS for the rest of its relation).
      return fc.array(int(1, 2 ** 40), { minLength: f.min, maxLength: Math.min(f.max, 8) }).map((sizes) => {
        let at = 0;
        return sizes.map((size) => ({ offset: (at += size) - size, size }));
      });
  }
}

/**
 * Relations that tie several fields together, made to hold rather than
 * filtered for (random values would almost never satisfy them).
 */
const FIXUPS: Partial<Record<FrameType, (f: Record<string, unknown>) => Record<string, unknown>>> = {
  [FrameType.FD_OFFER]: (f) => {
    const chunks = f.chunks as { offset: number; size: number }[];
    if (f.kind === HandleKind.POOL) return { ...f, chunks: [], size: Math.max(1, f.size as number) };
    const tiled = chunks.length > 0 ? chunks : [{ offset: 0, size: 1 }];
    return { ...f, poolId: 0, chunks: tiled, size: tiled.reduce((n, c) => n + c.size, 0) };
  },
};

/** Frames of one type, generated from its schema; an absent `undefined` field is left out, as decode leaves it out. */
function schemaArb(s: FrameSchema): fc.Arbitrary<Frame> {
  const parts: Record<string, fc.Arbitrary<unknown>> = { type: fc.constant(s.type) };
  for (const f of s.fields) parts[f.name] = fieldArb(f);
  return fc
    .record(parts)
    .map((r) => FIXUPS[s.type]?.(r) ?? r)
    .map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as unknown as Frame)
    .filter((f) => s.relation?.(f as unknown as Record<string, unknown>, true) === undefined);
}

const anyFrame = fc.oneof(...FRAME_SCHEMAS.map(schemaArb));

function onlyProtocolError(fn: () => unknown): ProtocolError | undefined {
  try {
    fn();
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    return e as ProtocolError;
  }
}

describe('the schema covers the wire', () => {
  it('every FrameType has a schema, once', () => {
    const types = Object.values(FrameType).filter((v): v is FrameType => typeof v === 'number');
    expect(FRAME_SCHEMAS.map((s) => s.type).sort((a, b) => a - b)).toEqual(types.sort((a, b) => a - b));
  });

  // The TypeScript view (frames.ts) and the schema name the same fields: a
  // missing or extra key here fails to compile, a field missing from the schema fails the test.
  type Keys<T extends FrameType> = Exclude<keyof Extract<Frame, { type: T }>, 'type'>;
  const VIEW: { [T in FrameType]: Record<Keys<T>, true> } = {
    [FrameType.HELLO]: { version: true, pid: true, peerId: true, deviceUuid: true, nonce: true, features: true },
    [FrameType.PROOF]: { proof: true },
    [FrameType.IPC_REQ]: { attempt: true, deviceUuid: true, probe: true },
    [FrameType.IPC_ACK]: { attempt: true, ok: true, deviceUuid: true, probe: true },
    [FrameType.IPC_NOTREADY]: { attempt: true },
    [FrameType.IPC_CONFIRM]: { attempt: true },
    [FrameType.IPC_ABORT]: { reason: true },
    [FrameType.EAGER]: { tag: true, seq: true, fromDevice: true, data: true },
    [FrameType.RGET]: {
      tag: true,
      seq: true,
      kind: true,
      identity: true,
      base: true,
      allocSize: true,
      offset: true,
      length: true,
      bufferId: true,
      deviceUuid: true,
      event: true,
    },
    [FrameType.FIN]: { seq: true, status: true, message: true },
    [FrameType.CANCEL]: { seq: true },
    [FrameType.FINS]: { seqs: true },
    [FrameType.CREDIT]: { consumed: true },
    [FrameType.STAGE_BEGIN]: { tag: true, seq: true, length: true, chunkSize: true, slots: true },
    [FrameType.STAGE_CHUNK]: { seq: true, slot: true, offset: true, length: true },
    [FrameType.STAGE_ACK]: { seq: true, slot: true },
    [FrameType.INVALIDATE]: { deviceUuid: true, base: true, bufferId: true },
    [FrameType.FD_OFFER]: { kind: true, bufferId: true, deviceUuid: true, base: true, size: true, poolId: true, exportData: true, chunks: true },
    [FrameType.FD_POOL]: { poolId: true, deviceUuid: true },
    [FrameType.FD_RELEASE]: { kind: true, id: true, base: true },
    [FrameType.FD_DESCRIPTOR]: { kind: true, id: true, base: true, index: true },
    [FrameType.SEGMENT]: { kind: true, bytes: true },
    [FrameType.CLOSE]: { reason: true },
    [FrameType.REG_OFFER]: { regId: true, kind: true, deviceUuid: true, base: true, allocSize: true, offset: true, length: true, bufferId: true, handle: true },
    [FrameType.REG_RELEASE]: { regId: true },
    [FrameType.PT_OFFER]: { ptId: true, role: true, regId: true, offset: true, length: true, flagRegId: true, slot: true },
    [FrameType.PT_FAIL]: { ptId: true, reason: true },
    [FrameType.REG_FAIL]: { regId: true, reason: true },
    [FrameType.RING_OFFER]: { capacity: true },
    [FrameType.RING_SWITCH]: {},
    [FrameType.DOORBELL]: {},
    [FrameType.SPILL]: { seq: true, frame: true },
  };
  it.each(FRAME_SCHEMAS.map((s) => [FrameType[s.type], s] as const))('%s: the schema has exactly the fields of the TypeScript view', (_, s) => {
    expect(s.fields.map((f) => f.name).sort()).toEqual(Object.keys(VIEW[s.type]).sort());
  });

  it("RGET's restamped fields sit where the fast path writes them, and the smallest sizes are the documented ones", () => {
    expect(fieldOffset(FrameType.RGET, 'tag')).toBe(4);
    expect(fieldOffset(FrameType.RGET, 'seq')).toBe(8);
    expect(fieldOffset(FrameType.RGET, 'offset')).toBe(97);
    expect(minFrameBytes(FrameType.RGET)).toBe(138);
    expect(minFrameBytes(FrameType.EAGER)).toBe(21);
    expect(minFrameBytes(FrameType.SPILL)).toBe(12);
    expect(() => fieldOffset(FrameType.HELLO, 'nonce')).toThrow(/fixed offset/);
  });
});

describe('the codec compiled from the schema', () => {
  describe.each(FRAME_SCHEMAS.map((s) => [FrameType[s.type], s] as const))('%s', (_, s) => {
    test.prop([schemaArb(s)], { numRuns: 60 })('decode(encode(f)) is f, and the size is what the schema says', (f) => {
      const bytes = encodeFrame(f);
      expect(bytes.byteLength).toBeGreaterThanOrEqual(minFrameBytes(s.type));
      expect(decodeFrame(bytes)).toEqual(f);
    });
  });

  test.prop([anyFrame, fc.nat()], { numRuns: 300 })('a truncated frame is refused with a ProtocolError', (f, cut) => {
    const bytes = encodeFrame(f);
    expect(onlyProtocolError(() => decodeFrame(bytes.subarray(0, cut % bytes.byteLength)))?.code).toBe('SMCUDA_PROTOCOL');
  });

  test.prop([anyFrame, fc.uint8Array({ minLength: 1, maxLength: 64 })], { numRuns: 300 })(
    'an oversized frame (bytes after the last field) is refused',
    (f, extra) => {
      const bytes = encodeFrame(f);
      const longer = new Uint8Array(bytes.byteLength + extra.byteLength);
      longer.set(bytes);
      longer.set(extra, bytes.byteLength);
      expect(onlyProtocolError(() => decodeFrame(longer))?.message).toMatch(/trailing bytes/);
    },
  );

  test.prop([anyFrame, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 1, max: 255 })), { minLength: 1, maxLength: 4 })], { numRuns: 500 })(
    'garbage: a frame with bytes changed is refused with a ProtocolError, or decodes to a frame that encodes to exactly those bytes',
    (f, flips) => {
      const bytes = encodeFrame(f).slice();
      for (const [at, x] of flips) bytes[at % bytes.byteLength]! ^= x;
      let back: Frame | undefined;
      if (onlyProtocolError(() => (back = decodeFrame(bytes))) === undefined) expect(encodeFrame(back!)).toEqual(bytes);
    },
  );

  test.prop([fc.constantFrom(...FRAME_SCHEMAS.map((s) => s.type)), fc.uint8Array({ maxLength: 200 })], { numRuns: 500 })(
    'random bodies behind a valid header: a ProtocolError, never anything else',
    (type, body) => {
      const bytes = new Uint8Array(4 + body.byteLength);
      bytes.set([0x53, WIRE_VERSION, type, 0]);
      bytes.set(body, 4);
      let back: Frame | undefined;
      if (onlyProtocolError(() => (back = decodeFrame(bytes))) === undefined) expect(encodeFrame(back!)).toEqual(bytes);
    },
  );
});

describe('docs/protocol.md', () => {
  const doc = readFileSync(PROTOCOL_MD, 'utf8');

  it('has the field tables the schema renders (run `npm run protocol-tables` after changing the schema)', () => {
    expect(renderFrameTables(doc)).toBe(doc);
  });

  it('has a table for every frame type with fields', () => {
    const withFields = FRAME_SCHEMAS.filter((s) => s.fields.length > 0).map((s) => FrameType[s.type]);
    expect(framesWithTables(doc).sort()).toEqual(withFields.sort());
  });

  it('a table gives offsets after a variable part in terms of its size', () => {
    expect(frameTable(FrameType.HELLO)).toContain('| 27 + P | 32 | bytes | nonce |');
    expect(frameTable(FrameType.RGET)).toContain('| 138 | 64 | handle | event |');
  });

  it('a stale table is rewritten', () => {
    const stale = doc.replace('| 105 | 8 | u64 (number) | length |', '| 106 | 8 | u64 (number) | length |');
    expect(stale).not.toBe(doc);
    expect(renderFrameTables(stale)).toBe(doc);
  });
});
