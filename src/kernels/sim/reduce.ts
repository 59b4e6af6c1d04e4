/**
 * The TypeScript twins of reduce.cu's entries, run by the simulated driver
 * with the same arguments. Same semantics, element for element: the same
 * accumulation types (f16/bf16/fp8 in f32 with round-to-nearest-even on the
 * store, fp8 saturating; i32 and u32 in an exact integer, u8 and i8 in 32
 * bits, i64 and u64 wrapping), the same fold order (inputs 0..n-1, left to
 * right), the same comparisons for min/max (`x < acc ? x : acc`), the same
 * integer division (toward zero) and premul's product rounded once in the
 * accumulator type before the sum.
 */
import type { KernelArg } from '../../cuda/driver.js';
import {
  checkDtypeOp,
  DTYPE_BYTES,
  DTYPES,
  divEntry,
  opFactor,
  opName,
  opOf,
  reduceEntry,
  reducePartEntry,
  type DType,
  type ReduceArg,
  type ReduceOp,
} from '../dtypes.js';
import { bf16ToF32, e4m3ToF32, e5m2ToF32, f16ToF32, f32ToBf16, f32ToE4m3, f32ToE5m2, f32ToF16 } from './half.js';
import { tableOf, type KernelTwin, type TwinMemory } from './twin.js';

/** One dtype's loads, stores and arithmetic in its accumulator type (number or bigint). */
interface Arith<A> {
  load(v: DataView, at: number): A;
  store(v: DataView, at: number, a: A): void;
  add(a: A, b: A): A;
  mul(a: A, b: A): A;
  div(a: A, n: number): A;
  /** premul's product with the factor (floats; integers refuse premul before this). */
  scale(a: A, f: number): A;
  band(a: A, b: A): A;
  bor(a: A, b: A): A;
  bxor(a: A, b: A): A;
}

/** What an integer accumulator kept in a JS number does for premul (nothing: refused) and the bitwise operations (in 32 bits, `>>> 0` for unsigned). */
const intBits = (unsigned: boolean) =>
  unsigned
    ? {
        scale: (a: number) => a,
        band: (a: number, b: number) => (a & b) >>> 0,
        bor: (a: number, b: number) => (a | b) >>> 0,
        bxor: (a: number, b: number) => (a ^ b) >>> 0,
      }
    : { scale: (a: number) => a, band: (a: number, b: number) => a & b, bor: (a: number, b: number) => a | b, bxor: (a: number, b: number) => a ^ b };
const bigBits = { scale: (a: bigint) => a, band: (a: bigint, b: bigint) => a & b, bor: (a: bigint, b: bigint) => a | b, bxor: (a: bigint, b: bigint) => a ^ b };
/** Floats take no bitwise operation (refused before this): the accumulator stays, as reduce.cu's Bits<float>. */
const keep = (a: number) => a;

const LE = true;
const fround = Math.fround;

const floatArith = (load: (v: DataView, at: number) => number, store: (v: DataView, at: number, a: number) => void): Arith<number> => ({
  load,
  store,
  add: (a, b) => fround(a + b),
  mul: (a, b) => fround(a * b),
  div: (a, n) => fround(a / n),
  scale: (a, f) => fround(a * fround(f)),
  band: keep,
  bor: keep,
  bxor: keep,
});

const f64Arith: Arith<number> = {
  load: (v, at) => v.getFloat64(at, LE),
  store: (v, at, a) => v.setFloat64(at, a, LE),
  add: (a, b) => a + b,
  mul: (a, b) => a * b,
  div: (a, n) => a / n,
  scale: (a, f) => a * f,
  band: keep,
  bor: keep,
  bxor: keep,
};
// i32 sums exactly (as the kernel's i64 accumulator), multiplies modulo 2^32 (the low half of the i64 product).
const i32Arith: Arith<number> = {
  load: (v, at) => v.getInt32(at, LE),
  store: (v, at, a) => v.setInt32(at, a | 0, LE),
  add: (a, b) => a + b,
  mul: (a, b) => Math.imul(a, b),
  div: (a, n) => (a - (a % n)) / n,
  ...intBits(false),
};
// u32 as i32, unsigned: an exact sum (the kernel's u64 accumulator), products modulo 2^32.
const u32Arith: Arith<number> = {
  load: (v, at) => v.getUint32(at, LE),
  store: (v, at, a) => v.setUint32(at, a >>> 0, LE),
  add: (a, b) => a + b,
  mul: (a, b) => Math.imul(a, b) >>> 0,
  div: (a, n) => (a - (a % n)) / n,
  ...intBits(true),
};
// i8 in 32 bits (the kernel's int): the sum exact, products modulo 2^32, stored modulo 2^8.
const i8Arith: Arith<number> = {
  load: (v, at) => v.getInt8(at),
  store: (v, at, a) => v.setInt8(at, a),
  add: (a, b) => a + b,
  mul: (a, b) => Math.imul(a, b),
  div: (a, n) => (a - (a % n)) / n,
  ...intBits(false),
};
const i64Arith: Arith<bigint> = {
  load: (v, at) => v.getBigInt64(at, LE),
  store: (v, at, a) => v.setBigInt64(at, a, LE),
  add: (a, b) => BigInt.asIntN(64, a + b),
  mul: (a, b) => BigInt.asIntN(64, a * b),
  div: (a, n) => a / BigInt(n),
  ...bigBits,
};
const u64Arith: Arith<bigint> = {
  load: (v, at) => v.getBigUint64(at, LE),
  store: (v, at, a) => v.setBigUint64(at, a, LE),
  add: (a, b) => BigInt.asUintN(64, a + b),
  mul: (a, b) => BigInt.asUintN(64, a * b),
  div: (a, n) => a / BigInt(n),
  ...bigBits,
};
const u8Arith: Arith<number> = {
  load: (v, at) => v.getUint8(at),
  store: (v, at, a) => v.setUint8(at, a & 0xff),
  add: (a, b) => (a + b) >>> 0,
  mul: (a, b) => Math.imul(a, b) >>> 0,
  div: (a, n) => Math.floor(a / n),
  ...intBits(true),
};

const ARITH: Record<DType, Arith<number> | Arith<bigint>> = {
  f32: floatArith(
    (v, at) => v.getFloat32(at, LE),
    (v, at, a) => v.setFloat32(at, a, LE),
  ),
  f16: floatArith(
    (v, at) => f16ToF32(v.getUint16(at, LE)),
    (v, at, a) => v.setUint16(at, f32ToF16(a), LE),
  ),
  bf16: floatArith(
    (v, at) => bf16ToF32(v.getUint16(at, LE)),
    (v, at, a) => v.setUint16(at, f32ToBf16(a), LE),
  ),
  f64: f64Arith,
  i32: i32Arith,
  i64: i64Arith,
  u8: u8Arith,
  i8: i8Arith,
  u32: u32Arith,
  u64: u64Arith,
  f8e4m3: floatArith(
    (v, at) => e4m3ToF32(v.getUint8(at)),
    (v, at, a) => v.setUint8(at, f32ToE4m3(a)),
  ),
  f8e5m2: floatArith(
    (v, at) => e5m2ToF32(v.getUint8(at)),
    (v, at, a) => v.setUint8(at, f32ToE5m2(a)),
  ),
};

function dataView(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * `out[i] = op(in_0[off+i], ..., in_{n-1}[off+i])` over plain byte views: the twin's core, also the
 * demo's reference. A pair the kernels are not built for (checkDtypeOp) is refused, as the collectives do.
 */
export function reduceInto(op: ReduceArg, dtype: DType, out: Uint8Array, inputs: readonly Uint8Array[], count: number): void {
  const name = opName(op);
  checkDtypeOp(dtype, name);
  if (reduceTyped(name, dtype, out, inputs, count)) return;
  reduceViews(name, opFactor(op), dtype, out, inputs, count);
}

/** The reduction a kernel's `op` and `factor` arguments name. */
export function reduceArgOf(op: ReduceOp, factor: number): ReduceArg {
  return op === 'premul' ? { op, factor } : op;
}

/** reduceInto through DataViews and the Arith table: any alignment, any byte order. */
function reduceViews(op: ReduceOp, factor: number, dtype: DType, out: Uint8Array, inputs: readonly Uint8Array[], count: number): void {
  const size = DTYPE_BYTES[dtype];
  const a = ARITH[dtype] as Arith<number | bigint> as Arith<number>; // one accumulator type per dtype; the casts only unify the table
  const outs = dataView(out);
  const ins = inputs.map(dataView);
  const n = ins.length;
  for (let i = 0; i < count; i++) {
    const at = i * size;
    let acc = a.load(ins[0]!, at);
    if (op === 'premul') acc = a.scale(acc, factor);
    for (let k = 1; k < n; k++) {
      const x = a.load(ins[k]!, at);
      switch (op) {
        case 'sum':
        case 'avg':
          acc = a.add(acc, x);
          break;
        case 'premul':
          acc = a.add(acc, a.scale(x, factor));
          break;
        case 'band':
          acc = a.band(acc, x);
          break;
        case 'bor':
          acc = a.bor(acc, x);
          break;
        case 'bxor':
          acc = a.bxor(acc, x);
          break;
        case 'prod':
          acc = a.mul(acc, x);
          break;
        case 'min':
          acc = x < acc ? x : acc;
          break;
        case 'max':
          acc = x > acc ? x : acc;
          break;
      }
    }
    if (op === 'avg') acc = a.div(acc, n);
    a.store(outs, at, acc);
  }
}

/*
 * The same folds over typed arrays, one loop per element type: what the
 * demo's host reference and the simulator's kernels spend their time in.
 * The Arith table's calls differ per dtype at one call site, and DataView
 * calls cost more than typed loads: a sum of two 64 MiB inputs took a
 * quarter to a third of the time for f16 (with the f16 table of half.ts)
 * and u8, a little less for f32. Only where every view is aligned to its
 * element and the machine is little-endian (the DataView path otherwise);
 * i64 stays there (bigint either way). Same operations in the same order:
 * test/unit/kernels checks both against references and each other. The
 * loops have the same shape on purpose: one loop with per-type calls in it
 * is what made the DataView path slow.
 */
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const SUM = 0;
const PROD = 1;
const MIN = 2;
const MAX = 3;
/** The operations the typed loops take (premul and the bitwise ones take the DataView path). */
const OP_KIND: Partial<Record<ReduceOp, number>> = { sum: SUM, avg: SUM, prod: PROD, min: MIN, max: MAX };

type Typed = Float32Array | Float64Array | Int32Array | Uint8Array | Uint16Array;
function typed<T extends Typed>(make: new (b: ArrayBufferLike, o: number, n: number) => T, bytes: Uint8Array, count: number): T {
  return new make(bytes.buffer, bytes.byteOffset, count);
}

function reduceTyped(op: ReduceOp, dtype: DType, out: Uint8Array, inputs: readonly Uint8Array[], count: number): boolean {
  const es = DTYPE_BYTES[dtype];
  const kind = OP_KIND[op];
  if (kind === undefined || !LITTLE_ENDIAN || dtype === 'i64' || out.byteOffset % es !== 0 || inputs.some((b) => b.byteOffset % es !== 0)) return false;
  const avg = op === 'avg';
  switch (dtype) {
    case 'f32':
      foldF32(
        kind,
        avg,
        typed(Float32Array, out, count),
        inputs.map((b) => typed(Float32Array, b, count)),
        count,
      );
      return true;
    case 'f64':
      foldF64(
        kind,
        avg,
        typed(Float64Array, out, count),
        inputs.map((b) => typed(Float64Array, b, count)),
        count,
      );
      return true;
    case 'f16':
      foldHalf(
        kind,
        avg,
        typed(Uint16Array, out, count),
        inputs.map((b) => typed(Uint16Array, b, count)),
        count,
        f16ToF32,
        f32ToF16,
      );
      return true;
    case 'bf16':
      foldHalf(
        kind,
        avg,
        typed(Uint16Array, out, count),
        inputs.map((b) => typed(Uint16Array, b, count)),
        count,
        bf16ToF32,
        f32ToBf16,
      );
      return true;
    case 'i32':
      foldI32(
        kind,
        avg,
        typed(Int32Array, out, count),
        inputs.map((b) => typed(Int32Array, b, count)),
        count,
      );
      return true;
    case 'u8':
      foldU8(
        kind,
        avg,
        out.subarray(0, count),
        inputs.map((b) => b.subarray(0, count)),
        count,
      );
      return true;
    case 'f8e4m3':
      foldHalf(
        kind,
        avg,
        out.subarray(0, count),
        inputs.map((b) => b.subarray(0, count)),
        count,
        e4m3ToF32,
        f32ToE4m3,
      );
      return true;
    case 'f8e5m2':
      foldHalf(
        kind,
        avg,
        out.subarray(0, count),
        inputs.map((b) => b.subarray(0, count)),
        count,
        e5m2ToF32,
        f32ToE5m2,
      );
      return true;
  }
  return false;
}

function foldF32(kind: number, avg: boolean, out: Float32Array, ins: Float32Array[], count: number): void {
  const n = ins.length;
  for (let i = 0; i < count; i++) {
    let acc = ins[0]![i]!;
    for (let k = 1; k < n; k++) {
      const x = ins[k]![i]!;
      if (kind === SUM) acc = fround(acc + x);
      else if (kind === PROD) acc = fround(acc * x);
      else if (kind === MIN) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    out[i] = avg ? fround(acc / n) : acc;
  }
}

function foldF64(kind: number, avg: boolean, out: Float64Array, ins: Float64Array[], count: number): void {
  const n = ins.length;
  for (let i = 0; i < count; i++) {
    let acc = ins[0]![i]!;
    for (let k = 1; k < n; k++) {
      const x = ins[k]![i]!;
      if (kind === SUM) acc = acc + x;
      else if (kind === PROD) acc = acc * x;
      else if (kind === MIN) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    out[i] = avg ? acc / n : acc;
  }
}

function foldHalf<U extends Uint16Array | Uint8Array>(
  kind: number,
  avg: boolean,
  out: U,
  ins: U[],
  count: number,
  load: (h: number) => number,
  store: (v: number) => number,
): void {
  const n = ins.length;
  for (let i = 0; i < count; i++) {
    let acc = load(ins[0]![i]!);
    for (let k = 1; k < n; k++) {
      const x = load(ins[k]![i]!);
      if (kind === SUM) acc = fround(acc + x);
      else if (kind === PROD) acc = fround(acc * x);
      else if (kind === MIN) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    out[i] = store(avg ? fround(acc / n) : acc);
  }
}

function foldI32(kind: number, avg: boolean, out: Int32Array, ins: Int32Array[], count: number): void {
  const n = ins.length;
  for (let i = 0; i < count; i++) {
    let acc = ins[0]![i]!;
    for (let k = 1; k < n; k++) {
      const x = ins[k]![i]!;
      if (kind === SUM) acc = acc + x;
      else if (kind === PROD) acc = Math.imul(acc, x);
      else if (kind === MIN) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    out[i] = avg ? (acc - (acc % n)) / n : acc; // the store wraps to 32 bits, as `| 0`
  }
}

function foldU8(kind: number, avg: boolean, out: Uint8Array, ins: Uint8Array[], count: number): void {
  const n = ins.length;
  for (let i = 0; i < count; i++) {
    let acc = ins[0]![i]!;
    for (let k = 1; k < n; k++) {
      const x = ins[k]![i]!;
      if (kind === SUM) acc = (acc + x) >>> 0;
      else if (kind === PROD) acc = Math.imul(acc, x) >>> 0;
      else if (kind === MIN) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    out[i] = avg ? Math.floor(acc / n) : acc; // the store keeps the low 8 bits, as `& 0xff`
  }
}

/** `data[i] = data[i] / n` in the accumulator type, stored back. */
export function divideInPlace(dtype: DType, data: Uint8Array, count: number, n: number): void {
  const size = DTYPE_BYTES[dtype];
  const a = ARITH[dtype] as Arith<number | bigint> as Arith<number>;
  const v = dataView(data);
  for (let i = 0; i < count; i++) a.store(v, i * size, a.div(a.load(v, i * size), n));
}

function u64(args: readonly KernelArg[], k: number): bigint {
  return args[k]!.value as bigint;
}

function u32(args: readonly KernelArg[], k: number): number {
  return args[k]!.value as number;
}

function reduceTwin(dtype: DType): KernelTwin {
  const size = DTYPE_BYTES[dtype];
  return (memory: TwinMemory, args) => {
    const out = u64(args, 0);
    const table = u64(args, 1);
    const n = u32(args, 2);
    const offset = u64(args, 3);
    const count = Number(u64(args, 4));
    const op = reduceArgOf(opOf(u32(args, 5), reduceEntry(dtype)), u32(args, 6));
    if (count === 0) return;
    const inputs = tableOf(memory, table, n).map((p) => memory.view(p + offset * BigInt(size), count * size));
    reduceInto(op, dtype, memory.view(out, count * size), inputs, count);
  };
}

function divTwin(dtype: DType): KernelTwin {
  const size = DTYPE_BYTES[dtype];
  return (memory, args) => {
    const count = Number(u64(args, 1));
    if (count === 0) return;
    divideInPlace(dtype, memory.view(u64(args, 0), count * size), count, u32(args, 2));
  };
}

/** reduce.cu's reduce_part: `own` stands in for table[rank]. */
function reducePartTwin(dtype: DType): KernelTwin {
  const size = DTYPE_BYTES[dtype];
  return (memory, args) => {
    const out = u64(args, 0);
    const own = u64(args, 1);
    const table = u64(args, 2);
    const rank = u32(args, 3);
    const n = u32(args, 4);
    const count = Number(u64(args, 5));
    const op = reduceArgOf(opOf(u32(args, 6), reducePartEntry(dtype)), u32(args, 7));
    if (count === 0) return;
    const inputs = tableOf(memory, table, n).map((p, k) => memory.view(k === rank ? own : p, count * size));
    // In place (out = own) too: reduceInto reads every input's element i before it writes out's.
    reduceInto(op, dtype, memory.view(out, count * size), inputs, count);
  };
}

/** Every entry of reduce.cu, by name. */
export const REDUCE_TWINS: Readonly<Record<string, KernelTwin>> = Object.fromEntries([
  ...DTYPES.map((d) => [reduceEntry(d), reduceTwin(d)] as const),
  ...DTYPES.map((d) => [divEntry(d), divTwin(d)] as const),
  ...DTYPES.map((d) => [reducePartEntry(d), reducePartTwin(d)] as const),
]);
