/**
 * Argument checks shared by both drivers: bad input from JS is refused here,
 * with an ArgumentTypeError or ArgumentRangeError (src/errors.ts) that names the argument, before any driver
 * (native or simulated) sees it.
 */
import { IPC_HANDLE_SIZE, POOL_EXPORT_DATA_SIZE, type FdChunk } from './driver.js';
import { ArgumentTypeError, ArgumentRangeError } from '../errors.js';

/** Largest byte count a Number carries exactly. */
const MAX_BYTES = Number.MAX_SAFE_INTEGER;

/** 2^64, made once: these checks run on every driver call of the per-message path. */
const U64_END = 1n << 64n;

export function assertPtr(name: string, value: unknown): asserts value is bigint {
  if (typeof value !== 'bigint') {
    throw new ArgumentTypeError(`${name} must be a bigint device pointer, got ${describe(value)}`);
  }
  if (value < 0n || value >= U64_END) throw new ArgumentRangeError(`${name} must fit in 64 unsigned bits, got ${value}`);
}

/** Streams and events: bigint handles; 0n is allowed (the default stream). */
export function assertHandle(name: string, value: unknown): asserts value is bigint {
  if (typeof value !== 'bigint') throw new ArgumentTypeError(`${name} must be a bigint handle, got ${describe(value)}`);
  if (value < 0n || value >= U64_END) throw new ArgumentRangeError(`${name} must fit in 64 unsigned bits, got ${value}`);
}

export function assertSize(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new ArgumentTypeError(`${name} must be an integer byte count, got ${describe(value)}`);
  }
  if (value < 0 || value > MAX_BYTES) throw new ArgumentRangeError(`${name} must be between 0 and ${MAX_BYTES}, got ${value}`);
}

/** Most copies one memcpyBatchAsync call takes (the addon's bound). */
export const MAX_BATCH_COPIES = 256;

/** memcpyBatchAsync's arguments: typed arrays of at least `count` entries, 1 <= count <= MAX_BATCH_COPIES. */
export function assertCopyBatch(dsts: unknown, srcs: unknown, sizes: unknown, count: unknown): asserts count is number {
  if (!(dsts instanceof BigUint64Array)) throw new ArgumentTypeError(`dsts must be a BigUint64Array, got ${describe(dsts)}`);
  if (!(srcs instanceof BigUint64Array)) throw new ArgumentTypeError(`srcs must be a BigUint64Array, got ${describe(srcs)}`);
  if (!(sizes instanceof Float64Array)) throw new ArgumentTypeError(`sizes must be a Float64Array, got ${describe(sizes)}`);
  if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > MAX_BATCH_COPIES) {
    throw new ArgumentRangeError(`count must be an integer from 1 to ${MAX_BATCH_COPIES}, got ${describe(count)}`);
  }
  if (dsts.length < count || srcs.length < count || sizes.length < count) {
    throw new ArgumentRangeError(`dsts, srcs and sizes must hold at least count (${count}) entries`);
  }
}

export function assertIndex(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new ArgumentTypeError(`${name} must be an integer, got ${describe(value)}`);
  }
  if (value < 0 || value > 0x7fffffff) throw new ArgumentRangeError(`${name} must be a non-negative int32, got ${value}`);
}

export function assertByte(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new ArgumentTypeError(`${name} must be an integer, got ${describe(value)}`);
  }
  if (value < 0 || value > 255) throw new ArgumentRangeError(`${name} must be between 0 and 255, got ${value}`);
}

export function assertBytes(name: string, value: unknown): asserts value is Uint8Array {
  if (!(value instanceof Uint8Array)) throw new ArgumentTypeError(`${name} must be a Uint8Array (or Buffer), got ${describe(value)}`);
}

/** Host memory for a copy: any ArrayBufferView (Buffer, any TypedArray, DataView). */
export function assertHostView(name: string, value: unknown): asserts value is ArrayBufferView {
  if (!ArrayBuffer.isView(value)) throw new ArgumentTypeError(`${name} must be a Buffer, TypedArray or DataView, got ${describe(value)}`);
}

/** Its bytes, as a Uint8Array view (no copy). */
export function viewBytes(value: ArrayBufferView): Uint8Array {
  return value instanceof Uint8Array ? value : new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
}

export function assertIpcHandle(name: string, value: unknown): asserts value is Uint8Array {
  assertBytes(name, value);
  if (value.byteLength !== IPC_HANDLE_SIZE) {
    throw new ArgumentRangeError(`${name} must be ${IPC_HANDLE_SIZE} bytes (a CUipcMemHandle/CUipcEventHandle), got ${value.byteLength}`);
  }
}

export function assertName(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string') throw new ArgumentTypeError(`${name} must be a string, got ${describe(value)}`);
  // POSIX shm names: one leading slash, no other slash, short.
  if (!/^\/[A-Za-z0-9._-]{1,200}$/.test(value)) {
    throw new ArgumentRangeError(`${name} must look like '/name' (letters, digits, '.', '_', '-'; at most 200), got ${JSON.stringify(value)}`);
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return `${typeof value} ${String(value).slice(0, 40)}`;
}

/** A file descriptor number: a non-negative int32. */
export function assertFd(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new ArgumentTypeError(`${name} must be an integer file descriptor, got ${describe(value)}`);
  if (value < 0 || value > 0x7fffffff) throw new ArgumentRangeError(`${name} must be a non-negative int32, got ${value}`);
}

/** vmmAlloc's chunk count: 1..4096. */
export function assertChunkCount(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new ArgumentTypeError(`${name} must be an integer, got ${describe(value)}`);
  if (value < 1 || value > 4096) throw new ArgumentRangeError(`${name} must be between 1 and 4096, got ${value}`);
}

/** vmmImport's chunks: at least one; offsets start at 0, ascending, each chunk ending where the next begins. */
export function assertFdChunks(name: string, value: unknown): asserts value is readonly FdChunk[] {
  if (!Array.isArray(value)) throw new ArgumentTypeError(`${name} must be an array of { fd, offset, size }, got ${describe(value)}`);
  if (value.length === 0 || value.length > 4096) throw new ArgumentRangeError(`${name} must hold 1 to 4096 chunks, got ${value.length}`);
  let next = 0;
  value.forEach((c: unknown, k) => {
    if (typeof c !== 'object' || c === null) throw new ArgumentTypeError(`${name}[${k}] must be { fd, offset, size }, got ${describe(c)}`);
    const { fd, offset, size } = c as Record<string, unknown>;
    assertFd(`${name}[${k}].fd`, fd);
    assertSize(`${name}[${k}].offset`, offset);
    assertSize(`${name}[${k}].size`, size);
    if (size === 0) throw new ArgumentRangeError(`${name}[${k}].size must not be 0`);
    if (offset !== next) throw new ArgumentRangeError(`${name}[${k}].offset must be ${next} (chunks are contiguous from 0), got ${offset}`);
    next = (offset as number) + (size as number);
  });
}

export function assertPoolExportData(name: string, value: unknown): asserts value is Uint8Array {
  assertBytes(name, value);
  if (value.byteLength !== POOL_EXPORT_DATA_SIZE) {
    throw new ArgumentRangeError(`${name} must be ${POOL_EXPORT_DATA_SIZE} bytes (a CUmemPoolPtrExportData), got ${value.byteLength}`);
  }
}

/** An options object, or undefined. */
export function assertOptions(name: string, value: unknown): asserts value is object | undefined {
  if (value !== undefined && (typeof value !== 'object' || value === null)) throw new ArgumentTypeError(`${name} must be an object, got ${describe(value)}`);
}
