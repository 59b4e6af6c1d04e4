/**
 * Per-endpoint counters: what the negotiation did, and how many messages and
 * bytes went by each data path in each direction. Plain numbers, updated on
 * the hot path without allocation.
 */

export type DataPath = 'eager' | 'rget' | 'staging';

export interface PathCounters {
  messages: number;
  bytes: number;
}

export interface DirectionCounters {
  eager: PathCounters;
  rget: PathCounters;
  staging: PathCounters;
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

export interface EndpointStats {
  peerId: string;
  control: ControlStats;
  negotiation: NegotiationRecord;
  sent: DirectionCounters;
  received: DirectionCounters;
}

export function newDirection(): DirectionCounters {
  return {
    eager: { messages: 0, bytes: 0 },
    rget: { messages: 0, bytes: 0 },
    staging: { messages: 0, bytes: 0 },
  };
}

export function count(dir: DirectionCounters, path: DataPath, bytes: number): void {
  const c = dir[path];
  c.messages++;
  c.bytes += bytes;
}
