/**
 * The frame codec is generated ahead of time (src/wire/compile.ts writes
 * src/wire/codec.generated.ts; `npm run codec`) instead of compiled with
 * `new Function` at load. The committed file must be what the schema
 * generates now, and a file left stale by a schema change must fail at load,
 * not encode an old layout.
 */
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { codecModuleSource, constsOf, frameSource, layoutOf } from '../../../src/wire/compile.js';
import { FrameType } from '../../../src/wire/frames.js';
import { FRAME_SCHEMAS, schemaOf } from '../../../src/wire/schema.js';

const GENERATED = new URL('../../../src/wire/codec.generated.ts', import.meta.url);

afterEach(() => {
  vi.doUnmock('../../../src/wire/codec.generated.js');
  vi.resetModules();
});

describe('src/wire/codec.generated.ts', () => {
  it('is what the schema generates (run `npm run codec` after changing the schema)', () => {
    expect(readFileSync(GENERATED, 'utf8')).toBe(codecModuleSource());
  });

  it('has one factory and one layout per frame type of the schema', async () => {
    const { CODEC_FACTORIES, CODEC_LAYOUTS } = await import('../../../src/wire/codec.generated.js');
    for (const s of FRAME_SCHEMAS) {
      expect(typeof CODEC_FACTORIES[s.type], FrameType[s.type]).toBe('function');
      expect(CODEC_LAYOUTS[s.type], FrameType[s.type]).toBe(layoutOf(s));
    }
  });

  it('a layout that differs from the schema fails the codec at load, naming the frame and the fix', async () => {
    vi.resetModules();
    vi.doMock('../../../src/wire/codec.generated.js', async (load) => {
      const real = await load<typeof import('../../../src/wire/codec.generated.js')>();
      return { ...real, CODEC_LAYOUTS: { ...real.CODEC_LAYOUTS, [FrameType.FIN]: 'seq:u64' } };
    });
    await expect(import('../../../src/wire/codec.js')).rejects.toThrow(/codec\.generated\.ts is stale for frame type FIN .*npm run codec/);
  });

  it('a frame type without generated code fails the codec at load', async () => {
    vi.resetModules();
    vi.doMock('../../../src/wire/codec.generated.js', async (load) => {
      const real = await load<typeof import('../../../src/wire/codec.generated.js')>();
      const factories = { ...real.CODEC_FACTORIES };
      delete factories[FrameType.RGET];
      return { ...real, CODEC_FACTORIES: factories };
    });
    await expect(import('../../../src/wire/codec.js')).rejects.toThrow(/stale for frame type RGET/);
  });
});

describe('compile.ts', () => {
  it('refers to each enum table and relation of a frame by its index in constsOf', () => {
    const fin = schemaOf(FrameType.FIN);
    const K = constsOf(fin);
    const src = frameSource(fin);
    for (const [i, k] of K.entries()) expect(`${src.encode}\n${src.decode}`, String(k)).toContain(`K[${i}]`);
    expect(`${src.encode}\n${src.decode}`).not.toContain(`K[${K.length}]`);
  });

  it('refuses a field name that is not an identifier (the source is built from the schema only)', () => {
    const fin = schemaOf(FrameType.FIN);
    const bad = { ...fin, fields: [{ ...fin.fields[0]!, name: 'seq; evil()' }, ...fin.fields.slice(1)] };
    expect(() => frameSource(bad as never)).toThrow(/is not an identifier/);
  });
});
