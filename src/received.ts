/**
 * What receives resolve to, typed by the `into` given: `recv({ into: f32 })`
 * resolves to a Received whose `data` is a Float32Array; and what a probe
 * says of a waiting message without receiving it.
 */
import type { DeviceBuffer, MessageBuffer } from './buffers.js';
import type { DataPath } from './endpoint-stats.js';
import type { Received as PathReceived } from './paths/index.js';
import { FrameType } from './wire/frames.js';
import type { Arrival } from './paths/index.js';

/**
 * One received message. `D`, the type of `data`, is the type of the receive's
 * `into` (without `into`: a new Uint8Array, or a DeviceBuffer for a device
 * message where this process has a device).
 */
export interface Received<D = Uint8Array | DeviceBuffer> extends Omit<PathReceived, 'data'> {
  /** Message tag (with ANY_TAG: the tag it was sent with). */
  tag: number;
  /** Its length in bytes. */
  length: number;
  /** The data path that carried it. */
  path: DataPath;
  /** Whether the sender's buffer was device memory. */
  fromDevice: boolean;
  /**
   * `into` when it is a DeviceBuffer; for a host `into`, a view of the same
   * type over the received bytes (a TypedArray of `floor(length /
   * BYTES_PER_ELEMENT)` elements, a DataView or Uint8Array of `length`
   * bytes). Without `into`: host bytes, or — for device messages where this
   * process has a device — a new device allocation owned by the caller (free
   * it with `transport.free(data.ptr)` or `driver.memFree(data.ptr)`).
   */
  data: D;
}

/** The type of `data` for a receive given `into` of type `Into` (undefined: none given). */
export type ReceivedData<Into> = [Into] extends [undefined]
  ? Uint8Array | DeviceBuffer
  : Exclude<Into, undefined> | (undefined extends Into ? Uint8Array | DeviceBuffer : never);

/** What a probe says of the next message a receive of that tag would take. */
export interface MessageInfo {
  /** The tag it was sent with. */
  tag: number;
  /** Its length in bytes: a receive's `into` must hold at least this many. */
  length: number;
  /** Whether it comes from device memory (RGET, staging, or EAGER of device bytes). */
  fromDevice: boolean;
  /** The id of the peer that sent it. */
  peerId: string;
}

export function messageInfo(a: Arrival, peerId: string): MessageInfo {
  if (a.type === FrameType.EAGER) return { tag: a.tag, length: a.data.byteLength, fromDevice: a.fromDevice, peerId };
  return { tag: a.tag, length: a.length, fromDevice: true, peerId };
}

type ViewConstructor = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayBufferView;

/**
 * `data` (the received bytes, a Uint8Array view of `into`) as a view of
 * `into`'s own type. Uint8Array and Buffer come through as they are.
 */
export function asTypeOfInto(data: Uint8Array | DeviceBuffer, into: MessageBuffer): unknown {
  if (into instanceof Uint8Array || !ArrayBuffer.isView(into) || !(data instanceof Uint8Array)) return data;
  if (into instanceof DataView) return new DataView(data.buffer, data.byteOffset, data.byteLength);
  const C = into.constructor as ViewConstructor & { BYTES_PER_ELEMENT: number };
  return new C(data.buffer, data.byteOffset, Math.floor(data.byteLength / C.BYTES_PER_ELEMENT));
}
