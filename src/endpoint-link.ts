/**
 * The link to one peer that the endpoint and its data paths share: frames
 * out (encoded, traced), FINs and their batching, message seqs, the sends
 * waiting for FIN, backpressure, the per-path counters, the handle pool, the
 * GPU work, and whether the endpoint is closed. The paths see it as their
 * PathContext (RGET as its RgetLink), and each gets what it alone uses from
 * `parts` (createPaths). The endpoint owns the lifecycle: it reports each
 * negotiation transition (negotiationState) and sets `closedWith` and
 * `closeReason` when it closes.
 */
import { HandlePool } from '../cache/index.js';
import type { NegotiationState } from '../machines/index.js';
import type { ControlChannel } from './channel/channel.js';
import type { FdChannel, FdChannelHandlers, FdMessage } from './channel/fd-channel.js';
import type { CudaDriver } from './cuda/driver.js';
import { type CopyKernelStats, newDirection, newFdStats } from './endpoint-stats.js';
import { ClosedError, DescriptorError, PeerLostError, ProtocolError } from './errors.js';
import type { ExportTable } from './exports.js';
import { FinBatcher } from './fin-batcher.js';
import { FlowControl } from './flow-control.js';
import { GpuRuntime } from './gpu/gpu-runtime.js';
import type { GpuWork } from './gpu/gpu-work.js';
import type { ResolvedOptions } from './options.js';
import type { Arrival, PendingRecv } from './paths/data-path.js';
import type { PathParts } from './paths/index.js';
import type { DescriptorMemory, RgetLink } from './paths/rget-link.js';
import { PendingSends } from './paths/pending-sends.js';
import type { ProgressEngine } from './progress/engine.js';
import type { KeepAlive } from './progress/keep-alive.js';
import type { Watchdog } from './persistent/watchdog.js';
import type { Tracer } from './trace.js';
import { SegmentExchange } from './segment-exchange.js';
import { decodeFrame, decodeFrameType, encodeFrame } from './wire/codec.js';
import { Feature, FinStatus, type Frame, FrameType, type HelloFrame } from './wire/frames.js';
import { UuidNames } from './wire/uuid.js';
import { closeFdQuietly } from './cuda/close-fd.js';

/**
 * How long close() waits, at most, for copies in flight to complete so that
 * their FINs go before CLOSE (a copy the caller synchronized completes
 * within it; a long one still running is failed by the close).
 */
export const CLOSE_SETTLE_MS = 2;

/** What the Transport hands every endpoint. */
export interface EndpointContext {
  driver: CudaDriver;
  options: ResolvedOptions;
  /** This process's HELLO (id, device). */
  local: HelloFrame;
  /** What peers need to map local allocations, shared by the transport's endpoints. */
  exports: ExportTable;
  tracer?: Tracer;
  /** The transport's progress engine (it polls this endpoint's GPU completions). */
  progress?: ProgressEngine;
  /** The transport's watchdog over persistent transfers (an endpoint made without one makes its own). */
  watchdog?: Watchdog;
  /** The transport's GPU runtime (src/gpu/); an endpoint made without one makes its own. */
  gpu?: GpuRuntime;
  /** The transport's keep-alive: the endpoint's channel is ref'd only while something is pending (progress/keep-alive.ts). */
  keepAlive?: KeepAlive;
}

export class EndpointLink implements RgetLink {
  readonly driver: CudaDriver;
  private readonly opts: ResolvedOptions;
  readonly tracer: Tracer | undefined;
  readonly exports: ExportTable;
  readonly pool: HandlePool;
  /** Device UUIDs this endpoint's frames name, decoded once (wire/uuid.ts). */
  readonly uuidNames = new UuidNames();
  readonly sends: PendingSends;
  readonly sent = newDirection();
  readonly received = newDirection();
  /** Backpressure: what the peer holds unread of ours, and the sends waiting for room (flow-control.ts). */
  readonly flow: FlowControl;
  readonly fins: FinBatcher;
  /** Hot-path copy of `negotiation state === 'OK'` (negotiationState). */
  ipcOk = false;
  /** The negotiation may still end OK: not settled (OK or BAD) and IPC not off (negotiationState). */
  ipcPending = false;
  /** Memory by file descriptor with this peer: agreed, its counters and bounds (RGET's descriptor side). */
  readonly fd: DescriptorMemory;
  /** Both HELLOs announced Feature.DESCRIPTORS: a descriptor channel is (being) set up, and the rings travel on it. */
  readonly descriptorsAgreed: boolean;
  readonly segments: SegmentExchange;
  /** The descriptor channel, once attached (closed with the endpoint). */
  private fdChannel: FdChannel | undefined;
  /** The endpoint's failure (set by the endpoint): a peer that breaks the descriptor channel's rules fails it. */
  onProtocolError: ((err: Error) => void) | undefined;
  closedWith: Error | null | undefined; // undefined: open; null: closed cleanly
  /** What pending operations were rejected with when the endpoint closed. */
  closeReason: Error | undefined;
  /** Receives matched to a message that the sender announces again (an RGET we could not map, coming by staging). */
  readonly resends = new Map<number, PendingRecv>();
  /** What each data path alone uses, handed to it by createPaths (the link owns them). */
  readonly parts: PathParts;
  private readonly uuidByOrdinal = new Map<number, string>();
  private gpuWork: GpuWork | undefined;
  /** The GPU runtime this endpoint's GPU work belongs to: the transport's, or one of its own (closed with it). */
  readonly runtime: GpuRuntime;
  private readonly ownRuntime: boolean;
  private seq = 1;

  constructor(
    private readonly channel: ControlChannel,
    private readonly ctx: EndpointContext,
    readonly peerId: string,
    peerFeatures: number,
    /** The peer's device (its HELLO): one with this process's device is a same-GPU peer. */
    private readonly peerDeviceUuid = '',
  ) {
    const driver = (this.driver = ctx.driver);
    this.opts = ctx.options;
    this.ownRuntime = ctx.gpu === undefined;
    this.runtime = ctx.gpu ?? new GpuRuntime(driver, { engine: ctx.progress, spinUs: ctx.options.completionSpinUs });
    this.negotiationState('INIT');
    const tracer = (this.tracer = ctx.tracer);
    this.exports = ctx.exports;
    const open = () => this.closedWith === undefined && !this.channel.closed;
    this.descriptorsAgreed = ((ctx.local.features ?? 0) & peerFeatures & Feature.DESCRIPTORS) !== 0;
    this.segments = new SegmentExchange(this.descriptorsAgreed, peerId, (fd) => closeFdQuietly(driver, fd));
    const agreed = this.descriptorsAgreed && ((ctx.local.features ?? 0) & peerFeatures & Feature.FD_MEMORY) !== 0;
    this.fd = { agreed, stats: newFdStats(agreed), maxPeerDescriptors: this.opts.maxPeerDescriptors, offerTimeoutMs: this.opts.negotiation.checkTimeoutMs };
    this.fins = new FinBatcher(((ctx.local.features ?? 0) & peerFeatures & Feature.FINS) !== 0, (frame) => this.sendFrame(frame), open);
    this.flow = new FlowControl(
      this.opts.maxUnreadBytes,
      (consumed) => {
        if (!open()) return;
        try {
          this.sendFrame({ type: FrameType.CREDIT, consumed });
        } catch {
          // the channel failed: the endpoint closes
        }
      },
      this.opts.maxBufferedBytes,
    );
    this.sends = new PendingSends(peerId, this.sent, (seq) => this.sendFrame({ type: FrameType.CANCEL, seq }));
    this.pool = new HandlePool(driver, { ...this.opts.cache, onEvent: tracer ? (ev) => tracer.cache(peerId, ev) : undefined });
    this.parts = {
      eager: { sent: this.sent, deviceEagerLimit: this.opts.deviceEagerLimit, negotiationEagerLimit: this.opts.negotiationEagerLimit },
      staging: { segments: this.segments, options: this.opts.staging, failEndpoint: (err) => this.failEndpoint(err) },
      rget: { exports: this.exports, pool: this.pool, fins: this.fins, fd: this.fd },
    };
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  nextSeq(): number {
    return this.seq++;
  }

  gpu(): GpuWork {
    return (this.gpuWork ??= this.runtime.work(this.sameGpu()));
  }

  /**
   * Close, before CLOSE: copies whose GPU work completed settle now (within
   * CLOSE_SETTLE_MS), so their FINs leave first; then the FIN batch goes.
   */
  settleBeforeClose(): void {
    this.gpuWork?.settleCompleted(CLOSE_SETTLE_MS);
    this.fins.flush();
  }

  /** Copies and waits of the GPU work not settled yet (0 before it exists). */
  gpuOutstanding(): number {
    return this.gpuWork?.outstanding ?? 0;
  }

  /** stats().copyKernel: zero until the endpoint's GPU work exists. */
  copyKernelStats(): CopyKernelStats {
    return this.gpuWork?.copyKernelStats() ?? { launches: 0, copies: 0 };
  }

  /** This process's device when the peer runs on the same GPU (their HELLOs name one UUID); else undefined. */
  private sameGpu(): { device: number; uuid: string } | undefined {
    const uuid = this.ctx.local.deviceUuid;
    if (!uuid || uuid !== this.peerDeviceUuid) return undefined;
    try {
      const current = this.driver.currentDevice();
      return current >= 0 && this.uuidOf(current) === uuid ? { device: current, uuid } : undefined;
    } catch {
      return undefined;
    }
  }

  /** Keeps the hot-path copies of the negotiation's state (the endpoint calls it on each transition). */
  negotiationState(state: NegotiationState): void {
    this.ipcOk = state === 'OK';
    this.ipcPending = state !== 'OK' && state !== 'BAD' && this.opts.negotiation.ipc;
  }

  sendFrame(frame: Frame): Uint8Array {
    if (this.channel.closed) throw this.closedError();
    this.tracer?.frame(this.peerId, 'send', frame);
    const bytes = encodeFrame(frame, this.uuidNames);
    this.channel.send(bytes);
    return bytes;
  }

  sendBytes(bytes: Uint8Array): void {
    if (this.channel.closed) throw this.closedError();
    this.channel.send(bytes);
  }

  sendFin(seq: number, status: FinStatus, message: string): void {
    if (this.closedWith !== undefined || this.channel.closed) return;
    // The wire carries at most 4096 bytes of message (a long driver or nested error must not make the FIN itself fail).
    if (message.length > 1000) message = `${message.slice(0, 1000)}…`;
    this.sendFrame({ type: FrameType.FIN, seq, status, message });
  }

  uuidOf(ordinal: number): string {
    let uuid = this.uuidByOrdinal.get(ordinal);
    if (uuid === undefined) {
      uuid = this.driver.deviceInfo(ordinal).uuid;
      this.uuidByOrdinal.set(ordinal, uuid);
    }
    return uuid;
  }

  /** See PathContext.failArrival. */
  failArrival(recv: PendingRecv, frame: Arrival, err: Error): void {
    if (frame.type !== FrameType.EAGER) {
      try {
        this.sendFin(frame.seq, err instanceof ProtocolError ? FinStatus.REFUSED : FinStatus.FAILED, err.message);
      } catch {
        // the channel failed: the endpoint closes and the sender learns it that way
      }
    }
    recv.reject(err);
  }

  expectResend(seq: number, recv: PendingRecv): void {
    this.resends.set(seq, recv);
  }

  /**
   * The transport made the descriptor channel: the link starts it and routes
   * its messages: SEGMENT (sealed rings) to `segments`, FD_DESCRIPTOR to
   * whom `take` names (the data path that declares attachFd; dropped where
   * none takes them).
   */
  attachFd(channel: FdChannel, take: (channel: FdChannel) => FdChannelHandlers | undefined): void {
    if (this.closed || !this.descriptorsAgreed) return channel.close();
    const rget = take(channel);
    this.fdChannel = channel;
    this.segments.attach(channel);
    channel.start({
      message: (msg) => this.onFdMessage(msg, rget),
      close: (err) => {
        rget?.close?.(err);
        this.segments.down(err ?? new DescriptorError('SMCUDA_FD_CHANNEL', `the descriptor channel to ${this.peerId} closed`));
      },
    });
  }

  private failEndpoint(err: Error): void {
    this.onProtocolError?.(err);
  }

  /** The transport could not make the descriptor channel: no rings or staging with this peer. */
  descriptorsFailed(err: Error): void {
    this.segments.down(err);
  }

  private onFdMessage(msg: FdMessage, rget: FdChannelHandlers | undefined): void {
    let type: FrameType | undefined;
    try {
      type = decodeFrameType(msg.meta);
    } catch {
      type = undefined;
    }
    if (type !== FrameType.SEGMENT) {
      if (rget !== undefined) return rget.message(msg);
      if (msg.fd !== undefined) closeFdQuietly(this.driver, msg.fd); // unsolicited: closed at once
      return;
    }
    try {
      const f = decodeFrame(msg.meta);
      if (f.type !== FrameType.SEGMENT) return;
      if (msg.lost !== undefined) return this.segments.down(msg.lost); // its consumers learn it; rings already mapped stay
      if (msg.fd === undefined) throw new ProtocolError(`peer ${this.peerId} sent a SEGMENT without a descriptor`, 'SMCUDA_BAD_SEGMENT');
      this.segments.receive(f.kind, msg.fd, f.bytes);
    } catch (err) {
      if (msg.fd !== undefined && !(err instanceof ProtocolError && err.code === 'SMCUDA_BAD_SEGMENT')) closeFdQuietly(this.driver, msg.fd);
      this.onProtocolError?.(err instanceof Error ? err : new ProtocolError(String(err)));
    }
  }

  closedError(): Error {
    const why = this.closeReason;
    if (why instanceof PeerLostError || this.closedWith) return new PeerLostError(`endpoint to ${this.peerId} is closed: ${(why ?? this.closedWith)!.message}`);
    return new ClosedError(`endpoint to ${this.peerId} is closed${why ? `: ${why.message}` : ''}`);
  }

  /** The endpoint closed (its paths first): every mapping of the peer's memory closes, the GPU work stops. */
  close(): void {
    this.segments.close(this.closeReason ?? new ClosedError(`endpoint to ${this.peerId} is closed`));
    this.fdChannel?.close(); // the descriptor path closes it too where it has it; idempotent
    this.fdChannel = undefined;
    this.pool.close();
    // Waits on the peer's events fail with the close reason (GpuEventQueue owns them).
    this.gpuWork?.close(this.closeReason ?? this.closedError());
    if (this.ownRuntime) this.runtime.close(this.closeReason ?? this.closedError());
  }
}
