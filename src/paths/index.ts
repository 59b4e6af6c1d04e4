/**
 * The data paths an endpoint uses, in the order a send asks them: the first
 * whose canSend is true carries the message (data-path.ts says how a new
 * path plugs in: its file, and one line here).
 */
import type { DataPath } from './data-path.js';
import { EagerPath, type EagerParts } from './eager.js';
import { RgetPath } from './rget.js';
import type { RgetLink, RgetParts } from './rget-link.js';
import { StagingPath, type StagingParts } from './staging.js';

/** What the endpoint hands each path beyond the shared PathContext: each path's own parts. */
export interface PathParts {
  readonly eager: EagerParts;
  readonly staging: StagingParts;
  readonly rget: RgetParts;
}

/** `ctx`: the link, as RGET sees it (the other paths see it as a PathContext). */
export function createPaths(ctx: RgetLink, parts: PathParts): DataPath[] {
  const staging = new StagingPath(ctx, parts.staging);
  const rget = new RgetPath(ctx, parts.rget, staging);
  staging.reasonOf = (buf) => rget.stagingReason(buf);
  const eager = new EagerPath(ctx, parts.eager);
  // No descriptor channel, so no ring can reach the peer: staged messages go inline.
  staging.inline = (buf, tag, options) => eager.send(buf, tag, options);
  // EAGER first (host data; small device data before IPC is OK), then RGET
  // (IPC OK; legacy-IPC memory, or VMM or pool memory with a peer with
  // FD_MEMORY and the descriptor channel up), which falls back to staging
  // for a message the peer cannot map. Staging last.
  return [eager, rget, staging];
}

export type { EagerParts } from './eager.js';
export type { StagingParts } from './staging.js';
export type { DescriptorMemory, RgetLink, RgetParts } from './rget-link.js';
export type { DataPath, PathContext, PendingRecv, Received, RecvOptions, SendOptions, Arrival } from './data-path.js';
export { lookupRemote, openRemote, type RemoteMemory } from './open-remote.js';
export type { RemoteKey, RemoteKind } from './remote-key.js';
