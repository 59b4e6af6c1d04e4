/**
 * The collective calls `smcuda demo --collectives` (and its bench) runs, the
 * inputs every rank makes for them, and the result every rank expects: each
 * rank can compute every other rank's input, so it verifies its own output
 * against a host reference with no extra communication.
 */
import type { CollectiveOp } from '../collectives/communicator.js';
import { mulberry32 } from '../cuda/sim/prng.js';
import { DTYPE_BYTES, DTYPES, dtypeOpSupported, REDUCE_OPS, reduceArg, type DType, type ReduceOp } from '../kernels/dtypes.js';
import { reduceInto } from '../kernels/sim/reduce.js';

/** The collectives the demo verifies: every one that moves data. */
export type CaseOp = Exclude<CollectiveOp, 'split' | 'new-group' | 'barrier'>;

/** The calls with counts per rank: a rank's input and output sizes are its own (vCounts, alltoallvCount). */
const V_OPS: ReadonlySet<CaseOp> = new Set(['allgatherv', 'reduce-scatterv', 'alltoallv']);

export interface CollectiveCase {
  op: CaseOp;
  /** The reduction, for allreduce, reduce and reduce-scatter. */
  reduce?: ReduceOp;
  /** premul's factor (PREMUL_FACTOR), with reduce 'premul' only. */
  factor?: number;
  dtype: DType;
  /** Elements per rank of the call's `count`. */
  count: number;
  /** Bytes of each rank's input. */
  size: number;
  root?: number;
}

/** The demo's premul factor: not a power of two, so that its rounding to f32 and each product's rounding show. */
export const PREMUL_FACTOR = 0.3;

/**
 * Every op (allreduce with each reduction the dtype takes: dtypeOpSupported) × dtype × size; `sizes` are bytes of each rank's input, rounded
 * to whole elements (at least one when not 0). Dtype by dtype and size by size, every op of a size in a
 * row: most of them share their inputs (caseInput keeps the last ones).
 */
export function collectiveCases(sizes: readonly number[], ranks: number): CollectiveCase[] {
  const out: CollectiveCase[] = [];
  const ops: Array<[CaseOp, ReduceOp | undefined]> = [
    ...REDUCE_OPS.map((r) => ['allreduce', r] as [CaseOp, ReduceOp]),
    ['reduce', 'sum'],
    ['broadcast', undefined],
    ['allgather', undefined],
    // Their inputs are `ranks` blocks of count: last, together.
    ['reduce-scatter', 'sum'],
    ['alltoall', undefined],
    ['gather', undefined],
    ['scatter', undefined],
    // Counts per rank: a zero-count rank, and for alltoallv a skewed pattern (vCounts, alltoallvCount).
    ['allgatherv', undefined],
    ['reduce-scatterv', 'sum'],
    ['reduce-scatterv', 'premul'],
    ['alltoallv', undefined],
  ];
  for (const dtype of DTYPES) {
    for (const size of sizes) {
      for (const [op, reduce] of ops) {
        if (reduce !== undefined && !dtypeOpSupported(dtype, reduce)) continue;
        const es = DTYPE_BYTES[dtype];
        const per = op === 'reduce-scatter' || op === 'alltoall' || op === 'scatter' ? ranks : 1; // their input is `ranks` blocks of count
        const count = size === 0 ? 0 : Math.max(1, Math.floor(size / es / per));
        out.push({
          op,
          dtype,
          count,
          size: count * es * per,
          ...(reduce ? { reduce } : {}),
          ...(reduce === 'premul' ? { factor: PREMUL_FACTOR } : {}),
          ...(op === 'broadcast' || op === 'reduce' || op === 'gather' || op === 'scatter' ? { root: ranks - 1 } : {}),
        });
      }
    }
  }
  return out;
}

/**
 * The inputs made last, by rank, and what they were made for: the ops of one dtype and size come one after
 * another (collectiveCases), and every rank makes every rank's input for its reference (expectedOutput):
 * the demo's host work per rank at 16 MiB, 2 ranks, all 70 cases: 25.2 -> 10.5 s (with the tables hoisted
 * out of the loop and f16 conversions by table, src/kernels/sim/half.ts), 7.1 s with reduceInto's typed loops.
 */
let kept: { key: string; byRank: Map<number, Uint8Array> } = { key: '', byRank: new Map() };

/** Input elements of `count` per block × blocks, for `rank`: small values, exact in every dtype, never NaN. Callers must not change it (it is kept for the next case). */
export function caseInput(c: CollectiveCase, rank: number, ranks: number): Uint8Array {
  const n = inputCount(c, ranks, rank);
  // The calls with counts per rank make inputs of each rank's own size.
  const key = V_OPS.has(c.op) ? `${c.dtype} ${c.count} ${c.op}` : `${c.dtype} ${c.count} ${n}`;
  if (kept.key !== key) kept = { key, byRank: new Map() };
  let bytes = kept.byRank.get(rank);
  if (bytes === undefined) kept.byRank.set(rank, (bytes = makeInput(c.dtype, c.count, n, rank)));
  return bytes;
}

/** f16 and bf16 bit patterns of -4..4 mapped to small values (1, -1, 1/3, 3, 0.1, -2, 0, 0.999, 0.5); fp8: 1, -1, 0.3125 (e4m3) or 0.3125 (e5m2), 3, 0.1015625 (e4m3) or 0.09375 (e5m2), -2, 0, 0.875 (e4m3) or 0.75 (e5m2), 0.5. */
const F16_BITS = [0x3c00, 0xbc00, 0x3555, 0x4200, 0x2e66, 0xc000, 0x0000, 0x3bff, 0x3800];
const BF16_BITS = [0x3f80, 0xbf80, 0x3eaa, 0x4040, 0x3dcd, 0xc000, 0x0000, 0x3f7f, 0x3f00];
const E4M3_BITS = [0x38, 0xb8, 0x2a, 0x44, 0x1d, 0xc0, 0x00, 0x36, 0x30];
const E5M2_BITS = [0x3c, 0xbc, 0x35, 0x42, 0x2e, 0xc0, 0x00, 0x3a, 0x38];

function makeInput(dtype: DType, count: number, n: number, rank: number): Uint8Array {
  const es = DTYPE_BYTES[dtype];
  const bytes = new Uint8Array(n * es);
  const v = new DataView(bytes.buffer);
  const rnd = mulberry32((rank + 1) * 7919 + count * 31 + es);
  for (let i = 0; i < n; i++) {
    const x = Math.floor(rnd() * 9) - 4; // -4..4: products of a few ranks stay finite
    const at = i * es;
    if (dtype === 'f32') v.setFloat32(at, x / 2 + 0.25, true);
    else if (dtype === 'f64') v.setFloat64(at, x / 2 + 0.25, true);
    else if (dtype === 'f16') v.setUint16(at, F16_BITS[x + 4]!, true);
    else if (dtype === 'bf16') v.setUint16(at, BF16_BITS[x + 4]!, true);
    else if (dtype === 'i32') v.setInt32(at, x * 1001, true);
    else if (dtype === 'i64') v.setBigInt64(at, BigInt(x) * 1_000_000_007n, true);
    else if (dtype === 'u64') v.setBigUint64(at, BigInt.asUintN(64, BigInt(x + 4) * 0x1_0000_0001n + (BigInt(x) << 60n)), true);
    else if (dtype === 'u32') v.setUint32(at, ((x + 4) * 0x1001_0001 + x * 7) >>> 0, true);
    else if (dtype === 'i8') v.setInt8(at, x * 29);
    else if (dtype === 'f8e4m3') v.setUint8(at, E4M3_BITS[x + 4]!);
    else if (dtype === 'f8e5m2') v.setUint8(at, E5M2_BITS[x + 4]!);
    else v.setUint8(at, (x + 4) * 29);
  }
  return bytes;
}

/**
 * allgatherv's and reduce-scatterv's counts per rank from the case's count: rank 0 `count`, every odd
 * rank none, the other even ranks half (at least one).
 */
export function vCounts(c: CollectiveCase, ranks: number): number[] {
  return [...Array(ranks).keys()].map((k) => (c.count === 0 || k % 2 === 1 ? 0 : k === 0 ? c.count : Math.max(1, c.count >> 1)));
}

/**
 * alltoallv's elements from rank i to rank j, skewed as a mixture of experts routes tokens: the last
 * rank gets `count` from every rank, the others a quarter of it from some ranks and none from the rest.
 */
export function alltoallvCount(c: CollectiveCase, ranks: number, i: number, j: number): number {
  if (c.count === 0) return 0;
  if (j === ranks - 1) return c.count;
  return (i + j) % 3 === 0 ? 0 : Math.max(1, c.count >> 2);
}

/** Elements of `rank`'s input (the calls with counts per rank: its own). */
export function inputCount(c: CollectiveCase, ranks: number, rank = 0): number {
  if (c.op === 'allgatherv') return vCounts(c, ranks)[rank]!;
  if (c.op === 'reduce-scatterv') return sum(vCounts(c, ranks));
  if (c.op === 'alltoallv') return sum([...Array(ranks).keys()].map((j) => alltoallvCount(c, ranks, rank, j)));
  return c.op === 'reduce-scatter' || c.op === 'alltoall' || c.op === 'scatter' ? ranks * c.count : c.count;
}

/** Elements of `rank`'s output. */
export function outputCount(c: CollectiveCase, ranks: number, rank = 0): number {
  if (c.op === 'allgatherv') return sum(vCounts(c, ranks));
  if (c.op === 'reduce-scatterv') return vCounts(c, ranks)[rank]!;
  if (c.op === 'alltoallv') return sum([...Array(ranks).keys()].map((i) => alltoallvCount(c, ranks, i, rank)));
  return c.op === 'allgather' || c.op === 'alltoall' || c.op === 'gather' ? ranks * c.count : c.count;
}

function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

/** What `rank`'s output must hold, or undefined where the call writes nothing there (reduce off the root). */
export function expectedOutput(c: CollectiveCase, rank: number, ranks: number): Uint8Array | undefined {
  const es = DTYPE_BYTES[c.dtype];
  const inputs = [...Array(ranks).keys()].map((k) => caseInput(c, k, ranks));
  const block = (k: number, j: number) => inputs[k]!.subarray(j * c.count * es, (j + 1) * c.count * es);
  const reduced = (parts: Uint8Array[]) => {
    const out = new Uint8Array(c.count * es);
    reduceInto(reduceArg(c.reduce!, c.factor), c.dtype, out, parts, c.count);
    return out;
  };
  switch (c.op) {
    case 'allreduce':
      return reduced(inputs);
    case 'reduce':
      return rank === c.root ? reduced(inputs) : undefined;
    case 'reduce-scatter':
      return reduced(inputs.map((_, k) => block(k, rank)));
    case 'broadcast':
      return inputs[c.root!]!;
    case 'allgather':
      return Buffer.concat(inputs);
    case 'alltoall':
      return Buffer.concat(inputs.map((_, k) => block(k, rank)));
    case 'gather':
      return rank === c.root ? Buffer.concat(inputs) : undefined;
    case 'scatter':
      return block(c.root!, rank);
    case 'allgatherv':
      return Buffer.concat(inputs);
    case 'reduce-scatterv': {
      // Packed blocks: rank k's block starts after the counts before it.
      const counts = vCounts(c, ranks);
      const at = sum(counts.slice(0, rank));
      const out = new Uint8Array(counts[rank]! * es);
      reduceInto(
        reduceArg(c.reduce!, c.factor),
        c.dtype,
        out,
        inputs.map((x) => x.subarray(at * es, (at + counts[rank]!) * es)),
        counts[rank]!,
      );
      return out;
    }
    case 'alltoallv':
      // From each rank j, its packed block for this rank.
      return Buffer.concat(
        inputs.map((x, j) => {
          const at = sum([...Array(rank).keys()].map((k) => alltoallvCount(c, ranks, j, k)));
          return x.subarray(at * es, (at + alltoallvCount(c, ranks, j, rank)) * es);
        }),
      );
  }
}
