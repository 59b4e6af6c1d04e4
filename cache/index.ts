/**
 * The per-endpoint pool of opened remote CUDA IPC handles. See docs/cache.md.
 *
 * @module smcuda/cache
 */
export { HandlePool, RETRYABLE_OPEN_ERRORS, type FdUndoDriver, type IpcDriver, type MappingDriver, type ResidentEntryInfo } from './handle-pool.js';
export { MAPPING_KINDS, type Mapping, type MappingRequest, type ImportRequest, type PeerPoolRef, type MappingKind, type DetachReason } from './mapping.js';
export { DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, type HandlePoolOptions } from './options.js';
export type { HandlePoolStats, KindStats } from './stats.js';
export type { HandlePoolEvent, HandlePoolEventListener, HandlePoolEventType } from './events.js';
