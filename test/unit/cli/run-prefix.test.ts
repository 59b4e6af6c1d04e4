/** `smcuda run`'s output: each line whole, with its rank in front, however the bytes arrive. */
import { PassThrough } from 'node:stream';
import { fc, it } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { LinePrefixer, pipePrefixed } from '../../../src/cli/run-prefix.js';

function collect(): { sink: { write(c: Uint8Array | string): void }; text(): string } {
  const parts: Buffer[] = [];
  return { sink: { write: (c) => parts.push(Buffer.from(c)) }, text: () => Buffer.concat(parts).toString('utf8') };
}

describe('rank prefixes', () => {
  it('lines split across chunks, empty lines, a last line without newline', () => {
    const c = collect();
    const p = new LinePrefixer(2, c.sink);
    p.push(Buffer.from('hel'));
    expect(c.text()).toBe('');
    p.push(Buffer.from('lo\n\nwor'));
    p.push(Buffer.from('ld\nlast'));
    p.flush();
    p.flush();
    expect(c.text()).toBe('[2] hello\n[2] \n[2] world\n[2] last\n');
  });

  it.prop([fc.array(fc.string({ unit: 'grapheme' }), { maxLength: 8 }), fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 5 })])(
    'any text cut anywhere (inside a character too) comes out as its lines, prefixed',
    (lines, cuts) => {
      const text = lines.join('\n');
      const bytes = Buffer.from(text);
      const c = collect();
      const p = new LinePrefixer(7, c.sink);
      for (let at = 0, i = 0; at < bytes.length; i++) {
        const n = cuts[i % cuts.length]!;
        p.push(bytes.subarray(at, at + n));
        at += n;
      }
      p.flush();
      const expected =
        text === ''
          ? ''
          : text
              .split('\n')
              .map((l, i, all) => (i === all.length - 1 && l === '' ? '' : `[7] ${l}\n`))
              .join('');
      expect(c.text()).toBe(expected);
    },
  );

  it('pipePrefixed resolves when the stream ends, with the partial line flushed', async () => {
    const s = new PassThrough();
    const c = collect();
    const done = pipePrefixed(s, 0, c.sink);
    s.write('a\nb');
    s.end();
    await done;
    expect(c.text()).toBe('[0] a\n[0] b\n');
  });
});
