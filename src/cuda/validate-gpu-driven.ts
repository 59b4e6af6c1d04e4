/**
 * Argument checks of the GPU-driven calls (stream memory operations,
 * capture), shared by both drivers so that a bad argument from JS is refused
 * the same way, before any driver sees it (TypeError / RangeError).
 */
import type { CaptureMode, StreamMemOp, WaitCondition } from './driver.js';
import { assertPtr } from './validate.js';

const CONDITIONS: readonly WaitCondition[] = ['geq', 'eq', 'and', 'nor'];
const MODES: readonly CaptureMode[] = ['global', 'thread-local', 'relaxed'];
const U64_MAX = (1n << 64n) - 1n;

export function assertCondition(name: string, value: unknown): asserts value is WaitCondition {
  if (!CONDITIONS.includes(value as WaitCondition)) throw new TypeError(`${name} must be one of ${CONDITIONS.join(', ')}, got ${String(value)}`);
}

export function assertU32(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number (a 32-bit word), got ${typeof value}`);
  if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) throw new RangeError(`${name} must be an integer in [0, 2^32), got ${value}`);
}

export function assertU64(name: string, value: unknown): asserts value is bigint {
  if (typeof value !== 'bigint') throw new TypeError(`${name} must be a bigint (a 64-bit word), got ${typeof value}`);
  if (value < 0n || value > U64_MAX) throw new RangeError(`${name} must be in [0, 2^64), got ${value}`);
}

/** A word address: 4-byte aligned for 32-bit operations, 8 for 64-bit, as the driver requires. */
export function assertWordAddress(name: string, value: unknown, bits: 32 | 64): asserts value is bigint {
  assertPtr(name, value);
  if (value % BigInt(bits / 8) !== 0n) throw new RangeError(`${name} must be ${bits / 8}-byte aligned for a ${bits}-bit memory operation, got 0x${value.toString(16)}`);
}

export function assertCaptureMode(name: string, value: unknown): asserts value is CaptureMode {
  if (!MODES.includes(value as CaptureMode)) throw new TypeError(`${name} must be one of ${MODES.join(', ')}, got ${String(value)}`);
}

/** Every operation of a batch, before any is queued (the driver refuses a bad batch whole). */
export function assertMemOps(name: string, ops: unknown): asserts ops is readonly StreamMemOp[] {
  if (!Array.isArray(ops)) throw new TypeError(`${name} must be an array of memory operations`);
  if (ops.length === 0) throw new RangeError(`${name} must hold at least one operation`);
  ops.forEach((op: unknown, k) => {
    const at = `${name}[${k}]`;
    if (op === null || typeof op !== 'object') throw new TypeError(`${at} must be an object like { op: 'write64', addr, value }`);
    const o = op as Record<string, unknown>;
    switch (o.op) {
      case 'wait32':
        assertWordAddress(`${at}.addr`, o.addr, 32);
        assertU32(`${at}.value`, o.value);
        assertCondition(`${at}.condition`, o.condition);
        return;
      case 'wait64':
        assertWordAddress(`${at}.addr`, o.addr, 64);
        assertU64(`${at}.value`, o.value);
        assertCondition(`${at}.condition`, o.condition);
        return;
      case 'write32':
        assertWordAddress(`${at}.addr`, o.addr, 32);
        assertU32(`${at}.value`, o.value);
        return;
      case 'write64':
        assertWordAddress(`${at}.addr`, o.addr, 64);
        assertU64(`${at}.value`, o.value);
        return;
      case 'barrier':
        return;
      default:
        throw new TypeError(`${at}.op must be wait32, wait64, write32, write64 or barrier, got ${String(o.op)}`);
    }
  });
}
