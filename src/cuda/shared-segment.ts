/**
 * Wraps a mapped POSIX shared-memory segment (an ArrayBuffer from the addon's
 * shmCreate/shmOpen) as a `SharedSegment`, and creates one with an error that
 * says what to do when /dev/shm is full. Shared by the native and the
 * simulated driver, so both create and close segments the same way.
 */
import { statfsSync } from 'node:fs';
import { ShmSpaceError } from '../errors.js';
import { parseSegmentName } from '../segment-owner.js';
import type { SharedSegment } from './driver.js';

/** Where shm_open keeps segments on Linux (glibc and musl). */
export const SHM_DIR = '/dev/shm';

/** The addon's segment calls. */
export interface ShmCalls {
  shmCreate(name: string, bytes: number): ArrayBuffer;
  shmClose(buffer: ArrayBuffer): void;
}

/**
 * `close` unmaps the buffer (the addon's `shmClose`); it runs at most once,
 * after which `bytes` is empty (the ArrayBuffer is detached).
 */
export function sharedSegment(name: string, buffer: ArrayBuffer, close: (buffer: ArrayBuffer) => void): SharedSegment {
  let open = true;
  const bytes = new Uint8Array(buffer);
  return {
    name,
    get bytes() {
      // A view over a detached buffer reads as empty; say so explicitly once closed.
      return open ? bytes : new Uint8Array(0);
    },
    close() {
      if (!open) return;
      open = false;
      close(buffer);
    },
  };
}

/**
 * Creates and maps a new segment. The addon reserves every page at creation
 * (posix_fallocate), so a full tmpfs answers ENOSPC here instead of a SIGBUS
 * at first touch; that answer becomes a ShmSpaceError. `call` wraps each addon
 * call (the native driver's error translation).
 */
export function createSharedSegment(shm: ShmCalls, name: string, bytes: number, call: <T>(fn: () => T) => T = (fn) => fn()): SharedSegment {
  let buffer: ArrayBuffer;
  try {
    buffer = call(() => shm.shmCreate(name, bytes));
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ENOSPC' || code === 'ENOMEM') throw shmSpaceError(name, bytes, err);
    throw err;
  }
  return sharedSegment(name, buffer, (b) => call(() => shm.shmClose(b)));
}

const MiB = 1024 * 1024;
const show = (n: number) => (n >= MiB ? `${(n / MiB).toFixed(1)} MiB` : `${n} B`);

/** What to shrink, by the kind of segment (segment-owner.ts names). */
function remedy(name: string, bytes: number): string {
  switch (parseSegmentName(name)?.kind) {
    case 'stg':
      return `this is a staging ring of ${show(bytes)} (one per endpoint and direction that sends device data by staging): shrink it with the transport option staging: { chunkSize, slots } (chunkSize × slots bytes)`;
    case 'ctl':
      return 'this is a control ring (the channel falls back to its socket without it); controlRing: false turns them off';
    case 'sim':
      return 'the simulated driver keeps device memory in /dev/shm: allocate less, or use the native driver';
    default:
      return 'free space there';
  }
}

export function shmSpaceError(name: string, bytes: number, cause: unknown): ShmSpaceError {
  let size: number | undefined;
  let free: number | undefined;
  try {
    const s = statfsSync(SHM_DIR);
    size = s.blocks * s.bsize;
    free = s.bavail * s.bsize;
  } catch {
    // no statfs here: the message says so
  }
  const room = size === undefined ? 'its size could not be read' : `${show(size)} in all, ${show(free!)} free`;
  return new ShmSpaceError(
    `${SHM_DIR} has no room for ${show(bytes)} (segment ${name}; ${room}). ${remedy(name, bytes)}; ` +
      `or enlarge ${SHM_DIR} (docker run --shm-size=1g, or mount -o remount,size=1G ${SHM_DIR}).`,
    SHM_DIR,
    bytes,
    size,
    free,
    { cause },
  );
}
