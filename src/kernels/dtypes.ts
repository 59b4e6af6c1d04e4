/**
 * The element types and reduction operations the kernels in reduce.cu are
 * built for, and the names of their entries: one table that the collectives,
 * the TypeScript twins and the tests share.
 */
import { ArgumentRangeError } from '../errors.js';

/** The element types the kernels in reduce.cu are built for (and the collectives take). */
export const DTYPES = ['f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8'] as const;
export type DType = (typeof DTYPES)[number];

export const REDUCE_OPS = ['sum', 'avg', 'min', 'max', 'prod'] as const;
export type ReduceOp = (typeof REDUCE_OPS)[number];

/** Bytes per element. */
export const DTYPE_BYTES: Readonly<Record<DType, number>> = { f32: 4, f16: 2, bf16: 2, f64: 8, i32: 4, i64: 8, u8: 1 };

export function isDType(v: unknown): v is DType {
  return typeof v === 'string' && (DTYPES as readonly string[]).includes(v);
}

export function isReduceOp(v: unknown): v is ReduceOp {
  return typeof v === 'string' && (REDUCE_OPS as readonly string[]).includes(v);
}

/** `smcuda_reduce_<dtype>(out, table, n, offset, count, op)`. */
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

/** `smcuda_oneshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op, landOffset, slotBytes)`: a one-shot allreduce piece in one launch. */
export function oneshotEntry(dtype: DType): string {
  return `smcuda_oneshot_${dtype}`;
}

/** `smcuda_twoshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op, bOffset, partMax)`: a whole two-shot allreduce in one launch. */
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
export function opCode(op: ReduceOp): number {
  return REDUCE_OPS.indexOf(op);
}

/** The operation an `op` argument names (opCode's inverse), for the kernels' twins; `entry` names the kernel in the error. */
export function opOf(code: number, entry: string): ReduceOp {
  const op = REDUCE_OPS[code];
  if (op === undefined) throw new ArgumentRangeError(`${entry}: op ${String(code)} is not one of 0..${REDUCE_OPS.length - 1}`);
  return op;
}

/** `smcuda_reduce_part_<dtype>(out, own, table, rank, n, count, op)`: the copy-engine pipeline's reduction of this rank's part of a chunk. */
export function reducePartEntry(dtype: DType): string {
  return `smcuda_reduce_part_${dtype}`;
}

/** `smcuda_div_<dtype>(data, count, n)`: the avg epilogue. */
export function divEntry(dtype: DType): string {
  return `smcuda_div_${dtype}`;
}
