/**
 * The simulator's 64-byte IPC handles (memory and event), and the shm
 * segment names they point to.
 *
 * Layout, little-endian:
 *
 *   off size  field
 *    0   4    magic 0x534d4353 ('SCMS')
 *    4   1    version (1)
 *    5   1    kind: 1 memory, 2 event
 *    6   2    reserved (0)
 *    8   8    size in bytes of the allocation (0 for events)
 *   16   8    buffer id of the allocation in its owner (0 for events)
 *   24   4    owner pid
 *   28   4    owner's segment counter
 *   32   4    random nonce of the segment
 *   36   4    owner driver instance tag (random per SimulatedCudaDriver)
 *   40  16    owner device UUID, raw bytes
 *   56   4    owner start time (clock ticks since boot, mod 2^32; segment-owner.ts)
 *   60   4    FNV-1a checksum of bytes 0..59
 *
 * The segment name is derived from (kind, pid, start, counter, nonce) plus
 * this machine's boot id and pid namespace (segment-owner.ts: the owner stamp
 * that lets a sweep tell a dead owner's segment from a live one's), so a
 * handle never carries free text. A new allocation always gets a new counter and
 * nonce, so after free + realloc at the same address the handle bytes differ.
 */
import { IPC_HANDLE_SIZE } from '../driver.js';
import { localOwner, segmentName as ownedName } from '../../segment-owner.js';

export const SIM_SHM_PREFIX = '/smcuda-sim-';
const MAGIC = 0x534d4353;
const VERSION = 2; // 2: owner start time at offset 56

export type HandleKind = 'memory' | 'event';

export interface SimHandle {
  kind: HandleKind;
  size: number;
  bufferId: bigint;
  pid: number;
  /** Owner's start time (src/segment-owner.ts), so the segment name can be swept once the owner is gone. */
  start: number;
  counter: number;
  nonce: number;
  /** Random tag of the owning driver instance: opening one's own handle is refused, as CUDA does. */
  instance: number;
  /** Owner device UUID, 'GPU-…' */
  uuid: string;
}

/** The segment behind a handle. Boot id and pid namespace are the opener's: simulated IPC stays on one machine and namespace. */
export function segmentName(h: Pick<SimHandle, 'kind' | 'pid' | 'start' | 'counter' | 'nonce'>): string {
  const k = h.kind === 'memory' ? 'm' : 'e';
  const { boot, pidns } = localOwner();
  return ownedName('sim', `${k}${h.counter}-${h.nonce.toString(16).padStart(8, '0')}`, { pid: h.pid, start: h.start, boot, pidns });
}

export function encodeHandle(h: SimHandle): Uint8Array {
  const out = new Uint8Array(IPC_HANDLE_SIZE);
  const v = new DataView(out.buffer);
  v.setUint32(0, MAGIC, true);
  v.setUint8(4, VERSION);
  v.setUint8(5, h.kind === 'memory' ? 1 : 2);
  v.setBigUint64(8, BigInt(h.size), true);
  v.setBigUint64(16, h.bufferId, true);
  v.setUint32(24, h.pid, true);
  v.setUint32(28, h.counter, true);
  v.setUint32(32, h.nonce, true);
  v.setUint32(36, h.instance, true);
  out.set(uuidToBytes(h.uuid), 40);
  v.setUint32(56, h.start >>> 0, true);
  v.setUint32(60, fnv1a(out.subarray(0, 60)), true);
  return out;
}

/** The handle's fields, or undefined when the bytes are not a handle of `kind`. */
export function decodeHandle(bytes: Uint8Array, kind: HandleKind): SimHandle | undefined {
  if (bytes.byteLength !== IPC_HANDLE_SIZE) return undefined;
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint32(0, true) !== MAGIC || v.getUint8(4) !== VERSION) return undefined;
  if (v.getUint32(60, true) !== fnv1a(bytes.subarray(0, 60))) return undefined;
  const k = v.getUint8(5);
  if (k !== (kind === 'memory' ? 1 : 2)) return undefined;
  const size = v.getBigUint64(8, true);
  if (size > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  return {
    kind,
    size: Number(size),
    bufferId: v.getBigUint64(16, true),
    pid: v.getUint32(24, true),
    counter: v.getUint32(28, true),
    nonce: v.getUint32(32, true),
    instance: v.getUint32(36, true),
    start: v.getUint32(56, true),
    uuid: bytesToUuid(bytes.subarray(40, 56)),
  };
}

function uuidToBytes(uuid: string): Uint8Array {
  const hex = uuid.replace(/^GPU-/, '').replaceAll('-', '');
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function bytesToUuid(b: Uint8Array): string {
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}
