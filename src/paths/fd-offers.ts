/**
 * The receiver's table of the descriptor side of RGET (VMM and pool keys,
 * fd-side.ts): it puts
 * back together what the peer announces on the control channel (FD_OFFER,
 * FD_POOL) and the descriptors that come on the descriptor channel — the two
 * sockets keep no order between them, so a descriptor may come before its
 * offer (held for checkTimeoutMs, then closed) —, lets an RGET of a descriptor key wait,
 * bounded, until its offer is complete, and says how the handle pool imports
 * each offer (the ImportRequest, whose dispose closes the descriptors once
 * imported; open-remote.ts asks it). fd-side.ts owns the exchange; this table owns the
 * descriptors until the handle pool takes them, and closes every one it
 * still holds on close.
 *
 * Its timers wait for the peer (an offer, its descriptors), not for the GPU:
 * nothing they close or fail is in GPU use. What a receive holds once the
 * GPU works for it is the endpoint's GPU work's (remote-copy.ts, src/gpu/gpu-work.ts).
 */
import type { ImportRequest } from '../../cache/index.js';
import type { FdMessage } from '../channel/fd-channel.js';
import type { DevicePtr, PoolHandle } from '../cuda/driver.js';
import { closeFdQuietly } from '../cuda/close-fd.js';
import { debug } from '../debug.js';
import { DescriptorError, PeerLimitError, ProtocolError } from '../errors.js';
import { decodeFrame } from '../wire/codec.js';
import { type FdOfferFrame, type FdPoolFrame, type Frame, FrameType, HandleKind } from '../wire/frames.js';
import type { HandlePool } from '../../cache/index.js';
import type { PathContext } from './data-path.js';
import type { DescriptorMemory, RgetParts } from './rget-link.js';

/** Receiver: an offer from the peer, and the descriptors that came for it. */
export interface Incoming {
  frame: FdOfferFrame;
  /** VMM: descriptor k for chunk k (undefined: not yet in, or closed once imported). */
  fds: (number | undefined)[];
  have: number;
  /** A descriptor of it was lost (EMFILE) or the offer was refused. */
  lost: Error | undefined;
  /** Descriptor messages that came for it (kept, closed or lost). */
  arrived: number;
  /** The request the handle pool imports it by (also the lookup key of later messages). */
  req: ImportRequest;
}

/** Receiver: a pool the peer announced (FD_POOL). */
export interface IncomingPool {
  deviceUuid: string;
  fd: number | undefined;
  arrived: boolean;
  lost: Error | undefined;
  imported: boolean;
}

interface Waiter {
  ready: () => boolean;
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** Descriptor messages that came before their offer: the descriptors kept, how many came, the first loss. */
interface Early {
  fds: Map<number, number>;
  timer: NodeJS.Timeout;
  count: number;
  lost?: Error;
}

export class FdOfferTable {
  private readonly incoming = new Map<string, Incoming>();
  /**
   * Descriptors that came before their offer: closed if none comes in time;
   * `lost`: one of them was lost or refused (its offer is lost from the start).
   */
  private readonly early = new Map<string, Early>();
  private readonly pools = new Map<number, IncomingPool>();
  /**
   * Offers forgotten while lost, by key: how many of their descriptors are
   * still on the way. They are closed as they come, not held for a next
   * offer (the channel keeps order: a next offer's descriptors follow them).
   */
  private readonly draining = new Map<string, number>();
  private readonly waiters = new Set<Waiter>();
  private readonly ordinals = new Map<string, number>();
  /** Set on close: a wait after it fails at once. */
  private closedWith: Error | undefined;

  /** Counters and bounds. */
  private readonly mem: DescriptorMemory;
  /** The handle pool that imports the peer's offers and pools. */
  private readonly handles: HandlePool;

  constructor(
    private readonly ctx: PathContext,
    own: Pick<RgetParts, 'fd' | 'pool'>,
  ) {
    this.mem = own.fd;
    this.handles = own.pool;
  }

  /** The offer of the allocation (buffer id, base), if one came and was not forgotten. */
  offer(bufferId: bigint, base: bigint): Incoming | undefined {
    return this.incoming.get(offerKey(bufferId, base));
  }

  /** The pool `poolId` as announced (FD_POOL), if it was. */
  pool(poolId: number): IncomingPool | undefined {
    return this.pools.get(poolId);
  }

  /**
   * Whether the offer of (buffer id, base) can be imported now, or will never
   * be (a descriptor lost): all its descriptors (VMM) or its pool's came.
   */
  settled(bufferId: bigint, base: bigint): boolean {
    const inc = this.offer(bufferId, base);
    if (inc === undefined) return false;
    if (inc.lost !== undefined) return true;
    // VMM: every descriptor came (maybe imported and closed since: the pool may still hold the import)
    if (inc.frame.kind === HandleKind.VMM) return inc.have === inc.fds.length;
    const p = this.pools.get(inc.frame.poolId);
    return p !== undefined && (p.arrived || p.lost !== undefined || p.imported);
  }

  /** Forgets the offer of (buffer id, base), closing what it still holds. */
  forgetOffer(bufferId: bigint, base: bigint): Incoming | undefined {
    const key = offerKey(bufferId, base);
    const inc = this.incoming.get(key);
    if (inc !== undefined) this.forget(key, inc);
    return inc;
  }

  /** Drops pool `poolId` (its import failed, or is stale): its descriptor is closed, the handle pool's import dropped. */
  dropPool(poolId: number): void {
    const p = this.pools.get(poolId);
    if (p?.fd !== undefined) closeFdQuietly(this.ctx.driver, p.fd);
    this.pools.delete(poolId);
    this.handles.dropPeerPool(this.poolKey(poolId));
  }

  /** FD_POOL: the peer announces (again) a pool; its descriptor follows on the descriptor channel. */
  onPool(frame: FdPoolFrame): void {
    const old = this.pools.get(frame.poolId);
    if (old?.fd !== undefined) closeFdQuietly(this.ctx.driver, old.fd);
    this.handles.dropPeerPool(this.poolKey(frame.poolId)); // a pool announced again is imported afresh
    this.pools.set(frame.poolId, { deviceUuid: frame.deviceUuid, fd: undefined, arrived: false, lost: undefined, imported: false });
    const early = this.takeEarly(`pool:${frame.poolId}`);
    if (early?.lost !== undefined) this.pools.get(frame.poolId)!.lost = early.lost;
    if (early !== undefined) for (const fd of early.fds.values()) this.poolFd(frame.poolId, fd);
    this.changed();
  }

  /** FD_OFFER: an allocation of the peer's, its descriptors (VMM) to come on the descriptor channel. */
  onOffer(frame: FdOfferFrame): void {
    const key = offerKey(frame.bufferId, frame.base);
    const old = this.incoming.get(key);
    if (old !== undefined) this.forget(key, old);
    const inc: Incoming = { frame, fds: frame.chunks.map(() => undefined), have: 0, lost: undefined, arrived: 0, req: undefined as unknown as ImportRequest };
    inc.req = this.requestFor(inc);
    this.incoming.set(key, inc);
    const early = this.takeEarly(key);
    // An offer of more chunks than the bound can never be whole here: lost at once, so its RGET
    // goes by staging now rather than after waiting checkTimeoutMs for descriptors that will be refused.
    const max = this.mem.maxPeerDescriptors;
    if (frame.chunks.length > max) {
      inc.lost = new PeerLimitError(
        'SMCUDA_PEER_FD_LIMIT',
        `peer ${this.ctx.peerId} offered ${frame.chunks.length} descriptors for one message, more than maxPeerDescriptors (${max}): it goes by staging`,
      );
    } else if (early?.lost !== undefined) {
      inc.lost = early.lost;
    }
    inc.arrived = early?.count ?? 0;
    if (early !== undefined) for (const [index, fd] of early.fds) inc.lost === undefined ? this.chunkFd(inc, index, fd) : closeFdQuietly(this.ctx.driver, fd);
    this.changed();
  }

  /** A message of the descriptor channel: a descriptor for an offer or a pool (maybe before it), or one lost. */
  onDescriptor(msg: FdMessage): void {
    let meta: Frame;
    try {
      meta = decodeFrame(msg.meta);
      if (meta.type !== FrameType.FD_DESCRIPTOR) throw new ProtocolError(`a ${FrameType[meta.type]} frame on the descriptor channel`);
    } catch (err) {
      if (msg.fd !== undefined) closeFdQuietly(this.ctx.driver, msg.fd);
      debug('endpoint %s: bad descriptor-channel message: %s', this.ctx.peerId, (err as Error).message);
      return;
    }
    let fd = msg.fd;
    let lost: Error | undefined = msg.lost;
    if (fd !== undefined) {
      this.mem.stats.descriptorsReceived++;
      // Bounded: a peer may not make this endpoint hold more of its descriptors than maxPeerDescriptors
      // (offers and pools not yet imported, descriptors ahead of their offer). One past it is closed at
      // once and counts as lost: its offer's message goes by staging (FIN RESTAGE), as for EMFILE, so an
      // honest peer with one large or many unexpected offers loses nothing, and a hoarding one holds no more.
      const max = this.mem.maxPeerDescriptors;
      if (this.heldDescriptors() >= max) {
        closeFdQuietly(this.ctx.driver, fd);
        fd = undefined;
        this.mem.stats.descriptorsRefused++;
        lost = new PeerLimitError(
          'SMCUDA_PEER_FD_LIMIT',
          `peer ${this.ctx.peerId} has ${max} descriptors held here not yet imported (maxPeerDescriptors): one more was closed, its message goes by staging`,
        );
      }
    }
    const poolKey = `pool:${meta.id}`;
    if (meta.kind === HandleKind.POOL) {
      const p = this.pools.get(Number(meta.id));
      if (lost !== undefined) {
        if (p !== undefined) p.lost = lost;
        else this.holdLoss(poolKey, lost); // before its FD_POOL: the pool is lost when it comes
      } else if (p === undefined || p.arrived) {
        this.hold(poolKey, 0, fd);
      } else {
        this.poolFd(Number(meta.id), fd);
      }
      return this.changed();
    }
    const key = offerKey(meta.id, meta.base);
    const inc = this.incoming.get(key);
    if (this.drained(key)) {
      if (fd !== undefined) closeFdQuietly(this.ctx.driver, fd); // of an offer lost and forgotten already
      return this.changed();
    }
    if (inc !== undefined) inc.arrived++;
    if (lost !== undefined) {
      if (inc !== undefined) inc.lost = lost;
      else this.holdLoss(key, lost); // before its offer: the offer is lost when it comes, not after checkTimeoutMs
      debug('endpoint %s: descriptor %d of offer %s lost: %s', this.ctx.peerId, meta.index, key, lost.message);
    } else if (inc !== undefined && inc.lost !== undefined && fd !== undefined) {
      closeFdQuietly(this.ctx.driver, fd); // its offer is refused already: nothing will import it
    } else if (inc === undefined || inc.fds[meta.index] !== undefined || inc.have === inc.fds.length) {
      this.hold(key, meta.index, fd); // before its offer (or for the next one)
    } else {
      this.chunkFd(inc, meta.index, fd);
    }
    this.changed();
  }

  /** Whether a descriptor of `key` belongs to an offer forgotten while lost (counted off). */
  private drained(key: string): boolean {
    const left = this.draining.get(key);
    if (left === undefined) return false;
    if (left <= 1) this.draining.delete(key);
    else this.draining.set(key, left - 1);
    return true;
  }

  /** Descriptors of the peer's held here now (closed once imported, refused, or timed out). */
  private heldDescriptors(): number {
    let n = 0;
    for (const e of this.early.values()) n += e.fds.size;
    for (const p of this.pools.values()) if (p.fd !== undefined) n++;
    for (const inc of this.incoming.values()) if (inc.have > 0) for (const fd of inc.fds) if (fd !== undefined) n++;
    return n;
  }

  private chunkFd(inc: Incoming, index: number, fd: number | undefined): void {
    if (fd === undefined) return;
    if (index >= inc.fds.length || inc.fds[index] !== undefined) {
      closeFdQuietly(this.ctx.driver, fd);
      inc.lost = new ProtocolError(`descriptor ${index} does not belong to an offer of ${inc.fds.length} chunks`);
      return;
    }
    inc.fds[index] = fd;
    inc.have++;
  }

  private poolFd(poolId: number, fd: number | undefined): void {
    const p = this.pools.get(poolId)!;
    p.arrived = true;
    if (fd !== undefined) p.fd = fd;
  }

  /** The early entry of `key`, made (with its checkTimeoutMs timer) if there is none. */
  private earlyEntry(key: string): Early {
    let e = this.early.get(key);
    if (e === undefined) {
      const timer = setTimeout(() => {
        const gone = this.takeEarly(key);
        if (gone !== undefined) for (const f of gone.fds.values()) closeFdQuietly(this.ctx.driver, f);
      }, this.mem.offerTimeoutMs);
      timer.unref?.();
      e = { fds: new Map(), timer, count: 0 };
      this.early.set(key, e);
    }
    return e;
  }

  /** Remembers, until its offer comes (or checkTimeoutMs), that a descriptor of `key` was lost before it. */
  private holdLoss(key: string, lost: Error): void {
    const e = this.earlyEntry(key);
    e.count++;
    e.lost ??= lost;
  }

  /** Keeps a descriptor that came before its offer, closed if none comes within checkTimeoutMs. */
  private hold(key: string, index: number, fd: number | undefined): void {
    if (fd === undefined) return;
    const e = this.earlyEntry(key);
    e.count++;
    const prev = e.fds.get(index);
    if (prev !== undefined) closeFdQuietly(this.ctx.driver, prev);
    e.fds.set(index, fd);
  }

  private takeEarly(key: string): Early | undefined {
    const e = this.early.get(key);
    if (e === undefined) return undefined;
    clearTimeout(e.timer);
    this.early.delete(key);
    return e;
  }

  private requestFor(inc: Incoming): ImportRequest {
    const f = inc.frame;
    const d = this.ctx.driver;
    if (f.kind === HandleKind.POOL) {
      const poolId = f.poolId;
      return {
        kind: 'pool',
        deviceUuid: f.deviceUuid,
        base: f.base,
        size: f.size,
        bufferId: f.bufferId,
        identity: f.exportData,
        peerPool: {
          key: this.poolKey(poolId),
          open: () => {
            const p = this.pools.get(poolId);
            if (p === undefined || p.fd === undefined)
              throw new DescriptorError('SMCUDA_FD_CHANNEL', `no descriptor of pool ${poolId} is held here (closed once imported)`);
            const fd = p.fd;
            p.fd = undefined;
            try {
              const handle = d.memPoolImport(fd, { device: this.ordinalOf(p.deviceUuid) });
              p.imported = true;
              this.mem.stats.imports++;
              return handle;
            } finally {
              closeFdQuietly(d, fd); // imported (or refused): the descriptor is not needed again
            }
          },
        },
        open: (pool?: PoolHandle) => d.memPoolImportPointer(pool!, f.exportData),
      };
    }
    return {
      kind: 'vmm',
      deviceUuid: f.deviceUuid,
      base: f.base,
      size: f.size,
      bufferId: f.bufferId,
      open: (): DevicePtr => {
        const chunks = f.chunks.map((c, k) => {
          const fd = inc.fds[k];
          if (fd === undefined)
            throw new DescriptorError('SMCUDA_FD_CHANNEL', `descriptor ${k} of the offer at 0x${f.base.toString(16)} is not held here (closed once imported)`);
          return { fd, offset: c.offset, size: c.size };
        });
        const r = d.vmmImport(chunks, { device: this.ordinalOf(f.deviceUuid) });
        if (r.size !== f.size) {
          d.vmmRelease(r.ptr);
          throw new ProtocolError(`the descriptors map ${r.size} bytes, not the ${f.size} offered`, 'SMCUDA_BAD_RGET');
        }
        this.mem.stats.imports++;
        return r.ptr;
      },
      dispose: () => {
        for (let k = 0; k < inc.fds.length; k++) {
          const fd = inc.fds[k];
          if (fd !== undefined) closeFdQuietly(d, fd);
          inc.fds[k] = undefined;
        }
      },
    };
  }

  /** Forgets an offer and closes the descriptors still held for it. */
  forget(key: string, inc: Incoming): void {
    this.incoming.delete(key);
    const coming = inc.fds.length - inc.arrived;
    if (inc.lost !== undefined && inc.frame.kind === HandleKind.VMM && coming > 0) this.draining.set(key, coming);
    for (const fd of inc.fds) if (fd !== undefined) closeFdQuietly(this.ctx.driver, fd);
    inc.fds.fill(undefined);
  }

  /**
   * Resolves once `ready()` holds (checked now and on every offer, descriptor
   * or close), or `start` settles it; rejects after checkTimeoutMs when
   * `timeout` names why.
   */
  waitFor(ready: () => boolean, timeout: string | undefined, start?: (resolve: () => void, reject: (e: Error) => void) => void): Promise<void> {
    if (ready()) return Promise.resolve();
    if (this.closedWith !== undefined) return Promise.reject(this.closedWith);
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        ready,
        resolve: () => {
          clearTimeout(w.timer);
          this.waiters.delete(w);
          resolve();
        },
        reject: (e) => {
          clearTimeout(w.timer);
          this.waiters.delete(w);
          reject(e);
        },
        timer: undefined as unknown as NodeJS.Timeout,
      };
      if (timeout !== undefined) w.timer = setTimeout(() => w.reject(new DescriptorError('SMCUDA_FD_CHANNEL', timeout)), this.mem.offerTimeoutMs);
      this.waiters.add(w);
      start?.(w.resolve, w.reject);
    });
  }

  /** Something came (or the path closed): waits whose condition now holds go on. */
  changed(): void {
    for (const w of [...this.waiters]) if (w.ready()) w.resolve();
  }

  poolKey(poolId: number): string {
    return `${this.ctx.peerId}:pool:${poolId}`;
  }

  /** This process's ordinal of the device `uuid` names (the import is refused if the descriptor names another). */
  private ordinalOf(uuid: string): number | undefined {
    let o = this.ordinals.get(uuid);
    if (o === undefined) {
      const d = this.ctx.driver;
      for (let i = 0; i < d.deviceCount(); i++) if (d.deviceInfo(i).uuid === uuid) o = i;
      if (o === undefined) return undefined;
      this.ordinals.set(uuid, o);
    }
    return o;
  }

  /** Rejects every wait with `reason` and closes every descriptor still held. */
  close(reason: Error): void {
    this.closedWith = reason;
    this.changed();
    for (const w of [...this.waiters]) w.reject(reason);
    for (const [key, inc] of [...this.incoming]) this.forget(key, inc);
    for (const key of [...this.early.keys()]) for (const fd of this.takeEarly(key)!.fds.values()) closeFdQuietly(this.ctx.driver, fd);
    for (const p of this.pools.values()) if (p.fd !== undefined) closeFdQuietly(this.ctx.driver, p.fd);
    this.pools.clear();
    this.draining.clear();
  }
}

export function offerKey(bufferId: bigint, base: bigint): string {
  return `${bufferId}:${base}`;
}
