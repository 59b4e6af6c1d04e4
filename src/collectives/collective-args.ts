/**
 * What each collective call takes: one named argument interface per call,
 * with every field documented (the API reference lists them), and the
 * options every call shares.
 *
 * Buffers (`send`, `recv`) are BufferArg: a bare device pointer, or a buffer
 * object `{ ptr, length, device }` (from `comm.alloc`, `driver.memAllocBuffer`
 * or the application) whose length the call is checked against
 * (buffer-arg.ts). Counts are in elements of `dtype`.
 */
import type { StreamHandle } from '../cuda/driver.js';
import type { DType, ReduceOp } from '../kernels/dtypes.js';
import type { Algorithm } from './algorithms.js';
import type { BufferArg } from './buffer-arg.js';

export type { BufferArg };

/** The options every call takes. */
export interface CallOptions {
  /** The stream the call is ordered on (default 0n, the legacy default stream). */
  stream?: StreamHandle;
  /** This call's time limit, ms (default: the communicator's). */
  timeoutMs?: number;
  /** Force this call's algorithm (allreduce: any; the others: 'one-shot' or 'staged'). */
  algorithm?: Exclude<Algorithm, 'local'>;
}

/** `allreduce`: recv[i] = op over every rank's send[i]. */
export interface AllreduceArgs extends CallOptions {
  /** This rank's input: `count` elements. */
  send: BufferArg;
  /** Where the result goes (`count` elements); default `send` (in place). */
  recv?: BufferArg;
  /** Elements per rank (0 allowed; need not divide by the ranks). */
  count: number;
  /** The elements' type: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2. */
  dtype: DType;
  /** The reduction: sum, avg, min, max, prod, premul (with `factor`); band, bor, bxor for integers. */
  op: ReduceOp;
  /** `premul`'s factor: recv[i] = Σ factor × send[i]; given with `premul` only, the same on every rank. */
  factor?: number;
}

/** `broadcast`: every rank's recv gets root's send. */
export interface BroadcastArgs extends CallOptions {
  /** Root's input (`count` elements); default `recv` (in place). Other ranks need not pass it. */
  send?: BufferArg;
  /** Where every rank gets root's data (`count` elements). */
  recv: BufferArg;
  /** Elements broadcast (0 allowed). */
  count: number;
  /** The elements' type: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2. */
  dtype: DType;
  /** The rank whose `send` is broadcast. */
  root: number;
}

/** `reduce`: root's recv[i] = op over every rank's send[i]. */
export interface ReduceArgs extends CallOptions {
  /** This rank's input: `count` elements. */
  send: BufferArg;
  /** Root's output (`count` elements); default `send`. Not written on the other ranks. */
  recv?: BufferArg;
  /** Elements per rank (0 allowed). */
  count: number;
  /** The elements' type: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2. */
  dtype: DType;
  /** The reduction: sum, avg, min, max, prod, premul (with `factor`); band, bor, bxor for integers. */
  op: ReduceOp;
  /** `premul`'s factor (see AllreduceArgs.factor). */
  factor?: number;
  /** The rank that gets the result. */
  root: number;
}

/** `allgather`: recv holds every rank's send, in rank order. */
export interface AllgatherArgs extends CallOptions {
  /** This rank's input: `count` elements (in place when it is `recv` + rank × count elements). */
  send: BufferArg;
  /** size × `count` elements: rank k's `send` lands at k × count. */
  recv: BufferArg;
  /** Elements each rank contributes. */
  count: number;
  /** The elements' type: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2. */
  dtype: DType;
}

/** `reduceScatter`: recv = op over every rank's block `rank` of send. */
export interface ReduceScatterArgs extends CallOptions {
  /** size × `count` elements: block k goes to rank k's reduction. */
  send: BufferArg;
  /** `count` elements: the reduction of block `rank` (in place when it is `send` + rank × count elements). */
  recv: BufferArg;
  /** Elements of each block (what each rank receives). */
  count: number;
  /** The elements' type: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2. */
  dtype: DType;
  /** The reduction: sum, avg, min, max, prod, premul (with `factor`); band, bor, bxor for integers. */
  op: ReduceOp;
  /** `premul`'s factor (see AllreduceArgs.factor). */
  factor?: number;
}

/** `alltoall`: block k of send goes to rank k, into its block `rank` of recv. */
export interface AlltoallArgs extends CallOptions {
  /** size × `count` elements, block k for rank k. */
  send: BufferArg;
  /** size × `count` elements, block k from rank k; default `send` (in place). */
  recv?: BufferArg;
  /** Elements of each block. */
  count: number;
  /** The elements' type: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2. */
  dtype: DType;
}
