/**
 * Argument checks of the GPU-driven calls (stream memory operations, capture,
 * modules, kernel launch), shared by both drivers like validate.ts: a bad
 * argument is a TypeError or RangeError naming it, before any driver sees it.
 */
import type { CaptureMode, KernelArg, LaunchConfig, StreamMemOp, WaitCondition } from './driver.js';
import { ArgumentTypeError, ArgumentRangeError } from '../errors.js';

const U32_END = 2 ** 32;
const U64_END = 1n << 64n;
const I64_MIN = -(1n << 63n);
const I64_END = 1n << 63n;

/**
 * Most operations one streamBatchMemOp takes: cuStreamBatchMemOp's `count`
 * "must be less than 256", and the driver answers a batch of 256 with
 * CUDA_ERROR_INVALID_VALUE (seen on an H100: the communicator's poison,
 * written in full batches, never landed). The addon's array holds 256.
 */
export const MAX_BATCH_MEM_OPS = 255;
/** Most kernel parameter bytes, packed (the classic cuLaunchKernel limit). */
export const MAX_KERNEL_PARAM_BYTES = 4096;
/** Most kernel parameters. */
export const MAX_KERNEL_ARGS = 256;

const CONDITIONS: readonly WaitCondition[] = ['geq', 'eq', 'and', 'nor'];
const MODES: readonly CaptureMode[] = ['global', 'thread-local', 'relaxed'];

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return `${typeof value} ${String(value).slice(0, 40)}`;
}

function isU32(v: unknown): boolean {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v < U32_END;
}

function isU64(v: unknown): boolean {
  return typeof v === 'bigint' && v >= 0n && v < U64_END;
}

function isWordAddress(v: unknown, bytes: 4 | 8): boolean {
  return typeof v === 'bigint' && v > 0n && v < U64_END && (v & (bytes === 8 ? 7n : 3n)) === 0n;
}

/** A 32-bit word's value: an integer 0 .. 2^32-1. */
export function assertU32(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new ArgumentTypeError(`${name} must be an integer, got ${describe(value)}`);
  if (value < 0 || value >= U32_END) throw new ArgumentRangeError(`${name} must be between 0 and 2^32-1, got ${value}`);
}

/** A 64-bit word's value: a bigint 0 .. 2^64-1. */
export function assertU64(name: string, value: unknown): asserts value is bigint {
  if (typeof value !== 'bigint') throw new ArgumentTypeError(`${name} must be a bigint, got ${describe(value)}`);
  if (value < 0n || value >= U64_END) throw new ArgumentRangeError(`${name} must be between 0n and 2n**64n-1n, got ${value}`);
}

/** A device address of a 4- or 8-byte word: the driver needs it aligned to the word. */
export function assertWordAddress(name: string, value: unknown, bytes: 4 | 8): asserts value is bigint {
  if (typeof value !== 'bigint') throw new ArgumentTypeError(`${name} must be a bigint device pointer, got ${describe(value)}`);
  if (value <= 0n || value >= U64_END) throw new ArgumentRangeError(`${name} must be a non-null 64-bit device pointer, got ${value}`);
  if (value % BigInt(bytes) !== 0n)
    throw new ArgumentRangeError(`${name} must be ${bytes}-byte aligned for a ${bytes * 8}-bit word, got 0x${value.toString(16)}`);
}

export function assertWaitCondition(name: string, value: unknown): asserts value is WaitCondition {
  if (!CONDITIONS.includes(value as WaitCondition)) {
    throw new ArgumentTypeError(`${name} must be one of ${CONDITIONS.map((c) => `'${c}'`).join(', ')}, got ${describe(value)}`);
  }
}

export function assertCaptureMode(name: string, value: unknown): asserts value is CaptureMode {
  if (!MODES.includes(value as CaptureMode)) {
    throw new ArgumentTypeError(`${name} must be one of ${MODES.map((m) => `'${m}'`).join(', ')}, got ${describe(value)}`);
  }
}

function assertOptionalBoolean(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'boolean') throw new ArgumentTypeError(`${name} must be a boolean, got ${describe(value)}`);
}

/** streamBatchMemOp's list: 1 .. MAX_BATCH_MEM_OPS operations, each well formed. */
export function assertMemOps(name: string, value: unknown): asserts value is readonly StreamMemOp[] {
  if (!Array.isArray(value)) throw new ArgumentTypeError(`${name} must be an array of stream memory operations, got ${describe(value)}`);
  if (value.length < 1 || value.length > MAX_BATCH_MEM_OPS) {
    throw new ArgumentRangeError(`${name} must hold 1 to ${MAX_BATCH_MEM_OPS} operations, got ${value.length}`);
  }
  // A plain loop, and the name of an element only built for its error: a collective queues two batches a call,
  // and the name string per operation was most of this check's cost (and garbage). The native driver's
  // streamBatchMemOp over a no-op addon, a 2-rank step (3 operations): half the time with this alone.
  for (let k = 0; k < value.length; k++) {
    const op: unknown = value[k];
    if (typeof op !== 'object' || op === null) throw new ArgumentTypeError(`${name}[${k}] must be an operation object, got ${describe(op)}`);
    const o = op as Record<string, unknown>;
    switch (o.op) {
      case 'wait32':
      case 'write32':
        if (!isWordAddress(o.addr, 4)) assertWordAddress(`${name}[${k}].addr`, o.addr, 4);
        if (!isU32(o.value)) assertU32(`${name}[${k}].value`, o.value);
        break;
      case 'wait64':
      case 'write64':
        if (!isWordAddress(o.addr, 8)) assertWordAddress(`${name}[${k}].addr`, o.addr, 8);
        if (!isU64(o.value)) assertU64(`${name}[${k}].value`, o.value);
        break;
      case 'barrier':
        continue;
      default:
        throw new ArgumentTypeError(`${name}[${k}].op must be 'wait32', 'wait64', 'write32', 'write64' or 'barrier', got ${describe(o.op)}`);
    }
    if (o.op === 'wait32' || o.op === 'wait64') {
      if (!CONDITIONS.includes(o.condition as WaitCondition)) assertWaitCondition(`${name}[${k}].condition`, o.condition);
      if (o.flush !== undefined && typeof o.flush !== 'boolean') assertOptionalBoolean(`${name}[${k}].flush`, o.flush);
    } else if (o.noMemoryBarrier !== undefined && typeof o.noMemoryBarrier !== 'boolean') {
      assertOptionalBoolean(`${name}[${k}].noMemoryBarrier`, o.noMemoryBarrier);
    }
  }
}

/** PTX text: a non-empty string without NUL (the driver reads it as a C string). */
export function assertPtx(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string') throw new ArgumentTypeError(`${name} must be PTX text (a string), got ${describe(value)}`);
  if (value.length === 0) throw new ArgumentRangeError(`${name} must not be empty`);
  if (value.includes('\0')) throw new ArgumentRangeError(`${name} must not contain NUL characters`);
}

/** A kernel's .entry name: a PTX identifier. */
export function assertEntryName(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string') throw new ArgumentTypeError(`${name} must be a string, got ${describe(value)}`);
  if (!/^[A-Za-z_$%][\w$]{0,1023}$/.test(value)) throw new ArgumentRangeError(`${name} must be a PTX identifier, got ${JSON.stringify(value.slice(0, 60))}`);
}

function assertDims(name: string, value: unknown, limits: readonly [number, number, number]): [number, number, number] {
  if (!Array.isArray(value) || value.length < 1 || value.length > 3) {
    throw new ArgumentTypeError(`${name} must be [x], [x, y] or [x, y, z], got ${describe(value)}`);
  }
  const dims: [number, number, number] = [1, 1, 1];
  for (let i = 0; i < value.length; i++) {
    const v: unknown = value[i] ?? 1;
    if (typeof v !== 'number' || !Number.isInteger(v)) throw new ArgumentTypeError(`${name}[${i}] must be an integer, got ${describe(v)}`);
    if (v < 1 || v > limits[i]!) throw new ArgumentRangeError(`${name}[${i}] must be between 1 and ${limits[i]}, got ${v}`);
    dims[i] = v;
  }
  return dims;
}

/** A launch configuration: grid and block sizes within CUDA's limits. Returns [grid, block, sharedMemBytes] in full. */
export function assertLaunchConfig(name: string, value: unknown): [grid: [number, number, number], block: [number, number, number], sharedMemBytes: number] {
  if (typeof value !== 'object' || value === null) throw new ArgumentTypeError(`${name} must be { grid, block, sharedMemBytes? }, got ${describe(value)}`);
  const c = value as Partial<LaunchConfig>;
  const grid = assertDims(`${name}.grid`, c.grid, [2 ** 31 - 1, 65535, 65535]);
  const block = assertDims(`${name}.block`, c.block, [1024, 1024, 64]);
  if (block[0] * block[1] * block[2] > 1024) throw new ArgumentRangeError(`${name}.block must hold at most 1024 threads, got ${block.join('x')}`);
  const shared = c.sharedMemBytes ?? 0;
  if (typeof shared !== 'number' || !Number.isInteger(shared))
    throw new ArgumentTypeError(`${name}.sharedMemBytes must be an integer, got ${describe(shared)}`);
  if (shared < 0 || shared >= U32_END) throw new ArgumentRangeError(`${name}.sharedMemBytes must be between 0 and 2^32-1, got ${shared}`);
  return [grid, block, shared];
}

/** Bytes a kernel argument takes (and its alignment). */
export function kernelArgSize(type: KernelArg['type']): 4 | 8 {
  return type === 'u32' || type === 'i32' || type === 'f32' ? 4 : 8;
}

/** A kernel's argument list: each { type, value } in range for its type, MAX_KERNEL_PARAM_BYTES at most once packed. */
export function assertKernelArgs(name: string, value: unknown): asserts value is readonly KernelArg[] {
  if (!Array.isArray(value)) throw new ArgumentTypeError(`${name} must be an array of { type, value }, got ${describe(value)}`);
  if (value.length > MAX_KERNEL_ARGS) throw new ArgumentRangeError(`${name} must hold at most ${MAX_KERNEL_ARGS} arguments, got ${value.length}`);
  let bytes = 0;
  // A plain loop, names built only for an error (as assertMemOps).
  for (let k = 0; k < value.length; k++) {
    const arg: unknown = value[k];
    if (typeof arg !== 'object' || arg === null) throw new ArgumentTypeError(`${name}[${k}] must be { type, value }, got ${describe(arg)}`);
    const { type, value: v } = arg as Record<string, unknown>;
    switch (type) {
      case 'ptr':
      case 'u64':
        if (!isU64(v)) assertU64(`${name}[${k}].value`, v);
        break;
      case 'i64':
        if (typeof v !== 'bigint') throw new ArgumentTypeError(`${name}[${k}].value must be a bigint, got ${describe(v)}`);
        if (v < I64_MIN || v >= I64_END) throw new ArgumentRangeError(`${name}[${k}].value must fit in 64 signed bits, got ${v}`);
        break;
      case 'u32':
        if (!isU32(v)) assertU32(`${name}[${k}].value`, v);
        break;
      case 'i32':
        if (typeof v !== 'number' || !Number.isInteger(v)) throw new ArgumentTypeError(`${name}[${k}].value must be an integer, got ${describe(v)}`);
        if (v < -(2 ** 31) || v >= 2 ** 31) throw new ArgumentRangeError(`${name}[${k}].value must fit in 32 signed bits, got ${v}`);
        break;
      case 'f32':
      case 'f64':
        if (typeof v !== 'number') throw new ArgumentTypeError(`${name}[${k}].value must be a number, got ${describe(v)}`);
        break;
      default:
        throw new ArgumentTypeError(`${name}[${k}].type must be 'ptr', 'u64', 'i64', 'u32', 'i32', 'f32' or 'f64', got ${describe(type)}`);
    }
    const size = kernelArgSize(type);
    bytes = Math.ceil(bytes / size) * size + size;
  }
  if (bytes > MAX_KERNEL_PARAM_BYTES) throw new ArgumentRangeError(`${name} take ${bytes} bytes packed; at most ${MAX_KERNEL_PARAM_BYTES}`);
}
