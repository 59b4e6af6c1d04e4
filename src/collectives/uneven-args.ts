/**
 * The arguments of gather, scatter and the collectives with counts per rank
 * (allgatherv, reduce-scatterv, alltoallv), and the checks of their counts
 * and displacements, made on every rank before anything runs: a bad one
 * throws a typed error there and aborts the communicator on every rank (as
 * any bad argument does). Counts and displacements are in elements.
 */
import { ArgumentRangeError, ArgumentTypeError } from '../errors.js';
import type { DType, ReduceOp } from '../kernels/dtypes.js';
import type { BufferArg, CallOptions } from './collective-args.js';

/** Counts or displacements per rank: an array (or typed array) of `size` non-negative integers. */
export type PerRank = readonly number[] | ArrayLike<number>;

/** gather: the root's recv gets every rank's send, rank k's at element k × count. */
export interface GatherArgs extends CallOptions {
  /** This rank's `count` elements (in place at the root: recv + root × count elements). */
  send: BufferArg;
  /** The root's result, size × count elements; not written on the other ranks (default: send). */
  recv?: BufferArg;
  /** Elements each rank sends: the same on every rank. */
  count: number;
  dtype: DType;
  /** The rank that receives. */
  root: number;
}

/** scatter: every rank's recv gets block `rank` (count elements at rank × count) of the root's send. */
export interface ScatterArgs extends CallOptions {
  /** The root's size × count elements; not read on the other ranks (default: recv). */
  send?: BufferArg;
  /** This rank's `count` elements (in place at the root: send + root × count elements). */
  recv: BufferArg;
  /** Elements each rank receives: the same on every rank. */
  count: number;
  dtype: DType;
  /** The rank that sends. */
  root: number;
}

/** allgatherv: every rank's recv gets rank k's send (counts[k] elements) at element displs[k]. */
export interface AllgathervArgs extends CallOptions {
  /** This rank's counts[rank] elements (in place: recv + displs[rank] elements). */
  send: BufferArg;
  /** Every rank's block, rank k's counts[k] elements at displs[k]; blocks must not overlap. */
  recv: BufferArg;
  /** Elements of each rank's block, by rank: the same on every rank. */
  counts: PerRank;
  /** Where each rank's block starts in recv, in elements (default: packed, the sums of the counts before it); this rank's own business. */
  displs?: PerRank;
  dtype: DType;
}

/** reduce-scatterv: recv (counts[rank] elements) = op over every rank's block `rank` of send. */
export interface ReduceScattervArgs extends CallOptions {
  /** Every rank's block, block k counts[k] elements at element displs[k]. */
  send: BufferArg;
  /** This rank's counts[rank] elements of result (in place: send + displs[rank] elements). */
  recv: BufferArg;
  /** Elements of each rank's block, by rank: the same on every rank. */
  counts: PerRank;
  /** Where each block starts in send, in elements (default: packed); this rank's own business. */
  displs?: PerRank;
  dtype: DType;
  /** Any reduction the dtype takes (docs/collectives.md's table). */
  op: ReduceOp;
  /** premul's factor (op 'premul' only): the same on every rank. */
  factor?: number;
}

/**
 * alltoallv: rank k's recv, at element recvDispls[j], gets sendCounts[k]
 * elements of rank j's send at its sendDispls[k]. Rank j's sendCounts[k]
 * must equal rank k's recvCounts[j] (a pair that disagrees fails the call
 * on every rank with SMCUDA_CALL_MISMATCH); zero counts move nothing.
 */
export interface AlltoallvArgs extends CallOptions {
  /** What this rank sends: to rank k, sendCounts[k] elements at sendDispls[k]. */
  send: BufferArg;
  /** What this rank receives, from rank k recvCounts[k] elements at recvDispls[k]: apart from send, blocks not overlapping. */
  recv: BufferArg;
  sendCounts: PerRank;
  /** Default: packed (the sums of the sendCounts before each). */
  sendDispls?: PerRank;
  recvCounts: PerRank;
  /** Default: packed (the sums of the recvCounts before each). */
  recvDispls?: PerRank;
  dtype: DType;
}

function isPerRank(v: unknown): v is ArrayLike<number> {
  return Array.isArray(v) || (ArrayBuffer.isView(v) && !(v instanceof DataView) && !(v instanceof BigInt64Array) && !(v instanceof BigUint64Array));
}

/** `size` non-negative safe integers (counts or displacements), as a plain array. */
export function perRankArg(name: string, v: unknown, size: number): number[] {
  if (!isPerRank(v)) throw new ArgumentTypeError(`${name} must be an array of ${size} element counts, one per rank, got ${v === null ? 'null' : typeof v}`);
  if (v.length !== size) throw new ArgumentRangeError(`${name} must hold one entry per rank (${size}), got ${v.length}`);
  const out = Array.from(v as ArrayLike<unknown>);
  out.forEach((x, k) => {
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0)
      throw new ArgumentRangeError(`${name}[${k}] must be a non-negative integer (elements), got ${typeof x === 'number' ? x : typeof x}`);
  });
  return out as number[];
}

/** The displacements: given (checked), or packed (each the sum of the counts before it). */
export function displsArg(name: string, v: unknown, counts: readonly number[]): number[] {
  if (v !== undefined) return perRankArg(name, v, counts.length);
  let at = 0;
  return counts.map((n) => {
    const d = at;
    at += n;
    return d;
  });
}

/** Elements from the buffer's start to the end of its last block (0 when every count is 0). */
export function extentOf(name: string, counts: readonly number[], displs: readonly number[], es: number): number {
  let end = 0;
  for (let k = 0; k < counts.length; k++) if (counts[k]! > 0) end = Math.max(end, displs[k]! + counts[k]!);
  if (!Number.isSafeInteger(end * es)) throw new ArgumentRangeError(`${name} reach past ${Number.MAX_SAFE_INTEGER} bytes`);
  return end;
}

/** Blocks a call writes must not overlap (the result would depend on the order of the copies). */
export function checkDisjoint(name: string, counts: readonly number[], displs: readonly number[]): void {
  const blocks = [...counts.keys()].filter((k) => counts[k]! > 0).sort((x, y) => displs[x]! - displs[y]!);
  for (let i = 1; i < blocks.length; i++) {
    const p = blocks[i - 1]!;
    const k = blocks[i]!;
    if (displs[k]! < displs[p]! + counts[p]!)
      throw new ArgumentRangeError(
        `${name}: rank ${p}'s block (${counts[p]} elements at ${displs[p]}) and rank ${k}'s (at ${displs[k]}) overlap: give each rank its own part of the buffer`,
      );
  }
}
