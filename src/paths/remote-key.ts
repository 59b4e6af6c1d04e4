/**
 * RemoteKey: how remote memory is named, whatever the way it is shared. It
 * is what an RGET carries (its `kind`, `identity`, `base`, `allocSize`,
 * `bufferId` and `deviceUuid` fields) and what open-remote.ts opens, through
 * one switch over the kinds.
 *
 *  - 'legacy': cuMemAlloc memory, shared by CUDA IPC. `identity` is the
 *    cuIpcGetMemHandle; base and size are the allocation's.
 *  - 'vmm-fd': cuMemCreate chunks mapped into one range, shared by one
 *    descriptor per chunk. base and size are the offered range's (FD_OFFER),
 *    which with the buffer id names the offer and so its chunks; `identity`
 *    is zero.
 *  - 'pool-fd': an allocation of a pool with POSIX-descriptor handles.
 *    `identity` is the cuMemPoolExportPointer data; the pool (its id and
 *    descriptor) comes with the FD_OFFER of (bufferId, base).
 *
 * A fabric handle (CUmemFabricHandle, 64 bytes) would be one more kind,
 * with the handle as identity: the frame, the key and the switch have room.
 */
import { HandleKind, IPC_HANDLE_BYTES } from '../wire/frames.js';

export type RemoteKind = 'legacy' | 'vmm-fd' | 'pool-fd';

export interface RemoteKey {
  kind: RemoteKind;
  /** 64 bytes naming the memory beside its address (see above); compared on every cache hit. */
  identity: Uint8Array;
  /** The owner's address of the allocation (legacy) or offered range (vmm-fd, pool-fd). */
  base: bigint;
  /** Bytes from `base`. */
  size: number;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID of the owner's allocation: changes on free + realloc at one address. */
  bufferId: bigint;
  /** UUID ('GPU-…') of the device the memory lives on. */
  device: string;
}

/** The zero identity of a 'vmm-fd' key. */
export const NO_IDENTITY: Uint8Array = new Uint8Array(IPC_HANDLE_BYTES);

const BY_WIRE: Record<HandleKind, RemoteKind> = { [HandleKind.LEGACY]: 'legacy', [HandleKind.VMM]: 'vmm-fd', [HandleKind.POOL]: 'pool-fd' };
const TO_WIRE: Record<RemoteKind, HandleKind> = { legacy: HandleKind.LEGACY, 'vmm-fd': HandleKind.VMM, 'pool-fd': HandleKind.POOL };

/** The key kind of an RGET's `kind`. */
export function remoteKind(kind: HandleKind): RemoteKind {
  return BY_WIRE[kind];
}

/** The RGET `kind` of a key kind. */
export function wireKind(kind: RemoteKind): HandleKind {
  return TO_WIRE[kind];
}

/** Whether a key of this kind is shared by file descriptor (needs FD_MEMORY and the descriptor channel). */
export function byDescriptor(kind: RemoteKind): boolean {
  return kind !== 'legacy';
}
