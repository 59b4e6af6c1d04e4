/**
 * One endpoint: this process's half of a connection to one peer. It matches
 * messages to receives (matching.ts), routes frames, and keeps the lifecycle;
 * the bytes move by data paths (src/paths/), asked in order per send:
 *
 *   host data                                                → EAGER (inline)
 *   device data ≤ deviceEagerLimit, IPC not OK, no stream    → EAGER (copied through the host)
 *   device data, negotiation OK                              → RGET (peer copies from an IPC mapping)
 *   device data, otherwise                                   → staging (pinned shared host ring)
 *
 * The first device send on an endpoint in INIT starts the negotiation; the
 * message itself does not wait for it (it goes by staging), so the hot path
 * never waits on, or even touches, the state machine: it reads `ipcOk`.
 */
import { EventEmitter } from 'node:events';
import type { HandlePool } from '../cache/index.js';
import type { NegotiationState } from '../machines/index.js';
import { checkMessageBuffer, isDeviceBuffer, type MessageBuffer } from './buffers.js';
import type { ControlChannel } from './channel/channel.js';
import type { FdChannel } from './channel/fd-channel.js';
import { copyBytes } from './channel/bytes.js';
import { ShmChannel } from './channel/shm-channel.js';
import { LEGACY_STREAM } from './cuda/driver.js';
import { assertHandle } from './cuda/validate.js';
import { debug } from './debug.js';
import { EndpointLink, type EndpointContext } from './endpoint-link.js';
import { NegotiationLink } from './endpoint-negotiation.js';
import type { DataPath as PathKind, EndpointStats } from './endpoint-stats.js';
import { ClosedError, PeerLostError, ProtocolError, SmcudaError } from './errors.js';
import { describeAllocation } from './exports.js';
import type { FlowStats } from './flow-control.js';
import { MatchQueues } from './matching.js';
import { StagingPath } from './paths/staging.js';
import { createPaths, type Arrival, type DataPath, type PendingRecv, type Received, type RecvOptions, type SendOptions } from './paths/index.js';
import { abortReason } from './paths/pending-sends.js';
import { RgetDecoder } from './wire/codec.js';
import { FinStatus, type Frame, FrameType, type HelloFrame, type NegotiationFrame } from './wire/frames.js';

export type { SendOptions, RecvOptions, Received };
export type { FlowStats, EndpointContext };

export interface EndpointEvents {
  /** The negotiation entered a state. */
  state: [state: NegotiationState, previous: NegotiationState];
  /** The endpoint closed; `error` is set when it closed because of a failure. */
  close: [error?: Error];
}

export class Endpoint extends EventEmitter<EndpointEvents> {
  readonly peerId: string;
  readonly peerPid: number;
  readonly peerDeviceUuid: string;

  /** The link to the peer the paths share: frames, FINs, seqs, pending sends, flow, counters, closed state. */
  private readonly link: EndpointLink;
  private readonly neg: NegotiationLink;
  private readonly matches = new MatchQueues<PendingRecv, Arrival>();
  private readonly paths: readonly DataPath[];
  /** The staging path, whose reasons stats() reports. */
  private readonly staging: StagingPath;
  /** The path whose arrival (or own control frame) each frame type is, by FrameType. */
  private readonly byArrival: (DataPath | undefined)[] = [];
  private readonly byControl: (DataPath | undefined)[] = [];
  private readonly byKind = {} as Record<PathKind, DataPath>;
  /** Decodes frames; an RGET like the last one is that one with a new tag and seq. */
  private readonly rgets = new RgetDecoder();

  constructor(
    private readonly channel: ControlChannel,
    ctx: EndpointContext,
    peer: HelloFrame,
  ) {
    super();
    this.peerId = peer.peerId;
    this.peerPid = peer.pid;
    this.peerDeviceUuid = peer.deviceUuid;
    const link = (this.link = new EndpointLink(channel, ctx, peer.peerId, peer.features ?? 0));
    this.neg = new NegotiationLink({
      driver: ctx.driver,
      localId: ctx.local.peerId,
      peerId: peer.peerId,
      options: ctx.options.negotiation,
      pool: link.pool,
      tracer: ctx.tracer,
      sendFrame: (frame) => link.sendFrame(frame),
      uuidOf: (ordinal) => link.uuidOf(ordinal),
      onState: (state, previous) => {
        link.ipcOk = state === 'OK';
        this.emit('state', state, previous);
      },
    });
    this.paths = createPaths(link);
    this.staging = this.paths.find((p): p is StagingPath => p instanceof StagingPath)!;
    for (const p of this.paths) {
      for (const k of p.counts ?? [p.kind]) this.byKind[k] = p;
      for (const t of p.arrivals) this.byArrival[t] = p;
      for (const t of p.controls) this.byControl[t] = p;
    }
    // What the channel may still buffer for the peer: the budget less what the peer's unmatched messages hold.
    channel.limitBuffered?.(() => link.flow.maxBufferedBytes - link.flow.held);
    channel.on('frame', this.onFrame);
    channel.on('close', this.onChannelClose);
  }

  // ---------------------------------------------------------------- public API

  /** The negotiation's current state: INIT, SENT, ACKING, ACKED, OK or BAD. */
  get state(): NegotiationState {
    return this.neg.state;
  }

  get closed(): boolean {
    return this.link.closed;
  }

  /**
   * Starts the IPC negotiation now, as the first device send would, and
   * resolves with its outcome (OK or BAD); at once if it has settled. Across
   * GPUs the negotiation's first probe open sets up peer access (2 ms per
   * side on 2xH200), and a first message sent meanwhile goes by staging,
   * whose set-up (pinning its ring: 6-9 ms) delays the negotiation further.
   * Called right after connecting, all of that happens before the first
   * message needs it: on 2xH200 a fresh pair's first 64 KiB message then
   * arrives 3.7 ms after its send instead of 32 ms (`smcuda bench --suite
   * first-send`, median of 5 runs). Rejects if the endpoint closes first.
   */
  negotiate(): Promise<NegotiationState> {
    if (this.link.closed) return Promise.reject(this.link.closedError());
    return new Promise((resolve, reject) => {
      const settled = (state: NegotiationState) => state === 'OK' || state === 'BAD';
      const onState = (state: NegotiationState) => {
        if (!settled(state)) return;
        this.off('close', onClose);
        this.off('state', onState);
        resolve(state);
      };
      const onClose = () => {
        this.off('state', onState);
        reject(this.link.closedError());
      };
      if (settled(this.neg.state)) return resolve(this.neg.state);
      this.on('state', onState);
      this.once('close', onClose);
      this.neg.gpuSend();
    });
  }

  /**
   * Sends one message. Resolves when the buffer may be reused: at once for
   * eager messages (the bytes were copied), on FIN for RGET and staging.
   * When the peer already holds `maxUnreadBytes` of unreceived messages, the
   * send first waits, in order, for the peer to receive (backpressure); it
   * rejects if the endpoint closes or the peer is lost meanwhile.
   */
  send(buffer: MessageBuffer, options: SendOptions = {}): Promise<void> {
    checkMessageBuffer('buffer', buffer);
    const tag = checkTag(options.tag);
    if (options.stream !== undefined) assertHandle('options.stream', options.stream);
    if (options.ready !== undefined && typeof options.ready !== 'boolean') throw new TypeError(`options.ready must be a boolean, got ${typeof options.ready}`);
    if (this.link.closed) return Promise.reject(this.link.closedError());
    if (options.signal?.aborted) return Promise.reject(abortReason(options.signal));
    let path = this.pathFor(buffer, options);
    if (
      options.stream === undefined &&
      options.ready !== true &&
      path.kind !== 'eager' && // EAGER's cuMemcpyDtoH is itself ordered after the legacy stream
      isDeviceBuffer(buffer) &&
      buffer.length > 0 &&
      !this.link.gpu().legacyStreamIdle()
    ) {
      // Work queued before this send on the legacy default stream is still in
      // flight (a pageable cuMemcpyHtoD returns before the DMA is done): the
      // message is ordered after it, as if sent with that stream.
      options = { ...options, stream: LEGACY_STREAM };
      path = this.pathFor(buffer, options);
    }
    if (!this.link.flow.mayGo(path.inlineBytes(buffer))) {
      // Its path may change while it waits (the negotiation may end meanwhile): asked again.
      const waiting = { inline: () => this.pathFor(buffer, options).inlineBytes(buffer), go: () => this.sendBy(this.pathFor(buffer, options), buffer, tag, options) };
      return this.link.flow.wait(waiting, options.signal, abortReason);
    }
    return this.sendBy(path, buffer, tag, options);
  }

  /** The first path that takes this message now. */
  private pathFor(buffer: MessageBuffer, options: SendOptions): DataPath {
    const paths = this.paths;
    for (let i = 0; i < paths.length; i++) if (paths[i]!.canSend(buffer, options)) return paths[i]!;
    throw new SmcudaError('SMCUDA_NO_PATH', `no data path takes this ${isDeviceBuffer(buffer) ? 'device' : 'host'} buffer`);
  }

  private sendBy(path: DataPath, buffer: MessageBuffer, tag: number, options: SendOptions): Promise<void> {
    try {
      if (isDeviceBuffer(buffer)) this.neg.gpuSend();
      return path.send(buffer, tag, options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Receives the next message with `tag` (MPI order). */
  recv(options: RecvOptions = {}): Promise<Received> {
    const tag = checkTag(options.tag);
    if (options.into !== undefined) checkMessageBuffer('options.into', options.into);
    if (options.stream !== undefined) assertHandle('options.stream', options.stream);
    if (this.link.closed) return Promise.reject(this.link.closedError());
    if (options.signal?.aborted) return Promise.reject(abortReason(options.signal));
    return new Promise<Received>((resolve, reject) => {
      const recv: PendingRecv = { tag, into: options.into, stream: options.stream, resolve, reject, cleanup: noop };
      const signal = options.signal;
      if (signal) {
        const onAbort = () => {
          // Only a receive that has not matched can be withdrawn; a matched one completes.
          if (this.matches.unpost(tag, recv)) reject(abortReason(signal));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        recv.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      const arrival = this.matches.post(tag, recv);
      if (arrival) this.deliver(recv, arrival);
    });
  }

  /** Counters and the negotiation record (plain data; safe to JSON.stringify). */
  stats(): EndpointStats & { cache: ReturnType<HandlePool['stats']>; flow: FlowStats } {
    const rec = this.neg.record;
    return {
      peerId: this.peerId,
      control: {
        channel: this.channel.label,
        ringOut: this.channel instanceof ShmChannel && this.channel.ringOut,
        ringIn: this.channel instanceof ShmChannel && this.channel.ringIn,
      },
      negotiation: { ...rec, path: [...rec.path], state: this.neg.state },
      sent: structuredClone(this.link.sent),
      received: structuredClone(this.link.received),
      stagingReasons: { ...this.staging.reasons },
      fd: { ...this.link.fd.stats },
      cache: this.link.pool.stats(),
      flow: this.link.flow.stats(this.matches.unexpectedCount),
    };
  }

  /**
   * Tells the peer to drop its mapping of a local allocation (call it before
   * freeing device memory that was sent by RGET, so the memory is really freed).
   */
  invalidate(ptr: bigint): void {
    this.invalidateAllocation(describeAllocation(this.link.driver, ptr));
  }

  /** @internal INVALIDATE for an allocation already described (Transport.free describes it once for all endpoints). */
  invalidateAllocation(alloc: { base: bigint; bufferId: bigint; device: number }): void {
    if (this.link.closed) return;
    this.link.sendFrame({ type: FrameType.INVALIDATE, deviceUuid: this.link.uuidOf(alloc.device), base: alloc.base, bufferId: alloc.bufferId });
  }

  /** @internal The transport made the descriptor channel to this peer (docs/protocol.md, "File-descriptor memory"). */
  attachFdChannel(channel: FdChannel): void {
    const taker = this.link.closed ? undefined : this.paths.find((p) => p.attachFd !== undefined);
    if (taker === undefined) return channel.close();
    taker.attachFd!(channel);
  }

  /** Orderly close: tells the peer, rejects what is pending, releases every mapping. */
  close(reason = 'closed by the application'): void {
    if (this.link.closed) return;
    try {
      this.link.fins.flush(); // receives already resolved: their senders learn it before CLOSE
      if (!this.channel.closed) this.link.sendFrame({ type: FrameType.CLOSE, reason });
    } catch {
      // the channel failed meanwhile: closing anyway
    }
    this.shutdown(null, new ClosedError(`endpoint to ${this.peerId} was closed: ${reason}`), true);
    this.channel.close();
  }

  // ---------------------------------------------------------- frame handling

  /** `transient`: `bytes` is a view of the channel's ring, gone after this call (ControlChannel). */
  private readonly onFrame = (bytes: Uint8Array, transient?: boolean): void => {
    if (this.link.closed) return;
    let frame: Frame;
    try {
      frame = this.rgets.decode(bytes, this.link.uuidNames);
      // EAGER data is a view of the frame (decodeFrame), and may wait in the
      // unexpected queue: its own copy. Nothing else keeps the frame's bytes.
      if (transient === true && frame.type === FrameType.EAGER) frame = { ...frame, data: copyBytes(frame.data) };
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
      return;
    }
    this.link.tracer?.frame(this.peerId, 'recv', frame);
    try {
      this.dispatch(frame);
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
    }
  };

  private dispatch(frame: Frame): void {
    const path = this.byArrival[frame.type];
    if (path !== undefined) {
      const arrival = frame as Arrival;
      const waiting = this.link.resends.size > 0 ? this.link.resends.get(arrival.seq) : undefined;
      if (waiting) {
        // announced again (an RGET we could not map, now by staging): already matched
        this.link.resends.delete(arrival.seq);
        return this.receiveOn(path, waiting, arrival);
      }
      // Counted before it is queued: past maxBufferedBytes the endpoint fails (PeerLimitError) and nothing is kept.
      this.link.flow.arrived(arrival.type === FrameType.EAGER ? arrival.data.byteLength : 0);
      const recv = this.matches.arrive(arrival.tag, arrival);
      if (recv) this.deliver(recv, arrival);
      return;
    }
    const control = this.byControl[frame.type];
    if (control !== undefined) return control.onFrame(frame);
    switch (frame.type) {
      case FrameType.FIN:
        if (frame.status === FinStatus.SENDER_FAILED) return this.onSenderFailed(frame.seq, frame.message);
        return this.onFin(frame.seq, frame.status, frame.message);
      case FrameType.FINS:
        if (!this.link.fins.enabled) throw new ProtocolError(`peer ${this.peerId} sent FINS without both HELLOs announcing it`);
        for (const seq of frame.seqs) this.onFin(seq, FinStatus.OK, '');
        return;
      case FrameType.CANCEL:
        return this.onCancel(frame.seq);
      case FrameType.CREDIT:
        return this.link.flow.credit(frame.consumed);
      case FrameType.INVALIDATE:
        this.link.pool.invalidate(frame.deviceUuid, frame.base, frame.bufferId);
        return;
      case FrameType.CLOSE:
        this.shutdown(null, new PeerLostError(`peer ${this.peerId} closed the endpoint: ${frame.reason}`), true);
        this.channel.close();
        return;
      case FrameType.IPC_REQ:
      case FrameType.IPC_ACK:
      case FrameType.IPC_NOTREADY:
      case FrameType.IPC_CONFIRM:
      case FrameType.IPC_ABORT:
        return this.neg.receive(frame as NegotiationFrame);
      case FrameType.HELLO:
      case FrameType.PROOF:
        throw new ProtocolError(`peer ${this.peerId} sent a handshake frame (${FrameType[frame.type]}) after the handshake`);
      case FrameType.RING_OFFER:
      case FrameType.RING_SWITCH:
      case FrameType.DOORBELL:
      case FrameType.SPILL:
        // ShmChannel consumes these; here they come from a peer that did not announce rings in its HELLO
        throw new ProtocolError(`peer ${this.peerId} sent a channel-layer ${FrameType[frame.type]} frame without announcing control rings`);
      default:
        throw new ProtocolError(`peer ${this.peerId} sent a ${FrameType[frame.type]} frame that no data path of this endpoint handles`);
    }
  }

  /** A posted receive met its message: it leaves the unexpected queue (flow control) and goes to its path. */
  private deliver(recv: PendingRecv, frame: Arrival): void {
    recv.cleanup();
    this.link.flow.received(frame.type === FrameType.EAGER ? frame.data.byteLength : 0);
    this.receiveOn(this.byArrival[frame.type]!, recv, frame);
  }

  private receiveOn(path: DataPath, recv: PendingRecv, frame: Arrival): void {
    try {
      path.receive(recv, frame);
    } catch (err) {
      this.link.failArrival(recv, frame, err as Error);
    }
  }

  private onFin(seq: number, status: FinStatus, message: string): void {
    const p = this.link.sends.get(seq);
    if (!p) throw new ProtocolError(`FIN for message ${seq}, which is not pending`, 'SMCUDA_BAD_FIN');
    if (status !== FinStatus.OK && this.byKind[p.path].onFin(seq, status, message)) return;
    if (status === FinStatus.RESTAGE) throw new ProtocolError(`FIN RESTAGE for message ${seq}, which was not sent by RGET`, 'SMCUDA_BAD_FIN');
    this.link.sends.settle(p, status, message);
  }

  /** Receiver: the sender of message `seq` could not supply it (FIN SENDER_FAILED). */
  private onSenderFailed(seq: number, message: string): void {
    const err = new SmcudaError('SMCUDA_SENDER_FAILED', `peer ${this.peerId} could not send message ${seq}: ${message}; the message is lost, the endpoint stays open`);
    for (const path of this.paths) if (path.senderFailed(seq, err)) return;
    const waiting = this.link.resends.get(seq);
    if (waiting) {
      this.link.resends.delete(seq);
      return waiting.reject(err);
    }
    // Not matched yet: the message is withdrawn, as a cancelled one is. Anything
    // else (already failed here, or unknown) needs no answer.
    this.withdraw(seq);
  }

  private onCancel(seq: number): void {
    // Withdraw the message if no receive has matched it yet; otherwise the
    // transfer completes and its own FIN answers the sender.
    if (this.withdraw(seq)) this.link.sendFin(seq, FinStatus.CANCELLED, 'cancelled by the sender');
  }

  private withdraw(seq: number): boolean {
    const withdrawn = this.matches.withdrawArrival((a) => a.seq === seq);
    if (withdrawn) this.link.flow.received(withdrawn.type === FrameType.EAGER ? withdrawn.data.byteLength : 0);
    return withdrawn !== undefined;
  }

  // ---------------------------------------------------------------- plumbing

  private readonly onChannelClose = (error?: Error): void => {
    if (this.link.closed) return;
    // No CLOSE frame came first: the peer is lost. 'close' gives the channel's error, or (a killed
    // peer's socket just ends) PeerLostError: never nothing.
    const lost = new PeerLostError(`lost peer ${this.peerId}${error ? `: ${error.message}` : ' (channel closed without CLOSE)'}`, { cause: error });
    this.shutdown(error ?? lost, lost);
  };

  /** A failure on this endpoint only (bad frame, protocol violation): close it. */
  private fail(err: Error): void {
    if (this.link.closed) return;
    this.shutdown(err, err);
    this.channel.close();
  }

  /**
   * Rejects everything pending with `reason`, releases mappings, rings and GPU
   * resources. `orderly`: a close either side asked for, not a failure.
   */
  private shutdown(error: Error | null, reason: Error, orderly = false): void {
    debug('endpoint %s: closing (%s): %s', this.peerId, orderly ? 'orderly' : 'failure', reason.message);
    this.link.closedWith = error;
    this.link.closeReason = reason;
    this.link.ipcOk = false;
    // An orderly close (ours, or the peer's CLOSE) leaves the negotiation's
    // outcome as it was; a failure or a lost peer ends it BAD.
    this.neg.stop(orderly);
    this.link.sends.close(reason);
    this.link.flow.close(reason);
    const { posted } = this.matches.drain();
    posted.push(...this.link.resends.values());
    this.link.resends.clear();
    for (const r of posted) {
      r.cleanup();
      r.reject(reason);
    }
    for (const path of this.paths) path.close(reason);
    this.link.close();
    this.channel.off('frame', this.onFrame);
    this.emit('close', error ?? undefined);
  }
}

function checkTag(tag: unknown): number {
  if (tag === undefined) return 0;
  if (typeof tag !== 'number' || !Number.isInteger(tag) || tag < 0 || tag > 0xffffffff) {
    throw new RangeError(`tag must be an integer between 0 and 2^32-1, got ${String(tag)}`);
  }
  return tag;
}

function noop(): void {}
