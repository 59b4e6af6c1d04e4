/**
 * The addon's readiness watches of this process's descriptor sockets, so
 * that they stop when the process exits. A job that never calls close()
 * now exits by itself (progress/keep-alive.ts), with watches still started:
 * a readiness the epoll thread queued then reached the JS callback while
 * Node tore the environment down, where no JS may run, and the process
 * aborted (napi_throw: FATAL ERROR) instead of exiting 0. Stopped at 'exit',
 * a watch delivers nothing more (the addon drops readiness of a stopped watch).
 */
import type { NativeFdPassing } from '../cuda/native-addon.js';
import { onExit } from '../exit-hooks.js';

type Watches = Pick<NativeFdPassing, 'fdWatchStart' | 'fdWatchStop'>;

const live = new Map<object, Watches>();

/** fdWatchStart, remembered until stopWatch (or the process exits). */
export function startWatch(native: Watches, fd: number, callback: (revents: number) => void): object {
  const watch = native.fdWatchStart(fd, callback);
  if (live.size === 0) onExit(stopAll);
  live.set(watch, native);
  return watch;
}

export function stopWatch(native: Watches, watch: object): void {
  live.delete(watch);
  native.fdWatchStop(watch);
}

/** Watches started and not stopped (tests). */
export function liveWatches(): number {
  return live.size;
}

function stopAll(): void {
  for (const [watch, native] of live) {
    try {
      native.fdWatchStop(watch);
    } catch {
      // stopped already, or the addon is going: nothing more can be delivered either way
    }
  }
  live.clear();
}
