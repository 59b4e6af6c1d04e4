/**
 * EAGER: the bytes travel inline in the control frame. Host data always;
 * device data when the endpoint is not (yet) using IPC, the message is at
 * most `deviceEagerLimit` bytes (`negotiationEagerLimit` while the
 * negotiation has not settled) and no stream orders it (one synchronous
 * device→host copy on the sender, host→device on the receiver). A send
 * resolves at once: the bytes were copied.
 *
 * Where nothing can be shared by memory with the peer (no descriptor
 * channel: attach() without one, or its set-up failed; docs/reliability.md,
 * "Trust"), the staging path hands its messages here, of any size: a ring
 * could reach the peer only as a descriptor. A send with a stream then waits
 * for that stream first.
 */
import { byteLength, isDeviceBuffer, hostBytes, type MessageBuffer } from '../buffers.js';
import { count, type DirectionCounters } from '../endpoint-stats.js';
import { type Frame, FrameType, type EagerFrame } from '../wire/frames.js';
import type { Arrival, DataPath, PathContext, PendingRecv, SendOptions } from './data-path.js';
import { receiveTarget } from './receive-target.js';
import { checkStagedSource } from './staging-ring.js';

/** What EAGER alone uses, handed to its constructor (createPaths). */
export interface EagerParts {
  /** Sent messages by path (stats().sent): an EAGER send is counted when sent, having no FIN. */
  readonly sent: DirectionCounters;
  /** options.deviceEagerLimit: device messages up to this size go inline while IPC is not OK. */
  readonly deviceEagerLimit: number;
  /** options.negotiationEagerLimit: device messages up to this size go inline while the negotiation may still end OK. */
  readonly negotiationEagerLimit: number;
}

export class EagerPath implements DataPath {
  readonly kind = 'eager';
  readonly arrivals = [FrameType.EAGER] as const;
  readonly controls = [] as const;

  private readonly sent: DirectionCounters;
  private readonly deviceEagerLimit: number;
  private readonly negotiationEagerLimit: number;

  constructor(
    private readonly ctx: PathContext,
    own: EagerParts,
  ) {
    this.sent = own.sent;
    this.deviceEagerLimit = own.deviceEagerLimit;
    this.negotiationEagerLimit = own.negotiationEagerLimit;
  }

  canSend(buf: MessageBuffer, options: SendOptions): boolean {
    if (!isDeviceBuffer(buf)) return true;
    // Small and the endpoint not (yet) using IPC: one synchronous device→host
    // copy, inline in the frame. Once IPC is OK even small messages go by RGET:
    // one device copy with a polled completion beats two synchronous host
    // copies (a shorter 8 B half round trip, measured on 2×H200).
    // While the negotiation may still end OK, a larger one goes inline too
    // rather than wait for it (DEFAULT_NEGOTIATION_EAGER_LIMIT says why).
    const n = buf.length;
    if (n === 0) return true;
    const ctx = this.ctx;
    return !ctx.ipcOk && options.stream === undefined && (n <= this.deviceEagerLimit || (ctx.ipcPending && n <= this.negotiationEagerLimit));
  }

  inlineBytes(buf: MessageBuffer): number {
    return byteLength(buf);
  }

  send(buf: MessageBuffer, tag: number, options?: SendOptions): Promise<void> {
    const ctx = this.ctx;
    let data: Uint8Array;
    let fromDevice = false;
    if (isDeviceBuffer(buf)) {
      if (options?.stream !== undefined && buf.length > 0) ctx.gpu().synchronize(options.stream); // the data is what the stream's work left
      // Above deviceEagerLimit (only while negotiating): the staging path's check, so a bad source fails as it would there.
      if (buf.length > this.deviceEagerLimit) checkStagedSource(ctx.driver, buf);
      data = new Uint8Array(buf.length);
      if (buf.length > 0) ctx.driver.memcpyDtoH(data, buf.ptr);
      fromDevice = true;
    } else {
      data = hostBytes(buf);
    }
    ctx.sendFrame({ type: FrameType.EAGER, tag, seq: ctx.nextSeq(), fromDevice, data });
    ctx.flow.charge(data.byteLength);
    count(this.sent, 'eager', data.byteLength);
    return Promise.resolve();
  }

  receive(recv: PendingRecv, arrival: Arrival): void {
    const frame = arrival as EagerFrame;
    const ctx = this.ctx;
    const n = frame.data.byteLength;
    count(ctx.received, 'eager', n);
    // A new buffer goes on the device for device data where there is one (frame.data may be a view of a larger receive buffer: always copied).
    const data = receiveTarget(ctx.driver, recv.into, n, recv.into === undefined && frame.fromDevice && n > 0 && ctx.driver.isReady());
    if (isDeviceBuffer(data)) {
      if (n > 0) ctx.driver.memcpyHtoD(data.ptr, frame.data);
    } else {
      data.set(frame.data);
    }
    recv.resolve({ tag: frame.tag, length: n, path: 'eager', fromDevice: frame.fromDevice, data });
  }

  onFrame(_frame: Frame): void {}

  onFin(): boolean {
    return false;
  }

  senderFailed(): boolean {
    return false;
  }

  close(): void {}
}
