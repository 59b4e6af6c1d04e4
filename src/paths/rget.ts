/**
 * RGET: the receiver copies straight out of the sender's device memory,
 * whatever kind it is. The sender names the memory by its RemoteKey
 * (remote-key.ts) in one RGET frame, with the message's offset and length
 * and an IPC event when a stream orders the data; the receiver opens the key
 * (open-remote.ts, through the handle pool), copies with cuMemcpyAsync and
 * answers FIN once the copy is complete. Used once the negotiation is OK,
 * whatever the size.
 *
 * The kinds differ only in how the key is obtained and opened: legacy-IPC
 * memory by cuIpcGetMemHandle (its export entry); VMM and pool memory by an
 * offer of descriptors, made once per allocation per peer (fd-side.ts),
 * which the receiver's open waits for. A key the receiver cannot open
 * answers FIN RESTAGE: the message goes by staging under the same seq.
 *
 * The fast path belongs here and runs the same traced or not: a re-send
 * from the same legacy buffer is the last encoding with a new tag and seq
 * (restampRget; a tracer is given the frame those bytes say), and a receive
 * whose mapping is pooled runs synchronously from the frame to the copy,
 * whose completion calls straight into the FIN — no promise between the GPU
 * and the answer.
 */
import { type DeviceBuffer, isDeviceBuffer, type MessageBuffer, pastItsAllocation } from '../buffers.js';
import type { FdChannel, FdChannelHandlers } from '../channel/fd-channel.js';
import type { StreamHandle } from '../cuda/driver.js';
import { ArgumentRangeError, CudaError, DescriptorError, ProtocolError } from '../errors.js';
import type { ExportInfo, ExportTable } from '../exports.js';
import type { FinBatcher } from '../fin-batcher.js';
import { debug } from '../debug.js';
import { restampRget } from '../wire/codec.js';
import { type Frame, FinStatus, FrameType, HandleKind, type RgetFrame } from '../wire/frames.js';
import type { Arrival, DataPath, PendingRecv, SendOptions } from './data-path.js';
import { FdSide } from './fd-side.js';
import { lookupRemote, openRemote, type RemoteMemory } from './open-remote.js';
import { refuseTooSmall } from './receive-target.js';
import { finishRemoteCopy, holdFor, launchRemoteCopy, type RemoteCopy } from './remote-copy.js';
import { byDescriptor, type RemoteKey, remoteKind } from './remote-key.js';
import type { RgetLink, RgetParts } from './rget-link.js';

/** Where an RGET whose peer cannot map it is sent again (the staging path). */
export interface Resender {
  /** Announces pending send `seq` again from `buf` (throws if it cannot: the caller fails it). */
  resend(seq: number, buf: DeviceBuffer, stream: StreamHandle | undefined): void;
  /** Counts a device message sent by staging for `why` (stats().stagingReasons). */
  countReason(why: string): void;
}

/**
 * One RGET receive from the frame to its FIN, handed along as one object.
 * It is also the key the memory is opened by: one allocation per message
 * for both.
 */
interface RgetCopy extends RemoteKey, RemoteCopy {
  frame: RgetFrame;
}

export class RgetPath implements DataPath {
  readonly kind = 'rget';
  /** Legacy keys count as 'rget', descriptor keys as 'rget-fd' (stats().paths). */
  readonly counts = ['rget', 'rget-fd'] as const;
  readonly arrivals = [FrameType.RGET] as const;
  readonly controls = [FrameType.FD_OFFER, FrameType.FD_POOL, FrameType.FD_RELEASE] as const;
  /** VMM and pool memory: the offers made and received, the descriptor channel. */
  private readonly fd: FdSide;
  /** Where this endpoint opens the peer's keys (its registrations, src/persistent/, open theirs here too). */
  readonly remote: RemoteMemory;
  private closeReason: Error | undefined;
  /** Local allocations peers map: what a send's key names. */
  private readonly exports: ExportTable;
  /** Receiver: the FINs of completed copies, batched. */
  private readonly fins: FinBatcher;

  constructor(
    private readonly ctx: RgetLink,
    own: RgetParts,
    private readonly fallback: Resender,
  ) {
    this.exports = own.exports;
    this.fins = own.fins;
    this.fd = new FdSide(ctx, own);
    this.remote = { pool: own.pool, offers: this.fd.table };
  }

  /**
   * The key the peer opens `buf`'s VMM or pool memory by: the descriptor
   * side's offer covering it (made now if none is live). A registration
   * (src/persistent/remote-memory.ts) names its memory by it. Throws
   * SMCUDA_FD_CHANNEL while the descriptor channel is not up, and the
   * driver's CudaError when it will not export the memory.
   */
  descriptorKey(exp: ExportInfo, buf: DeviceBuffer): RemoteKey {
    if (!this.fd.up)
      throw new DescriptorError(
        'SMCUDA_FD_CHANNEL',
        `the descriptor channel to ${this.ctx.peerId} is not up: ${exp.kind} memory cannot be shared with this peer by descriptor`,
      );
    const o = this.fd.offerFor(exp, buf);
    return { kind: remoteKind(o.kind), identity: o.identity, base: o.base, size: o.size, bufferId: o.bufferId, device: this.ctx.uuidOf(exp.device) };
  }

  /** The transport made the descriptor channel: its FD_DESCRIPTOR messages come here (undefined: not taken, without FD_MEMORY or once closed). */
  attachFd(channel: FdChannel): FdChannelHandlers | undefined {
    if (this.closeReason !== undefined) return undefined;
    return this.fd.attach(channel);
  }

  /**
   * Legacy-IPC memory, and VMM and pool memory once the descriptor channel
   * is up. The export entry looked up here is the one `send` uses next (the
   * endpoint calls them back to back).
   */
  canSend(buf: MessageBuffer): boolean {
    if (!this.ctx.ipcOk || !isDeviceBuffer(buf)) return false;
    let exp: ExportInfo;
    try {
      exp = this.exports.lookup(buf.ptr);
    } catch {
      return true; // a bad pointer: send() looks it up again and rejects with the driver's error, as before
    }
    if (exp.kind !== 'legacy-ipc' && !((exp.kind === 'vmm' || exp.kind === 'pool') && this.fd.up)) return false;
    this.checked = exp;
    this.checkedPtr = buf.ptr;
    return true;
  }

  /** The entry canSend just looked up for `send` (one revalidation per message, not two). */
  private checked: ExportInfo | undefined;
  private checkedPtr = 0n;

  /** Why a device message goes by staging instead (stats().stagingReasons). */
  stagingReason(buf: DeviceBuffer): string {
    if (!this.ctx.ipcOk) return 'IPC not OK (negotiation not settled, off, or failed)';
    let exp: ExportInfo;
    try {
      exp = this.exports.lookup(buf.ptr);
    } catch (err) {
      return `not exportable: ${(err as Error).message}`;
    }
    if (exp.kind === 'other') return `memory kind other: ${exp.reason ?? 'no way to share it'}`;
    if (exp.kind === 'legacy-ipc') return 'legacy IPC memory';
    if (!this.fd.agreed) return `${exp.kind} memory, peer without FD_MEMORY`;
    return `${exp.kind} memory, descriptor channel not up`;
  }

  inlineBytes(): number {
    return 0;
  }

  // ------------------------------------------------------------------ sender

  send(buffer: MessageBuffer, tag: number, options: SendOptions): Promise<void> {
    const buf = buffer as DeviceBuffer;
    const ctx = this.ctx;
    const checked = this.checked;
    this.checked = undefined;
    const exp = checked !== undefined && this.checkedPtr === buf.ptr ? checked : this.exports.lookup(buf.ptr);
    // The key: the export entry itself (legacy), or the offer of the memory to this peer (VMM, pool).
    let kind = HandleKind.LEGACY;
    let identity = exp.handle;
    let base = exp.base;
    let size = exp.size;
    if (exp.kind !== 'legacy-ipc') {
      if (exp.kind !== 'vmm' && exp.kind !== 'pool')
        throw new ArgumentRangeError(`${exp.kind} memory cannot be sent by RGET: send it from cuMemAlloc, VMM or pool memory`);
      try {
        const offer = this.fd.offerFor(exp, buf);
        kind = offer.kind;
        identity = offer.identity;
        base = offer.base;
        size = offer.size;
      } catch (err) {
        if (!(err instanceof CudaError)) throw err;
        // The driver would not export it (cuMemPoolExportPointer was seen to refuse
        // a pool allocation now and then on an H100): this message goes by staging.
        return this.sendByStaging(buf, tag, options, `${exp.kind} memory, export failed: ${err.message}`);
      }
    }
    const offset = Number(buf.ptr - base);
    if (offset + buf.length > size) {
      throw pastItsAllocation('buffer', buf.length, offset, size - offset);
    }
    let event: bigint | undefined;
    let eventHandle: Uint8Array | null = null;
    if (options.stream !== undefined) {
      // The peer orders its copy after our stream's work through an IPC event.
      const gpu = ctx.gpu();
      ({ event, handle: eventHandle } = gpu.ipcEvent(options.stream));
    }
    const seq = ctx.nextSeq();
    const release = event === undefined ? noop : () => ctx.gpu().releaseIpcEvent(event);
    const done = ctx.sends.pend(seq, tag, buf.length, kind === HandleKind.LEGACY ? 'rget' : 'rget-fd', options.signal, release, {
      buf,
      stream: options.stream,
    });
    try {
      if (kind === HandleKind.LEGACY) this.announceLegacy(exp, buf.length, tag, seq, offset, eventHandle);
      else ctx.sendFrame(this.frameOf(kind, identity, base, size, exp.bufferId, exp.device, buf.length, tag, seq, offset, eventHandle));
      ctx.flow.charge(0);
    } catch (err) {
      ctx.sends.fail(seq, err as Error); // releases the event; `done` rejects
    }
    return done;
  }

  /** A legacy RGET: re-sent from the same buffer without an event, the last encoding with this tag and seq. */
  private announceLegacy(exp: ExportInfo, length: number, tag: number, seq: number, offset: number, eventHandle: Uint8Array | null): void {
    const ctx = this.ctx;
    const last = exp.rget;
    let bytes: Uint8Array;
    if (eventHandle === null && last !== undefined && last.length === length) {
      bytes = restampRget(last.frame, tag, seq);
      if (ctx.tracer !== undefined)
        ctx.tracer.frame(
          ctx.peerId,
          'send',
          this.frameOf(HandleKind.LEGACY, exp.handle, exp.base, exp.size, exp.bufferId, exp.device, length, tag, seq, offset, null),
        );
    } else {
      const frame = this.frameOf(HandleKind.LEGACY, exp.handle, exp.base, exp.size, exp.bufferId, exp.device, length, tag, seq, offset, eventHandle);
      bytes = ctx.sendFrame(frame);
      if (eventHandle === null) exp.rget = { length, frame: bytes.slice() }; // its own memory, not a pool slab
      return;
    }
    ctx.sendBytes(bytes);
  }

  private frameOf(
    kind: HandleKind,
    identity: Uint8Array,
    base: bigint,
    allocSize: number,
    bufferId: bigint,
    device: number,
    length: number,
    tag: number,
    seq: number,
    offset: number,
    event: Uint8Array | null,
  ): RgetFrame {
    return { type: FrameType.RGET, tag, seq, kind, identity, base, allocSize, offset, length, bufferId, deviceUuid: this.ctx.uuidOf(device), event };
  }

  /** `buf` by staging under a seq of its own, the reason counted (stats().stagingReasons). */
  private sendByStaging(buf: DeviceBuffer, tag: number, options: SendOptions, why: string): Promise<void> {
    const ctx = this.ctx;
    this.fallback.countReason(why);
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

  /**
   * FIN RESTAGE: the peer could not open our memory; its receive waits for
   * the same message by staging, under the same seq. If it cannot go (the
   * source went bad meanwhile), the send fails and the receiver learns why.
   */
  onFin(seq: number, status: FinStatus, message: string): boolean {
    if (status !== FinStatus.RESTAGE) return false;
    const ctx = this.ctx;
    const p = ctx.sends.get(seq);
    const restage = p?.restage;
    if (!p || !restage) throw new ProtocolError(`FIN RESTAGE for message ${seq}, which was not sent by RGET`, 'SMCUDA_BAD_FIN');
    p.restage = undefined;
    // Counted with the peer's reason (addresses left out, so that one cause is one key).
    this.fallback.countReason(
      `${p.path === 'rget' ? 'legacy' : 'descriptor'} key restaged, the peer could not open it: ${message.replace(/0x[0-9a-f]+/gi, '0x…')}`,
    );
    p.path = 'staging';
    try {
      this.fallback.resend(seq, restage.buf as DeviceBuffer, restage.stream as StreamHandle | undefined);
    } catch (err) {
      ctx.sends.fail(seq, err as Error);
      try {
        ctx.sendFin(seq, FinStatus.SENDER_FAILED, (err as Error).message);
      } catch {
        // the channel failed: the endpoint closes and the receiver learns it that way
      }
    }
    return true;
  }

  /** FD_OFFER, FD_POOL, FD_RELEASE: the descriptor side's. */
  onFrame(frame: Frame): void {
    this.fd.onFrame(frame);
  }

  // ---------------------------------------------------------------- receiver

  /**
   * The common case — the mapping is in the pool and the sender passed no
   * stream event — runs synchronously from the frame to the copy (copy). A
   * key to open, or an event to wait for, goes through prepare first.
   */
  receive(recv: PendingRecv, arrival: Arrival): void {
    const frame = arrival as RgetFrame;
    const kind = remoteKind(frame.kind);
    if (byDescriptor(kind) && this.fd.table === undefined) {
      throw new ProtocolError(`peer ${this.ctx.peerId} sent an RGET of ${kind} memory without both HELLOs announcing FD_MEMORY`, 'SMCUDA_BAD_FRAME');
    }
    if (refuseTooSmall(this.ctx, recv, frame)) return;
    const job: RgetCopy = {
      kind,
      identity: frame.identity,
      base: frame.base,
      size: frame.allocSize,
      bufferId: frame.bufferId,
      device: frame.deviceUuid,
      recv,
      frame,
      mapping: undefined,
      event: undefined,
      target: undefined,
      held: undefined,
      result: undefined,
    };
    job.mapping = lookupRemote(this.remote, job);
    if (job.mapping !== undefined) {
      holdFor(this.ctx, job);
      if (!frame.event) return this.copy(job);
    }
    this.prepare(job).catch((err: Error) => {
      job.held?.close();
      this.ctx.failArrival(recv, frame, err);
    });
  }

  /** Opens the key (unless the pool had it) and waits for the sender's stream event, then copies. */
  private async prepare(job: RgetCopy): Promise<void> {
    const { recv, frame } = job;
    const ctx = this.ctx;
    if (job.mapping === undefined) {
      try {
        // The pool checks the mapping's real extent before it keeps it
        // (cache/extent.ts): the peer's word for the size bounds no copy.
        job.mapping = await openRemote(this.remote, job);
        holdFor(ctx, job);
      } catch (err) {
        if (ctx.closed) return recv.reject(ctx.closedError());
        if (this.closeReason !== undefined) return recv.reject(this.closeReason); // the endpoint is closing
        // A legacy mapping smaller than the peer claims is a lie: refused. A
        // descriptor key restages instead, as before there was one path: its
        // import's extent is read from the ranges the driver names, and a
        // false refusal there must cost speed (staging), never the message.
        if ((err as { code?: string }).code === 'SMCUDA_BAD_EXTENT' && job.kind === 'legacy') {
          const bad = new ProtocolError(`RGET ${frame.seq}: ${(err as Error).message}`, 'SMCUDA_BAD_RGET');
          ctx.sendFin(frame.seq, FinStatus.REFUSED, bad.message);
          recv.reject(bad);
          return;
        }
        return this.restage(job, err as Error);
      }
    }
    if (frame.event) {
      // The data is valid once the sender's stream reaches its event. Wait for
      // it here, on the host, not with cuStreamWaitEvent: if the peer dies
      // meanwhile, no copy is queued behind an event that can never complete,
      // and the mapping can be released at once. The wait is the endpoint's
      // GpuEventQueue's: when the endpoint closes or loses the peer, it fails
      // the wait with the reason, and destroys the event (retired when the
      // receive lets go of it, remote-copy.ts) only once the native
      // completion thread has let go of it.
      if (this.closeReason !== undefined) return this.finish(job, this.closeReason);
      try {
        job.event = ctx.gpu().openPeerEvent(frame.event);
      } catch (err) {
        return this.finish(job, err as Error);
      }
      ctx.gpu().whenEvent(job.event, (err) => (err ? this.finish(job, err) : this.copy(job)));
      return;
    }
    this.copy(job);
  }

  /**
   * Could not open the key (even after evicting): the receive stays matched
   * and the sender resends the same message by staging (FIN RESTAGE).
   * Nothing is lost; a descriptor key's offer is forgotten on both sides.
   */
  private restage(job: RgetCopy, err: Error): void {
    const { recv, frame } = job;
    const ctx = this.ctx;
    debug('endpoint %s: cannot open RGET %d (%s): asking for it by staging', ctx.peerId, frame.seq, err.message);
    ctx.expectResend(frame.seq, recv);
    ctx.sendFin(frame.seq, FinStatus.RESTAGE, err.message);
    if (byDescriptor(job.kind)) this.fd.forget(job);
  }

  /** Queues the copy out of the peer's memory; its completion sends the FIN (finish). */
  private copy(job: RgetCopy): void {
    const { frame } = job;
    const mapping = job.mapping!;
    if (frame.offset + frame.length > mapping.size) {
      return this.finish(
        job,
        new ProtocolError(
          `RGET ${frame.seq} asks for bytes ${frame.offset}..${frame.offset + frame.length} of a ${mapping.size}-byte mapping`,
          'SMCUDA_BAD_RGET',
        ),
      );
    }
    launchRemoteCopy(this.ctx, job, mapping.ptr + BigInt(frame.offset), job.kind === 'legacy' ? 'rget' : 'rget-fd', (err) => this.finish(job, err));
  }

  /** The copy completed (or failed, or none was queued): FIN to the sender, the receive settles (remote-copy.ts). */
  private finish(job: RgetCopy, err: Error | undefined): void {
    finishRemoteCopy(this.ctx, this.fins, job, job.kind === 'legacy' ? 'rget' : 'rget-fd', err);
  }

  senderFailed(): boolean {
    return false;
  }

  close(reason: Error): void {
    this.closeReason = reason;
    this.fd.close(reason);
  }
}

function noop(): void {}
