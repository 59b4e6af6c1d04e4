/**
 * Argument errors carry a code (ArgumentTypeError / ArgumentRangeError: a
 * TypeError / RangeError, as Node's own, that is also an SmcudaError), and
 * unknown option keys are refused with the key and its close match.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ArgumentRangeError, ArgumentTypeError, ConfigError, SmcudaError } from '../../../src/errors.js';
import { closest } from '../../../src/option-keys.js';
import { resolveOptions } from '../../../src/options.js';
import { Transport } from '../../../src/transport.js';
import { makePair, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe('argument errors', () => {
  it('are TypeError / RangeError with a code, and instanceof SmcudaError', () => {
    const d = new SimulatedCudaDriver();
    try {
      d.init();
      const type = catchError(() => d.memFree(1 as unknown as bigint));
      expect(type).toBeInstanceOf(ArgumentTypeError);
      expect(type).toBeInstanceOf(TypeError);
      expect(type).toBeInstanceOf(SmcudaError);
      expect(type).toMatchObject({ code: 'SMCUDA_INVALID_ARG_TYPE', name: 'TypeError' });
      const range = catchError(() => d.memAlloc(-1));
      expect(range).toBeInstanceOf(ArgumentRangeError);
      expect(range).toBeInstanceOf(RangeError);
      expect(range).toBeInstanceOf(SmcudaError);
      expect(range).toMatchObject({ code: 'SMCUDA_OUT_OF_RANGE', name: 'RangeError' });
      // Subclasses keep their own instanceof: an argument error is no ConfigError.
      expect(range).not.toBeInstanceOf(ConfigError);
      expect(new ConfigError('x')).toBeInstanceOf(SmcudaError);
      expect(new Error('x')).not.toBeInstanceOf(SmcudaError);
    } finally {
      d.close();
    }
  });

  it('send, recv: bad buffers and tags are coded errors', async () => {
    pair = await makePair();
    const ep = pair.a.ep;
    expect(catchError(() => ep.send('text' as unknown as Uint8Array))).toMatchObject({ code: 'SMCUDA_INVALID_ARG_TYPE' });
    expect(catchError(() => ep.send(new Uint8Array(1), { tag: -1 }))).toMatchObject({ code: 'SMCUDA_OUT_OF_RANGE' });
    expect(catchError(() => ep.recv({ tag: 'x' as unknown as number }))).toMatchObject({ code: 'SMCUDA_INVALID_ARG_TYPE' });
    expect(catchError(() => ep.recv({ into: 5 as unknown as Uint8Array }))).toMatchObject({ code: 'SMCUDA_INVALID_ARG_TYPE' });
  });

  it('no source file throws a bare TypeError or RangeError', () => {
    const offenders: string[] = [];
    for (const root of ['src', 'machines', 'cache']) {
      for (const file of tsFiles(root)) {
        readFileSync(file, 'utf8')
          .split('\n')
          .forEach((line, i) => {
            if (/new (Type|Range)Error\(/.test(line)) offenders.push(`${file}:${i + 1}: ${line.trim()}`);
          });
      }
    }
    expect(offenders, 'throw ArgumentTypeError / ArgumentRangeError (src/errors.ts) instead: they carry a code').toEqual([]);
  });
});

describe('unknown option keys', () => {
  it('{ tokn } is refused, naming the key and the close match, before a driver opens', async () => {
    const err = await Transport.create({ driver: 'sim', tokn: 'secret' } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/unknown option "tokn" in Transport.create options: did you mean "token"\?/);
  });

  it('nested option objects are checked too', () => {
    expect(() => resolveOptions({ negotiation: { maxTry: 2 } as never })).toThrow(/"maxTry" in negotiation options: did you mean "maxTries"/);
    expect(() => resolveOptions({ staging: { chunksize: 8192 } as never })).toThrow(/"chunksize" in staging options: did you mean "chunkSize"/);
    expect(() => resolveOptions({ cache: { maxEntry: 2 } as never })).toThrow(/did you mean "maxEntries"/);
    expect(() => resolveOptions({ negotiation: 5 as never })).toThrow(ConfigError);
  });

  it('a key far from every known one gets the list, not a guess', () => {
    expect(() => resolveOptions({ banana: 1 } as never)).toThrow(/unknown option "banana" in transport options \(known: id, device/);
    expect(closest('x', ['id', 'token'])).toBeUndefined();
    expect(closest('TOKEN', ['id', 'token'])).toBe('token');
  });

  it('Transport.create accepts every documented key', async () => {
    const t = await Transport.create({
      driver: new SimulatedCudaDriver(),
      lazyDevice: true,
      helloTimeoutMs: 1000,
      frameTimeoutMs: 0,
      id: 'all-keys',
      device: 0,
      deviceEagerLimit: 0,
      negotiation: { ipc: true },
      staging: { slots: 2 },
      cache: { maxEntries: 4 },
      token: 't',
      completionSpinUs: 0,
      controlRing: true,
      controlSpinUs: 0,
      maxUnreadBytes: 1 << 20,
    });
    await t.close();
    (t.driver as SimulatedCudaDriver).close();
  });

  it('listen() refuses unknown keys', async () => {
    const d = new SimulatedCudaDriver();
    const t = await Transport.create({ driver: d });
    try {
      await expect(t.listen('/tmp/never.sock', { privatedir: true } as never)).rejects.toThrow(/did you mean "privateDir"/);
    } finally {
      await t.close();
      d.close();
    }
  });
});

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected a throw');
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return tsFiles(p);
    return p.endsWith('.ts') && !p.endsWith('.d.ts') ? [p] : [];
  });
}
