/**
 * The per-endpoint pool of opened remote CUDA IPC handles. See docs/cache.md.
 */
export { HandlePool, RETRYABLE_OPEN_ERRORS, type IpcDriver, type ResidentEntryInfo } from './handle-pool.js';
export type { Mapping, MappingRequest, DetachReason } from './mapping.js';
export { DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, type HandlePoolOptions } from './options.js';
export type { HandlePoolStats } from './stats.js';
export type { HandlePoolEvent, HandlePoolEventListener, HandlePoolEventType } from './events.js';
