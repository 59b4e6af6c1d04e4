/**
 * What a message can be: host bytes (Buffer, any TypedArray, DataView) or a
 * range of device memory. Device memory is described, not owned: the caller
 * keeps its allocation alive until the send settles.
 */
import { DeviceAllocation } from './cuda/device-allocation.js';
import type { DevicePtr } from './cuda/driver.js';
import { assertPtr, assertSize } from './cuda/validate.js';
import { ArgumentRangeError } from './errors.js';
import { ArgumentTypeError } from './errors.js';

export interface DeviceBuffer {
  /** First byte of the message in device memory. */
  readonly ptr: DevicePtr;
  /** Length in bytes. */
  readonly length: number;
  /** Device ordinal as this process sees it; informational (pointers carry their device). */
  readonly device?: number;
}

export type HostBuffer = ArrayBufferView;
export type MessageBuffer = HostBuffer | DeviceBuffer;

export function isDeviceBuffer(value: unknown): value is DeviceBuffer {
  return typeof value === 'object' && value !== null && typeof (value as DeviceBuffer).ptr === 'bigint';
}

/** Host bytes as a Uint8Array view (no copy). */
export function hostBytes(buf: HostBuffer): Uint8Array {
  return buf instanceof Uint8Array ? buf : new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Validates a message buffer argument (better-sqlite3 style: in JS, before any driver call). */
export function checkMessageBuffer(name: string, buf: unknown): asserts buf is MessageBuffer {
  if (isDeviceBuffer(buf)) {
    assertPtr(`${name}.ptr`, buf.ptr);
    assertSize(`${name}.length`, buf.length);
    return;
  }
  if (!ArrayBuffer.isView(buf)) {
    throw new ArgumentTypeError(`${name} must be a Buffer/TypedArray/DataView or a device buffer { ptr: bigint, length: number }`);
  }
}

export function byteLength(buf: MessageBuffer): number {
  return isDeviceBuffer(buf) ? buf.length : buf.byteLength;
}

/**
 * A device buffer `offset` bytes into `buf`, `length` long (default: the
 * rest): no bigint arithmetic at call sites. Stays within `buf`.
 *
 *   await ep.send(offsetDevice(whole, 4096, 1024));
 */
export function offsetDevice(buf: DeviceBuffer, offset: number, length: number = buf.length - offset): DeviceBuffer {
  // A view keeps what the allocation knows (its liveness): a collective checks it with no driver query.
  if (buf instanceof DeviceAllocation) return buf.view(offset, length);
  if (!isDeviceBuffer(buf)) checkMessageBuffer('buf', buf); // throws the usual argument error
  assertSize('offset', offset);
  assertSize('length', length);
  if (offset + length > buf.length) {
    throw new ArgumentRangeError(`offsetDevice: ${length} bytes at offset ${offset} run past the ${buf.length}-byte buffer`);
  }
  const out = { ptr: buf.ptr + BigInt(offset), length };
  return buf.device === undefined ? out : { ...out, device: buf.device };
}

/**
 * The one message for a device buffer (a send's source, a receive's `into`)
 * whose length runs past the end of its allocation, whichever path found it.
 * `offset`: where the buffer starts in the allocation; `room`: the bytes
 * mapped from that start.
 */
export function pastItsAllocation(name: string, length: number, offset: number | bigint, room: number | bigint): ArgumentRangeError {
  return new ArgumentRangeError(
    `${name} (${length} bytes at offset ${offset} of its allocation) runs past the end of the allocation: ${room} bytes are mapped from its start; pass a length of at most ${room}, or a larger allocation`,
  );
}
