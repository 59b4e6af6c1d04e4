/**
 * Per-endpoint counters: what the negotiation did, and how many messages and
 * bytes went by each data path in each direction. Plain numbers, updated on
 * the hot path without allocation.
 */

/** 'rget-fd': RGET of VMM or pool memory imported by file descriptor (a descriptor key: paths/fd-side.ts). */
export type DataPath = 'eager' | 'rget' | 'rget-fd' | 'staging';

export interface PathCounters {
  messages: number;
  bytes: number;
}

export interface DirectionCounters {
  eager: PathCounters;
  rget: PathCounters;
  'rget-fd': PathCounters;
  staging: PathCounters;
}

/** The descriptor side's own counters (paths/fd-side.ts, fd-offers.ts). */
export interface FdPathStats {
  /** Both HELLOs announced Feature.FD_MEMORY. */
  agreed: boolean;
  /** The descriptor channel is up (false until set up, and after it failed). */
  channel: boolean;
  /** Sender: FD_OFFERs sent, descriptors sent (VMM chunks and pools), FD_POOLs sent, FD_RELEASEs received. */
  offers: number;
  descriptorsSent: number;
  pools: number;
  releasesReceived: number;
  /** Receiver: descriptors received, imports made, RGETs of descriptor keys answered with RESTAGE, FD_RELEASEs sent. */
  descriptorsReceived: number;
  imports: number;
  restaged: number;
  releasesSent: number;
  /** Receiver: descriptors closed at once because the peer already had maxPeerDescriptors held here. */
  descriptorsRefused: number;
}

export function newFdStats(agreed: boolean): FdPathStats {
  return {
    agreed,
    channel: false,
    offers: 0,
    descriptorsSent: 0,
    pools: 0,
    releasesReceived: 0,
    descriptorsReceived: 0,
    imports: 0,
    restaged: 0,
    releasesSent: 0,
    descriptorsRefused: 0,
  };
}

export interface NegotiationRecord {
  /** Current state: INIT, SENT, ACKING, ACKED, OK or BAD. */
  state: string;
  /** Every state entered, in order, starting with INIT. */
  path: string[];
  /** IPC_REQ frames this side sent. */
  tries: number;
  /** Why the endpoint is BAD, where it is. */
  reason?: string;
  /** Milliseconds from this side's first GPU send (or first negotiation frame) to OK/BAD. */
  settleMs?: number;
}

/** How control frames travel (channel/shm-channel.ts). */
export interface ControlStats {
  /** The channel's label; '+ring' when it may move frames through shared-memory rings. */
  channel: string;
  /** Our frames go through the peer's ring. */
  ringOut: boolean;
  /** The peer's frames come through our ring. */
  ringIn: boolean;
}

import type { CopyKernelStats } from './gpu/copy-list.js';
export type { CopyKernelStats } from './gpu/copy-list.js';

export interface EndpointStats {
  peerId: string;
  control: ControlStats;
  negotiation: NegotiationRecord;
  sent: DirectionCounters;
  received: DirectionCounters;
  /** Device messages sent by staging, by why no faster path took them (e.g. the memory kind, a peer without FD_MEMORY). */
  stagingReasons: Record<string, number>;
  fd: FdPathStats;
  /** Zero where the peer is on another GPU. */
  copyKernel: CopyKernelStats;
}

export function newDirection(): DirectionCounters {
  return {
    eager: { messages: 0, bytes: 0 },
    rget: { messages: 0, bytes: 0 },
    'rget-fd': { messages: 0, bytes: 0 },
    staging: { messages: 0, bytes: 0 },
  };
}

export function count(dir: DirectionCounters, path: DataPath, bytes: number): void {
  const c = dir[path];
  c.messages++;
  c.bytes += bytes;
}
