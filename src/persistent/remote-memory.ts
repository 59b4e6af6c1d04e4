/**
 * The one place a registration describes local memory to the peer and opens
 * the peer's: LEGACY through its IPC handle, VMM and pool memory through the
 * descriptor path's offer (as RGET_FD does), both opened by the endpoint's
 * handle pool, which maps an allocation once however many users hold it.
 * Kept to these two functions so that a unified remote key (issue 24) can
 * replace their insides without touching the registrations.
 */
import type { Mapping } from '../../cache/index.js';
import type { DeviceBuffer } from '../buffers.js';
import { SmcudaError } from '../errors.js';
import type { PathContext } from '../paths/data-path.js';
import type { FdRgetPath } from '../paths/fd-rget.js';
import { HandleKind, IPC_HANDLE_BYTES, type RegOfferFrame } from '../wire/frames.js';

export interface RemoteMemoryContext {
  link: PathContext;
  /** The descriptor path (VMM and pool memory), when this endpoint has one. */
  fd: FdRgetPath | undefined;
}

const ZERO_HANDLE = new Uint8Array(IPC_HANDLE_BYTES);

/** What REG_OFFER says of `buf` (sends the FD_OFFER and descriptors first for VMM and pool memory). */
export function describeForPeer(ctx: RemoteMemoryContext, buf: DeviceBuffer): Omit<RegOfferFrame, 'type' | 'regId'> {
  const exp = ctx.link.exports.lookup(buf.ptr);
  const deviceUuid = ctx.link.uuidOf(exp.device);
  const at = (base: bigint) => Number(buf.ptr - base);
  if (exp.kind === 'legacy-ipc') {
    return { kind: HandleKind.LEGACY, deviceUuid, base: exp.base, allocSize: exp.size, offset: at(exp.base), length: buf.length, bufferId: exp.bufferId, handle: exp.handle };
  }
  if ((exp.kind === 'vmm' || exp.kind === 'pool') && ctx.fd !== undefined && ctx.link.fdAgreed) {
    const o = ctx.fd.offerForRegistration(exp, buf);
    return { kind: o.kind, deviceUuid, base: o.base, allocSize: o.size, offset: at(o.base), length: buf.length, bufferId: o.bufferId, handle: ZERO_HANDLE };
  }
  throw new SmcudaError(
    'SMCUDA_REGISTER_KIND',
    `cannot register ${exp.kind} memory with peer ${ctx.link.peerId}: ${exp.kind === 'other' ? (exp.reason ?? 'it cannot be shared') : 'the peer does not import memory by descriptor'}; register cuMemAlloc memory instead`,
  );
}

/** Opens (or finds, already mapped) the peer's registered allocation; the caller releases the mapping. */
export function openRemote(ctx: RemoteMemoryContext, f: RegOfferFrame): Promise<Mapping> {
  if (f.kind === HandleKind.LEGACY) {
    return ctx.link.pool.acquire({ deviceUuid: f.deviceUuid, base: f.base, size: f.allocSize, handle: f.handle, bufferId: f.bufferId });
  }
  if (ctx.fd === undefined) return Promise.reject(new SmcudaError('SMCUDA_REGISTER_KIND', `peer ${ctx.link.peerId} registered ${HandleKind[f.kind]} memory, which this endpoint cannot import`));
  return ctx.fd.importForRegistration(f.bufferId, f.base, f.kind, f.allocSize);
}
