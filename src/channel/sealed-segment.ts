/**
 * Sealed anonymous segments: the shared memory of a job's control rings and
 * staging rings (issue 23, findings 1 and 2).
 *
 * A segment is made with memfd_create: it has no name in /dev/shm (nothing
 * for a process without the token to watch for and open, nothing left behind
 * by SIGKILL, no /dev/shm size limit). It is sized, its pages reserved, and
 * sealed against shrinking and growing (and against further seals), then
 * passed to the authenticated peer as a descriptor (SCM_RIGHTS, on the
 * endpoint's descriptor channel). The receiver maps it only if those seals
 * are on and the size is the one announced (native/shm.cc sealedMap): a peer
 * can then never truncate a segment under our mapping (SIGBUS).
 */
import { loadAddon } from '../cuda/addon.js';
import type { NativeFdPassing, NativeShm } from '../cuda/native-addon.js';
import { ProtocolError, SmcudaError } from '../errors.js';

export type SegmentNative = Pick<NativeShm, 'sealedCreate' | 'sealedMap' | 'shmClose'> & Pick<NativeFdPassing, 'fdClose'>;

/** A mapped segment: `bytes` until `close()`, which unmaps it (and closes its descriptor if still held). */
export interface MappedSegment {
  readonly bytes: Uint8Array;
  /** Our descriptor of it, until it has been passed (then undefined). */
  readonly fd: number | undefined;
  /** Closes the descriptor now (it has been passed: the peer holds its own). */
  releaseFd(): void;
  /**
   * The descriptor for a send in flight (undefined if already passed or
   * lent): until `settled()`, close() leaves it open (the channel's queue
   * still names it, and a number closed and reused would pass another
   * file); `settled()` closes it.
   */
  lendFd(): { fd: number; settled(): void } | undefined;
  close(): void;
}

function mapped(native: SegmentNative, buffer: ArrayBuffer, fd: number | undefined): MappedSegment {
  let open = true;
  let held = fd;
  let lent = false;
  const bytes = new Uint8Array(buffer);
  const releaseFd = () => {
    if (held === undefined || lent) return;
    const f = held;
    held = undefined;
    try {
      native.fdClose(f);
    } catch {
      // closed already
    }
  };
  return {
    get bytes() {
      return open ? bytes : new Uint8Array(0);
    },
    get fd() {
      return held;
    },
    releaseFd,
    lendFd() {
      if (held === undefined || lent) return undefined;
      lent = true;
      return {
        fd: held,
        settled: () => {
          lent = false;
          releaseFd();
        },
      };
    },
    close() {
      releaseFd();
      if (!open) return;
      open = false;
      native.shmClose(buffer);
    },
  };
}

const MiB = 1024 * 1024;

/**
 * A new sealed segment of `bytes`, mapped, with its descriptor to pass. Its
 * pages are reserved at creation: where memory is short (a container's
 * memory limit) that fails here, SmcudaError 'SMCUDA_SEGMENT_NO_MEMORY'
 * saying what to shrink, never a SIGBUS at first touch. /dev/shm's size
 * does not matter: the segment is not there.
 */
export function createSealedSegment(bytes: number, label: string, native: SegmentNative = loadAddon()): MappedSegment {
  let made: { fd: number; buffer: ArrayBuffer };
  try {
    made = native.sealedCreate(label, bytes);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code !== 'ENOMEM' && code !== 'ENOSPC') throw err;
    const what = label.endsWith('stg')
      ? 'a staging ring (one per endpoint and direction that sends device data by staging): shrink it with the transport option staging: { chunkSize, slots } (chunkSize × slots bytes)'
      : 'a control ring: controlRing: false turns them off';
    throw new SmcudaError(
      'SMCUDA_SEGMENT_NO_MEMORY',
      `no memory for a ${(bytes / MiB).toFixed(1)} MiB shared segment (${code}), ${what}; or give the process more memory`,
      { cause: err },
    );
  }
  return mapped(native, made.buffer, made.fd);
}

/**
 * Maps the segment a peer passed as `fd`, announced as `bytes` long. Takes
 * `fd` (closed here whatever happens: the mapping does not need it). A
 * segment without the seals, or of another size, is refused before it is
 * mapped: ProtocolError 'SMCUDA_BAD_SEGMENT' (the peer is broken or hostile).
 */
export function mapPeerSegment(fd: number, bytes: number, what: string, native: SegmentNative = loadAddon()): MappedSegment {
  let buffer: ArrayBuffer;
  try {
    buffer = native.sealedMap(fd, bytes);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ESEALS' || code === 'ESIZE') {
      throw new ProtocolError(`the peer's ${what}: ${(err as Error).message}`, 'SMCUDA_BAD_SEGMENT');
    }
    throw err;
  } finally {
    try {
      native.fdClose(fd);
    } catch {
      // closed already
    }
  }
  return mapped(native, buffer, undefined);
}
