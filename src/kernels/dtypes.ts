/**
 * The element types and reduction operations the kernels in reduce.cu are
 * built for, and the names of their entries: one table that the collectives,
 * the TypeScript twins and the tests share.
 */
import { ArgumentRangeError, ArgumentTypeError } from '../errors.js';

/**
 * The element types the kernels in reduce.cu are built for (and the collectives take). New ones go at
 * the end: a call print (call-print.ts) holds the index plus one in 5 bits (at most 31 dtypes).
 * f8e4m3 and f8e5m2 are OCP fp8 (E4M3 "fn": no infinity, largest finite 448; E5M2: largest finite 57344).
 */
export const DTYPES = ['f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8', 'i8', 'u32', 'u64', 'f8e4m3', 'f8e5m2'] as const;
export type DType = (typeof DTYPES)[number];

/**
 * The reduction operations; a call print holds the index plus one in 4 bits (at most 15). `premul`:
 * out = sum over ranks of (factor × input), the factor a per-call argument (reduceArg); `band`, `bor`,
 * `bxor`: bitwise, integer dtypes only (checkDtypeOp says which pairs the kernels take).
 */
export const REDUCE_OPS = ['sum', 'avg', 'min', 'max', 'prod', 'premul', 'band', 'bor', 'bxor'] as const;
export type ReduceOp = (typeof REDUCE_OPS)[number];

/** Bytes per element. */
export const DTYPE_BYTES: Readonly<Record<DType, number>> = {
  f32: 4,
  f16: 2,
  bf16: 2,
  f64: 8,
  i32: 4,
  i64: 8,
  u8: 1,
  i8: 1,
  u32: 4,
  u64: 8,
  f8e4m3: 1,
  f8e5m2: 1,
};

/** The floating-point dtypes (reduced in f32, or f64 for f64): premul takes these only. */
export const FLOAT_DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'f64', 'f8e4m3', 'f8e5m2'];
/** The integer dtypes: the bitwise operations take these only. */
export const INT_DTYPES: readonly DType[] = ['i32', 'i64', 'u8', 'i8', 'u32', 'u64'];
const BITWISE_OPS: readonly ReduceOp[] = ['band', 'bor', 'bxor'];

/** Whether the kernels reduce `dtype` with `op`: every pair but premul on integers and the bitwise operations on floats. */
export function dtypeOpSupported(dtype: DType, op: ReduceOp): boolean {
  if (op === 'premul') return FLOAT_DTYPES.includes(dtype);
  if (BITWISE_OPS.includes(op)) return INT_DTYPES.includes(dtype);
  return true;
}

/**
 * Refuses a dtype × op pair the kernels do not take (ArgumentTypeError, SMCUDA_INVALID_ARG_TYPE), saying
 * which dtypes the op takes: the communicator calls it before a call (every rank refuses the same pair).
 */
export function checkDtypeOp(dtype: DType, op: ReduceOp): void {
  if (dtypeOpSupported(dtype, op)) return;
  if (op === 'premul')
    throw new ArgumentTypeError(
      `op 'premul' takes a floating-point dtype (${FLOAT_DTYPES.join(', ')}), not '${dtype}': for an integer dtype, scale the input before the call and use 'sum'`,
    );
  throw new ArgumentTypeError(
    `op '${op}' is bitwise and takes an integer dtype (${INT_DTYPES.join(', ')}), not '${dtype}': reinterpret the buffer as an integer dtype of the same size (u8, u32, u64)`,
  );
}

/** premul with its factor: what the collectives hand the kernels for `op: 'premul'`. */
export interface PreMulSum {
  readonly op: 'premul';
  readonly factor: number;
}
/** A reduction as the kernels take it: an op, or premul with its factor. */
export type ReduceArg = ReduceOp | PreMulSum;

/**
 * The reduction of a call from its `op` and `factor` fields: premul needs a finite number `factor`
 * (ArgumentTypeError if it is not a number, ArgumentRangeError if not finite); any other op refuses one
 * (ArgumentTypeError). Ranks must pass the same factor: it is not part of the call print (see docs/collectives.md).
 */
export function reduceArg(op: ReduceOp, factor: unknown): ReduceArg {
  if (op !== 'premul') {
    if (factor !== undefined) throw new ArgumentTypeError(`factor is premul's (op: 'premul', factor: <number>); op '${op}' takes none: leave factor out`);
    return op;
  }
  if (typeof factor !== 'number')
    throw new ArgumentTypeError(
      `op 'premul' needs a number factor (e.g. { op: 'premul', factor: 0.25 }), got ${factor === undefined ? 'none' : typeof factor}`,
    );
  if (!Number.isFinite(factor)) throw new ArgumentRangeError(`premul's factor must be finite, got ${String(factor)}`);
  return { op: 'premul', factor };
}

/** The op of a reduction. */
export function opName(r: ReduceArg): ReduceOp {
  return typeof r === 'string' ? r : r.op;
}

/** The kernels' `factor` argument: premul's factor, else 1 (unused). */
export function opFactor(r: ReduceArg): number {
  return typeof r === 'string' ? 1 : r.factor;
}

export function isDType(v: unknown): v is DType {
  return typeof v === 'string' && (DTYPES as readonly string[]).includes(v);
}

export function isReduceOp(v: unknown): v is ReduceOp {
  return typeof v === 'string' && (REDUCE_OPS as readonly string[]).includes(v);
}

/** `smcuda_reduce_<dtype>(out, table, n, offset, count, op, factor)`: factor (f64) is premul's, unused by the other ops. */
export function reduceEntry(dtype: DType): string {
  return `smcuda_reduce_${dtype}`;
}

/**
 * Blocks of the one- and two-shot kernels at most: reduce.cu's
 * ONESHOT_MAX_BLOCKS (a test checks they agree). Each block steps on its own
 * flag slots, so the flag block holds that many per rank (device-sync.ts).
 */
export const ONESHOT_MAX_BLOCKS = 512;

/** Where the two-shot kernel's step slot (parity `p`, signalled by rank `src`, block `b`) lies among a flag block's kernel slots, for `n` ranks: reduce.cu's block_step. */
export function blockStepSlotOffset(n: number, p: number, src: number, b: number): number {
  return ((p * n + src) * ONESHOT_MAX_BLOCKS + b) * 8;
}

/** The one-shot kernel's flag area (reduce.cu's oneshot_flag): word 0 its launch count (the epoch, at this offset), word 1 the blocks done, then a slot per source rank and block. */
export const ONESHOT_EPOCH_WORD = 0;
/** Where the one-shot kernel's flag of rank `src`'s block `b` lies in its flag area. */
export function oneshotFlagOffset(src: number, b: number): number {
  return (2 + src * ONESHOT_MAX_BLOCKS + b) * 8;
}
/** Bytes of the one-shot kernel's flag area for `n` ranks. */
export function oneshotAreaBytes(n: number): number {
  return oneshotFlagOffset(n, 0);
}

/** `smcuda_oneshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op, landOffset, slotBytes, factor)`: a one-shot allreduce piece in one launch. */
export function oneshotEntry(dtype: DType): string {
  return `smcuda_oneshot_${dtype}`;
}

/** `smcuda_lloneshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op, landOffset, slotBytes, factor)`: a one-shot allreduce piece by the LL protocol (data and flag in one store). */
export function lloneshotEntry(dtype: DType): string {
  return `smcuda_lloneshot_${dtype}`;
}

/** The LL one-shot's area (reduce.cu's lloneshot): word 0 its launch count (the epoch), word 1 the blocks done, word 2 the poison (non-zero: every wait ends). */
export const LL_EPOCH_WORD = 0;
export const LL_POISON_WORD = 16;
/** Bytes of the LL one-shot's area. */
export const LL_AREA_BYTES = 24;
/** Bytes of an LL line: two 64-bit words, each 4 data bytes and the 32-bit flag. */
export const LL_LINE_BYTES = 16;
/** Data bytes a line carries. */
export const LL_LINE_DATA = 8;
/** reduce.cu's LL_CLEAN_MASK: a launch whose epoch e has (e & mask) < 2 stores every line of its slots. */
export const LL_CLEAN_MASK = 0x3fffffffn;

/** `smcuda_twoshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op, bOffset, partMax, factor)`: a whole two-shot allreduce in one launch. */
export function twoshotEntry(dtype: DType): string {
  return `smcuda_twoshot_${dtype}`;
}

/** Elements per part of a two-shot piece of `count` elements among `n` ranks: reduce.cu's twoshot_chunk (count / n rounded up to whole 16-byte vectors). */
export function twoshotChunk(dtype: DType, count: number, n: number): number {
  const v = 16 / DTYPE_BYTES[dtype];
  return Math.ceil(Math.ceil(count / n) / v) * v;
}

/** Part j of a two-shot piece of `count` elements in parts of `chunk` (the last ones short or empty): [lo, lo + len). */
export function twoshotPart(count: number, chunk: number, j: number): { lo: number; len: number } {
  const lo = Math.min(count, j * chunk);
  return { lo, len: Math.min(count, lo + chunk) - lo };
}

/** The `op` argument of the kernels: reduce.cu's Op enum, in REDUCE_OPS order. */
export function opCode(op: ReduceArg): number {
  return REDUCE_OPS.indexOf(opName(op));
}

/** The operation an `op` argument names (opCode's inverse), for the kernels' twins; `entry` names the kernel in the error. */
export function opOf(code: number, entry: string): ReduceOp {
  const op = REDUCE_OPS[code];
  if (op === undefined) throw new ArgumentRangeError(`${entry}: op ${String(code)} is not one of 0..${REDUCE_OPS.length - 1}`);
  return op;
}

/** `smcuda_reduce_part_<dtype>(out, own, table, rank, n, count, op, factor)`: the copy-engine pipeline's reduction of this rank's part of a chunk. */
export function reducePartEntry(dtype: DType): string {
  return `smcuda_reduce_part_${dtype}`;
}

/** `smcuda_div_<dtype>(data, count, n)`: the avg epilogue. */
export function divEntry(dtype: DType): string {
  return `smcuda_div_${dtype}`;
}
