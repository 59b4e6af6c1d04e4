/**
 * What RGET (rget.ts, with its descriptor side fd-side.ts and fd-offers.ts,
 * and its receiving half remote-copy.ts) gets from the endpoint beyond the
 * PathContext every path shares: the link's operations only RGET uses
 * (`RgetLink`), and the objects only RGET uses (`RgetParts`), handed to its
 * constructor by createPaths.
 */
import type { HandlePool } from '../../cache/index.js';
import type { FdPathStats } from '../endpoint-stats.js';
import type { ExportTable } from '../exports.js';
import type { FinBatcher } from '../fin-batcher.js';
import type { Tracer } from '../trace.js';
import type { PathContext, PendingRecv } from './data-path.js';

/** The link as RGET sees it. */
export interface RgetLink extends PathContext {
  /** Traces a re-sent RGET whose bytes are restamped, not encoded (sendBytes). */
  readonly tracer: Tracer | undefined;
  /** The UUID of local device `ordinal` (a key names its device by UUID). */
  uuidOf(ordinal: number): string;
  /** Sends an already encoded frame (the caller traced it). */
  sendBytes(bytes: Uint8Array): void;
  /** Receiver: `recv` stays matched and waits for message `seq` to be announced again (by staging, after FIN RESTAGE). */
  expectResend(seq: number, recv: PendingRecv): void;
}

/** Memory by file descriptor with this peer (descriptor keys, fd-side.ts and fd-offers.ts). */
export interface DescriptorMemory {
  /** Both HELLOs announced Feature.FD_MEMORY (descriptor keys may be sent once the channel is up). */
  readonly agreed: boolean;
  /** Its counters (stats().fd). */
  readonly stats: FdPathStats;
  /** Descriptors of the peer's held here not yet imported, at most (options.maxPeerDescriptors). */
  readonly maxPeerDescriptors: number;
  /** How long an open waits for an offer and its descriptors (options.negotiation.checkTimeoutMs). */
  readonly offerTimeoutMs: number;
}

/** The objects only RGET uses. */
export interface RgetParts {
  /** Local allocations peers map (shared by the transport's endpoints): what a send's key names. */
  readonly exports: ExportTable;
  /** The peer's allocations opened here (the handle cache). */
  readonly pool: HandlePool;
  /** Receiver: the FINs of completed copies, batched. */
  readonly fins: FinBatcher;
  readonly fd: DescriptorMemory;
}
