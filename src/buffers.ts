/**
 * What a message can be: host bytes (Buffer, any TypedArray, DataView) or a
 * range of device memory. Device memory is described, not owned: the caller
 * keeps its allocation alive until the send settles.
 */
import type { DevicePtr } from './cuda/driver.js';
import { assertPtr, assertSize } from './cuda/validate.js';

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
    throw new TypeError(`${name} must be a Buffer/TypedArray/DataView or a device buffer { ptr: bigint, length: number }`);
  }
}

export function byteLength(buf: MessageBuffer): number {
  return isDeviceBuffer(buf) ? buf.length : buf.byteLength;
}
