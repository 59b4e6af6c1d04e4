/**
 * Options of a handle pool and their defaults.
 *
 * Bounded by default, unlike Open MPI's rgpusm cache and UCX cuda_ipc (both
 * unbounded unless configured): an idle mapping of a peer's allocation keeps
 * that device memory alive in the peer after the peer frees it, which is the
 * most common complaint about those caches. See docs/cache.md.
 */
import { ConfigError } from '../src/errors.js';
import type { HandlePoolEventListener } from './events.js';

/**
 * 64 mappings: an endpoint's working set is a handful of buffers (double
 * buffering, a few tensors); past that, a miss costs one open (docs/benchmarks.md, 'cache hit').
 */
export const DEFAULT_MAX_ENTRIES = 64;
/**
 * 16 GiB: the most peer device memory one endpoint's idle mappings may keep
 * alive. Large enough that one big working buffer stays mapped (on 2×H200 a
 * 4 GiB bound made an 8 GiB send buffer reopen on every message: 68 % of raw
 * at 1 GiB), small next to a 141 GiB device; freed memory is dropped at once
 * by INVALIDATE and by the buffer-id check anyway.
 */
export const DEFAULT_MAX_BYTES = 16 * 1024 ** 3;

export interface HandlePoolOptions {
  /** Most resident mappings. Default 64. `Infinity`: no limit. 0: keep nothing once released. */
  maxEntries?: number;
  /** Most resident mapped bytes. Default 16 GiB. `Infinity`: no limit. */
  maxBytes?: number;
  /** Both limits off. Must not be combined with finite `maxEntries`/`maxBytes`. */
  unlimited?: boolean;
  /** Trace listener; called synchronously, must not throw. */
  onEvent?: HandlePoolEventListener;
  /** Clock for open timing, in milliseconds. Default `performance.now`. */
  now?: () => number;
}

export interface PoolBounds {
  maxEntries: number;
  maxBytes: number;
}

export function resolveBounds(options: HandlePoolOptions): PoolBounds {
  const { unlimited, maxEntries, maxBytes } = options;
  if (unlimited !== undefined && typeof unlimited !== 'boolean') {
    throw new ConfigError(`handle pool: unlimited must be a boolean, got ${String(unlimited)}`);
  }
  if (unlimited) {
    if ((maxEntries !== undefined && maxEntries !== Infinity) || (maxBytes !== undefined && maxBytes !== Infinity)) {
      throw new ConfigError('handle pool: `unlimited: true` contradicts a finite maxEntries/maxBytes; pass one or the other');
    }
    return { maxEntries: Infinity, maxBytes: Infinity };
  }
  return {
    maxEntries: checkLimit('maxEntries', maxEntries ?? DEFAULT_MAX_ENTRIES),
    maxBytes: checkLimit('maxBytes', maxBytes ?? DEFAULT_MAX_BYTES),
  };
}

function checkLimit(name: string, value: unknown): number {
  if (value === Infinity) return value;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new ConfigError(
      `handle pool: ${name} must be a non-negative integer or Infinity (got ${String(value)}); use { unlimited: true } to turn both limits off`,
    );
  }
  return value;
}
