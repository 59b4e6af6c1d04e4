/**
 * The reduction kernels as the simulated driver runs them: the shipped PTX
 * loads, every entry has a TypeScript twin, launches check their arguments
 * against the PTX parameters, and every op × dtype matches a reference
 * written here independently of the twin (exact integers by BigInt, floats
 * folded in rank order in f32 / f64, f16/bf16/fp8 rounded to nearest even,
 * fp8 saturating; premul's products rounded before each sum), and every pair
 * the kernels are not built for is refused.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { ArgumentRangeError, ArgumentTypeError, CudaError } from '../../../src/errors.js';
import {
  DTYPE_BYTES,
  DTYPES,
  FLOAT_DTYPES,
  INT_DTYPES,
  ONESHOT_MAX_BLOCKS,
  REDUCE_OPS,
  checkDtypeOp,
  divEntry,
  dtypeOpSupported,
  opCode,
  reduceArg,
  reduceEntry,
  reducePartEntry,
  type DType,
  type ReduceOp,
} from '../../../src/kernels/dtypes.js';
import { readFileSync } from 'node:fs';
import { REDUCE_ENTRIES, reducePtx } from '../../../src/kernels/reduce.ptx.js';

const PTX = reducePtx();
import { FILL_PTX } from '../../../src/kernels/fill.ptx.js';
import { bf16ToF32, e4m3ToF32, e5m2ToF32, f16ToF32, f32ToBf16, f32ToE4m3, f32ToE5m2, f32ToF16 } from '../../../src/kernels/sim/half.js';
import { REDUCE_TWINS, reduceInto } from '../../../src/kernels/sim/reduce.js';
import { ONESHOT_TWINS } from '../../../src/kernels/sim/oneshot.js';
import { LLONESHOT_TWINS } from '../../../src/kernels/sim/lloneshot.js';
import { TWOSHOT_TWINS } from '../../../src/kernels/sim/twoshot.js';
import { simDevice } from '../../helpers/sim-device.js';

const sim = () => simDevice({ env: {} });

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CudaError);
    return (err as CudaError).code;
  }
  throw new Error('expected a CudaError');
}

/** The f16 nearest to `x` (exact arithmetic in doubles), ties to the even significand: the reference for f32ToF16. */
function nearestF16(x: number): number {
  if (Number.isNaN(x)) return 0x7fff;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a >= 65520) return sign | 0x7c00; // 65504 + half an ulp (16) rounds to infinity
  let best = 0;
  let bestErr = Infinity;
  // Candidates around a's magnitude: search the two f16 values that bracket it.
  let lo = 0;
  let hi = 0x7bff;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (f16ToF32(mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  for (const h of [lo, lo + 1]) {
    const err = Math.abs(f16ToF32(h) - a);
    if (err < bestErr || (err === bestErr && (h & 1) === 0)) {
      best = h;
      bestErr = err;
    }
  }
  return sign | best;
}

describe('f16 and bf16 conversions', () => {
  it('every finite f16 survives f16 → f32 → f16, and NaN becomes the canonical 0x7fff', () => {
    for (let h = 0; h < 0x10000; h++) {
      const exp = (h >> 10) & 0x1f;
      if (exp === 0x1f && (h & 0x3ff) !== 0) expect(f32ToF16(f16ToF32(h))).toBe(0x7fff);
      else expect(f32ToF16(f16ToF32(h))).toBe(h);
    }
  });

  propTest.prop([fc.float({ noNaN: true })], { numRuns: 2000 })('f32 → f16 rounds to nearest, ties to even', (x) => {
    expect(f32ToF16(x)).toBe(nearestF16(x));
  });

  it('ties go to the even significand (f16 and bf16)', () => {
    expect(f32ToF16(1 + 2 ** -11)).toBe(0x3c00); // halfway between 1 and 1+2^-10: even is 1
    expect(f32ToF16(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToBf16(1 + 2 ** -8)).toBe(0x3f80);
    expect(f32ToBf16(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToBf16(NaN)).toBe(0x7fff);
  });

  propTest.prop([fc.float({ noNaN: true, noDefaultInfinity: true })], { numRuns: 2000 })(
    'f32 → bf16 is the nearest bf16 (ties to even), bf16 → f32 exact',
    (x) => {
      const b = f32ToBf16(x);
      const y = bf16ToF32(b);
      // the neighbours of the result are no nearer
      for (const n of [b - 1, b + 1]) {
        const z = bf16ToF32(n & 0xffff);
        if (Number.isFinite(z) && Number.isFinite(y) && Math.sign(z) === Math.sign(y)) expect(Math.abs(z - x)).toBeGreaterThanOrEqual(Math.abs(y - x));
      }
    },
  );
});

describe('the shipped PTX on the simulated driver', () => {
  it('every .entry of reduce.ptx.ts has a twin, and every twin an entry', () => {
    const entries = [...PTX.matchAll(/\.entry\s+(\w+)\s*\(/g)].map((m) => m[1]);
    expect(entries).toEqual([...REDUCE_ENTRIES]);
    // The one-shot, LL one-shot and two-shot kernels wait for other processes: the simulator queues them as stream operations.
    expect(new Set(entries)).toEqual(
      new Set([...Object.keys(REDUCE_TWINS), ...Object.keys(ONESHOT_TWINS), ...Object.keys(LLONESHOT_TWINS), ...Object.keys(TWOSHOT_TWINS)]),
    );
    expect(entries).toHaveLength(DTYPES.length * 6);
    expect(PTX).toMatch(/^\.version 8\.0$/m);
  });

  it("the one-shot kernel's block limit is the one the flag block is laid out for", () => {
    const cu = readFileSync(new URL('../../../src/kernels/reduce.cu', import.meta.url), 'utf8');
    expect(Number(/#define ONESHOT_MAX_BLOCKS (\d+)/.exec(cu)?.[1])).toBe(ONESHOT_MAX_BLOCKS);
  });

  it('says modules work; refuses what is not PTX, an unknown entry and arguments that do not match the parameters', () => {
    const d = sim();
    expect(d.gpuDrivenStatus().modules).toBe(true);
    expect(codeOf(() => d.moduleLoadData('not ptx'))).toBe('CUDA_ERROR_INVALID_PTX');
    expect(() => d.moduleLoadData('')).toThrow(RangeError);
    const { module, loadMs } = d.moduleLoadData(PTX);
    expect(loadMs).toBeGreaterThanOrEqual(0);
    expect(codeOf(() => d.moduleGetFunction(module, 'nope'))).toBe('CUDA_ERROR_NOT_FOUND');
    const fn = d.moduleGetFunction(module, reduceEntry('f32'));
    const cfg = { grid: [1] as [number], block: [32] as [number] };
    expect(codeOf(() => d.launchKernel(fn, cfg, [{ type: 'ptr', value: 0n }], 0n))).toBe('CUDA_ERROR_INVALID_VALUE');
    expect(
      codeOf(() =>
        d.launchKernel(
          fn,
          cfg,
          [
            { type: 'ptr', value: 1n },
            { type: 'ptr', value: 1n },
            { type: 'u64', value: 1n },
            { type: 'u64', value: 0n },
            { type: 'u64', value: 0n },
          ],
          0n,
        ),
      ),
    ).toBe('CUDA_ERROR_INVALID_VALUE');
    expect(() => d.launchKernel(fn, { grid: [0], block: [1] }, [], 0n)).toThrow(RangeError); // as the native driver: before any driver call
    d.moduleUnload(module);
    expect(codeOf(() => d.launchKernel(fn, cfg, [], 0n))).toBe('CUDA_ERROR_INVALID_HANDLE');
  });

  it("fill.cu's smcuda_fill_u32 runs too (its twin)", () => {
    const d = sim();
    const { module } = d.moduleLoadData(FILL_PTX);
    const fn = d.moduleGetFunction(module, 'smcuda_fill_u32');
    const p = d.memAlloc(16);
    d.memsetD8(p, 0, 16);
    d.launchKernel(
      fn,
      { grid: [1], block: [64] },
      [
        { type: 'ptr', value: p },
        { type: 'u32', value: 0xdeadbeef },
        { type: 'u64', value: 3n },
      ],
      0n,
    );
    d.streamSynchronize(0n);
    const host = new Uint8Array(16);
    d.memcpyDtoH(host, p);
    expect([...new Uint32Array(host.buffer)]).toEqual([0xdeadbeef, 0xdeadbeef, 0xdeadbeef, 0]);
  });

  it('a launch runs on its stream, later, never inside the call', async () => {
    const d = sim();
    const { module } = d.moduleLoadData(PTX);
    const fn = d.moduleGetFunction(module, divEntry('i32'));
    const p = d.memAlloc(8);
    d.memcpyHtoD(p, new Uint8Array(new Int32Array([10, -7]).buffer));
    const s = d.streamCreate();
    d.launchKernel(
      fn,
      { grid: [1], block: [32] },
      [
        { type: 'ptr', value: p },
        { type: 'u64', value: 2n },
        { type: 'u32', value: 2 },
      ],
      s,
    );
    const host = new Uint8Array(8);
    d.memcpyDtoH(host, p);
    expect([...new Int32Array(host.buffer)]).toEqual([10, -7]);
    d.streamSynchronize(s);
    d.memcpyDtoH(host, p);
    expect([...new Int32Array(host.buffer)]).toEqual([5, -3]); // toward zero
  });
});

/** Random raw element bytes of `dtype` (no NaN for floats: NaN comparisons are order-dependent). */
function elementArb(dtype: DType): fc.Arbitrary<number | bigint> {
  switch (dtype) {
    case 'f32':
      return fc.float({ noNaN: true, min: -1e6, max: 1e6 });
    case 'f64':
      return fc.double({ noNaN: true, min: -1e12, max: 1e12 });
    case 'f16':
      return fc.integer({ min: 0, max: 0xffff }).filter((h) => ((h >> 10) & 0x1f) !== 0x1f);
    case 'bf16':
      return fc.integer({ min: 0, max: 0xffff }).filter((h) => ((h >> 7) & 0xff) !== 0xff);
    case 'i32':
      return fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
    case 'i64':
      return fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n });
    case 'u8':
      return fc.integer({ min: 0, max: 255 });
    case 'i8':
      return fc.integer({ min: -128, max: 127 });
    case 'u32':
      return fc.integer({ min: 0, max: 2 ** 32 - 1 });
    case 'u64':
      return fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
    case 'f8e4m3':
      return fc.integer({ min: 0, max: 255 }).filter((b) => (b & 0x7f) !== 0x7f);
    case 'f8e5m2':
      return fc.integer({ min: 0, max: 255 }).filter((b) => (b & 0x7c) !== 0x7c);
  }
}

function writeElem(v: DataView, dtype: DType, i: number, x: number | bigint): void {
  const at = i * DTYPE_BYTES[dtype];
  if (dtype === 'f32') v.setFloat32(at, x as number, true);
  else if (dtype === 'f64') v.setFloat64(at, x as number, true);
  else if (dtype === 'f16' || dtype === 'bf16') v.setUint16(at, x as number, true);
  else if (dtype === 'i32') v.setInt32(at, x as number, true);
  else if (dtype === 'i64') v.setBigInt64(at, x as bigint, true);
  else if (dtype === 'u64') v.setBigUint64(at, x as bigint, true);
  else if (dtype === 'u32') v.setUint32(at, x as number, true);
  else if (dtype === 'i8') v.setInt8(at, x as number);
  else v.setUint8(at, x as number);
}

/** Integer dtypes: bits and signedness. */
const INT_BITS: Partial<Record<DType, [number, boolean]>> = {
  i32: [32, true],
  i64: [64, true],
  u8: [8, false],
  i8: [8, true],
  u32: [32, false],
  u64: [64, false],
};

/** The fp8 value nearest to `x` among the finite ones (ties to the even code), saturated to the largest finite (infinities too), NaN 0x7f. */
function nearestF8(x: number, toF: (b: number) => number, maxCode: number): number {
  if (Number.isNaN(x)) return 0x7f;
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.abs(x);
  if (a >= toF(maxCode)) return sign | maxCode;
  let best = 0;
  for (let b = 1; b <= maxCode; b++) {
    const d = Math.abs(toF(b) - a) - Math.abs(toF(best) - a);
    if (d < 0 || (d === 0 && (b & 1) === 0)) best = b;
  }
  return sign | best;
}
const nearestE4m3 = (x: number) => nearestF8(x, e4m3ToF32, 0x7e);
const nearestE5m2 = (x: number) => nearestF8(x, e5m2ToF32, 0x7b);

/** The reference: each documented semantics spelled out plainly, per element (premul with `factor`). */
function reference(op: ReduceOp, dtype: DType, xs: (number | bigint)[], factor = 1): number | bigint {
  const n = xs.length;
  const ib = INT_BITS[dtype];
  if (ib) {
    const [bits, signed] = ib;
    const wrap = (v: bigint) => (signed ? BigInt.asIntN(bits, v) : BigInt.asUintN(bits, v));
    const b = xs.map((x) => BigInt(x));
    let r: bigint;
    if (op === 'min') r = b.reduce((a, x) => (x < a ? x : a));
    else if (op === 'max') r = b.reduce((a, x) => (x > a ? x : a));
    else if (op === 'prod') r = wrap(b.reduce((a, x) => a * x));
    else if (op === 'sum') r = wrap(b.reduce((a, x) => a + x));
    else if (op === 'band') r = wrap(b.reduce((a, x) => a & x));
    else if (op === 'bor') r = wrap(b.reduce((a, x) => a | x));
    else if (op === 'bxor') r = wrap(b.reduce((a, x) => a ^ x));
    else r = bits === 64 ? wrap(b.reduce((a, x) => a + x)) / BigInt(n) : b.reduce((a, x) => a + x) / BigInt(n); // 8 and 32 bits: exact sum
    return bits === 64 ? r : Number(r);
  }
  const toF = { f16: f16ToF32, bf16: bf16ToF32, f8e4m3: e4m3ToF32, f8e5m2: e5m2ToF32 }[dtype as string] ?? ((x: number) => x);
  const round = dtype === 'f64' ? (x: number) => x : Math.fround;
  const f = round(factor);
  const v = (xs as number[]).map(toF).map((x) => (op === 'premul' ? round(x * f) : x));
  let acc = v[0]!;
  for (let k = 1; k < n; k++) {
    const x = v[k]!;
    if (op === 'sum' || op === 'avg' || op === 'premul') acc = round(acc + x);
    else if (op === 'prod') acc = round(acc * x);
    else if (op === 'min') acc = x < acc ? x : acc;
    else acc = x > acc ? x : acc;
  }
  if (op === 'avg') acc = round(acc / n);
  const store = { f16: f32ToF16, bf16: f32ToBf16, f8e4m3: nearestE4m3, f8e5m2: nearestE5m2 }[dtype as string];
  return store ? store(acc) : acc;
}

/** The op × dtype pairs the kernels take. */
const PAIRS = DTYPES.flatMap((dtype) => REDUCE_OPS.filter((op) => dtypeOpSupported(dtype, op)).map((op) => ({ dtype, op })));
/** premul's factor in these tests: either a round one or one that rounds in f32. */
const factorArb = fc.constantFrom(0.3, -1.5, 0.25, 1e-3, 3);

function readElem(v: DataView, dtype: DType, i: number): number | bigint {
  const at = i * DTYPE_BYTES[dtype];
  if (dtype === 'f32') return v.getFloat32(at, true);
  if (dtype === 'f64') return v.getFloat64(at, true);
  if (dtype === 'f16' || dtype === 'bf16') return v.getUint16(at, true);
  if (dtype === 'i32') return v.getInt32(at, true);
  if (dtype === 'i64') return v.getBigInt64(at, true);
  if (dtype === 'u64') return v.getBigUint64(at, true);
  if (dtype === 'u32') return v.getUint32(at, true);
  if (dtype === 'i8') return v.getInt8(at);
  return v.getUint8(at);
}

describe('every op × dtype against the reference, through moduleLoadData and launchKernel', () => {
  const caseArb = fc
    .record({
      pair: fc.constantFrom(...PAIRS),
      factor: factorArb,
      n: fc.integer({ min: 1, max: 6 }),
      count: fc.integer({ min: 0, max: 40 }),
      offset: fc.integer({ min: 0, max: 5 }),
    })
    .map(({ pair, ...c }) => ({ ...c, ...pair }))
    .chain((c) =>
      fc.record({
        c: fc.constant(c),
        values: fc.array(fc.array(elementArb(c.dtype), { minLength: c.count + c.offset, maxLength: c.count + c.offset }), { minLength: c.n, maxLength: c.n }),
      }),
    );

  propTest.prop([caseArb], { numRuns: 600 })('out[i] = op over the n inputs at offset + i', ({ c, values }) => {
    const d = sim();
    const { module } = d.moduleLoadData(PTX);
    const fn = d.moduleGetFunction(module, reduceEntry(c.dtype));
    const size = DTYPE_BYTES[c.dtype];
    const len = (c.count + c.offset) * size;
    const inputs = values.map((vals) => {
      const bytes = new Uint8Array(Math.max(len, 1));
      const v = new DataView(bytes.buffer);
      vals.forEach((x, i) => writeElem(v, c.dtype, i, x));
      const p = d.memAlloc(bytes.byteLength);
      d.memcpyHtoD(p, bytes);
      return p;
    });
    const table = d.memAlloc(8 * c.n);
    d.memcpyHtoD(table, new Uint8Array(new BigUint64Array(inputs).buffer));
    const out = d.memAlloc(Math.max(c.count * size, 1));
    d.launchKernel(
      fn,
      { grid: [1], block: [256] },
      [
        { type: 'ptr', value: out },
        { type: 'ptr', value: table },
        { type: 'u32', value: c.n },
        { type: 'u64', value: BigInt(c.offset) },
        { type: 'u64', value: BigInt(c.count) },
        { type: 'u32', value: opCode(c.op) },
        { type: 'f64', value: c.factor },
      ],
      0n,
    );
    d.streamSynchronize(0n);
    const host = new Uint8Array(Math.max(c.count * size, 1));
    d.memcpyDtoH(host, out);
    const hv = new DataView(host.buffer);
    for (let i = 0; i < c.count; i++) {
      const want = reference(
        c.op,
        c.dtype,
        values.map((vals) => vals[c.offset + i]!),
        c.factor,
      );
      expect(readElem(hv, c.dtype, i), `${c.op} ${c.dtype} n=${c.n} element ${i}`).toEqual(want);
    }
    d.close();
  });
});

describe("the pipeline's reduce_part against the reference", () => {
  const caseArb = fc
    .record({
      pair: fc.constantFrom(...PAIRS),
      factor: factorArb,
      n: fc.integer({ min: 1, max: 6 }),
      rank: fc.nat(5),
      count: fc.integer({ min: 0, max: 40 }),
      inPlace: fc.boolean(),
    })
    .map(({ pair, ...c }) => ({ ...c, ...pair, rank: c.rank % c.n }))
    .chain((c) =>
      fc.record({
        c: fc.constant(c),
        values: fc.array(fc.array(elementArb(c.dtype), { minLength: c.count, maxLength: c.count }), { minLength: c.n, maxLength: c.n }),
      }),
    );

  propTest.prop([caseArb], { numRuns: 400 })('out[i] = op over own[i] in place of table[rank] and the others', ({ c, values }) => {
    const d = sim();
    const { module } = d.moduleLoadData(PTX);
    const fn = d.moduleGetFunction(module, reducePartEntry(c.dtype));
    const size = DTYPE_BYTES[c.dtype];
    const bytes = Math.max(c.count * size, 1);
    const ptrs = values.map((vals) => {
      const host = new Uint8Array(bytes);
      const v = new DataView(host.buffer);
      vals.forEach((x, i) => writeElem(v, c.dtype, i, x));
      const p = d.memAlloc(bytes);
      d.memcpyHtoD(p, host);
      return p;
    });
    // table[rank] points at garbage: the kernel must read `own` instead.
    const junk = d.memAlloc(bytes);
    d.memsetD8(junk, 0x7b, bytes);
    const table = d.memAlloc(8 * c.n);
    d.memcpyHtoD(table, new Uint8Array(new BigUint64Array(ptrs.map((p, k) => (k === c.rank ? junk : p))).buffer));
    const own = ptrs[c.rank]!;
    const out = c.inPlace ? own : d.memAlloc(bytes);
    d.launchKernel(
      fn,
      { grid: [1], block: [512] },
      [
        { type: 'ptr', value: out },
        { type: 'ptr', value: own },
        { type: 'ptr', value: table },
        { type: 'u32', value: c.rank },
        { type: 'u32', value: c.n },
        { type: 'u64', value: BigInt(c.count) },
        { type: 'u32', value: REDUCE_OPS.indexOf(c.op) },
        { type: 'f64', value: c.factor },
      ],
      0n,
    );
    d.streamSynchronize(0n);
    const host = new Uint8Array(bytes);
    d.memcpyDtoH(host, out);
    const hv = new DataView(host.buffer);
    for (let i = 0; i < c.count; i++) {
      const want = reference(
        c.op,
        c.dtype,
        values.map((vals) => vals[i]!),
        c.factor,
      );
      expect(readElem(hv, c.dtype, i), `${c.op} ${c.dtype} n=${c.n} rank=${c.rank} element ${i}`).toEqual(want);
    }
    d.close();
  });
});

describe('reduceInto: typed arrays and DataViews give the same bytes', () => {
  // Aligned views take the typed-array loops; the same data one byte off its element alignment takes the
  // DataView path (reduce.ts): every op × dtype, including bit patterns that are NaN, infinite or subnormal.
  propTest.prop([fc.constantFrom(...PAIRS), fc.integer({ min: 1, max: 5 }), fc.integer({ min: 0, max: 40 }), fc.integer()])(
    'every op and dtype',
    ({ dtype, op: name }, n, count, seed) => {
      const op = reduceArg(name, name === 'premul' ? 0.3 : undefined);
      const es = DTYPE_BYTES[dtype];
      let x = seed >>> 0;
      const byte = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 16) & 0xff;
      const inputs = Array.from({ length: n }, () => Uint8Array.from({ length: count * es }, byte));
      const shifted = (b: Uint8Array) => {
        const u = new Uint8Array(b.length + 1);
        u.set(b, 1);
        return u.subarray(1);
      };
      const aligned = new Uint8Array(count * es);
      reduceInto(op, dtype, aligned, inputs, count);
      const viaViews = shifted(new Uint8Array(count * es));
      reduceInto(op, dtype, viaViews, inputs.map(shifted), count);
      expect([...viaViews]).toEqual([...aligned]);
    },
  );
});

describe('fp8 conversions (E4M3 "fn" and E5M2)', () => {
  it('every finite fp8 survives fp8 → f32 → fp8; NaN becomes 0x7f; E5M2 infinities saturate to ±57344', () => {
    for (let b = 0; b < 256; b++) {
      if ((b & 0x7f) === 0x7f) expect(f32ToE4m3(e4m3ToF32(b))).toBe(0x7f);
      else expect(f32ToE4m3(e4m3ToF32(b))).toBe(b);
      const e = (b >> 2) & 0x1f;
      if (e !== 0x1f) expect(f32ToE5m2(e5m2ToF32(b))).toBe(b);
      else if ((b & 3) !== 0) expect(f32ToE5m2(e5m2ToF32(b))).toBe(0x7f);
      else expect(f32ToE5m2(e5m2ToF32(b))).toBe((b & 0x80) | 0x7b);
    }
    expect(e4m3ToF32(0x7e)).toBe(448);
    expect(e5m2ToF32(0x7b)).toBe(57344);
    expect(e4m3ToF32(0x01)).toBe(2 ** -9);
    expect(e5m2ToF32(0x01)).toBe(2 ** -16);
  });

  propTest.prop([fc.float()], { numRuns: 3000 })('f32 → fp8 rounds to the nearest finite value, ties to even, saturating', (x) => {
    expect(f32ToE4m3(x)).toBe(nearestE4m3(x));
    expect(f32ToE5m2(x)).toBe(nearestE5m2(x));
  });

  it('ties, the saturation boundary, subnormals and signed zero', () => {
    expect(f32ToE4m3(464)).toBe(0x7e); // halfway 448..(480): even 448
    expect(f32ToE4m3(465)).toBe(0x7e); // saturates rather than NaN
    expect(f32ToE4m3(Infinity)).toBe(0x7e);
    expect(f32ToE4m3(-1e9)).toBe(0xfe);
    expect(f32ToE5m2(61440)).toBe(0x7b); // halfway to 65536: saturates
    expect(f32ToE5m2(-Infinity)).toBe(0xfb);
    expect(f32ToE4m3(1 + 1 / 16)).toBe(0x38); // halfway 1..1.125: even 1
    expect(f32ToE4m3(1 + 3 / 16)).toBe(0x3a);
    expect(f32ToE4m3(2 ** -10)).toBe(0x00); // half the smallest subnormal: even 0
    expect(f32ToE4m3(3 * 2 ** -10)).toBe(0x02);
    expect(f32ToE4m3(-(2 ** -12))).toBe(0x80);
    expect(f32ToE5m2(2 ** -17 * 1.5)).toBe(0x01);
    expect(f32ToE4m3(NaN)).toBe(0x7f);
    expect(f32ToE5m2(NaN)).toBe(0x7f);
  });
});

describe('dtype × op pairs', () => {
  it('premul takes the float dtypes, the bitwise ops the integer ones; every other pair is built', () => {
    for (const dtype of DTYPES) {
      for (const op of REDUCE_OPS) {
        const ok = op === 'premul' ? FLOAT_DTYPES.includes(dtype) : ['band', 'bor', 'bxor'].includes(op) ? INT_DTYPES.includes(dtype) : true;
        expect(dtypeOpSupported(dtype, op), `${op} ${dtype}`).toBe(ok);
        if (ok) expect(() => checkDtypeOp(dtype, op)).not.toThrow();
        else expect(() => checkDtypeOp(dtype, op), `${op} ${dtype}`).toThrow(ArgumentTypeError);
      }
    }
    expect([...FLOAT_DTYPES, ...INT_DTYPES].sort()).toEqual([...DTYPES].sort());
  });

  it('a refusal is typed, coded and says which dtypes the op takes', () => {
    const bx = (() => {
      try {
        checkDtypeOp('f32', 'bxor');
      } catch (e) {
        return e as ArgumentTypeError;
      }
      throw new Error('expected a refusal');
    })();
    expect(bx.code).toBe('SMCUDA_INVALID_ARG_TYPE');
    expect(bx.message).toMatch(/'bxor' is bitwise and takes an integer dtype \(i32, i64, u8, i8, u32, u64\), not 'f32'/);
    expect(() => checkDtypeOp('i32', 'premul')).toThrow(/'premul' takes a floating-point dtype \(f32, f16, bf16, f64, f8e4m3, f8e5m2\), not 'i32'/);
  });

  it("the twins refuse what the collectives refuse (the kernels' result for such a pair is never asked for)", () => {
    const out = new Uint8Array(4);
    expect(() => reduceInto('band', 'f32', out, [new Uint8Array(4)], 1)).toThrow(ArgumentTypeError);
    expect(() => reduceInto({ op: 'premul', factor: 2 }, 'i32', out, [new Uint8Array(4)], 1)).toThrow(ArgumentTypeError);
  });

  it("premul's factor: a finite number with premul, none with any other op", () => {
    expect(reduceArg('premul', 0.25)).toEqual({ op: 'premul', factor: 0.25 });
    expect(reduceArg('sum', undefined)).toBe('sum');
    expect(() => reduceArg('premul', undefined)).toThrow(ArgumentTypeError);
    expect(() => reduceArg('premul', '0.5')).toThrow(/needs a number factor/);
    expect(() => reduceArg('premul', NaN)).toThrow(ArgumentRangeError);
    expect(() => reduceArg('premul', Infinity)).toThrow(/finite/);
    expect(() => reduceArg('sum', 2)).toThrow(/op 'sum' takes none/);
  });

  it('the call print still holds every dtype (5 bits) and op (4 bits)', async () => {
    const { decodePrint, encodePrint } = await import('../../../src/collectives/call-print.js');
    expect(DTYPES.length).toBeLessThanOrEqual(31); // codes 1..31
    expect(REDUCE_OPS.length).toBeLessThanOrEqual(15); // codes 1..15
    for (const dtype of DTYPES) {
      for (const redop of REDUCE_OPS) {
        const [w0, w1, w2] = encodePrint({ op: 'allreduce', dtype, redop, count: 2 ** 40 + 3 });
        expect(decodePrint(w0, w1, w2)).toEqual({ op: 'allreduce', dtype, redop, count: 2 ** 40 + 3 });
      }
    }
  });
});
