/**
 * One endpoint: this process's half of a connection to one peer.
 *
 * It owns the control channel, the IPC negotiation actor (machines/), the
 * pool of opened peer handles (cache/), its GPU stream and events, and the
 * staging rings. send() and recv() pick a data path per message:
 *
 *   host data                                                → EAGER (inline)
 *   device data, negotiation OK                              → RGET (peer copies from an IPC mapping)
 *   device data ≤ deviceEagerLimit, not OK, no stream        → EAGER (copied through the host)
 *   device data, otherwise                                   → staging (pinned shared host ring)
 *
 * The first device send on an endpoint in INIT starts the negotiation; the
 * message itself does not wait for it (it goes by staging), so the hot path
 * never waits on, or even touches, the state machine: it reads `ipcOk`.
 */
import { EventEmitter } from 'node:events';
import { HandlePool, type Mapping } from '../cache/index.js';
import { createNegotiator, type Negotiator, type NegotiationState } from '../machines/index.js';
import { byteLength, type DeviceBuffer, type MessageBuffer, checkMessageBuffer, hostBytes, isDeviceBuffer } from './buffers.js';
import type { ControlChannel } from './channel/channel.js';
import { copyBytes } from './channel/bytes.js';
import { ShmChannel } from './channel/shm-channel.js';
import type { CudaDriver, StreamHandle } from './cuda/driver.js';
import { assertHandle } from './cuda/validate.js';
import { count, type DataPath, type EndpointStats, newDirection, type NegotiationRecord } from './endpoint-stats.js';
import { ClosedError, PeerLostError, ProtocolError, SmcudaError, TruncationError } from './errors.js';
import { MatchQueues } from './matching.js';
import type { ResolvedOptions } from './options.js';
import { checkStagedSource, chunkCount, PeerRing, type StagedRecv, type StagedSend, StagingRing } from './staging.js';
import { encodeFrame, restampRget, RgetDecoder } from './wire/codec.js';
import { UuidNames } from './wire/uuid.js';
import {
  type EagerFrame,
  Feature,
  FinStatus,
  type Frame,
  FrameType,
  type HelloFrame,
  type NegotiationFrame,
  type RgetFrame,
  MAX_FINS,
  type StageBeginFrame,
} from './wire/frames.js';
import { debug } from './debug.js';
import { describeAllocation, type ExportTable } from './exports.js';
import { FlowControl } from './flow-control.js';
import { GpuWork } from './gpu-work.js';
import type { ProgressEngine } from './progress/engine.js';
import type { Tracer } from './trace.js';
import { newSegmentName } from './segment-owner.js';
import { ExportedProbe, verifyPeerProbe } from './ipc-probe.js';

export interface SendOptions {
  /** Message tag (u32). Messages with one tag on one endpoint are never overtaken. Default 0. */
  tag?: number;
  /**
   * The data is valid once the work queued on this stream so far is done.
   * Without it, the data must already be on the device when send() is called:
   * note that cuMemcpyHtoD from pageable memory and cuMemsetD8 may return
   * before the device has the bytes (synchronize their stream, or pass it here).
   */
  stream?: StreamHandle;
  /** Cancels the send if the peer has not matched it yet. */
  signal?: AbortSignal;
}

export interface RecvOptions {
  tag?: number;
  /** Where to put the message (host or device); must be at least as long. Default: a new buffer. */
  into?: MessageBuffer;
  /** The data is valid once this stream reaches the copy (the recv may resolve before). */
  stream?: StreamHandle;
  /** Cancels the receive if no message has matched it yet. */
  signal?: AbortSignal;
}

export interface Received {
  tag: number;
  length: number;
  path: DataPath;
  /** Whether the sender's buffer was device memory. */
  fromDevice: boolean;
  /**
   * `into` when given (a view of exactly `length` bytes for host buffers);
   * otherwise host bytes, or — for device messages where this process has a
   * device — a new device allocation owned by the caller (free it with
   * `driver.memFree(data.ptr)`).
   */
  data: Uint8Array | DeviceBuffer;
}

export interface EndpointEvents {
  /** The negotiation entered a state. */
  state: [state: NegotiationState, previous: NegotiationState];
  /** The endpoint closed; `error` is set when it closed because of a failure. */
  close: [error?: Error];
}

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
}

interface PendingSend {
  seq: number;
  tag: number;
  length: number;
  path: DataPath;
  resolve: () => void;
  reject: (err: Error) => void;
  /** Called once the send settles, whatever the outcome (frees events, listeners). */
  cleanup: () => void;
  cancelRequested: boolean;
  signal: AbortSignal | undefined;
  /**
   * RGET sends: what to announce again by staging if the peer cannot map it
   * (plain fields, not a closure: this is made for every send).
   */
  restage?: { buf: DeviceBuffer; stream: StreamHandle | undefined };
}

interface PendingRecv {
  tag: number;
  into: MessageBuffer | undefined;
  stream: StreamHandle | undefined;
  resolve: (r: Received) => void;
  reject: (err: Error) => void;
  cleanup: () => void;
}

type Arrival = EagerFrame | RgetFrame | StageBeginFrame;

/** What this endpoint holds for its peer and the peer for it (backpressure; see options.maxUnreadBytes). */
export interface FlowStats {
  maxUnreadBytes: number;
  /** Bytes sent (inline data + 64 per message) that the peer has not reported received. */
  unreadBytes: number;
  /** Sends waiting for the peer to receive. */
  waitingSends: number;
  /** Messages of the peer's that arrived here and wait for a receive. */
  unexpectedMessages: number;
}

/** A staged receive waiting for, or using, this direction's ring. */
interface StagedRecvJob extends StagedRecv {
  recv: PendingRecv;
  /** Where the bytes go: a device pointer or host bytes. */
  dst: bigint | Uint8Array;
  result: Received;
  /** Copies out of the ring still in progress. */
  inFlight: number;
  failed: boolean;
}

export class Endpoint extends EventEmitter<EndpointEvents> {
  readonly peerId: string;
  readonly peerPid: number;
  readonly peerDeviceUuid: string;

  private readonly driver: CudaDriver;
  private readonly opts: ResolvedOptions;
  private readonly negotiator: Negotiator;
  private readonly pool: HandlePool;
  private readonly matches = new MatchQueues<PendingRecv, Arrival>();
  private readonly pendingSends = new Map<number, PendingSend>();
  private readonly stagedSends = new Map<number, StagedSend>();
  private readonly stagedRecvQueue: StagedRecvJob[] = [];
  private activeStagedRecv: StagedRecvJob | undefined;
  private ring: StagingRing | undefined;
  private peerRing: PeerRing | undefined;
  private gpuWork: GpuWork | undefined;
  /**
   * RGET receives waiting for the sender's IPC event before their copy: on
   * peer loss they stop waiting (the event may never complete) and reject.
   */
  private readonly activeRgets = new Map<PendingRecv, () => void>();
  /** Receives matched to an RGET we could not map, waiting for the same message by staging. */
  private readonly restaging = new Map<number, PendingRecv>();
  /** Staged receives that failed: chunks still in flight for them are dropped. */
  private readonly failedStaged = new Set<number>();
  private nextSeq = 1;
  private closedWith: Error | null | undefined; // undefined: open; null: closed cleanly
  /** What pending operations were rejected with when the endpoint closed. */
  private closeReason: Error | undefined;
  private readonly sent = newDirection();
  private readonly received = newDirection();
  private readonly negotiation: NegotiationRecord = { state: 'INIT', path: ['INIT'], tries: 0 };
  private negotiationStartedAt = 0;
  private readonly uuidByOrdinal = new Map<number, string>();
  /** My allocation the peer opens during the negotiation, to prove IPC works. */
  private probe: ExportedProbe | undefined;
  /** Hot-path copy of `negotiator.state === 'OK'`. */
  private ipcOk = false;
  private readonly tracer: Tracer | undefined;
  /** Both HELLOs announced Feature.FINS: FIN OKs of one burst go out as one FINS frame. */
  private readonly fins: boolean;
  /** FIN OKs waiting for the end of the current synchronous run (flushFins). */
  private finsOut: number[] = [];
  /** Device UUIDs this endpoint's frames name, decoded once (wire/uuid.ts). */
  private readonly uuidNames = new UuidNames();
  /** Decodes frames; an RGET like the last one is that one with a new tag and seq. */
  private readonly rgets = new RgetDecoder();
  /** Backpressure: what the peer holds unread of ours, and the sends waiting for room (flow-control.ts). */
  private readonly flow: FlowControl;

  constructor(
    private readonly channel: ControlChannel,
    private readonly ctx: EndpointContext,
    peer: HelloFrame,
  ) {
    super();
    this.driver = ctx.driver;
    this.opts = ctx.options;
    this.tracer = ctx.tracer;
    this.peerId = peer.peerId;
    this.peerPid = peer.pid;
    this.peerDeviceUuid = peer.deviceUuid;
    this.fins = ((ctx.local.features ?? 0) & (peer.features ?? 0) & Feature.FINS) !== 0;
    this.flow = new FlowControl(this.opts.maxUnreadBytes, (consumed) => {
      if (this.closedWith !== undefined || this.channel.closed) return;
      try {
        this.sendFrame({ type: FrameType.CREDIT, consumed });
      } catch {
        // the channel failed: the endpoint closes
      }
    });
    this.pool = new HandlePool(this.driver, {
      ...this.opts.cache,
      onEvent: this.tracer ? (ev) => this.tracer!.cache(this.peerId, ev) : undefined,
    });
    this.negotiator = createNegotiator({
      localId: ctx.local.peerId,
      peerId: peer.peerId,
      options: this.opts.negotiation,
      send: (frame) => this.sendFrame(frame),
      checkReady: async () => {
        const ready = this.driver.isReady();
        return { ready, deviceUuid: this.localUuid(), probe: ready ? this.ownProbe() : undefined };
      },
      checkPeerAccess: async (peerUuid) => this.canAccessPeer(peerUuid),
      // Through the pool: the first real message finds the peer's context mapped.
      openProbe: (peerUuid, probe) => verifyPeerProbe(this.driver, this.pool, probe, peerUuid),
      onStateChange: (state, previous, info) => this.onNegotiationState(state, previous, info),
    });
    channel.on('frame', this.onFrame);
    channel.on('close', this.onChannelClose);
  }

  // ---------------------------------------------------------------- public API

  /** The negotiation's current state: INIT, SENT, ACKING, ACKED, OK or BAD. */
  get state(): NegotiationState {
    return this.negotiator.state;
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
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
    if (this.closedWith !== undefined) return Promise.reject(this.closedError());
    if (options.signal?.aborted) return Promise.reject(abortReason(options.signal));
    if (!this.flow.mayGo(this.inlineBytes(buffer, options))) {
      return this.flow.wait({ inline: () => this.inlineBytes(buffer, options), go: () => this.sendNow(buffer, tag, options) }, options.signal, abortReason);
    }
    return this.sendNow(buffer, tag, options);
  }

  private sendNow(buffer: MessageBuffer, tag: number, options: SendOptions): Promise<void> {
    try {
      if (!isDeviceBuffer(buffer)) {
        const data = hostBytes(buffer);
        this.sendFrame({ type: FrameType.EAGER, tag, seq: this.nextSeq++, fromDevice: false, data });
        this.flow.charge(data.byteLength);
        count(this.sent, 'eager', data.byteLength);
        return Promise.resolve();
      }
      return this.sendDevice(buffer, tag, options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  // ------------------------------------------------------------ backpressure

  /** Whether a device send goes inline (EAGER): the rule sendDevice applies. */
  private deviceEager(length: number, options: SendOptions): boolean {
    return length === 0 || (!this.ipcOk && length <= this.opts.deviceEagerLimit && options.stream === undefined);
  }

  /** The bytes a message would carry inline if sent now (what it weighs in the peer's window). */
  private inlineBytes(buffer: MessageBuffer, options: SendOptions): number {
    if (!isDeviceBuffer(buffer)) return byteLength(buffer);
    return this.deviceEager(buffer.length, options) ? buffer.length : 0;
  }

  /** Receiver: one of the peer's messages left the unexpected queue (matched or withdrawn). */
  private consumed(frame: Arrival): void {
    this.flow.received(frame.type === FrameType.EAGER ? frame.data.byteLength : 0);
  }

  /** Receives the next message with `tag` (MPI order). */
  recv(options: RecvOptions = {}): Promise<Received> {
    const tag = checkTag(options.tag);
    if (options.into !== undefined) checkMessageBuffer('options.into', options.into);
    if (options.stream !== undefined) assertHandle('options.stream', options.stream);
    if (this.closedWith !== undefined) return Promise.reject(this.closedError());
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
    return {
      peerId: this.peerId,
      control: {
        channel: this.channel.label,
        ringOut: this.channel instanceof ShmChannel && this.channel.ringOut,
        ringIn: this.channel instanceof ShmChannel && this.channel.ringIn,
      },
      negotiation: { ...this.negotiation, path: [...this.negotiation.path], state: this.negotiator.state },
      sent: structuredClone(this.sent),
      received: structuredClone(this.received),
      cache: this.pool.stats(),
      flow: {
        maxUnreadBytes: this.opts.maxUnreadBytes,
        unreadBytes: this.flow.unread,
        waitingSends: this.flow.waiting,
        unexpectedMessages: this.matches.unexpectedCount,
      },
    };
  }

  /**
   * Tells the peer to drop its mapping of a local allocation (call it before
   * freeing device memory that was sent by RGET, so the memory is really freed).
   */
  invalidate(ptr: bigint): void {
    this.invalidateAllocation(describeAllocation(this.driver, ptr));
  }

  /** @internal INVALIDATE for an allocation already described (Transport.free describes it once for all endpoints). */
  invalidateAllocation(alloc: { base: bigint; bufferId: bigint; device: number }): void {
    if (this.closedWith !== undefined) return;
    this.sendFrame({ type: FrameType.INVALIDATE, deviceUuid: this.uuidOf(alloc.device), base: alloc.base, bufferId: alloc.bufferId });
  }


  /** Orderly close: tells the peer, rejects what is pending, releases every mapping. */
  close(reason = 'closed by the application'): void {
    if (this.closedWith !== undefined) return;
    try {
      this.flushFins(); // receives already resolved: their senders learn it before CLOSE
      if (!this.channel.closed) this.sendFrame({ type: FrameType.CLOSE, reason });
    } catch {
      // the channel failed meanwhile: closing anyway
    }
    this.shutdown(null, new ClosedError(`endpoint to ${this.peerId} was closed: ${reason}`), true);
    this.channel.close();
  }

  // ------------------------------------------------------------- device sends

  private sendDevice(buf: DeviceBuffer, tag: number, options: SendOptions): Promise<void> {
    const length = buf.length;
    if (this.negotiator.state === 'INIT') this.startNegotiation();
    // Small and the endpoint not (yet) using IPC: one synchronous device→host
    // copy, inline in the frame. Once IPC is OK even small messages go by RGET:
    // one device copy with a polled completion beats two synchronous host
    // copies (8 B half round trip on 2×H200: 35 µs against 44 µs).
    if (this.deviceEager(length, options)) {
      const data = new Uint8Array(length);
      if (length > 0) this.driver.memcpyDtoH(data, buf.ptr);
      this.sendFrame({ type: FrameType.EAGER, tag, seq: this.nextSeq++, fromDevice: true, data });
      this.flow.charge(length);
      count(this.sent, 'eager', length);
      return Promise.resolve();
    }
    return this.ipcOk ? this.sendRget(buf, tag, options) : this.sendStaged(buf, tag, options);
  }

  private sendRget(buf: DeviceBuffer, tag: number, options: SendOptions): Promise<void> {
    const d = this.driver;
    const exp = this.ctx.exports.lookup(buf.ptr);
    const offset = Number(buf.ptr - exp.base);
    if (offset + buf.length > exp.size) {
      throw new RangeError(`buffer (${buf.length} bytes at +${offset}) runs past its allocation of ${exp.size} bytes`);
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
    const seq = this.nextSeq++;
    const length = buf.length;
    const release = event === undefined ? noop : () => destroyEvent(d, event);
    const done = this.pendSend(seq, tag, length, 'rget', options.signal, release, { buf, stream: options.stream });
    try {
      this.announceRget(exp, buf, tag, seq, offset, eventHandle);
      this.flow.charge(0);
    } catch (err) {
      this.failPendingSend(seq, err as Error); // releases the event; `done` rejects
    }
    return done;
  }

  private announceRget(exp: ReturnType<ExportTable['lookup']>, buf: DeviceBuffer, tag: number, seq: number, offset: number, eventHandle: Uint8Array | null): void {
    const length = buf.length;
    const last = exp.rget;
    if (eventHandle === null && last !== undefined && last.length === length && this.tracer === undefined) {
      // Re-sent from the same buffer: the last encoding with this tag and seq.
      this.sendBytes(restampRget(last.frame, tag, seq));
      return;
    }
    const frame: RgetFrame = {
      type: FrameType.RGET,
      tag,
      seq,
      handle: exp.handle,
      base: exp.base,
      allocSize: exp.size,
      offset,
      length,
      bufferId: exp.bufferId,
      deviceUuid: this.uuidOf(exp.device),
      event: eventHandle,
    };
    if (this.tracer !== undefined) {
      this.sendFrame(frame);
    } else {
      const bytes = encodeFrame(frame, this.uuidNames);
      if (eventHandle === null) exp.rget = { length, frame: bytes.slice() }; // its own memory, not a pool slab
      this.sendBytes(bytes);
    }
  }

  private sendStaged(buf: DeviceBuffer, tag: number, options: SendOptions): Promise<void> {
    checkStagedSource(this.driver, buf); // a bad source fails this send() alone, before anything is announced
    // The ring first: one that cannot be made (ShmSpaceError: /dev/shm full) fails this send before it uses a seq.
    this.stagingRing();
    const seq = this.nextSeq++;
    const done = this.pendSend(seq, tag, buf.length, 'staging', options.signal, noop);
    try {
      this.announceStaged(buf, tag, seq, options.stream);
      this.flow.charge(0);
    } catch (err) {
      this.failPendingSend(seq, err as Error);
    }
    return done;
  }

  /** STAGE_BEGIN for message `seq`; its chunks follow the receiver's grants. */
  private announceStaged(buf: DeviceBuffer, tag: number, seq: number, stream: StreamHandle | undefined): void {
    const ring = this.stagingRing();
    this.stagedSends.set(seq, { seq, src: buf.ptr, length: buf.length, next: 0, stream: stream ?? this.gpu().stream, inFlight: 0 });
    this.sendFrame({
      type: FrameType.STAGE_BEGIN,
      tag,
      seq,
      length: buf.length,
      segment: ring.segment.name,
      chunkSize: ring.options.chunkSize,
      slots: ring.options.slots,
    });
  }

  /** Registers a send that completes on FIN; wires its AbortSignal to CANCEL. `restage`: see PendingSend. */
  private pendSend(
    seq: number,
    tag: number,
    length: number,
    path: DataPath,
    signal: AbortSignal | undefined,
    release: () => void,
    restage?: PendingSend['restage'],
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const p: PendingSend = { seq, tag, length, path, resolve, reject, cleanup: release, cancelRequested: false, signal, restage };
      if (signal) {
        const onAbort = () => {
          if (p.cancelRequested || !this.pendingSends.has(seq)) return;
          p.cancelRequested = true;
          try {
            this.sendFrame({ type: FrameType.CANCEL, seq });
          } catch {
            // the endpoint is closing: the send rejects with that
          }
        };
        signal.addEventListener('abort', onAbort, { once: true });
        p.cleanup = () => {
          signal.removeEventListener('abort', onAbort);
          release();
        };
      }
      this.pendingSends.set(seq, p);
    });
  }

  // ---------------------------------------------------------- frame handling

  /** `transient`: `bytes` is a view of the channel's ring, gone after this call (ControlChannel). */
  private readonly onFrame = (bytes: Uint8Array, transient?: boolean): void => {
    if (this.closedWith !== undefined) return;
    let frame: Frame;
    try {
      frame = this.rgets.decode(bytes, this.uuidNames);
      // EAGER data is a view of the frame (decodeFrame), and may wait in the
      // unexpected queue: its own copy. Nothing else keeps the frame's bytes.
      if (transient === true && frame.type === FrameType.EAGER) frame = { ...frame, data: copyBytes(frame.data) };
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
      return;
    }
    this.tracer?.frame(this.peerId, 'recv', frame);
    try {
      this.dispatch(frame);
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
    }
  };

  private dispatch(frame: Frame): void {
    switch (frame.type) {
      case FrameType.STAGE_BEGIN: {
        const waiting = this.restaging.get(frame.seq);
        if (waiting) {
          // an RGET we could not map, now coming by staging: already matched
          this.restaging.delete(frame.seq);
          return this.deliverStaged(waiting, frame);
        }
        const recv = this.matches.arrive(frame.tag, frame);
        if (recv) this.deliver(recv, frame);
        return;
      }
      case FrameType.EAGER:
      case FrameType.RGET: {
        const recv = this.matches.arrive(frame.tag, frame);
        if (recv) this.deliver(recv, frame);
        return;
      }
      case FrameType.FIN:
        if (frame.status === FinStatus.SENDER_FAILED) return this.onSenderFailed(frame.seq, frame.message);
        return this.onFin(frame.seq, frame.status, frame.message);
      case FrameType.FINS:
        if (!this.fins) throw new ProtocolError(`peer ${this.peerId} sent FINS without both HELLOs announcing it`);
        for (const seq of frame.seqs) this.onFin(seq, FinStatus.OK, '');
        return;
      case FrameType.CANCEL:
        return this.onCancel(frame.seq);
      case FrameType.CREDIT:
        return this.flow.credit(frame.consumed);
      case FrameType.STAGE_ACK:
        return this.onStageGrant(frame.seq, frame.slot);
      case FrameType.STAGE_CHUNK:
        return this.onStageChunk(frame.seq, frame.slot, frame.offset, frame.length);
      case FrameType.INVALIDATE:
        this.pool.invalidate(frame.deviceUuid, frame.base, frame.bufferId);
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
        if (this.negotiationStartedAt === 0) this.negotiationStartedAt = performance.now();
        this.negotiator.receive(frame as NegotiationFrame);
        return;
      case FrameType.HELLO:
      case FrameType.PROOF:
        throw new ProtocolError(`peer ${this.peerId} sent a handshake frame (${FrameType[frame.type]}) after the handshake`);
      case FrameType.RING_OFFER:
      case FrameType.RING_SWITCH:
      case FrameType.DOORBELL:
      case FrameType.SPILL:
        // ShmChannel consumes these; here they come from a peer that did not announce rings in its HELLO
        throw new ProtocolError(`peer ${this.peerId} sent a channel-layer ${FrameType[frame.type]} frame without announcing control rings`);
    }
  }

  /** A posted receive met its message. */
  private deliver(recv: PendingRecv, frame: Arrival): void {
    recv.cleanup();
    this.consumed(frame);
    try {
      switch (frame.type) {
        case FrameType.EAGER:
          return this.deliverEager(recv, frame);
        case FrameType.RGET:
          return this.deliverRget(recv, frame);
        case FrameType.STAGE_BEGIN:
          return this.deliverStaged(recv, frame);
      }
    } catch (err) {
      this.failArrival(recv, frame, err as Error);
    }
  }

  /**
   * A matched message could not be received (no memory for it, a bad `into`,
   * a bad request): its receive rejects, and the sender of a rendezvous
   * message — which waits for a FIN — gets one with the status. The endpoint
   * stays open.
   */
  private failArrival(recv: PendingRecv, frame: Arrival, err: Error): void {
    if (frame.type !== FrameType.EAGER) {
      try {
        this.sendFin(frame.seq, err instanceof ProtocolError ? FinStatus.REFUSED : FinStatus.FAILED, err.message);
      } catch {
        // the channel failed: the endpoint closes and the sender learns it that way
      }
    }
    recv.reject(err);
  }

  private deliverEager(recv: PendingRecv, frame: EagerFrame): void {
    const n = frame.data.byteLength;
    count(this.received, 'eager', n);
    const into = recv.into;
    let data: Uint8Array | DeviceBuffer;
    if (into === undefined) {
      if (frame.fromDevice && n > 0 && this.driver.isReady()) {
        const ptr = this.driver.memAlloc(n);
        this.driver.memcpyHtoD(ptr, frame.data);
        data = { ptr, length: n, device: this.driver.currentDevice() };
      } else {
        data = frame.data.slice(); // own copy: the frame may be a view of a larger receive buffer
      }
    } else {
      checkFits(into, n);
      if (isDeviceBuffer(into)) {
        if (n > 0) this.driver.memcpyHtoD(into.ptr, frame.data);
        data = into;
      } else {
        const dst = hostBytes(into).subarray(0, n);
        dst.set(frame.data);
        data = dst;
      }
    }
    recv.resolve({ tag: frame.tag, length: n, path: 'eager', fromDevice: frame.fromDevice, data });
  }

  /** A rendezvous message longer than the receive buffer: FIN TRUNCATED to the sender, TruncationError here; nothing is copied. */
  private refusedTooSmall(recv: PendingRecv, frame: RgetFrame | StageBeginFrame): boolean {
    const n = frame.length;
    if (recv.into === undefined || byteLength(recv.into) >= n) return false;
    this.sendFin(frame.seq, FinStatus.TRUNCATED, `receive buffer of ${byteLength(recv.into)} bytes is smaller than the ${n}-byte message`);
    recv.reject(new TruncationError(`message of ${n} bytes (tag ${frame.tag}) does not fit the ${byteLength(recv.into)}-byte receive buffer`));
    return true;
  }

  /**
   * RGET, receiver side. The common case — the mapping is in the pool and the
   * sender passed no stream event — runs synchronously from the frame to the
   * copy, and the copy's completion calls back straight into the FIN: no
   * promise between the GPU and the answer (copyRget). A mapping to open, or
   * an event to wait for, goes through prepareRget first.
   */
  private deliverRget(recv: PendingRecv, frame: RgetFrame): void {
    if (this.refusedTooSmall(recv, frame)) return;
    const pooled = this.pool.lookup(rgetRequest(frame));
    if (pooled && !frame.event) return this.copyRget(recv, frame, pooled, undefined);
    this.prepareRget(recv, frame, pooled).catch((err: Error) => this.failArrival(recv, frame, err));
  }

  /** Opens the mapping (unless `pooled` is it) and waits for the sender's stream event, then copies. */
  private async prepareRget(recv: PendingRecv, frame: RgetFrame, pooled: Mapping | undefined): Promise<void> {
    const d = this.driver;
    let mapping = pooled;
    if (!mapping) {
      try {
        mapping = await this.pool.acquire(rgetRequest(frame));
        // The peer can make us read only what it handed us: the mapping's
        // real extent, not the peer's word for it, bounds every copy.
        const real = d.memGetAddressRange(mapping.ptr);
        if (real.base !== mapping.ptr || real.size < frame.allocSize) {
          mapping.release();
          this.pool.invalidate(frame.deviceUuid, frame.base);
          const err = new ProtocolError(`RGET ${frame.seq}: the handle maps ${real.size} bytes, not the ${frame.allocSize} the peer claims`, 'SMCUDA_BAD_RGET');
          this.sendFin(frame.seq, FinStatus.REFUSED, err.message);
          recv.reject(err);
          return;
        }
      } catch (err) {
        if (this.closedWith !== undefined) return recv.reject(this.closedError());
        // Could not map it (even after evicting): the receive stays matched and
        // the sender resends the same message by staging. Nothing is lost.
        this.restaging.set(frame.seq, recv);
        debug('endpoint %s: cannot map RGET %d (%s): asking for it by staging', this.peerId, frame.seq, (err as Error).message);
        this.sendFin(frame.seq, FinStatus.RESTAGE, (err as Error).message);
        return;
      }
    }
    let event: bigint | undefined;
    if (frame.event) {
      // The data is valid once the sender's stream reaches its event. Wait for
      // it here, on the host, not with cuStreamWaitEvent: if the peer dies
      // meanwhile, no copy is queued behind an event that can never complete,
      // and the mapping can be closed at once.
      try {
        event = d.ipcOpenEventHandle(frame.event);
        const abandoned = new Promise<'abandoned'>((resolve) => this.activeRgets.set(recv, () => resolve('abandoned')));
        const gpu = this.gpu();
        const peerDone = new Promise<void>((resolve, reject) => gpu.whenEvent(event!, (err) => (err ? reject(err) : resolve())));
        const outcome = await Promise.race([peerDone, abandoned]);
        if (outcome === 'abandoned') throw this.closeReason ?? new PeerLostError(`lost peer ${this.peerId}`);
      } catch (err) {
        this.activeRgets.delete(recv);
        return this.finishRget(recv, frame, mapping, event, undefined, undefined, err as Error);
      }
      this.activeRgets.delete(recv);
    }
    this.copyRget(recv, frame, mapping, event);
  }

  /** Queues the copy out of the peer's memory; its completion sends the FIN (finishRget). */
  private copyRget(recv: PendingRecv, frame: RgetFrame, mapping: Mapping, event: bigint | undefined): void {
    const d = this.driver;
    const n = frame.length;
    let allocated: bigint | undefined;
    try {
      if (frame.offset + n > mapping.size) {
        throw new ProtocolError(`RGET ${frame.seq} asks for bytes ${frame.offset}..${frame.offset + n} of a ${mapping.size}-byte mapping`, 'SMCUDA_BAD_RGET');
      }
      const src = mapping.ptr + BigInt(frame.offset);
      const gpu = this.gpu();
      const stream = recv.stream ?? gpu.stream;
      const into = recv.into;
      let dst: DeviceBuffer | undefined;
      let host: Uint8Array | undefined;
      if (into === undefined ? d.isReady() : isDeviceBuffer(into)) {
        if (into === undefined) {
          allocated = d.memAlloc(n);
          dst = { ptr: allocated, length: n, device: d.currentDevice() };
        } else {
          dst = into as DeviceBuffer;
        }
      } else {
        host = into === undefined ? new Uint8Array(n) : hostBytes(into as ArrayBufferView).subarray(0, n);
      }
      const result: Received = { tag: frame.tag, length: n, path: 'rget', fromDevice: true, data: dst ?? host! };
      const done = (err?: Error) => this.finishRget(recv, frame, mapping, event, result, allocated, err);
      if (dst !== undefined && recv.stream === undefined) {
        // Launched with the other copies of this run, in one batch (GpuWork.copy).
        gpu.copy(stream, dst.ptr, src, n, done);
        return;
      }
      if (dst !== undefined) d.memcpyAsync(dst.ptr, src, n, stream);
      else d.memcpyDtoHAsync(host!, src, stream);
      // On the caller's stream the receive resolves at once: the data is valid once that stream reaches the copy.
      if (recv.stream !== undefined) recv.resolve(result);
      gpu.whenDone(stream, n, done);
    } catch (err) {
      this.finishRget(recv, frame, mapping, event, undefined, allocated, err as Error);
    }
  }

  /** The copy completed (or failed): FIN to the sender, the receive settles, the mapping is released. */
  private finishRget(
    recv: PendingRecv,
    frame: RgetFrame,
    mapping: Mapping,
    event: bigint | undefined,
    result: Received | undefined,
    allocated: bigint | undefined,
    err: Error | undefined,
  ): void {
    mapping.release();
    if (event !== undefined) {
      try {
        this.driver.eventDestroy(event);
      } catch {
        // the driver was closed meanwhile (peer lost, transport closed)
      }
    }
    if (err === undefined) {
      try {
        count(this.received, 'rget', frame.length);
        this.finOk(frame.seq);
      } catch (e) {
        err = e as Error; // the FIN could not be sent: the channel failed
      }
      if (err === undefined) {
        if (recv.stream === undefined) recv.resolve(result!);
        return;
      }
    }
    if (allocated !== undefined) {
      try {
        this.driver.memFree(allocated);
      } catch {
        // the context is gone: nothing left to free
      }
    }
    try {
      this.sendFin(frame.seq, err instanceof ProtocolError ? FinStatus.REFUSED : FinStatus.FAILED, err.message);
    } catch {
      // the channel failed: the endpoint closes and the sender learns it that way
    }
    recv.reject(err);
  }

  private onFin(seq: number, status: FinStatus, message: string): void {
    const p = this.pendingSends.get(seq);
    if (!p) throw new ProtocolError(`FIN for message ${seq}, which is not pending`, 'SMCUDA_BAD_FIN');
    if (status === FinStatus.RESTAGE) {
      // The peer could not map our memory; its receive waits for the same message by staging.
      const restage = p.restage;
      if (!restage) throw new ProtocolError(`FIN RESTAGE for message ${seq}, which was not sent by RGET`, 'SMCUDA_BAD_FIN');
      p.restage = undefined;
      p.path = 'staging';
      try {
        checkStagedSource(this.driver, restage.buf);
        this.announceStaged(restage.buf, p.tag, seq, restage.stream);
      } catch (err) {
        // the source went bad meanwhile: this send fails, and the receive waiting for it learns why
        this.failSendAndTell(seq, err as Error);
      }
      return;
    }
    this.pendingSends.delete(seq);
    this.stagedSends.delete(seq);
    p.cleanup();
    switch (status) {
      case FinStatus.OK:
        count(this.sent, p.path, p.length);
        p.resolve();
        return;
      case FinStatus.CANCELLED:
        p.reject(p.signal ? abortReason(p.signal) : new SmcudaError('SMCUDA_CANCELLED', `send ${seq} was cancelled`));
        return;
      case FinStatus.TRUNCATED:
        p.reject(new TruncationError(`peer ${this.peerId} could not receive message ${seq} (tag ${p.tag}): ${message}`));
        return;
      default:
        p.reject(new SmcudaError(status === FinStatus.REFUSED ? 'SMCUDA_REFUSED' : 'SMCUDA_REMOTE_COPY_FAILED', `peer ${this.peerId} failed message ${seq} (tag ${p.tag}): ${message}`));
    }
  }

  private onCancel(seq: number): void {
    // Withdraw the message if no receive has matched it yet; otherwise the
    // transfer completes and its own FIN answers the sender.
    const withdrawn = this.matches.withdrawArrival((a) => a.seq === seq);
    if (withdrawn) {
      this.consumed(withdrawn);
      this.sendFin(seq, FinStatus.CANCELLED, 'cancelled by the sender');
    }
  }

  // ----------------------------------------------------------------- staging

  private stagingRing(): StagingRing {
    if (!this.ring) {
      const name = newSegmentName('stg'); // owner-stamped: swept if we die before the receiver unlinks it
      this.ring = new StagingRing(this.driver, this.opts.staging, name);
    }
    return this.ring;
  }

  /** Receiver: a staged message matched a receive; it waits for the ring. */
  private deliverStaged(recv: PendingRecv, frame: StageBeginFrame): void {
    try {
      this.queueStagedRecv(recv, frame);
    } catch (err) {
      this.failArrival(recv, frame, err as Error); // e.g. no device memory for it: FIN FAILED, the sender settles
    }
  }

  private queueStagedRecv(recv: PendingRecv, frame: StageBeginFrame): void {
    const n = frame.length;
    if (this.refusedTooSmall(recv, frame)) return;
    let dst: bigint | Uint8Array;
    let data: Uint8Array | DeviceBuffer;
    const into = recv.into;
    if (into === undefined) {
      if (this.driver.isReady()) {
        const ptr = this.driver.memAlloc(n);
        dst = ptr;
        data = { ptr, length: n, device: this.driver.currentDevice() };
      } else {
        dst = new Uint8Array(n);
        data = dst;
      }
    } else if (isDeviceBuffer(into)) {
      dst = into.ptr;
      data = into;
    } else {
      dst = hostBytes(into).subarray(0, n);
      data = dst;
    }
    const job: StagedRecvJob = {
      seq: frame.seq,
      length: n,
      granted: 0,
      received: 0,
      chunkSize: frame.chunkSize,
      slots: frame.slots,
      segment: frame.segment,
      recv,
      dst,
      result: { tag: frame.tag, length: n, path: 'staging', fromDevice: true, data },
      inFlight: 0,
      failed: false,
    };
    this.stagedRecvQueue.push(job);
    if (!this.activeStagedRecv) this.startNextStagedRecv();
  }

  private startNextStagedRecv(): void {
    if (this.closedWith !== undefined) return;
    const job = this.stagedRecvQueue.shift();
    this.activeStagedRecv = job;
    if (!job) return;
    try {
      if (!this.peerRing || this.peerRing.segment.name !== job.segment) {
        this.peerRing?.close();
        this.peerRing = undefined;
        const seg = this.driver.shmOpen(job.segment);
        if (seg.bytes.byteLength < job.chunkSize * job.slots) {
          seg.close();
          throw new ProtocolError(`staging segment ${job.segment} is ${seg.bytes.byteLength} bytes, less than ${job.slots} × ${job.chunkSize}`);
        }
        this.peerRing = new PeerRing(this.driver, seg, job.chunkSize, job.slots);
      }
      const chunks = chunkCount(job.length, job.chunkSize);
      const grants = Math.min(job.slots, chunks);
      for (let slot = 0; slot < grants; slot++) this.grant(job, slot);
    } catch (err) {
      this.failStagedRecv(job, err as Error);
    }
  }

  private grant(job: StagedRecvJob, slot: number): void {
    job.granted++;
    this.sendFrame({ type: FrameType.STAGE_ACK, seq: job.seq, slot });
  }

  /** Sender: the receiver granted `slot` to message `seq`: fill it with the next chunk. */
  private onStageGrant(seq: number, slot: number): void {
    const staged = this.stagedSends.get(seq);
    const ring = this.ring;
    if (!staged || !ring) {
      if (this.pendingSends.has(seq)) throw new ProtocolError(`STAGE_ACK for message ${seq}, which is not staged`);
      return; // the send was cancelled or failed meanwhile
    }
    if (slot >= ring.options.slots) throw new ProtocolError(`STAGE_ACK grants slot ${slot} of a ${ring.options.slots}-slot ring`);
    ring.unlink(); // the receiver has the segment open now
    if (staged.failed || staged.next >= staged.length) return;
    const offset = staged.next;
    const length = Math.min(ring.options.chunkSize, staged.length - offset);
    staged.next += length;
    try {
      // Fails for a source freed meanwhile or a bogus stream: this send alone fails.
      this.driver.memcpyDtoHAsync(ring.slot(slot, length), staged.src + BigInt(offset), staged.stream);
    } catch (err) {
      return this.abortStagedSend(staged, err as Error);
    }
    staged.inFlight++;
    // Infinity: an event of its own, as for any large copy (a chunk's grant must not wait for later copies).
    this.gpu().whenDone(staged.stream, Infinity, (err) => {
      staged.inFlight--;
      if (err) return this.abortStagedSend(staged, err);
      if (staged.failed) return this.abortStagedSend(staged, staged.failed);
      if (this.closedWith !== undefined || !this.stagedSends.has(seq)) return;
      try {
        this.sendFrame({ type: FrameType.STAGE_CHUNK, seq, slot, offset, length });
      } catch (e) {
        this.failPendingSend(seq, e as Error); // the channel failed: the endpoint is closing
      }
    });
  }

  /**
   * Sender: staged message `seq` cannot be supplied. Once none of its copies
   * is in flight, the send rejects and the receiver is told (FIN
   * SENDER_FAILED), so that its receive fails too; the endpoint stays open.
   */
  private abortStagedSend(staged: StagedSend, err: Error): void {
    staged.failed ??= err;
    if (staged.inFlight === 0) this.failSendAndTell(staged.seq, staged.failed);
  }

  private failSendAndTell(seq: number, err: Error): void {
    if (!this.pendingSends.has(seq)) return;
    this.failPendingSend(seq, err);
    try {
      this.sendFin(seq, FinStatus.SENDER_FAILED, err.message);
    } catch {
      // the channel failed: the endpoint closes and the receiver learns it that way
    }
  }

  /** Receiver: the sender of message `seq` could not supply it (FIN SENDER_FAILED). */
  private onSenderFailed(seq: number, message: string): void {
    const err = new SmcudaError('SMCUDA_SENDER_FAILED', `peer ${this.peerId} could not send message ${seq}: ${message}; the message is lost, the endpoint stays open`);
    const job = this.activeStagedRecv?.seq === seq ? this.activeStagedRecv : this.stagedRecvQueue.find((j) => j.seq === seq);
    if (job) {
      const i = this.stagedRecvQueue.indexOf(job);
      if (i >= 0) this.stagedRecvQueue.splice(i, 1);
      return this.failStagedRecv(job, err, false);
    }
    const waiting = this.restaging.get(seq);
    if (waiting) {
      this.restaging.delete(seq);
      return waiting.reject(err);
    }
    // Not matched yet: the message is withdrawn, as a cancelled one is. Anything
    // else (already failed here, or unknown) needs no answer.
    const withdrawn = this.matches.withdrawArrival((a) => a.seq === seq);
    if (withdrawn) this.consumed(withdrawn);
  }

  /** Receiver: chunk `offset..offset+length` of the active staged message is in `slot`. */
  private onStageChunk(seq: number, slot: number, offset: number, length: number): void {
    const job = this.activeStagedRecv;
    const ring = this.peerRing;
    if (this.failedStaged.has(seq)) return; // its FIN(FAILED) is on the way to the sender
    if (!job || job.seq !== seq || !ring) throw new ProtocolError(`STAGE_CHUNK for message ${seq}, which is not being received`);
    if (slot >= job.slots || length > job.chunkSize || offset + length > job.length) {
      throw new ProtocolError(`STAGE_CHUNK ${seq}: slot ${slot}, bytes ${offset}..${offset + length} outside the message or ring`);
    }
    if (job.failed) return;
    const src = ring.slot(slot, length);
    const finishChunk = () => {
      try {
        job.received += length;
        if (job.granted < chunkCount(job.length, job.chunkSize)) this.grant(job, slot);
        if (job.received === job.length) this.finishStagedRecv(job);
      } catch (err) {
        this.failStagedRecv(job, err as Error); // the channel failed: the endpoint is closing
      }
    };
    if (typeof job.dst === 'bigint') {
      const stream = job.recv.stream ?? this.gpu().stream;
      try {
        // Fails for a bad `into` (freed, too short for the driver): this receive alone fails.
        this.driver.memcpyHtoDAsync(job.dst + BigInt(offset), src, stream);
      } catch (err) {
        return this.failStagedRecv(job, err as Error);
      }
      job.inFlight++;
      // Infinity: an event of its own, as for any large copy (a chunk's grant must not wait for later copies).
      this.gpu().whenDone(stream, Infinity, (err) => {
        job.inFlight--;
        if (err) return this.failStagedRecv(job, err);
        if (job.failed) return this.nextAfterFailed(job);
        if (this.closedWith === undefined) finishChunk();
      });
    } else {
      job.dst.set(src, offset);
      finishChunk();
    }
  }

  private finishStagedRecv(job: StagedRecvJob): void {
    count(this.received, 'staging', job.length);
    this.sendFin(job.seq, FinStatus.OK, '');
    job.recv.resolve(job.result);
    this.startNextStagedRecv();
  }

  /** `tell`: FIN the sender with the status (not when the sender is the one who failed it). */
  private failStagedRecv(job: StagedRecvJob, err: Error, tell = true): void {
    if (job.failed) return this.nextAfterFailed(job);
    job.failed = true;
    this.failedStaged.add(job.seq);
    if (job.recv.into === undefined && typeof job.dst === 'bigint') {
      try {
        this.driver.memFree(job.dst);
      } catch {
        // the context is gone: nothing left to free
      }
    }
    try {
      if (tell) this.sendFin(job.seq, err instanceof ProtocolError ? FinStatus.REFUSED : FinStatus.FAILED, err.message);
    } catch {
      // closing
    }
    job.recv.reject(err);
    this.nextAfterFailed(job);
  }

  /**
   * The ring goes to the next staged receive once no copy out of it is in
   * flight for the failed one: a slot granted again must not still be read.
   */
  private nextAfterFailed(job: StagedRecvJob): void {
    if (this.activeStagedRecv === job && job.inFlight === 0) this.startNextStagedRecv();
  }

  private failPendingSend(seq: number, err: Error): void {
    const p = this.pendingSends.get(seq);
    if (!p) return;
    this.pendingSends.delete(seq);
    this.stagedSends.delete(seq);
    p.cleanup();
    p.reject(err);
  }

  // ------------------------------------------------------------ negotiation

  private startNegotiation(): void {
    if (this.negotiationStartedAt === 0) this.negotiationStartedAt = performance.now();
    this.negotiator.gpuSend();
  }

  private onNegotiationState(state: NegotiationState, previous: NegotiationState, info: { tries: number; reason?: string }): void {
    this.ipcOk = state === 'OK';
    const rec = this.negotiation;
    rec.state = state;
    rec.path.push(state);
    rec.tries = info.tries;
    if (info.reason !== undefined) rec.reason = info.reason;
    if ((state === 'OK' || state === 'BAD') && rec.settleMs === undefined && this.negotiationStartedAt > 0) {
      rec.settleMs = performance.now() - this.negotiationStartedAt;
    }
    this.tracer?.state(this.peerId, previous, state, info);
    debug('endpoint %s: %s → %s (tries %d)%s', this.peerId, previous, state, info.tries, info.reason ? `: ${info.reason}` : '');
    this.emit('state', state, previous);
  }

  /** My probe for the negotiation (ipc-probe.ts), made once; undefined if it cannot be (the peer then refuses IPC). */
  private ownProbe(): Uint8Array | undefined {
    try {
      this.probe ??= ExportedProbe.create(this.driver);
      return this.probe.bytes;
    } catch (err) {
      debug('endpoint %s: no IPC probe (%s): IPC will be refused', this.peerId, (err as Error).message);
      return undefined;
    }
  }

  private localUuid(): string {
    const dev = this.driver.currentDevice();
    return dev < 0 ? '' : this.uuidOf(dev);
  }

  private uuidOf(ordinal: number): string {
    let uuid = this.uuidByOrdinal.get(ordinal);
    if (uuid === undefined) {
      uuid = this.driver.deviceInfo(ordinal).uuid;
      this.uuidByOrdinal.set(ordinal, uuid);
    }
    return uuid;
  }

  /** Both directions: each side will open the other's handles. Devices by UUID, never by ordinal. */
  private canAccessPeer(peerUuid: string): boolean {
    const local = this.driver.currentDevice();
    if (local < 0) return false;
    const n = this.driver.deviceCount();
    for (let i = 0; i < n; i++) {
      if (this.uuidOf(i) === peerUuid) return this.driver.canAccessPeer(local, i) && this.driver.canAccessPeer(i, local);
    }
    return false; // the peer's device is not visible here: its handles cannot be opened
  }

  // ---------------------------------------------------------------- plumbing

  private gpu(): GpuWork {
    if (!this.gpuWork) {
      this.gpuWork = new GpuWork(this.driver, this.opts.completionSpinUs, this.ctx.progress);
    }
    return this.gpuWork;
  }

  private sendFrame(frame: Frame): void {
    if (this.channel.closed) throw this.closedError();
    this.tracer?.frame(this.peerId, 'send', frame);
    this.channel.send(encodeFrame(frame, this.uuidNames));
  }

  /** An already encoded frame (no tracer: it would want the frame). */
  private sendBytes(bytes: Uint8Array): void {
    if (this.channel.closed) throw this.closedError();
    this.channel.send(bytes);
  }

  /**
   * FIN OK for `seq`. With FINS, the FINs of one synchronous run (the copies
   * one completion event covered) leave together, in a microtask queued
   * before the receives they complete resolve: one frame to encode, write and
   * decode instead of one per message.
   */
  private finOk(seq: number): void {
    if (!this.fins) return this.sendFin(seq, FinStatus.OK, '');
    if (this.finsOut.push(seq) === 1) queueMicrotask(this.flushFins);
  }

  private readonly flushFins = (): void => {
    const seqs = this.finsOut;
    if (seqs.length === 0) return;
    this.finsOut = [];
    if (this.closedWith !== undefined || this.channel.closed) return;
    for (let i = 0; i < seqs.length; i += MAX_FINS) {
      const part = seqs.length <= MAX_FINS ? seqs : seqs.slice(i, i + MAX_FINS);
      if (part.length === 1) this.sendFin(part[0]!, FinStatus.OK, '');
      else this.sendFrame({ type: FrameType.FINS, seqs: part });
    }
  };

  private sendFin(seq: number, status: FinStatus, message: string): void {
    if (this.closedWith !== undefined || this.channel.closed) return;
    // The wire carries at most 4096 bytes of message (a long driver or nested error must not make the FIN itself fail).
    if (message.length > 1000) message = `${message.slice(0, 1000)}…`;
    this.sendFrame({ type: FrameType.FIN, seq, status, message });
  }

  private readonly onChannelClose = (error?: Error): void => {
    if (this.closedWith !== undefined) return;
    this.shutdown(error ?? null, new PeerLostError(`lost peer ${this.peerId}${error ? `: ${error.message}` : ' (channel closed)'}`, { cause: error }));
  };

  /** A failure on this endpoint only (bad frame, protocol violation): close it. */
  private fail(err: Error): void {
    if (this.closedWith !== undefined) return;
    this.shutdown(err, err);
    this.channel.close();
  }

  private closedError(): Error {
    const why = this.closeReason;
    if (why instanceof PeerLostError || this.closedWith) return new PeerLostError(`endpoint to ${this.peerId} is closed: ${(why ?? this.closedWith)!.message}`);
    return new ClosedError(`endpoint to ${this.peerId} is closed${why ? `: ${why.message}` : ''}`);
  }

  /**
   * Rejects everything pending with `reason`, releases mappings, rings and GPU
   * resources. `orderly`: a close either side asked for, not a failure.
   */
  private shutdown(error: Error | null, reason: Error, orderly = false): void {
    debug('endpoint %s: closing (%s): %s', this.peerId, orderly ? 'orderly' : 'failure', reason.message);
    this.closedWith = error;
    this.closeReason = reason;
    this.ipcOk = false;
    // An orderly close (ours, or the peer's CLOSE) leaves the negotiation's
    // outcome as it was; a failure or a lost peer ends it BAD.
    if (!orderly) this.negotiator.peerLost();
    this.negotiator.stop();
    for (const p of this.pendingSends.values()) {
      p.cleanup();
      p.reject(reason);
    }
    this.pendingSends.clear();
    this.stagedSends.clear();
    this.flow.close(reason);
    const { posted } = this.matches.drain();
    posted.push(...this.restaging.values());
    this.restaging.clear();
    for (const r of posted) {
      r.cleanup();
      r.reject(reason);
    }
    const jobs = [this.activeStagedRecv, ...this.stagedRecvQueue];
    this.activeStagedRecv = undefined;
    this.stagedRecvQueue.length = 0;
    for (const job of jobs) if (job) this.failStagedRecv(job, reason);
    for (const abandon of this.activeRgets.values()) abandon();
    this.activeRgets.clear();
    this.pool.close();
    this.probe?.free();
    this.ring?.close();
    this.ring = undefined;
    this.peerRing?.close();
    this.peerRing = undefined;
    this.gpuWork?.close();
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

function checkFits(into: MessageBuffer, n: number): void {
  if (byteLength(into) < n) throw new TruncationError(`message of ${n} bytes does not fit the ${byteLength(into)}-byte receive buffer`);
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new DOMException('The operation was aborted', 'AbortError');
}

function noop(): void {}

function destroyEvent(d: CudaDriver, event: bigint): void {
  try {
    d.eventDestroy(event);
  } catch {
    // the driver was closed meanwhile: nothing left to destroy
  }
}

/** What the handle pool needs to find or open the mapping an RGET reads from. */
function rgetRequest(frame: RgetFrame) {
  return { deviceUuid: frame.deviceUuid, base: frame.base, size: frame.allocSize, handle: frame.handle, bufferId: frame.bufferId };
}
