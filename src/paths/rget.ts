/**
 * RGET: the receiver copies straight out of the sender's device memory,
 * mapped through a CUDA IPC handle. The sender announces the allocation
 * (handle, base, size, offset, length, buffer id, device UUID, and an IPC
 * event when a stream orders the data); the receiver opens the mapping
 * (cache/), copies with cuMemcpyAsync and answers FIN once the copy is
 * complete. Used once the negotiation is OK, whatever the size.
 *
 * The fast path belongs here and runs the same traced or not: a re-send
 * from the same buffer is the last encoding with a new tag and seq
 * (restampRget; a tracer is given the frame those bytes say), and a receive
 * whose mapping is pooled runs synchronously from the frame to the copy,
 * whose completion calls straight into the FIN — no promise between the GPU
 * and the answer.
 */
import type { MappingRequest } from '../../cache/index.js';
import { type DeviceBuffer, isDeviceBuffer, type MessageBuffer, pastItsAllocation } from '../buffers.js';
import type { StreamHandle } from '../cuda/driver.js';
import { PeerLostError, ProtocolError } from '../errors.js';
import type { ExportInfo } from '../exports.js';
import { debug } from '../debug.js';
import { encodeFrame, restampRget } from '../wire/codec.js';
import { type Frame, FinStatus, FrameType, type RgetFrame } from '../wire/frames.js';
import type { Arrival, DataPath, PathContext, PendingRecv, SendOptions } from './data-path.js';
import { refuseTooSmall } from './receive-target.js';
import { destroyEvent, finishRemoteCopy, launchRemoteCopy, type RemoteCopy } from './remote-copy.js';

/** Where an RGET whose peer cannot map it is sent again (the staging path). */
export interface Resender {
  /** Announces pending send `seq` again from `buf` (throws if it cannot: the caller fails it). */
  resend(seq: number, buf: DeviceBuffer, stream: StreamHandle | undefined): void;
}

/**
 * One RGET receive from the frame to its FIN, handed along as one object.
 * It is also the request the handle pool looks the mapping up by: one
 * allocation per message for both, as the request alone cost before.
 */
interface RgetCopy extends MappingRequest, RemoteCopy {
  frame: RgetFrame;
}

export class RgetPath implements DataPath {
  readonly kind = 'rget';
  readonly arrivals = [FrameType.RGET] as const;
  readonly controls = [] as const;
  /**
   * Receives waiting for the sender's IPC event before their copy: on peer
   * loss they stop waiting (the event may never complete) and reject.
   */
  private readonly waiting = new Map<PendingRecv, () => void>();
  private closeReason: Error | undefined;

  constructor(
    private readonly ctx: PathContext,
    private readonly fallback: Resender,
  ) {}

  /**
   * Legacy-IPC memory only (cuIpcGetMemHandle refuses VMM and pool memory:
   * those go by RGET_FD or staging). The export entry looked up here is the
   * one `send` uses next (the endpoint calls them back to back).
   */
  canSend(buf: MessageBuffer): boolean {
    if (!this.ctx.ipcOk || !isDeviceBuffer(buf)) return false;
    let exp: ExportInfo;
    try {
      exp = this.ctx.exports.lookup(buf.ptr);
    } catch {
      return true; // a bad pointer: send() looks it up again and rejects with the driver's error, as before
    }
    if (exp.kind !== 'legacy-ipc') return false;
    this.checked = exp;
    this.checkedPtr = buf.ptr;
    return true;
  }

  /** The entry canSend just looked up for `send` (one revalidation per message, not two). */
  private checked: ExportInfo | undefined;
  private checkedPtr = 0n;

  inlineBytes(): number {
    return 0;
  }

  // ------------------------------------------------------------------ sender

  send(buffer: MessageBuffer, tag: number, options: SendOptions): Promise<void> {
    const buf = buffer as DeviceBuffer;
    const ctx = this.ctx;
    const d = ctx.driver;
    const checked = this.checked;
    this.checked = undefined;
    const exp = checked !== undefined && this.checkedPtr === buf.ptr ? checked : ctx.exports.lookup(buf.ptr);
    const offset = Number(buf.ptr - exp.base);
    if (offset + buf.length > exp.size) {
      throw pastItsAllocation('buffer', buf.length, offset, exp.size - offset);
    }
    let event: bigint | undefined;
    let eventHandle: Uint8Array | null = null;
    if (options.stream !== undefined) {
      // The peer orders its copy after our stream's work through an IPC event.
      event = d.eventCreate({ interprocess: true, disableTiming: true });
      try {
        d.eventRecord(event, options.stream);
        eventHandle = d.ipcGetEventHandle(event);
      } catch (err) {
        destroyEvent(d, event); // a bogus stream must not leak the event
        throw err;
      }
    }
    const seq = ctx.nextSeq();
    const release = event === undefined ? noop : () => destroyEvent(d, event);
    const done = ctx.sends.pend(seq, tag, buf.length, 'rget', options.signal, release, { buf, stream: options.stream });
    try {
      this.announce(exp, buf.length, tag, seq, offset, eventHandle);
      ctx.flow.charge(0);
    } catch (err) {
      ctx.sends.fail(seq, err as Error); // releases the event; `done` rejects
    }
    return done;
  }

  private announce(exp: ExportInfo, length: number, tag: number, seq: number, offset: number, eventHandle: Uint8Array | null): void {
    const ctx = this.ctx;
    const last = exp.rget;
    let bytes: Uint8Array;
    if (eventHandle === null && last !== undefined && last.length === length) {
      // Re-sent from the same buffer: the last encoding with this tag and seq.
      bytes = restampRget(last.frame, tag, seq);
      if (ctx.tracer !== undefined) ctx.tracer.frame(ctx.peerId, 'send', this.frameOf(exp, length, tag, seq, offset, null));
    } else {
      const frame = this.frameOf(exp, length, tag, seq, offset, eventHandle);
      bytes = encodeFrame(frame, ctx.uuidNames);
      if (eventHandle === null) exp.rget = { length, frame: bytes.slice() }; // its own memory, not a pool slab
      ctx.tracer?.frame(ctx.peerId, 'send', frame);
    }
    ctx.sendBytes(bytes);
  }

  private frameOf(exp: ExportInfo, length: number, tag: number, seq: number, offset: number, event: Uint8Array | null): RgetFrame {
    return {
      type: FrameType.RGET,
      tag,
      seq,
      handle: exp.handle,
      base: exp.base,
      allocSize: exp.size,
      offset,
      length,
      bufferId: exp.bufferId,
      deviceUuid: this.ctx.uuidOf(exp.device),
      event,
    };
  }

  /** FIN RESTAGE: the peer could not map our memory; its receive waits for the same message by staging. */
  onFin(seq: number, status: FinStatus): boolean {
    return restageOnFin(this.ctx, this.fallback, seq, status, 'RGET');
  }

  // ---------------------------------------------------------------- receiver

  /**
   * The common case — the mapping is in the pool and the sender passed no
   * stream event — runs synchronously from the frame to the copy (copy). A
   * mapping to open, or an event to wait for, goes through prepare first.
   */
  receive(recv: PendingRecv, arrival: Arrival): void {
    const frame = arrival as RgetFrame;
    if (refuseTooSmall(this.ctx, recv, frame)) return;
    const job: RgetCopy = {
      deviceUuid: frame.deviceUuid,
      base: frame.base,
      size: frame.allocSize,
      handle: frame.handle,
      bufferId: frame.bufferId,
      recv,
      frame,
      mapping: undefined,
      event: undefined,
      result: undefined,
    };
    job.mapping = this.ctx.pool.lookup(job);
    if (job.mapping !== undefined && !frame.event) return this.copy(job);
    this.prepare(job).catch((err: Error) => this.ctx.failArrival(recv, frame, err));
  }

  /** Opens the mapping (unless the pool had it) and waits for the sender's stream event, then copies. */
  private async prepare(job: RgetCopy): Promise<void> {
    const { recv, frame } = job;
    const ctx = this.ctx;
    const d = ctx.driver;
    if (job.mapping === undefined) {
      try {
        // The pool checks the mapping's real extent before it keeps it
        // (cache/extent.ts): the peer's word for the size bounds no copy.
        job.mapping = await ctx.pool.acquire(job);
      } catch (err) {
        if (ctx.closed) return recv.reject(ctx.closedError());
        if ((err as { code?: string }).code === 'SMCUDA_BAD_EXTENT') {
          const bad = new ProtocolError(`RGET ${frame.seq}: ${(err as Error).message}`, 'SMCUDA_BAD_RGET');
          ctx.sendFin(frame.seq, FinStatus.REFUSED, bad.message);
          recv.reject(bad);
          return;
        }
        // Could not map it (even after evicting): the receive stays matched and
        // the sender resends the same message by staging. Nothing is lost.
        ctx.expectResend(frame.seq, recv);
        debug('endpoint %s: cannot map RGET %d (%s): asking for it by staging', ctx.peerId, frame.seq, (err as Error).message);
        ctx.sendFin(frame.seq, FinStatus.RESTAGE, (err as Error).message);
        return;
      }
    }
    if (frame.event) {
      // The data is valid once the sender's stream reaches its event. Wait for
      // it here, on the host, not with cuStreamWaitEvent: if the peer dies
      // meanwhile, no copy is queued behind an event that can never complete,
      // and the mapping can be closed at once.
      try {
        const event = d.ipcOpenEventHandle(frame.event);
        job.event = event;
        const abandoned = new Promise<'abandoned'>((resolve) => this.waiting.set(recv, () => resolve('abandoned')));
        const gpu = ctx.gpu();
        const peerDone = new Promise<void>((resolve, reject) => gpu.whenEvent(event, (err) => (err ? reject(err) : resolve())));
        const outcome = await Promise.race([peerDone, abandoned]);
        if (outcome === 'abandoned') throw this.closeReason ?? new PeerLostError(`lost peer ${ctx.peerId}`);
      } catch (err) {
        this.waiting.delete(recv);
        return this.finish(job, err as Error);
      }
      this.waiting.delete(recv);
    }
    this.copy(job);
  }

  /** Queues the copy out of the peer's memory; its completion sends the FIN (finish). */
  private copy(job: RgetCopy): void {
    const { frame } = job;
    const mapping = job.mapping!;
    if (frame.offset + frame.length > mapping.size) {
      return this.finish(job, new ProtocolError(`RGET ${frame.seq} asks for bytes ${frame.offset}..${frame.offset + frame.length} of a ${mapping.size}-byte mapping`, 'SMCUDA_BAD_RGET'));
    }
    launchRemoteCopy(this.ctx, job, mapping.ptr + BigInt(frame.offset), 'rget', (err) => this.finish(job, err));
  }

  /** The copy completed (or failed): FIN to the sender, the receive settles, the mapping is released. */
  private finish(job: RgetCopy, err: Error | undefined): void {
    finishRemoteCopy(this.ctx, job, 'rget', err);
  }

  onFrame(_frame: Frame): void {}

  senderFailed(): boolean {
    return false;
  }

  close(reason: Error): void {
    this.closeReason = reason;
    for (const abandon of this.waiting.values()) abandon();
    this.waiting.clear();
  }
}

function noop(): void {}

/**
 * FIN RESTAGE for a message sent by RGET or RGET_FD: it goes by staging
 * under the same seq (the peer's receive waits for it); if it cannot (the
 * source went bad meanwhile), the send fails and the receiver learns why.
 */
export function restageOnFin(ctx: PathContext, fallback: Resender, seq: number, status: FinStatus, sentBy: string): boolean {
  if (status !== FinStatus.RESTAGE) return false;
  const p = ctx.sends.get(seq);
  const restage = p?.restage;
  if (!p || !restage) throw new ProtocolError(`FIN RESTAGE for message ${seq}, which was not sent by ${sentBy}`, 'SMCUDA_BAD_FIN');
  p.restage = undefined;
  p.path = 'staging';
  try {
    fallback.resend(seq, restage.buf as DeviceBuffer, restage.stream as StreamHandle | undefined);
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
