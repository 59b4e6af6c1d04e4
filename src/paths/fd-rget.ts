/**
 * RGET by descriptor (RGET_FD): memory that cuIpcGetMemHandle refuses — VMM
 * ranges (cuMemCreate chunks, e.g. expandable segments) and allocations of
 * pools made with POSIX-descriptor handles — is exported as file descriptors,
 * passed with SCM_RIGHTS on the endpoint's descriptor channel
 * (channel/fd-channel.ts, made by the transport after the handshake), and
 * imported by the receiver, which then copies out of it as RGET does.
 * docs/protocol.md, "File-descriptor memory", has the exchange.
 *
 * Sender: per allocation per peer, once: FD_OFFER (VMM: one descriptor per
 * chunk the message touches follows on the descriptor channel; POOL: FD_POOL
 * and the pool's descriptor first, once per pool per peer). Each exported
 * descriptor is closed as soon as the channel has passed it. Then RGET_FD;
 * the message completes on FIN like RGET, and FIN RESTAGE resends it by
 * staging. FD_RELEASE makes the next message offer again.
 *
 * Receiver: an RGET_FD waits (bounded by negotiation.checkTimeoutMs) until
 * its offer and descriptors are in — the two sockets do not keep order
 * between them — then imports through the handle pool (acquireImport; its
 * dispose closes the descriptors once imported) and copies. Anything that
 * goes wrong for one message (import fails, a descriptor lost to EMFILE, an
 * offer that does not match, time out) answers that message with FIN
 * RESTAGE and FD_RELEASE: it goes by staging, the next one offers afresh.
 *
 * One file over 500 lines, as one concept: both sides of one exchange
 * (offers, descriptors, the wait for two sockets to line up, imports,
 * release), as rget.ts holds both sides of RGET; the copy itself is shared
 * with RGET (remote-copy.ts).
 */
import type { ImportRequest } from '../../cache/index.js';
import { type DeviceBuffer, isDeviceBuffer, type MessageBuffer } from '../buffers.js';
import type { FdChannel, FdMessage } from '../channel/fd-channel.js';
import type { CudaDriver, DevicePtr, PoolHandle } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { ArgumentRangeError, CudaError, DescriptorError, ProtocolError } from '../errors.js';
import type { ExportInfo } from '../exports.js';
import { decodeFrame, encodeFrame } from '../wire/codec.js';
import {
  type FdOfferFrame,
  FinStatus,
  type Frame,
  FrameType,
  HandleKind,
  MAX_FD_CHUNKS,
  POOL_EXPORT_BYTES,
  type RgetFdFrame,
} from '../wire/frames.js';
import type { Arrival, DataPath, PathContext, PendingRecv, SendOptions } from './data-path.js';
import { type Resender, restageOnFin } from './rget.js';
import { refuseTooSmall } from './receive-target.js';
import { destroyEvent, finishRemoteCopy, launchRemoteCopy, type RemoteCopy } from './remote-copy.js';

/** Sender: a range offered to the peer (FD_OFFER sent). */
interface Offer {
  kind: HandleKind;
  base: bigint;
  size: number;
  bufferId: bigint;
  /** False once the peer released it (FD_RELEASE) or another offer replaced it. */
  live: boolean;
}

/** Receiver: an offer from the peer, and the descriptors that came for it. */
interface Incoming {
  frame: FdOfferFrame;
  /** VMM: descriptor k for chunk k (undefined: not yet in, or closed once imported). */
  fds: (number | undefined)[];
  have: number;
  /** A descriptor of it was lost (EMFILE) or the offer was refused. */
  lost: Error | undefined;
  /** The request the handle pool imports it by (also the lookup key of later messages). */
  req: ImportRequest;
}

/** Receiver: a pool the peer announced (FD_POOL). */
interface IncomingPool {
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

interface FdCopy extends RemoteCopy {
  frame: RgetFdFrame;
}

const ZERO_EXPORT = new Uint8Array(POOL_EXPORT_BYTES);

export class FdRgetPath implements DataPath {
  readonly kind = 'rget-fd';
  readonly arrivals = [FrameType.RGET_FD] as const;
  readonly controls = [FrameType.FD_OFFER, FrameType.FD_POOL, FrameType.FD_RELEASE] as const;
  private channel: FdChannel | undefined;
  // sender side
  private readonly offers = new Map<bigint, Offer>();
  private readonly offerOf = new WeakMap<ExportInfo, Offer>();
  private readonly poolIds = new Map<PoolHandle, number>();
  private nextPoolId = 1;
  // receiver side
  private readonly incoming = new Map<string, Incoming>();
  /** Descriptors that came before their offer: closed if none comes in time. */
  private readonly early = new Map<string, { fds: Map<number, number>; timer: NodeJS.Timeout }>();
  private readonly pools = new Map<number, IncomingPool>();
  private readonly waiters = new Set<Waiter>();
  private readonly ordinals = new Map<string, number>();
  private closeReason: Error | undefined;

  constructor(
    private readonly ctx: PathContext,
    private readonly fallback: Resender,
  ) {
    if (ctx.fdAgreed) ctx.onFdChannel = (channel) => this.attach(channel);
  }

  private attach(channel: FdChannel): void {
    if (this.closeReason !== undefined || this.channel !== undefined) return channel.close();
    this.channel = channel;
    this.ctx.fdStats.channel = true;
    channel.start({
      message: (msg) => this.onDescriptor(msg),
      close: (err) => {
        // The descriptor channel failed: from now on this peer is one without FD_MEMORY (staging), never an error.
        debug('endpoint %s: descriptor channel closed%s', this.ctx.peerId, err ? `: ${err.message}` : '');
        this.ctx.fdStats.channel = false;
        this.channel = undefined;
        this.changed();
      },
    });
  }

  canSend(buf: MessageBuffer): boolean {
    if (this.channel === undefined || !this.ctx.ipcOk || !isDeviceBuffer(buf)) return false;
    try {
      const kind = this.ctx.exports.lookup(buf.ptr).kind;
      return kind === 'vmm' || kind === 'pool';
    } catch {
      return false; // staging refuses it with the driver's error
    }
  }

  /** Why a device message goes by staging instead (stats().stagingReasons). */
  stagingReason(buf: DeviceBuffer): string {
    if (!this.ctx.ipcOk) return 'IPC not OK (negotiation not settled, off, or failed)';
    let exp: ExportInfo;
    try {
      exp = this.ctx.exports.lookup(buf.ptr);
    } catch (err) {
      return `not exportable: ${(err as Error).message}`;
    }
    if (exp.kind === 'other') return `memory kind other: ${exp.reason ?? 'no way to share it'}`;
    if (exp.kind === 'legacy-ipc') return 'legacy IPC memory';
    if (!this.ctx.fdAgreed) return `${exp.kind} memory, peer without FD_MEMORY`;
    return `${exp.kind} memory, descriptor channel not up`;
  }

  inlineBytes(): number {
    return 0;
  }

  // ------------------------------------------------------------------ sender

  send(buffer: MessageBuffer, tag: number, options: SendOptions): Promise<void> {
    const buf = buffer as DeviceBuffer;
    const ctx = this.ctx;
    const d = ctx.driver;
    const exp = ctx.exports.lookup(buf.ptr);
    let offer: Offer;
    try {
      offer = this.offerFor(exp, buf);
    } catch (err) {
      if (!(err instanceof CudaError)) throw err;
      // The driver would not export it (cuMemPoolExportPointer was seen to refuse
      // a pool allocation now and then on an H100): this message goes by staging.
      return this.sendByStaging(buf, tag, options, `${exp.kind} memory, export failed: ${err.message}`);
    }
    let event: bigint | undefined;
    let eventHandle: Uint8Array | null = null;
    if (options.stream !== undefined) {
      event = d.eventCreate({ interprocess: true, disableTiming: true });
      try {
        d.eventRecord(event, options.stream);
        eventHandle = d.ipcGetEventHandle(event);
      } catch (err) {
        destroyEvent(d, event);
        throw err;
      }
    }
    const seq = ctx.nextSeq();
    const release = event === undefined ? noop : () => destroyEvent(d, event);
    const done = ctx.sends.pend(seq, tag, buf.length, 'rget-fd', options.signal, release, { buf, stream: options.stream });
    try {
      ctx.sendFrame({
        type: FrameType.RGET_FD,
        tag,
        seq,
        kind: offer.kind,
        base: offer.base,
        allocSize: offer.size,
        offset: Number(buf.ptr - offer.base),
        length: buf.length,
        bufferId: offer.bufferId,
        deviceUuid: ctx.uuidOf(exp.device),
        event: eventHandle,
      });
      ctx.flow.charge(0);
    } catch (err) {
      ctx.sends.fail(seq, err as Error);
    }
    return done;
  }

  /** `buf` by staging under a seq of its own, the reason counted (stats().stagingReasons). */
  private sendByStaging(buf: DeviceBuffer, tag: number, options: SendOptions, why: string): Promise<void> {
    const ctx = this.ctx;
    ctx.stagingReasons[why] = (ctx.stagingReasons[why] ?? 0) + 1;
    debug('endpoint %s: %s; by staging', ctx.peerId, why);
    const seq = ctx.nextSeq();
    const done = ctx.sends.pend(seq, tag, buf.length, 'staging', options.signal, noop);
    try {
      this.fallback.resend(seq, buf, options.stream);
    } catch (err) {
      ctx.sends.fail(seq, err as Error);
    }
    return done;
  }

  /** The live offer covering `buf`, or a new one (exported and sent now). */
  private offerFor(exp: ExportInfo, buf: DeviceBuffer): Offer {
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
      if (x.chunks.length > MAX_FD_CHUNKS) throw new ArgumentRangeError(`the message spans ${x.chunks.length} chunks, more than the ${MAX_FD_CHUNKS} one FD_OFFER carries`);
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
      ctx.fdStats.offers++;
      x.chunks.forEach((c, index) => this.pass(c.fd, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.VMM, id: exp.bufferId, base: x.base, index }));
    } catch (err) {
      for (const fd of fds) closeFd(ctx.driver, fd);
      throw err;
    }
    return { kind: HandleKind.VMM, base: x.base, size: x.size, bufferId: exp.bufferId, live: true };
  }

  private offerPool(exp: ExportInfo): Offer {
    const ctx = this.ctx;
    const pool = exp.pool!;
    let poolId = this.poolIds.get(pool);
    if (poolId === undefined) {
      const fd = ctx.driver.memPoolExport(pool);
      poolId = this.nextPoolId++;
      try {
        ctx.sendFrame({ type: FrameType.FD_POOL, poolId, deviceUuid: ctx.uuidOf(exp.device) });
        ctx.fdStats.pools++;
        this.pass(fd, { type: FrameType.FD_DESCRIPTOR, kind: HandleKind.POOL, id: BigInt(poolId), base: 0n, index: 0 });
      } catch (err) {
        closeFd(ctx.driver, fd);
        throw err;
      }
      this.poolIds.set(pool, poolId);
    }
    ctx.sendFrame({
      type: FrameType.FD_OFFER,
      kind: HandleKind.POOL,
      bufferId: exp.bufferId,
      deviceUuid: ctx.uuidOf(exp.device),
      base: exp.base,
      size: exp.size,
      poolId,
      exportData: ctx.driver.memPoolExportPointer(exp.base),
      chunks: [],
    });
    ctx.fdStats.offers++;
    return { kind: HandleKind.POOL, base: exp.base, size: exp.size, bufferId: exp.bufferId, live: true };
  }

  /** Passes `fd` on the descriptor channel and closes our copy once passed (the kernel sends a duplicate). */
  private pass(fd: number, meta: Frame): void {
    const channel = this.channel;
    if (channel === undefined) throw new DescriptorError('SMCUDA_FD_CHANNEL', `the descriptor channel to ${this.ctx.peerId} is down`);
    this.ctx.fdStats.descriptorsSent++;
    const close = () => closeFd(this.ctx.driver, fd);
    // A failed pass shows on the receiver (lost or timed out: RESTAGE); the channel's close says the rest.
    channel.send(fd, encodeFrame(meta)).then(close, (err: Error) => {
      close();
      debug('endpoint %s: could not pass a descriptor: %s', this.ctx.peerId, err.message);
    });
  }

  /** FIN RESTAGE: the peer could not import our memory; the message goes by staging under the same seq. */
  onFin(seq: number, status: FinStatus): boolean {
    return restageOnFin(this.ctx, this.fallback, seq, status, 'RGET_FD');
  }

  // ---------------------------------------------------------------- receiver

  onFrame(frame: Frame): void {
    if (!this.ctx.fdAgreed) throw new ProtocolError(`peer ${this.ctx.peerId} sent ${FrameType[frame.type]} without both HELLOs announcing FD_MEMORY`, 'SMCUDA_BAD_FRAME');
    switch (frame.type) {
      case FrameType.FD_OFFER:
        return this.onOffer(frame);
      case FrameType.FD_POOL: {
        const old = this.pools.get(frame.poolId);
        if (old?.fd !== undefined) closeFd(this.ctx.driver, old.fd);
        this.ctx.pool.dropPeerPool(this.poolKey(frame.poolId)); // a pool announced again is imported afresh
        this.pools.set(frame.poolId, { deviceUuid: frame.deviceUuid, fd: undefined, arrived: false, lost: undefined, imported: false });
        const early = this.takeEarly(`pool:${frame.poolId}`);
        if (early !== undefined) for (const fd of early.values()) this.poolFd(frame.poolId, fd);
        return this.changed();
      }
      case FrameType.FD_RELEASE: {
        this.ctx.fdStats.releasesReceived++;
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
        throw new ProtocolError(`${FrameType[frame.type]} is not a descriptor-path frame`);
    }
  }

  private onOffer(frame: FdOfferFrame): void {
    const key = offerKey(frame.bufferId, frame.base);
    const old = this.incoming.get(key);
    if (old !== undefined) this.forget(key, old);
    const inc: Incoming = { frame, fds: frame.chunks.map(() => undefined), have: 0, lost: undefined, req: undefined as unknown as ImportRequest };
    inc.req = this.requestFor(inc);
    this.incoming.set(key, inc);
    const early = this.takeEarly(key);
    if (early !== undefined) for (const [index, fd] of early) this.chunkFd(inc, index, fd);
    this.changed();
  }

  private onDescriptor(msg: FdMessage): void {
    let meta: Frame;
    try {
      meta = decodeFrame(msg.meta);
      if (meta.type !== FrameType.FD_DESCRIPTOR) throw new ProtocolError(`a ${FrameType[meta.type]} frame on the descriptor channel`);
    } catch (err) {
      if (msg.fd !== undefined) closeFd(this.ctx.driver, msg.fd);
      debug('endpoint %s: bad descriptor-channel message: %s', this.ctx.peerId, (err as Error).message);
      return;
    }
    if (msg.fd !== undefined) this.ctx.fdStats.descriptorsReceived++;
    const poolKey = `pool:${meta.id}`;
    if (meta.kind === HandleKind.POOL) {
      const p = this.pools.get(Number(meta.id));
      if (msg.lost !== undefined) {
        if (p !== undefined) p.lost = msg.lost;
      } else if (p === undefined || p.arrived) {
        this.hold(poolKey, 0, msg.fd);
      } else {
        this.poolFd(Number(meta.id), msg.fd);
      }
      return this.changed();
    }
    const key = offerKey(meta.id, meta.base);
    const inc = this.incoming.get(key);
    if (msg.lost !== undefined) {
      if (inc !== undefined) inc.lost = msg.lost;
      debug('endpoint %s: descriptor %d of offer %s lost: %s', this.ctx.peerId, meta.index, key, msg.lost.message);
    } else if (inc === undefined || inc.fds[meta.index] !== undefined || inc.have === inc.fds.length) {
      this.hold(key, meta.index, msg.fd); // before its offer (or for the next one)
    } else {
      this.chunkFd(inc, meta.index, msg.fd);
    }
    this.changed();
  }

  private chunkFd(inc: Incoming, index: number, fd: number | undefined): void {
    if (fd === undefined) return;
    if (index >= inc.fds.length || inc.fds[index] !== undefined) {
      closeFd(this.ctx.driver, fd);
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

  /** Keeps a descriptor that came before its offer, closed if none comes within checkTimeoutMs. */
  private hold(key: string, index: number, fd: number | undefined): void {
    if (fd === undefined) return;
    let e = this.early.get(key);
    if (e === undefined) {
      const timer = setTimeout(() => {
        const gone = this.takeEarly(key);
        if (gone !== undefined) for (const f of gone.values()) closeFd(this.ctx.driver, f);
      }, this.ctx.opts.negotiation.checkTimeoutMs);
      timer.unref?.();
      e = { fds: new Map(), timer };
      this.early.set(key, e);
    }
    const prev = e.fds.get(index);
    if (prev !== undefined) closeFd(this.ctx.driver, prev);
    e.fds.set(index, fd);
  }

  private takeEarly(key: string): Map<number, number> | undefined {
    const e = this.early.get(key);
    if (e === undefined) return undefined;
    clearTimeout(e.timer);
    this.early.delete(key);
    return e.fds;
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
            if (p === undefined || p.fd === undefined) throw new DescriptorError('SMCUDA_FD_CHANNEL', `no descriptor of pool ${poolId} is held here (closed once imported)`);
            const fd = p.fd;
            p.fd = undefined;
            try {
              const handle = d.memPoolImport(fd, { device: this.ordinalOf(p.deviceUuid) });
              p.imported = true;
              this.ctx.fdStats.imports++;
              return handle;
            } finally {
              closeFd(d, fd); // imported (or refused): the descriptor is not needed again
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
          if (fd === undefined) throw new DescriptorError('SMCUDA_FD_CHANNEL', `descriptor ${k} of the offer at 0x${f.base.toString(16)} is not held here (closed once imported)`);
          return { fd, offset: c.offset, size: c.size };
        });
        const r = d.vmmImport(chunks, { device: this.ordinalOf(f.deviceUuid) });
        if (r.size !== f.size) {
          d.vmmRelease(r.ptr);
          throw new ProtocolError(`the descriptors map ${r.size} bytes, not the ${f.size} offered`, 'SMCUDA_BAD_RGET');
        }
        this.ctx.fdStats.imports++;
        return r.ptr;
      },
      dispose: () => {
        for (let k = 0; k < inc.fds.length; k++) {
          const fd = inc.fds[k];
          if (fd !== undefined) closeFd(d, fd);
          inc.fds[k] = undefined;
        }
      },
    };
  }

  receive(recv: PendingRecv, arrival: Arrival): void {
    const frame = arrival as RgetFdFrame;
    if (!this.ctx.fdAgreed) throw new ProtocolError(`peer ${this.ctx.peerId} sent RGET_FD without both HELLOs announcing FD_MEMORY`, 'SMCUDA_BAD_FRAME');
    if (refuseTooSmall(this.ctx, recv, frame)) return;
    const job: FdCopy = { recv, frame, mapping: undefined, event: undefined, result: undefined };
    const inc = this.incoming.get(offerKey(frame.bufferId, frame.base));
    if (inc !== undefined && !frame.event && this.matches(inc, frame) === undefined) {
      job.mapping = this.ctx.pool.lookupImport(inc.req);
      if (job.mapping !== undefined) return this.copy(job);
    }
    this.prepare(job).catch((err: Error) => this.ctx.failArrival(recv, frame, err));
  }

  /** Why `frame` does not fit the offer it names (undefined: it fits). */
  private matches(inc: Incoming, frame: RgetFdFrame): string | undefined {
    const f = inc.frame;
    if (f.kind !== frame.kind) return `kind ${HandleKind[frame.kind]}, but the offer is ${HandleKind[f.kind]}`;
    if (f.size !== frame.allocSize) return `${frame.allocSize} bytes, but the offer has ${f.size}`;
    if (f.deviceUuid !== frame.deviceUuid) return `device ${frame.deviceUuid}, but the offer is on ${f.deviceUuid}`;
    return undefined;
  }

  private async prepare(job: FdCopy): Promise<void> {
    const { frame } = job;
    const ctx = this.ctx;
    const key = offerKey(frame.bufferId, frame.base);
    try {
      await this.waitFor(() => {
        if (this.closeReason !== undefined) return true;
        const inc = this.incoming.get(key);
        if (inc === undefined) return false;
        if (inc.lost !== undefined) return true;
        // VMM: every descriptor came (maybe imported and closed since: the pool may still hold the import)
        if (inc.frame.kind === HandleKind.VMM) return inc.have === inc.fds.length;
        const p = this.pools.get(inc.frame.poolId);
        return p !== undefined && (p.arrived || p.lost !== undefined || p.imported);
      }, `RGET_FD ${frame.seq}: the offer and its descriptors did not arrive within ${ctx.opts.negotiation.checkTimeoutMs} ms`);
      if (this.closeReason !== undefined) throw this.closeReason;
      const inc = this.incoming.get(key)!;
      if (inc.lost !== undefined) throw inc.lost;
      const mismatch = this.matches(inc, frame);
      if (mismatch !== undefined) throw new ProtocolError(`RGET_FD ${frame.seq} names ${mismatch}`, 'SMCUDA_BAD_RGET');
      if (inc.frame.kind === HandleKind.POOL) {
        const lost = this.pools.get(inc.frame.poolId)?.lost;
        if (lost !== undefined) throw lost;
      }
      const mapping = (job.mapping = await ctx.pool.acquireImport(inc.req));
      if (mapping.size < frame.offset + frame.length) {
        mapping.release();
        job.mapping = undefined;
        throw new ProtocolError(`RGET_FD ${frame.seq}: the import maps ${mapping.size} bytes, fewer than it asks for`, 'SMCUDA_BAD_RGET');
      }
    } catch (err) {
      if (ctx.closed) return job.recv.reject(ctx.closedError());
      if (this.closeReason !== undefined) return job.recv.reject(this.closeReason); // the endpoint is closing
      return this.restage(job, err as Error);
    }
    if (frame.event) {
      try {
        const d = ctx.driver;
        const event = (job.event = d.ipcOpenEventHandle(frame.event));
        const gpu = ctx.gpu();
        await this.waitFor(() => this.closeReason !== undefined, undefined, (resolve, reject) => gpu.whenEvent(event, (err) => (err ? reject(err) : resolve())));
        if (this.closeReason !== undefined) throw this.closeReason;
      } catch (err) {
        return this.finish(job, err as Error);
      }
    }
    this.copy(job);
  }

  /** This message goes by staging (FIN RESTAGE); the offer is forgotten here and at the sender (FD_RELEASE). */
  private restage(job: FdCopy, err: Error): void {
    const { recv, frame } = job;
    const ctx = this.ctx;
    ctx.fdStats.restaged++;
    debug('endpoint %s: cannot import RGET_FD %d (%s): asking for it by staging', ctx.peerId, frame.seq, err.message);
    ctx.expectResend(frame.seq, recv);
    ctx.sendFin(frame.seq, FinStatus.RESTAGE, err.message);
    const key = offerKey(frame.bufferId, frame.base);
    const inc = this.incoming.get(key);
    if (inc !== undefined) this.forget(key, inc);
    ctx.pool.invalidate(frame.deviceUuid, frame.base, frame.bufferId);
    this.release(frame.kind, frame.bufferId, frame.base);
    if (frame.kind === HandleKind.POOL && inc !== undefined) {
      // The pool import may be what failed, or stale (the sender destroyed the
      // pool and its handle was reused): drop it, and the sender sends it again.
      const poolId = inc.frame.poolId;
      const p = this.pools.get(poolId);
      if (p?.fd !== undefined) closeFd(ctx.driver, p.fd);
      this.pools.delete(poolId);
      ctx.pool.dropPeerPool(this.poolKey(poolId));
      this.release(HandleKind.POOL, BigInt(poolId), 0n);
    }
  }

  private release(kind: HandleKind, id: bigint, base: bigint): void {
    try {
      this.ctx.sendFrame({ type: FrameType.FD_RELEASE, kind, id, base });
      this.ctx.fdStats.releasesSent++;
    } catch {
      // the channel failed: the endpoint closes
    }
  }

  private forget(key: string, inc: Incoming): void {
    this.incoming.delete(key);
    for (const fd of inc.fds) if (fd !== undefined) closeFd(this.ctx.driver, fd);
    inc.fds.fill(undefined);
  }

  private copy(job: FdCopy): void {
    launchRemoteCopy(this.ctx, job, job.mapping!.ptr + BigInt(job.frame.offset), 'rget-fd', (err) => this.finish(job, err));
  }

  private finish(job: FdCopy, err: Error | undefined): void {
    finishRemoteCopy(this.ctx, job, 'rget-fd', err);
  }

  /**
   * Resolves once `ready()` holds (checked now and on every offer, descriptor
   * or close), or `start` settles it; rejects after checkTimeoutMs when
   * `timeout` names why.
   */
  private waitFor(ready: () => boolean, timeout: string | undefined, start?: (resolve: () => void, reject: (e: Error) => void) => void): Promise<void> {
    if (ready()) return Promise.resolve();
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
      if (timeout !== undefined) w.timer = setTimeout(() => w.reject(new DescriptorError('SMCUDA_FD_CHANNEL', timeout)), this.ctx.opts.negotiation.checkTimeoutMs);
      this.waiters.add(w);
      start?.(w.resolve, w.reject);
    });
  }

  private changed(): void {
    for (const w of [...this.waiters]) if (w.ready()) w.resolve();
  }

  private poolKey(poolId: number): string {
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

  senderFailed(): boolean {
    return false;
  }

  close(reason: Error): void {
    this.closeReason = reason;
    this.changed();
    for (const w of [...this.waiters]) w.reject(reason);
    this.channel?.close();
    this.channel = undefined;
    this.ctx.fdStats.channel = false;
    for (const [key, inc] of [...this.incoming]) this.forget(key, inc);
    for (const key of [...this.early.keys()]) for (const fd of this.takeEarly(key)!.values()) closeFd(this.ctx.driver, fd);
    for (const p of this.pools.values()) if (p.fd !== undefined) closeFd(this.ctx.driver, p.fd);
    this.pools.clear();
  }
}

function offerKey(bufferId: bigint, base: bigint): string {
  return `${bufferId}:${base}`;
}

function noop(): void {}

function closeFd(d: CudaDriver, fd: number): void {
  try {
    d.closeFd(fd);
  } catch {
    // closed already
  }
}

