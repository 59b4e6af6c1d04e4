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
 * The calls with counts per rank (allgatherv, reduce-scatterv, alltoallv)
 * put a 53-bit hash of their counts in words 1 and 2 instead of a count
 * (countsHash): every rank passes the same counts to allgatherv and
 * reduce-scatterv, so equal hashes mean equal counts (but for a collision,
 * one in 2^53). alltoallv's ranks pass different counts (each its own
 * sendCounts and recvCounts), which must agree in pairs: rank i's
 * sendCounts[j] is rank j's recvCounts[i]. So its words hold each rank's
 * share of a sum (alltoallvShare): a term per count it sends, less a term
 * per count it receives, which over every rank is 0 exactly when every
 * pair agrees (but for a collision). Two ranks' alltoallv prints are
 * compared in word 0 only; the sum once every rank's print is in
 * (call-check.ts).
 *
 * A field a collective has not (broadcast's reduction op, allreduce's root)
 * is 0, so it always agrees. In place or not is recorded (traces, the flight
 * recorder) but not compared: it is each rank's own business (broadcast's
 * root passes a send buffer and the others only recv; every algorithm copies
 * the input into scratch first), so ranks may differ in it and still agree.
 */
import { DTYPES, REDUCE_OPS, type DType, type ReduceOp } from '../kernels/dtypes.js';

/** Every call a communicator checks, in the order of its code in word 0. */
export const CALL_OPS = [
  'allreduce',
  'broadcast',
  'reduce',
  'allgather',
  'reduce-scatter',
  'alltoall',
  'barrier',
  'gather',
  'scatter',
  'allgatherv',
  'reduce-scatterv',
  'alltoallv',
  'split',
  'new-group',
] as const;
export type CallOp = (typeof CALL_OPS)[number];

/** The calls whose words 1 and 2 hold a hash of their counts per rank, not a count. */
export const COUNTS_OPS: ReadonlySet<CallOp> = new Set(['allgatherv', 'reduce-scatterv', 'alltoallv']);
/** The code of alltoallv in word 0: its counts are compared as a sum over every rank. */
const ALLTOALLV_CODE = CALL_OPS.indexOf('alltoallv');

export interface CallPrint {
  op: CallOp;
  dtype?: DType | undefined;
  count?: number | undefined;
  root?: number | undefined;
  redop?: ReduceOp | undefined;
  inPlace?: boolean | undefined;
  /** The calls with counts per rank: the 53-bit hash of the counts (countsHash), or alltoallv's share of the sum (alltoallvShare). */
  counts?: number | undefined;
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

/** Words 1 and 2 of a call with counts per rank: the 53 bits of `counts` (countsHash, alltoallvShare) and the factor's hash. */
export function countsWords(counts: number, factor: number | undefined): [number, number] {
  return [counts >>> 0, (Math.floor(counts / TWO_32) | (factorHash(factor) << 21)) >>> 0];
}

/** A 32-bit mix (murmur3's finaliser). */
function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/** A term of 53 bits for count `c` at (i, j): as [low 32 bits, high 21]. */
function term(i: number, j: number, c: number): [number, number] {
  const lo = c >>> 0;
  const hi = Math.floor(c / TWO_32);
  const a = mix32(mix32(mix32(mix32(0x9e3779b9 ^ i) ^ j) ^ lo) ^ hi);
  const b = mix32(mix32(mix32(mix32(0x7f4a7c15 ^ j) ^ i) ^ hi) ^ lo);
  return [a, b & 0x1fffff];
}

/** A 53-bit hash of counts per rank (a sum of a term per rank: order and value both count). */
export function countsHash(counts: readonly number[]): number {
  let lo = 0;
  let hi = 0;
  for (let k = 0; k < counts.length; k++) {
    const [a, b] = term(k, 0x10000 + counts.length, counts[k]!);
    lo = (lo + a) >>> 0;
    hi = (hi + b) & 0x1fffff;
  }
  return hi * TWO_32 + lo;
}

/**
 * Rank `rank`'s share of alltoallv's sum: the terms of what it sends (rank → k, sendCounts[k]) less
 * the terms of what it receives (k → rank, recvCounts[k]), modulo 2^32 and 2^21. Every pair's send
 * term is some rank's receive term when the counts agree, and the shares of every rank add up to 0.
 */
export function alltoallvShare(rank: number, sendCounts: readonly number[], recvCounts: readonly number[]): number {
  let lo = 0;
  let hi = 0;
  for (let k = 0; k < sendCounts.length; k++) {
    const [a, b] = term(rank, k, sendCounts[k]!);
    const [c, d] = term(k, rank, recvCounts[k]!);
    lo = (lo + a - c) >>> 0;
    hi = (hi + b - d) & 0x1fffff;
  }
  return hi * TWO_32 + lo;
}

/** Whether word 0 is alltoallv's: its counts are checked as a sum over every rank's print (sharesSumToZero). */
export function isSummedPrint(w0: number): boolean {
  return (w0 & 0xf) === ALLTOALLV_CODE;
}

/** Whether alltoallv's shares (words 1 and 2 of every rank's print) add up to 0: every pair's counts agree. */
export function sharesSumToZero(words: ReadonlyArray<readonly [number, number]>): boolean {
  let lo = 0;
  let hi = 0;
  for (const [w1, w2] of words) {
    lo = (lo + w1) >>> 0;
    hi = (hi + (w2 & 0x1fffff)) & 0x1fffff;
  }
  return lo === 0 && hi === 0;
}

export function encodePrint(p: CallPrint): [number, number, number] {
  const n = (COUNTS_OPS.has(p.op) ? p.counts : p.count) ?? 0;
  return [printWord0(p.op, p.dtype, p.redop, p.inPlace ?? false, p.root), n >>> 0, (Math.floor(n / TWO_32) | ((p.factorHash ?? 0) << 21)) >>> 0];
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
  if (COUNTS_OPS.has(p.op)) p.counts = (w2 & 0x1fffff) * TWO_32 + w1;
  else if (p.op !== 'barrier') p.count = (w2 & 0x1fffff) * TWO_32 + w1;
  const f = w2 >>> 21;
  if (f > 0) p.factorHash = f;
  return p;
}

/** 'allreduce f32 × 1000 sum in place', 'broadcast u8 × 4 root 1', 'barrier'. */
export function describePrint(p: CallPrint): string {
  let s: string = p.op;
  if (p.dtype !== undefined) s += p.counts !== undefined ? ` ${p.dtype} (counts #${p.counts.toString(16)})` : ` ${p.dtype} × ${p.count ?? 0}`;
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
  if (((a0 ^ b0) & ~IN_PLACE_BIT) !== 0) return false;
  // alltoallv: each rank's counts differ; only the factor bits (none) are compared here, the counts as a sum.
  if (isSummedPrint(a0)) return (a2 ^ b2) >>> 21 === 0;
  return a1 === b1 && a2 === b2;
}

/** The fields in which two prints differ ('collective', 'dtype', 'count', 'counts', 'root', 'op', 'factor'); alltoallv's counts are not compared in pairs (sharesSumToZero). */
export function differingFields(a: CallPrint, b: CallPrint): string[] {
  const f: string[] = [];
  if (a.op !== b.op) f.push('collective');
  if (a.dtype !== b.dtype) f.push('dtype');
  if ((a.count ?? 0) !== (b.count ?? 0)) f.push('count');
  if (a.op === b.op && a.op !== 'alltoallv' && (a.counts ?? 0) !== (b.counts ?? 0)) f.push('counts');
  if (a.root !== b.root) f.push('root');
  if (a.redop !== b.redop) f.push('op');
  if ((a.factorHash ?? 0) !== (b.factorHash ?? 0)) f.push('factor');
  return f;
}
