/**
 * A call's fingerprint: what every rank must agree on for the same call
 * (collective, dtype, count, root, reduction op, in place or not), packed
 * into three 32-bit words so that ranks compare calls by a few stores and
 * loads (call-check.ts), never by parsing.
 *
 *   word 0: op (4 bits) | dtype + 1 (5) | reduction op + 1 (4) | in place (1) | root + 1 (14)
 *   word 1: count, low 32 bits
 *   word 2: count, high bits (counts are safe integers: at most 21 bits) | premul's factor, hashed (11 bits)
 *
 * A field a collective has not (broadcast's reduction op, allreduce's root)
 * is 0, so it always agrees. In place or not is recorded (traces, the flight
 * recorder) but not compared: it is each rank's own business (broadcast's
 * root passes a send buffer and the others only recv; every algorithm copies
 * the input into scratch first), so ranks may differ in it and still agree.
 */
import { DTYPES, REDUCE_OPS, type DType, type ReduceOp } from '../kernels/dtypes.js';

/** Every call a communicator checks, in the order of its code in word 0. */
export const CALL_OPS = ['allreduce', 'broadcast', 'reduce', 'allgather', 'reduce-scatter', 'alltoall', 'barrier'] as const;
export type CallOp = (typeof CALL_OPS)[number];

export interface CallPrint {
  op: CallOp;
  dtype?: DType | undefined;
  count?: number | undefined;
  root?: number | undefined;
  redop?: ReduceOp | undefined;
  inPlace?: boolean | undefined;
  /** premul's factor, as an 11-bit hash of its bits (0: no factor): ranks with different factors differ here (a hash: two factors may share one). */
  factorHash?: number | undefined;
}

const TWO_32 = 2 ** 32;
const OP_CODE = new Map<string, number>(CALL_OPS.map((o, i) => [o, i]));
const DTYPE_CODE = new Map<string, number>(DTYPES.map((d, i) => [d, i + 1]));
const REDOP_CODE = new Map<string, number>(REDUCE_OPS.map((o, i) => [o, i + 1]));

/** Word 0 of a print (the count goes in words 1 and 2: `count >>> 0`, `Math.floor(count / 2 ** 32)`). */
export function printWord0(op: CallOp, dtype: DType | undefined, redop: ReduceOp | undefined, inPlace: boolean, root: number | undefined): number {
  return (
    (OP_CODE.get(op)! |
      ((dtype === undefined ? 0 : DTYPE_CODE.get(dtype)!) << 4) |
      ((redop === undefined ? 0 : REDOP_CODE.get(redop)!) << 9) |
      ((inPlace ? 1 : 0) << 13) |
      ((root === undefined ? 0 : root + 1) << 14)) >>>
    0
  );
}

/** premul's factor as 11 bits for word 2 (0 for none): a fold of its float64 bits. */
export function factorHash(factor: number | undefined): number {
  if (factor === undefined) return 0;
  const v = new DataView(new ArrayBuffer(8));
  v.setFloat64(0, factor);
  const x = (v.getUint32(0) ^ v.getUint32(4)) >>> 0;
  return (x ^ (x >>> 11) ^ (x >>> 22)) & 0x7ff || 1;
}

/** Word 2 of a print: the count's high bits and the factor's hash. */
export function printWord2(count: number, factor: number | undefined): number {
  return ((count > 0xffffffff ? Math.floor(count / TWO_32) : 0) | (factorHash(factor) << 21)) >>> 0;
}

export function encodePrint(p: CallPrint): [number, number, number] {
  const count = p.count ?? 0;
  return [printWord0(p.op, p.dtype, p.redop, p.inPlace ?? false, p.root), count >>> 0, (Math.floor(count / TWO_32) | ((p.factorHash ?? 0) << 21)) >>> 0];
}

export function decodePrint(w0: number, w1: number, w2: number): CallPrint {
  const p: CallPrint = { op: CALL_OPS[w0 & 0xf] ?? 'barrier' };
  const d = (w0 >>> 4) & 0x1f;
  if (d > 0) p.dtype = DTYPES[d - 1];
  const r = (w0 >>> 9) & 0xf;
  if (r > 0) p.redop = REDUCE_OPS[r - 1];
  if ((w0 >>> 13) & 1) p.inPlace = true;
  const root = (w0 >>> 14) & 0x3fff;
  if (root > 0) p.root = root - 1;
  if (p.op !== 'barrier') p.count = (w2 & 0x1fffff) * TWO_32 + w1;
  const f = w2 >>> 21;
  if (f > 0) p.factorHash = f;
  return p;
}

/** 'allreduce f32 × 1000 sum in place', 'broadcast u8 × 4 root 1', 'barrier'. */
export function describePrint(p: CallPrint): string {
  let s: string = p.op;
  if (p.dtype !== undefined) s += ` ${p.dtype} × ${p.count ?? 0}`;
  if (p.redop !== undefined) s += ` ${p.redop}`;
  if (p.factorHash !== undefined) s += ` (factor #${p.factorHash})`;
  if (p.root !== undefined) s += ` root ${p.root}`;
  if (p.inPlace) s += ' in place';
  return s;
}

/** The bit of word 0 that is not compared (in place). */
const IN_PLACE_BIT = 1 << 13;

/** Whether two prints, as words, are of calls that agree (every field but in place). */
export function printsAgree(a0: number, a1: number, a2: number, b0: number, b1: number, b2: number): boolean {
  return ((a0 ^ b0) & ~IN_PLACE_BIT) === 0 && a1 === b1 && a2 === b2;
}

/** The fields in which two prints differ ('collective', 'dtype', 'count', 'root', 'op', 'factor'). */
export function differingFields(a: CallPrint, b: CallPrint): string[] {
  const f: string[] = [];
  if (a.op !== b.op) f.push('collective');
  if (a.dtype !== b.dtype) f.push('dtype');
  if ((a.count ?? 0) !== (b.count ?? 0)) f.push('count');
  if (a.root !== b.root) f.push('root');
  if (a.redop !== b.redop) f.push('op');
  if ((a.factorHash ?? 0) !== (b.factorHash ?? 0)) f.push('factor');
  return f;
}
