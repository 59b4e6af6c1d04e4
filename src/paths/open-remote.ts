/**
 * Opening a RemoteKey (remote-key.ts): the one switch over the kinds of
 * remote memory, between whoever names remote memory (an RGET, later a
 * registered or persistent transfer) and the handle pool (cache/), which
 * keeps each mapping and checks its real extent when it enters (cache/extent.ts).
 *
 *  - 'legacy': cuIpcOpenMemHandle of the key's identity.
 *  - 'vmm-fd', 'pool-fd': the import that the FD_OFFER of (bufferId, base)
 *    and its descriptors describe (fd-offers.ts): the open waits, bounded by
 *    negotiation.checkTimeoutMs, until they are in, and checks that the key
 *    names what was offered.
 *
 * A lease is what comes back: the caller copies out of `ptr + offset` after
 * checking offset + length ≤ key.size (the mapping holds at least that much)
 * and calls `release()` once the GPU is done with it.
 */
import type { HandlePool, Mapping } from '../../cache/index.js';
import { ProtocolError } from '../errors.js';
import { HandleKind } from '../wire/frames.js';
import type { FdOfferTable, Incoming } from './fd-offers.js';
import { type RemoteKey, wireKind } from './remote-key.js';

/** Where remote keys are opened: one per endpoint (the peer's memory). */
export interface RemoteMemory {
  /** The peer's memory mapped here. */
  readonly pool: HandlePool;
  /** What the peer offered by descriptor; undefined without FD_MEMORY (a descriptor key is then refused). */
  readonly offers: FdOfferTable | undefined;
}

/**
 * The hot path: a resident mapping of `key`, referenced for the caller, or
 * undefined (not resident, or not openable without waiting: call
 * openRemote). Never opens and never waits; allocates nothing on a hit but the lease.
 */
export function lookupRemote(m: RemoteMemory, key: RemoteKey): Mapping | undefined {
  switch (key.kind) {
    case 'legacy':
      return m.pool.lookupKey('legacy-ipc', key.device, key.base, key.size, key.bufferId, key.identity);
    case 'vmm-fd':
    case 'pool-fd': {
      const inc = m.offers?.offer(key.bufferId, key.base);
      if (inc === undefined || offerMismatch(inc, key) !== undefined) return undefined;
      return m.pool.lookupImport(inc.req);
    }
  }
}

/**
 * A mapping of `key`: resident, or opened now (and kept by the pool).
 * Rejects with the open's error: SMCUDA_BAD_EXTENT when the memory does not
 * hold what the key claims; for a descriptor key, SMCUDA_BAD_RGET when it
 * names other memory than offered, SMCUDA_FD_CHANNEL when the offer or its
 * descriptors did not come in time, the lost descriptor's error, or the
 * import's CudaError. The caller decides what a failure means (RGET: the
 * message goes by staging).
 */
export async function openRemote(m: RemoteMemory, key: RemoteKey): Promise<Mapping> {
  switch (key.kind) {
    case 'legacy':
      return m.pool.acquire({ deviceUuid: key.device, base: key.base, size: key.size, handle: key.identity, bufferId: key.bufferId });
    case 'vmm-fd':
    case 'pool-fd': {
      const table = m.offers;
      if (table === undefined) throw new ProtocolError(`a ${key.kind} key from a peer without FD_MEMORY`, 'SMCUDA_BAD_FRAME');
      await table.waitFor(
        () => table.settled(key.bufferId, key.base),
        `the offer of ${key.kind} memory at 0x${key.base.toString(16)} and its descriptors did not arrive within the negotiation's checkTimeoutMs`,
      );
      const inc = table.offer(key.bufferId, key.base)!;
      if (inc.lost !== undefined) throw inc.lost;
      const mismatch = offerMismatch(inc, key);
      if (mismatch !== undefined) throw new ProtocolError(`the key names ${mismatch}`, 'SMCUDA_BAD_RGET');
      if (inc.frame.kind === HandleKind.POOL) {
        const lost = table.pool(inc.frame.poolId)?.lost;
        if (lost !== undefined) throw lost;
      }
      return m.pool.acquireImport(inc.req);
    }
  }
}

/** Why `key` does not name the memory its offer describes (undefined: it does). */
function offerMismatch(inc: Incoming, key: RemoteKey): string | undefined {
  const f = inc.frame;
  const kind = wireKind(key.kind);
  if (f.kind !== kind) return `kind ${HandleKind[kind]}, but the offer is ${HandleKind[f.kind]}`;
  if (f.size !== key.size) return `${key.size} bytes, but the offer has ${f.size}`;
  if (f.deviceUuid !== key.device) return `device ${key.device}, but the offer is on ${f.deviceUuid}`;
  if (kind === HandleKind.POOL && !sameBytes(f.exportData, key.identity)) return 'other pool export data than the offer';
  return undefined;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
