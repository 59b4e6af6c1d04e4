/**
 * The one place a registration describes local memory to the peer and opens
 * the peer's. Both go through the RemoteKey of src/paths/remote-key.ts, as
 * an RGET's memory does: a REG_OFFER carries the key (LEGACY its IPC handle,
 * VMM and pool memory the descriptor side's offer, made first), and the
 * peer's is opened by the one switch, paths/open-remote.ts's `openRemote`,
 * over the endpoint's handle pool, which maps an allocation once however
 * many users hold it.
 */
import type { Mapping } from '../../cache/index.js';
import type { DeviceBuffer } from '../buffers.js';
import { ProtocolError, SmcudaError } from '../errors.js';
import type { EndpointLink } from '../endpoint-link.js';
import { openRemote } from '../paths/open-remote.js';
import { remoteKind, wireKind } from '../paths/remote-key.js';
import type { RgetPath } from '../paths/rget.js';
import { HandleKind, type RegOfferFrame } from '../wire/frames.js';

export interface RemoteMemoryContext {
  /** What registrations and persistent transfers use of the endpoint's link. */
  link: Pick<EndpointLink, 'driver' | 'peerId' | 'tracer' | 'sendFrame' | 'uuidOf' | 'exports' | 'fd' | 'runtime'>;
  /** The RGET path: its descriptor side offers VMM and pool memory, and it holds where remote keys open. */
  rget: RgetPath | undefined;
}

/** What REG_OFFER says of `buf` (sends the FD_OFFER and descriptors first for VMM and pool memory). */
export function describeForPeer(ctx: RemoteMemoryContext, buf: DeviceBuffer): Omit<RegOfferFrame, 'type' | 'regId'> {
  const exp = ctx.link.exports.lookup(buf.ptr);
  const deviceUuid = ctx.link.uuidOf(exp.device);
  const at = (base: bigint) => Number(buf.ptr - base);
  if (exp.kind === 'legacy-ipc') {
    return {
      kind: HandleKind.LEGACY,
      deviceUuid,
      base: exp.base,
      allocSize: exp.size,
      offset: at(exp.base),
      length: buf.length,
      bufferId: exp.bufferId,
      handle: exp.handle,
    };
  }
  if ((exp.kind === 'vmm' || exp.kind === 'pool') && ctx.rget !== undefined && ctx.link.fd.agreed) {
    const key = ctx.rget.descriptorKey(exp, buf);
    return {
      kind: wireKind(key.kind),
      deviceUuid,
      base: key.base,
      allocSize: key.size,
      offset: at(key.base),
      length: buf.length,
      bufferId: key.bufferId,
      handle: key.identity,
    };
  }
  throw new SmcudaError(
    'SMCUDA_REGISTER_KIND',
    `cannot register ${exp.kind} memory with peer ${ctx.link.peerId}: ${exp.kind === 'other' ? (exp.reason ?? 'it cannot be shared') : 'the peer does not import memory by descriptor'}; register cuMemAlloc memory instead`,
  );
}

/** Opens (or finds, already mapped) the peer's registered allocation, named by the REG_OFFER's key; the caller releases the mapping. */
export function openRegistered(ctx: RemoteMemoryContext, f: RegOfferFrame): Promise<Mapping> {
  const remote = ctx.rget?.remote;
  if (remote === undefined || (f.kind !== HandleKind.LEGACY && remote.offers === undefined)) {
    return Promise.reject(
      new SmcudaError('SMCUDA_REGISTER_KIND', `peer ${ctx.link.peerId} registered ${HandleKind[f.kind]} memory, which this endpoint cannot import`),
    );
  }
  const key = { kind: remoteKind(f.kind), identity: f.handle, base: f.base, size: f.allocSize, bufferId: f.bufferId, device: f.deviceUuid };
  return openRemote(remote, key).catch((err: unknown) => {
    // A key that names other memory than its offer is the registration's fault here, not an RGET's.
    if (err instanceof ProtocolError && err.code === 'SMCUDA_BAD_RGET')
      throw new ProtocolError(`REG_OFFER from ${ctx.link.peerId}: ${err.message}`, 'SMCUDA_BAD_REGISTRATION');
    throw err;
  });
}
