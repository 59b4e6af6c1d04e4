/**
 * Wraps a mapped POSIX shared-memory segment (an ArrayBuffer from the addon's
 * shmCreate/shmOpen) as a `SharedSegment`. Shared by the native and the
 * simulated driver, so both close segments the same way.
 */
import type { SharedSegment } from './driver.js';

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
