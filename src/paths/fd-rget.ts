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
 * its offer and descriptors are in — the table of fd-offers.ts puts the two
 * sockets' messages back together — then imports through the handle pool
 * (acquireImport; its dispose closes the descriptors once imported) and
 * copies (remote-copy.ts, shared with RGET). Anything that goes wrong for
 * one message (import fails, a descriptor lost to EMFILE, an offer that does
 * not match, time out) answers that message with FIN RESTAGE and
 * FD_RELEASE: it goes by staging, the next one offers afresh.
 */
import type { Mapping } from '../../cache/index.js';
import { type DeviceBuffer, isDeviceBuffer, type MessageBuffer } from '../buffers.js';
import type { FdChannel, FdChannelHandlers } from '../channel/fd-channel.js';
import type { PoolHandle } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { ArgumentRangeError, CudaError, DescriptorError, PeerLimitError, ProtocolError } from '../errors.js';
import type { ExportInfo } from '../exports.js';
import { encodeFrame } from '../wire/codec.js';
import {
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
import { closeFd, FdOfferTable, type Incoming } from './fd-offers.js';
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
  /** Receiver: the offers and descriptors from the peer, put back together (fd-offers.ts). */
  private readonly table: FdOfferTable;
  private closeReason: Error | undefined;

  constructor(
    private readonly ctx: PathContext,
    private readonly fallback: Resender,
  ) {
    this.table = new FdOfferTable(ctx);
    if (ctx.fdAgreed) ctx.onFdChannel = (channel) => this.attach(channel);
  }

  /** The link started the channel; it routes this path's messages (FD_DESCRIPTOR) here. */
  private attach(channel: FdChannel): FdChannelHandlers | undefined {
    if (this.closeReason !== undefined || this.channel !== undefined) return undefined;
    this.channel = channel;
    this.ctx.fdStats.channel = true;
    return {
      message: (msg) => this.table.onDescriptor(msg),
      close: (err) => {
        // The descriptor channel failed: from now on this peer is one without FD_MEMORY (staging), never an error.
        debug('endpoint %s: descriptor channel closed%s', this.ctx.peerId, err ? `: ${err.message}` : '');
        this.ctx.fdStats.channel = false;
        this.channel = undefined;
        this.table.changed();
      },
    };
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

  /**
   * Registration (src/persistent/remote-memory.ts): makes sure the peer holds
   * an offer (and its descriptors) covering `buf`, as before an RGET_FD, and
   * says which offer names it.
   */
  offerForRegistration(exp: ExportInfo, buf: DeviceBuffer): { kind: HandleKind; base: bigint; size: number; bufferId: bigint } {
    if (this.channel === undefined) throw new DescriptorError('SMCUDA_FD_CHANNEL', `the descriptor channel to ${this.ctx.peerId} is not up: ${exp.kind} memory cannot be registered with this peer`);
    const o = this.offerFor(exp, buf);
    return { kind: o.kind, base: o.base, size: o.size, bufferId: o.bufferId };
  }

  /** Registration: the import of the peer's offer (bufferId, base), once it and its descriptors are in (bounded as for RGET_FD). */
  async importForRegistration(bufferId: bigint, base: bigint, kind: HandleKind, size: number): Promise<Mapping> {
    await this.table.waitFor(
      () => this.closeReason !== undefined || this.table.settled(bufferId, base),
      `registration of ${HandleKind[kind]} memory at 0x${base.toString(16)}: the offer and its descriptors did not arrive within ${this.ctx.opts.negotiation.checkTimeoutMs} ms`,
    );
    if (this.closeReason !== undefined) throw this.closeReason;
    const inc = this.table.offer(bufferId, base)!;
    if (inc.lost !== undefined) throw inc.lost;
    if (inc.frame.kind !== kind || inc.frame.size < size) throw new ProtocolError(`the registration names a ${HandleKind[kind]} range of ${size} bytes, the offer is ${HandleKind[inc.frame.kind]} of ${inc.frame.size}`, 'SMCUDA_BAD_REGISTRATION');
    return this.ctx.pool.acquireImport(inc.req);
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
        return this.table.onOffer(frame);
      case FrameType.FD_POOL:
        return this.table.onPool(frame);
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

  receive(recv: PendingRecv, arrival: Arrival): void {
    const frame = arrival as RgetFdFrame;
    if (!this.ctx.fdAgreed) throw new ProtocolError(`peer ${this.ctx.peerId} sent RGET_FD without both HELLOs announcing FD_MEMORY`, 'SMCUDA_BAD_FRAME');
    if (refuseTooSmall(this.ctx, recv, frame)) return;
    const job: FdCopy = { recv, frame, mapping: undefined, event: undefined, result: undefined };
    const inc = this.table.offer(frame.bufferId, frame.base);
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
    try {
      await this.table.waitFor(
        () => this.closeReason !== undefined || this.table.settled(frame.bufferId, frame.base),
        `RGET_FD ${frame.seq}: the offer and its descriptors did not arrive within ${ctx.opts.negotiation.checkTimeoutMs} ms`,
      );
      if (this.closeReason !== undefined) throw this.closeReason;
      const inc = this.table.offer(frame.bufferId, frame.base)!;
      if (inc.lost !== undefined) throw inc.lost;
      const mismatch = this.matches(inc, frame);
      if (mismatch !== undefined) throw new ProtocolError(`RGET_FD ${frame.seq} names ${mismatch}`, 'SMCUDA_BAD_RGET');
      if (inc.frame.kind === HandleKind.POOL) {
        const lost = this.table.pool(inc.frame.poolId)?.lost;
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
        await this.table.waitFor(() => this.closeReason !== undefined, undefined, (resolve, reject) => gpu.whenEvent(event, (err) => (err ? reject(err) : resolve())));
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
    const inc = this.table.forgetOffer(frame.bufferId, frame.base);
    ctx.pool.invalidate(frame.deviceUuid, frame.base, frame.bufferId);
    this.release(frame.kind, frame.bufferId, frame.base);
    if (frame.kind === HandleKind.POOL && inc !== undefined) {
      // The pool import may be what failed, or stale (the sender destroyed the
      // pool and its handle was reused): drop it, and the sender sends it again.
      const poolId = inc.frame.poolId;
      this.table.dropPool(poolId);
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

  private copy(job: FdCopy): void {
    launchRemoteCopy(this.ctx, job, job.mapping!.ptr + BigInt(job.frame.offset), 'rget-fd', (err) => this.finish(job, err));
  }

  private finish(job: FdCopy, err: Error | undefined): void {
    finishRemoteCopy(this.ctx, job, 'rget-fd', err);
  }

  senderFailed(): boolean {
    return false;
  }

  close(reason: Error): void {
    this.closeReason = reason;
    this.table.close(reason);
    this.channel?.close();
    this.channel = undefined;
    this.ctx.fdStats.channel = false;
  }
}

function noop(): void {}

