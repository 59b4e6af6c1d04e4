/**
 * The descriptor side of RGET: how VMM and pool memory — which
 * cuIpcGetMemHandle refuses — gets a RemoteKey a peer can open. Memory is
 * exported as file descriptors, passed with SCM_RIGHTS on the endpoint's
 * descriptor channel (channel/fd-channel.ts, made by the transport after the
 * handshake), and imported by the receiver. docs/protocol.md,
 * "File-descriptor memory", has the exchange.
 *
 * Sender (`offerFor`): per allocation per peer, once: FD_OFFER (VMM: one
 * descriptor per chunk the message touches follows on the descriptor
 * channel; POOL: FD_POOL and the pool's descriptor first, once per pool per
 * peer). Each exported descriptor is closed as soon as the channel has
 * passed it. The offer is the key's base, size and identity; the RGET that
 * names it is the path's (rget.ts). FD_RELEASE makes the next message offer again.
 *
 * Receiver: the offers and descriptors from the peer are put back together
 * by fd-offers.ts's table, which open-remote.ts asks when it opens a
 * descriptor key. A key that cannot be opened is forgotten here (`forget`:
 * FD_RELEASE, so the next message offers afresh).
 */
import type { HandlePool } from '../../cache/index.js';
import type { DeviceBuffer } from '../buffers.js';
import type { FdChannel, FdChannelHandlers } from '../channel/fd-channel.js';
import type { PoolHandle } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { ArgumentRangeError, DescriptorError, ProtocolError } from '../errors.js';
import { bufferIdAt, type ExportInfo } from '../exports.js';
import { encodeFrame } from '../wire/codec.js';
import { type Frame, FrameType, HandleKind, MAX_FD_CHUNKS, POOL_EXPORT_BYTES } from '../wire/frames.js';
import { FdOfferTable } from './fd-offers.js';
import { closeFdQuietly } from '../cuda/close-fd.js';
import { NO_IDENTITY, type RemoteKey, wireKind } from './remote-key.js';
import type { DescriptorMemory, RgetLink, RgetParts } from './rget-link.js';

/** Sender: a range offered to the peer (FD_OFFER sent): the base, size, identity and buffer id of its RemoteKey. */
export interface Offer {
  kind: HandleKind.VMM | HandleKind.POOL;
  identity: Uint8Array;
  base: bigint;
  size: number;
  bufferId: bigint;
  /** False once the peer released it (FD_RELEASE) or another offer replaced it. */
  live: boolean;
  /** Pool memory: the pool it came from. */
  pool?: PoolHandle;
}

const ZERO_EXPORT = new Uint8Array(POOL_EXPORT_BYTES);

export class FdSide {
  private channel: FdChannel | undefined;
  // sender side
  private readonly offers = new Map<bigint, Offer>();
  private readonly offerOf = new WeakMap<ExportInfo, Offer>();
  private readonly poolIds = new Map<PoolHandle, number>();
  private nextPoolId = 1;
  /** Receiver: the offers and descriptors from the peer, put back together (fd-offers.ts); undefined without FD_MEMORY. */
  readonly table: FdOfferTable | undefined;
  private closed = false;
  /** Agreement, counters and bounds. */
  private readonly mem: DescriptorMemory;
  /** The peer's allocations opened here: a key that cannot be opened is dropped from it. */
  private readonly pool: HandlePool;

  constructor(
    private readonly ctx: RgetLink,
    own: RgetParts,
  ) {
    this.mem = own.fd;
    this.pool = own.pool;
    this.table = own.fd.agreed ? new FdOfferTable(ctx, own) : undefined;
  }

  /** Both HELLOs announced FD_MEMORY (the table of the peer's offers exists). */
  get agreed(): boolean {
    return this.table !== undefined;
  }

  /** Whether descriptor keys can be sent now (FD_MEMORY agreed, the channel up). */
  get up(): boolean {
    return this.channel !== undefined;
  }

  /**
   * The transport made the descriptor channel: it carries this side's
   * descriptors until it or the endpoint closes. The link started the
   * channel; this returns who takes its FD_DESCRIPTOR messages (undefined:
   * not taken, without FD_MEMORY or once closed).
   */
  attach(channel: FdChannel): FdChannelHandlers | undefined {
    const table = this.table;
    if (this.closed || this.channel !== undefined || table === undefined) return undefined;
    this.channel = channel;
    this.mem.stats.channel = true;
    return {
      message: (msg) => table.onDescriptor(msg),
      close: (err) => {
        // The descriptor channel failed: from now on this peer is one without FD_MEMORY (staging), never an error.
        debug('endpoint %s: descriptor channel closed%s', this.ctx.peerId, err ? `: ${err.message}` : '');
        this.mem.stats.channel = false;
        this.channel = undefined;
        table.changed();
      },
    };
  }

  // ------------------------------------------------------------------ sender

  /** The live offer covering `buf`, or a new one (exported and sent now). Throws CudaError if the driver will not export it. */
  offerFor(exp: ExportInfo, buf: DeviceBuffer): Offer {
    const end = buf.ptr + BigInt(buf.length);
    const covers = (o: Offer) => o.live && o.base <= buf.ptr && end <= o.base + BigInt(o.size);
    const known = this.offerOf.get(exp);
    if (known !== undefined && covers(known)) return known;
    for (const o of this.offers.values()) {
      if (o.bufferId === exp.bufferId && covers(o)) {
        this.offerOf.set(exp, o);
        return o;
      }
    }
    const offer = exp.kind === 'vmm' ? this.offerVmm(exp, buf) : this.offerPool(exp);
    const replaced = this.offers.get(offer.base);
    if (replaced !== undefined) replaced.live = false;
    this.offers.set(offer.base, offer);
    this.offerOf.set(exp, offer);
    return offer;
  }

  private offerVmm(exp: ExportInfo, buf: DeviceBuffer): Offer {
    const ctx = this.ctx;
    const x = ctx.driver.vmmExport(buf.ptr, buf.length); // every chunk the message touches
    const fds = x.chunks.map((c) => c.fd);
    try {
      if (x.chunks.length > MAX_FD_CHUNKS)
        throw new ArgumentRangeError(`the message spans ${x.chunks.length} chunks, more than the ${MAX_FD_CHUNKS} one FD_OFFER carries`);
      ctx.sendFrame({
        type: FrameType.FD_OFFER,
        kind: HandleKind.VMM,
        bufferId: exp.bufferId,
        deviceUuid: ctx.uuidOf(exp.device),
        base: x.base,
        size: x.size,
        poolId: 0,
        exportData: ZERO_EXPORT,
        chunks: x.chunks.map((c) => ({ offset: c.offset, size: c.size })),
      });
      this.mem.stats.offers++;
      x.chunks.forEach((c, index) => this.pass(c.fd, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: exp.bufferId, base: x.base, index }));
    } catch (err) {
      for (const fd of fds) closeFdQuietly(ctx.driver, fd);
      throw err;
    }
    return { kind: HandleKind.VMM, identity: NO_IDENTITY, base: x.base, size: x.size, bufferId: exp.bufferId, live: true };
  }

  private offerPool(exp: ExportInfo): Offer {
    const ctx = this.ctx;
    const pool = exp.pool!;
    let poolId = this.poolIds.get(pool);
    if (poolId === undefined || !this.samePool(pool)) {
      // Not sent yet, or the handle may name another pool now: announced
      // (again) under its id, which the peer then imports afresh.
      const fd = ctx.driver.memPoolExport(pool);
      poolId ??= this.nextPoolId++;
      try {
        ctx.sendFrame({ type: FrameType.FD_POOL, poolId, deviceUuid: ctx.uuidOf(exp.device) });
        this.mem.stats.pools++;
        this.pass(fd, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.POOL, id: BigInt(poolId), base: 0n, index: 0 });
      } catch (err) {
        closeFdQuietly(ctx.driver, fd);
        throw err;
      }
      this.poolIds.set(pool, poolId);
    }
    const exportData = ctx.driver.memPoolExportPointer(exp.base);
    ctx.sendFrame({
      type: FrameType.FD_OFFER,
      kind: HandleKind.POOL,
      bufferId: exp.bufferId,
      deviceUuid: ctx.uuidOf(exp.device),
      base: exp.base,
      size: exp.size,
      poolId,
      exportData,
      chunks: [],
    });
    this.mem.stats.offers++;
    return { kind: HandleKind.POOL, identity: exportData, base: exp.base, size: exp.size, bufferId: exp.bufferId, live: true, pool };
  }

  /**
   * Whether `pool` is still the pool announced under its handle. A handle
   * names a pool only while it lives: the driver gives a destroyed pool's
   * handle (its CUmemoryPool's address) to the next pool made (seen on H100:
   * one address for four pools made one after another). `bench --suite
   * memory` makes a pool per operation, and then sent every message of the
   * new pool by staging (2-3 % of raw, in about one run of three): the new
   * pool was never exported to a shareable handle, so cuMemPoolExportPointer
   * refused its pointers (CUDA_ERROR_INVALID_VALUE), and the peer, holding
   * the old pool's import under that id, could not have imported them
   * either. An allocation offered from it that is still alive (same buffer
   * id at its base) proves it is the same pool: a pool outlives its
   * allocations. With none, it may not be, and it is exported and announced
   * again (the peer replaces its import).
   */
  private samePool(pool: PoolHandle): boolean {
    const d = this.ctx.driver;
    for (const o of this.offers.values()) {
      // A freed allocation (its range unmapped) is no proof; bufferIdAt: asking there is an expected miss.
      if (o.pool === pool && bufferIdAt(d, o.base) === o.bufferId) return true;
    }
    return false;
  }

  /** Passes `fd` on the descriptor channel and closes our copy once passed (the kernel sends a duplicate). */
  private pass(fd: number, meta: Frame): void {
    const channel = this.channel;
    if (channel === undefined) throw new DescriptorError('SMCUDA_FD_CHANNEL', `the descriptor channel to ${this.ctx.peerId} is down`);
    this.mem.stats.descriptorsSent++;
    const close = () => closeFdQuietly(this.ctx.driver, fd);
    // A failed pass shows on the receiver (lost or timed out: RESTAGE); the channel's close says the rest.
    channel.send(fd, encodeFrame(meta)).then(close, (err: Error) => {
      close();
      debug('endpoint %s: could not pass a descriptor: %s', this.ctx.peerId, err.message);
    });
  }

  // ------------------------------------------------------------- controls

  /** FD_OFFER, FD_POOL (receiver) and FD_RELEASE (sender). */
  onFrame(frame: Frame): void {
    const table = this.table;
    if (table === undefined)
      throw new ProtocolError(`peer ${this.ctx.peerId} sent ${FrameType[frame.type]} without both HELLOs announcing FD_MEMORY`, 'SMCUDA_BAD_FRAME');
    switch (frame.type) {
      case FrameType.FD_OFFER:
        return table.onOffer(frame);
      case FrameType.FD_POOL:
        return table.onPool(frame);
      case FrameType.FD_RELEASE: {
        this.mem.stats.releasesReceived++;
        if (frame.kind === HandleKind.POOL && frame.base === 0n) {
          for (const [pool, id] of this.poolIds) if (BigInt(id) === frame.id) this.poolIds.delete(pool);
          return;
        }
        const o = this.offers.get(frame.base);
        if (o !== undefined && o.bufferId === frame.id) {
          o.live = false;
          this.offers.delete(frame.base);
        }
        return;
      }
      default:
        throw new ProtocolError(`${FrameType[frame.type]} is not a descriptor frame`);
    }
  }

  // ---------------------------------------------------------------- receiver

  /**
   * Receiver: descriptor key `key` could not be opened (its message goes by
   * staging): the offer is forgotten here and at the sender (FD_RELEASE), so
   * the next message offers afresh; for a pool key its pool import too (it
   * may be what failed, or stale: the sender destroyed the pool and its
   * handle was reused), and the sender sends the pool again.
   */
  forget(key: RemoteKey): void {
    this.mem.stats.restaged++;
    const inc = this.table?.forgetOffer(key.bufferId, key.base);
    this.pool.invalidate(key.device, key.base, key.bufferId);
    const kind = wireKind(key.kind);
    this.release(kind, key.bufferId, key.base);
    if (kind === HandleKind.POOL && inc !== undefined) {
      const poolId = inc.frame.poolId;
      this.table!.dropPool(poolId);
      this.release(HandleKind.POOL, BigInt(poolId), 0n);
    }
  }

  private release(kind: HandleKind, id: bigint, base: bigint): void {
    try {
      this.ctx.sendFrame({ type: FrameType.FD_RELEASE, kind, id, base });
      this.mem.stats.releasesSent++;
    } catch {
      // the channel failed: the endpoint closes
    }
  }

  close(reason: Error): void {
    this.closed = true;
    this.table?.close(reason);
    this.channel?.close();
    this.channel = undefined;
    this.mem.stats.channel = false;
  }
}
