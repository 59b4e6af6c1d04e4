/**
 * Trace events of a handle pool, for `onEvent`. The pool builds an event only
 * when a listener was given, so tracing costs nothing when off.
 */
import type { DetachReason, MappingKind } from './mapping.js';

export type HandlePoolEventType =
  | 'hit' // a valid resident mapping was handed out
  | 'miss' // no valid mapping: an open follows (or is joined)
  | 'stale' // a resident mapping no longer matches the remote allocation and was dropped
  | 'evict' // a resident mapping was removed for the bounds or to retry a failed open
  | 'invalidate' // a mapping was dropped on request of the allocation's owner
  | 'open' // the driver opened a handle
  | 'open-failed' // the driver refused to open a handle
  | 'close'; // the driver closed a mapping (now, or when its last user released it)

export interface HandlePoolEvent {
  type: HandlePoolEventType;
  /**
   * The mapping's kind (the request's, for hit/miss). Not named `kind`: trace
   * records spread the event beside their own `kind: 'cache'`.
   */
  mappingKind: MappingKind;
  deviceUuid: string;
  base: bigint;
  size: number;
  bufferId: bigint;
  /** Local pointer, once opened. */
  ptr?: bigint;
  /**
   * evict: 'entries' | 'bytes' (bounds) or 'overlap' | 'lru' (retrying a failed open);
   * close: the DetachReason that led to it.
   */
  reason?: 'entries' | 'bytes' | 'overlap' | 'lru' | DetachReason;
  /** open-failed: the CUDA error name. */
  code?: string;
  /** open / open-failed: duration of the driver call. */
  ms?: number;
}

export type HandlePoolEventListener = (event: HandlePoolEvent) => void;
