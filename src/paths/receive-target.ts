/**
 * Where a received message's bytes go, for every path: the receive's `into`
 * (a device buffer, or a view of exactly `length` host bytes), or a new
 * buffer — device memory when `onDevice` (the caller owns it), host bytes
 * otherwise. Returns the buffer itself (no wrapper: this runs per message);
 * `isDeviceBuffer(target)` says which kind it is, and `into === undefined`
 * whether it was allocated here.
 */
import { byteLength, type DeviceBuffer, hostBytes, isDeviceBuffer, type MessageBuffer } from '../buffers.js';
import type { CudaDriver } from '../cuda/driver.js';
import { TruncationError } from '../errors.js';
import { FinStatus } from '../wire/frames.js';
import type { PathContext, PendingRecv } from './data-path.js';

export function receiveTarget(driver: CudaDriver, into: MessageBuffer | undefined, length: number, onDevice: boolean): Uint8Array | DeviceBuffer {
  if (into === undefined) {
    if (onDevice) return { ptr: driver.memAlloc(length), length, device: driver.currentDevice() };
    return new Uint8Array(length);
  }
  if (byteLength(into) < length) throw new TruncationError(`message of ${length} bytes does not fit the ${byteLength(into)}-byte receive buffer`);
  if (isDeviceBuffer(into)) return into;
  return hostBytes(into).subarray(0, length);
}

/** Frees a target that receiveTarget allocated (a failed receive); `into` targets are the caller's. */
export function releaseTarget(driver: CudaDriver, into: MessageBuffer | undefined, target: Uint8Array | DeviceBuffer | undefined): void {
  if (into !== undefined || target === undefined || !isDeviceBuffer(target)) return;
  try {
    driver.memFree(target.ptr);
  } catch {
    // the context is gone: nothing left to free
  }
}

/**
 * A rendezvous message longer than the receive's `into`: FIN TRUNCATED to the
 * sender, TruncationError here, nothing copied. True if it was refused.
 */
export function refuseTooSmall(ctx: PathContext, recv: PendingRecv, frame: { tag: number; seq: number; length: number }): boolean {
  const n = frame.length;
  if (recv.into === undefined || byteLength(recv.into) >= n) return false;
  ctx.sendFin(frame.seq, FinStatus.TRUNCATED, `receive buffer of ${byteLength(recv.into)} bytes is smaller than the ${n}-byte message`);
  recv.reject(new TruncationError(`message of ${n} bytes (tag ${frame.tag}) does not fit the ${byteLength(recv.into)}-byte receive buffer`));
  return true;
}
