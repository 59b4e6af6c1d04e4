/**
 * One endpoint: this process's half of a connection to one peer. It matches
 * messages to receives (matching.ts), routes frames, and keeps the lifecycle;
 * the bytes move by data paths (src/paths/), asked in order per send:
 *
 *   host data                                                → EAGER (inline)
 *   device data ≤ deviceEagerLimit, IPC not OK, no stream    → EAGER (copied through the host)
 *     (≤ negotiationEagerLimit while the negotiation has not settled)
 *   device data, negotiation OK                              → RGET (peer copies from an IPC mapping)
 *   device data, otherwise                                   → staging (pinned shared host ring)
 *
 * The first device send on an endpoint in INIT starts the negotiation; a
 * message that would go by staging waits for it, with every send after it
 * (holdForNegotiation), and then goes by RGET, or by staging if IPC ended
 * BAD. Once settled, the hot path never waits on, or even touches, the state
 * machine: it reads `ipcOk`.
 */
import { EventEmitter } from 'node:events';
import type { HandlePool } from '../cache/index.js';
import type { NegotiationState } from '../machines/index.js';
import { checkMessageBuffer, type DeviceBuffer, isDeviceBuffer, type MessageBuffer } from './buffers.js';
import type { CudaDriver } from './cuda/driver.js';
import type { ControlChannel } from './channel/channel.js';
import type { FdChannel } from './channel/fd-channel.js';
import type { MappedSegment } from './channel/sealed-segment.js';
import { copyBytes } from './channel/bytes.js';
import { ShmChannel } from './channel/shm-channel.js';
import { LEGACY_STREAM } from './cuda/driver.js';
import { assertHandle } from './cuda/validate.js';
import { debug } from './debug.js';
import { EndpointLink, type EndpointContext } from './endpoint-link.js';
import { NegotiationLink } from './endpoint-negotiation.js';
import type { DataPath as PathKind, EndpointStats } from './endpoint-stats.js';
import { ArgumentRangeError, ArgumentTypeError, ClosedError, PeerLostError, ProtocolError, SmcudaError } from './errors.js';
import { describeAllocation } from './exports.js';
import type { FlowStats } from './flow-control.js';
import { ANY_TAG, MatchQueues, type RivalReceives } from './matching.js';
import { refuseUnknownKeys } from './option-keys.js';
import { StagingPath } from './paths/staging.js';
import { createPaths, type Arrival, type DataPath, type PendingRecv, type RecvOptions, type SendOptions } from './paths/index.js';
import { abortReason } from './paths/pending-sends.js';
import { allocationRanges } from './paths/allocation-ranges.js';
import { asTypeOfInto, type MessageInfo, messageInfo, type Received, type ReceivedData } from './received.js';
import { RgetDecoder } from './wire/codec.js';
import { Feature, FinStatus, type Frame, FrameType, type HelloFrame, type NegotiationFrame, SegmentKind } from './wire/frames.js';
import { RgetPath } from './paths/rget.js';
import { Registrations, type RegisterOptions, type Registration } from './persistent/registrations.js';
import { PersistentTransfers, type PersistentOptions, type PersistentTransfer } from './persistent/transfers.js';
import { Watchdog } from './persistent/watchdog.js';
import { closeFdQuietly } from './cuda/close-fd.js';
import { realWorkStarted, tellsWarmUp } from './warm-up-yield.js';
import type { KeepAlive } from './progress/keep-alive.js';

export type { SendOptions, RecvOptions, Received, ReceivedData, MessageInfo, Registration, PersistentOptions, PersistentTransfer };

/** The options send() reads (any other key is refused). */
export const SEND_OPTION_KEYS = ['tag', 'stream', 'signal', 'ready'] as const satisfies readonly (keyof SendOptions)[];
/** The options recv() reads (any other key is refused). */
export const RECV_OPTION_KEYS = ['tag', 'into', 'stream', 'signal'] as const satisfies readonly (keyof RecvOptions)[];
export type { FlowStats, EndpointContext };

export interface EndpointEvents {
  /** The negotiation entered a state. */
  state: [state: NegotiationState, previous: NegotiationState];
  /** The endpoint closed; `error` is set when it closed because of a failure. */
  close: [error?: Error];
}

/**
 * This process's half of a connection to one peer: send() and recv()
 * messages (host or device buffers) with tags, MPI order per tag. Made by
 * the Transport (listen, connect, attach); emits 'state' and 'close'.
 */
export class Endpoint extends EventEmitter<EndpointEvents> {
  /** The peer's transport id (its `TransportOptions.id`), unique in the job. */
  readonly peerId: string;
  /** The peer's process id, as it announced it in HELLO (on a Unix socket, checked against the kernel's SO_PEERCRED). */
  readonly peerPid: number;
  /** The UUID of the peer's device (`GPU-…`), or '' when the peer has no device yet (`lazyDevice`). */
  readonly peerDeviceUuid: string;

  /** @internal The transport's any-source receives, which compete for this endpoint's arrivals. */
  rival: RivalReceives<PendingRecv> | undefined;
  /** probe() calls waiting for a message. */
  private readonly probes: { tag: number; resolve: (m: MessageInfo) => void; reject: (e: Error) => void; cleanup: () => void }[] = [];

  /** The link to the peer the paths share: frames, FINs, seqs, pending sends, flow, counters, closed state. */
  private readonly link: EndpointLink;
  private readonly neg: NegotiationLink;
  private readonly matches = new MatchQueues<PendingRecv, Arrival>();
  private readonly paths: readonly DataPath[];
  /** Sends wait for the negotiation in flight (holdForNegotiation). */
  private holding = false;
  /** The staging path, whose reasons stats() reports. */
  private readonly staging: StagingPath;
  /** The path whose arrival (or own control frame) each frame type is, by FrameType. */
  private readonly byArrival: (DataPath | undefined)[] = [];
  private readonly byControl: (DataPath | undefined)[] = [];
  private readonly byKind = {} as Record<PathKind, DataPath>;
  /** Decodes frames; an RGET like the last one is that one with a new tag and seq. */
  private readonly rgets = new RgetDecoder();
  /** Registered memory and persistent transfers (src/persistent/). */
  private readonly registrations: Registrations;
  private readonly transfers: PersistentTransfers;
  /** A watchdog of its own, when the endpoint was made without the transport's. */
  private readonly ownWatchdog: Watchdog | undefined;
  /** The transport's keep-alive (undefined: made without one), and this endpoint's removal from it. */
  private readonly keep: KeepAlive | undefined;
  private readonly unkeep: (() => void)[] = [];
  /** recv() calls not settled yet. */
  private receiving = 0;
  /** Set for the duration of recvInBackground's call to recv. */
  private quietRecv = false;
  /** Other calls the caller waits on (negotiate, register, persistent) not settled yet. */
  private waiting = 0;
  /** The data-path warm-up is still to hear of this endpoint's first device work (src/warm-up-yield.ts); false on the warm-up's own endpoints. */
  private tellWarmUp: boolean;

  constructor(
    private readonly channel: ControlChannel,
    ctx: EndpointContext,
    peer: HelloFrame,
  ) {
    super();
    this.peerId = peer.peerId;
    this.peerPid = peer.pid;
    this.peerDeviceUuid = peer.deviceUuid;
    this.tellWarmUp = tellsWarmUp(ctx.driver);
    const link = (this.link = new EndpointLink(channel, ctx, peer.peerId, peer.features ?? 0, peer.deviceUuid));
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
        link.negotiationState(state);
        this.emit('state', state, previous);
      },
      gpu: () => link.gpu(),
    });
    this.paths = createPaths(link, link.parts);
    this.staging = this.paths.find((p): p is StagingPath => p instanceof StagingPath)!;
    for (const p of this.paths) {
      for (const k of p.counts ?? [p.kind]) this.byKind[k] = p;
      for (const t of p.arrivals) this.byArrival[t] = p;
      for (const t of p.controls) this.byControl[t] = p;
    }
    // What the channel may still buffer for the peer: the budget less what the peer's unmatched messages hold.
    channel.limitBuffered?.(() => link.flow.maxBufferedBytes - link.flow.held);
    link.onProtocolError = (err) => this.fail(err);
    if (channel instanceof ShmChannel) {
      // The control rings travel as sealed segments on the descriptor channel (the segment exchange).
      channel.useSegments({
        send: (seg) => link.segments.send(SegmentKind.CONTROL_RING, seg),
        take: (taker) => link.segments.take(SegmentKind.CONTROL_RING, taker),
        closeFd: (fd) => closeFdQuietly(ctx.driver, fd),
      });
    }
    const remote = { link, rget: this.paths.find((p): p is RgetPath => p instanceof RgetPath) };
    const agreed = ((ctx.local.features ?? 0) & (peer.features ?? 0) & Feature.REGISTER) !== 0;
    this.registrations = new Registrations(remote, agreed);
    const watchdog = ctx.watchdog ?? (this.ownWatchdog = new Watchdog(link.runtime, { timeoutMs: ctx.options.persistent.timeoutMs }));
    this.transfers = new PersistentTransfers(remote, this.registrations, watchdog, ctx.options.persistent.flagSlots);
    channel.on('frame', this.onFrame);
    channel.on('close', this.onChannelClose);
    const keep = (this.keep = ctx.keepAlive);
    if (keep !== undefined) {
      // The channel keeps the process alive only while something is pending here (docs/reliability.md).
      this.unkeep.push(keep.addSource(() => this.pending));
      if (channel.ref !== undefined && channel.unref !== undefined) this.unkeep.push(keep.add(channel as Required<Pick<ControlChannel, 'ref' | 'unref'>>));
    }
  }

  /**
   * @internal Whether an operation is pending here — a send waiting for its
   * FIN or for room, a receive, a probe, a negotiation, a copy or wait of the
   * GPU work, another call the caller awaits: the transport keeps the process
   * alive meanwhile (progress/keep-alive.ts).
   */
  get pending(): boolean {
    if (this.link.closed) return false;
    return (
      this.receiving > 0 ||
      this.waiting > 0 ||
      this.link.sends.size > 0 ||
      this.link.flow.waiting > 0 ||
      this.probes.length > 0 ||
      this.link.resends.size > 0 ||
      this.neg.inFlight ||
      this.link.gpuOutstanding() > 0
    );
  }

  /** A call the caller waits on: the process is kept alive until it settles. */
  private awaited<T>(p: Promise<T>): Promise<T> {
    this.keep?.busy();
    this.waiting++;
    const done = () => void this.waiting--;
    p.then(done, done);
    return p;
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
   * Sends one message. Resolves when the buffer may be reused: at once for
   * eager messages (the bytes were copied), on FIN for RGET and staging.
   * When the peer already holds `maxUnreadBytes` of unreceived messages, the
   * send first waits, in order, for the peer to receive (backpressure); it
   * rejects if the endpoint closes or the peer is lost meanwhile.
   */
  send(buffer: MessageBuffer, options: SendOptions = {}): Promise<void> {
    checkMessageBuffer('buffer', buffer);
    refuseUnknownKeys('send options', options, SEND_OPTION_KEYS);
    const tag = checkTag(options.tag, false);
    if (options.stream !== undefined) assertHandle('options.stream', options.stream);
    if (options.ready !== undefined && typeof options.ready !== 'boolean')
      throw new ArgumentTypeError(`options.ready must be a boolean, got ${typeof options.ready}`);
    if (this.link.closed) return Promise.reject(this.link.closedError());
    if (options.signal?.aborted) return Promise.reject(abortReason(options.signal));
    this.keep?.busy(); // a send that waits (FIN, room, the negotiation) keeps the process alive
    if (this.tellWarmUp && isDeviceBuffer(buffer)) this.realWork('a device send');
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
    if (path.kind === 'staging') this.holdForNegotiation();
    if (!this.link.flow.mayGo(path.inlineBytes(buffer))) {
      // Its path may change while it waits (the negotiation may end meanwhile): asked again.
      // One held for the negotiation was part of that attempt: it does not start another (after NOT_READY, the next send does).
      const kick = !this.holding;
      const waiting = {
        inline: () => this.pathFor(buffer, options).inlineBytes(buffer),
        go: () => this.sendBy(this.pathFor(buffer, options), buffer, tag, options, kick),
      };
      return this.link.flow.wait(waiting, options.signal, abortReason);
    }
    return this.sendBy(path, buffer, tag, options);
  }

  /**
   * A device message would go by staging while IPC is not settled: it starts
   * the negotiation (or finds one running) and it, and every send after it,
   * wait in order until the negotiation is OK (then they go by RGET), BAD, or
   * back in INIT (the peer was not ready): the staging ring is set up only
   * when IPC cannot be used. Pinning a ring before the request left cost the
   * first message of a fresh pair milliseconds on both sides, and delayed
   * the negotiation by as much: with this (and the negotiation's warm-up,
   * machines/warm-up.ts) a fresh pair's first 64 KiB message arrives in
   * about half the time (2xH100, MPS on; docs/benchmarks.md, 'first GPU
   * send'). A message of at most
   * negotiationEagerLimit does not wait at all: it goes by EAGER.
   */
  private holdForNegotiation(): void {
    if (this.holding) return;
    this.neg.gpuSend();
    if (!this.neg.inFlight) return;
    this.holding = true;
    this.link.flow.hold();
    this.neg.whenIdle(() => {
      this.holding = false;
      this.link.flow.release();
    });
  }

  /** The first path that takes this message now. */
  private pathFor(buffer: MessageBuffer, options: SendOptions): DataPath {
    const paths = this.paths;
    for (let i = 0; i < paths.length; i++) if (paths[i]!.canSend(buffer, options)) return paths[i]!;
    throw new SmcudaError('SMCUDA_NO_PATH', `no data path takes this ${isDeviceBuffer(buffer) ? 'device' : 'host'} buffer`);
  }

  private sendBy(path: DataPath, buffer: MessageBuffer, tag: number, options: SendOptions, kick = true): Promise<void> {
    try {
      if (!kick || !isDeviceBuffer(buffer)) return path.send(buffer, tag, options);
      if (path.kind !== 'eager') {
        this.neg.gpuSend();
        return path.send(buffer, tag, options);
      }
      // An inline message leaves before the negotiation starts: starting it (the actor, the probe's
      // allocation and handle) held a fresh pair's first 64 KiB message milliseconds on an H200.
      const sent = path.send(buffer, tag, options);
      this.neg.gpuSend();
      return sent;
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Receives the next message with `tag` (MPI order), or of any tag with
   * `tag: ANY_TAG`. `data` has the type of `into` (see Received). A device
   * `into` is checked here against its allocation: one longer than the
   * memory mapped from its start is refused at once. After the endpoint
   * closed, it still takes a message that arrived whole before the close
   * (inline: host data, small device data before IPC is negotiated), in
   * order; with none left it rejects with the close's error.
   */
  recv<Into extends MessageBuffer | undefined = undefined>(options: RecvOptions & { into?: Into } = {}): Promise<Received<ReceivedData<Into>>> {
    refuseUnknownKeys('recv options', options, RECV_OPTION_KEYS);
    const tag = checkTag(options.tag, true);
    const into = options.into;
    let intoDevice: number | undefined;
    if (into !== undefined) {
      checkMessageBuffer('options.into', into);
      if (isDeviceBuffer(into)) {
        intoDevice = checkIntoRoom(this.link.driver, into);
        if (this.tellWarmUp) this.realWork('a device receive');
      }
    }
    if (options.stream !== undefined) assertHandle('options.stream', options.stream);
    // Closed: only a message that arrived whole (inline) before the close can still be taken (shutdown keeps them).
    if (this.link.closed && this.matches.probe(tag) === undefined) return Promise.reject(this.link.closedError());
    if (options.signal?.aborted) return Promise.reject(abortReason(options.signal));
    const counted = !this.quietRecv;
    if (counted) {
      this.keep?.busy();
      this.receiving++;
    }
    return new Promise<Received<ReceivedData<Into>>>((resolveTyped, rejectRaw) => {
      // Counted until it settles, once (a receive on a stream may be failed after it resolved).
      let open = counted;
      const reject = (err: Error): void => {
        if (open) this.receiving--;
        open = false;
        rejectRaw(err);
      };
      // A host `into` other than a Uint8Array: `data` comes back as a view of its type.
      const retype = into !== undefined && !(into instanceof Uint8Array) && !isDeviceBuffer(into);
      const resolve = (r: Received): void => {
        if (open) this.receiving--;
        open = false;
        resolveTyped((retype ? Object.assign(r, { data: asTypeOfInto(r.data, into) }) : r) as never);
      };
      const recv: PendingRecv = { tag, into, intoDevice, stream: options.stream, resolve, reject, cleanup: noop };
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

  /** @internal Whether memory can be shared with the peer by descriptor (the segment exchange is not 'none'). */
  get sharesMemory(): boolean {
    return this.link.segments.state !== 'none';
  }

  /** @internal Passes a communicator's call table (print-table.ts) to the peer, as the rings travel. */
  sendCallTable(seg: MappedSegment): Promise<void> {
    return this.link.segments.send(SegmentKind.CALL_TABLE, seg);
  }

  /** @internal Takes the peer's call table when it comes (its descriptor and announced size). */
  takeCallTable(taker: (seg: { fd: number; bytes: number }) => void): void {
    this.link.segments.take(SegmentKind.CALL_TABLE, taker);
  }

  /**
   * @internal A host receive that does not keep the process alive: a layer's
   * listener for messages that may never come (the Communicator's control
   * messages). The layer keeps the process alive itself while it waits on one.
   */
  recvInBackground(options: RecvOptions): Promise<Received> {
    this.quietRecv = true;
    try {
      return this.recv(options) as Promise<Received>;
    } finally {
      this.quietRecv = false;
    }
  }

  /**
   * What the next message a `recv({ tag })` would take is (its tag, length,
   * whether it is device data), without receiving it (MPI_Iprobe);
   * undefined when none has arrived. `tag` may be ANY_TAG.
   */
  tryProbe(options: { tag?: number } = {}): MessageInfo | undefined {
    refuseUnknownKeys('probe options', options, ['tag']);
    const a = this.matches.probe(checkTag(options.tag, true));
    return a === undefined ? undefined : messageInfo(a, this.peerId);
  }

  /** @internal When the message a `recv({ tag })` would take arrived (a process-wide order; Infinity: none waits). */
  arrivalOrder(tag: number): number {
    return this.matches.probeOrder(tag);
  }

  /**
   * Waits for a message a `recv({ tag })` would take, and says what it is
   * without receiving it (MPI_Probe): size an `into` for it, then recv().
   * Rejects when the endpoint closes or `signal` aborts.
   */
  probe(options: { tag?: number; signal?: AbortSignal } = {}): Promise<MessageInfo> {
    refuseUnknownKeys('probe options', options, ['tag', 'signal']);
    const tag = checkTag(options.tag, true);
    const now = this.matches.probe(tag);
    if (now !== undefined) return Promise.resolve(messageInfo(now, this.peerId));
    if (this.link.closed) return Promise.reject(this.link.closedError());
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    this.keep?.busy();
    return new Promise<MessageInfo>((resolve, reject) => {
      const p = { tag, resolve, reject, cleanup: noop };
      if (signal) {
        const onAbort = () => {
          const i = this.probes.indexOf(p);
          if (i >= 0) this.probes.splice(i, 1);
          reject(abortReason(signal));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        p.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      this.probes.push(p);
    });
  }

  /**
   * Settles the IPC negotiation now, rather than at the first device send
   * (which then waits for it): resolves with 'OK' (device messages go by
   * RGET) or 'BAD' (they go by staging or EAGER). While the peer answers
   * "not ready" (it has no device yet) it asks again, backing off, up to
   * `negotiation.maxTries`; while this process has no device (`lazyDevice`
   * before `useDevice()`) it waits: bound it with `signal`. Rejects when the
   * endpoint closes first. Across GPUs the negotiation's first probe open
   * sets up peer access (milliseconds per side): called right after
   * connecting, it takes all of that out of the first message (`smcuda
   * bench --suite first-send`; docs/benchmarks.md, 'first GPU send').
   */
  negotiate(options: { signal?: AbortSignal } = {}): Promise<'OK' | 'BAD'> {
    refuseUnknownKeys('negotiate options', options, ['signal']);
    const settled = (s: NegotiationState): s is 'OK' | 'BAD' => s === 'OK' || s === 'BAD';
    if (settled(this.neg.state)) return Promise.resolve(this.neg.state);
    if (this.link.closed) return Promise.reject(this.link.closedError());
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if (this.tellWarmUp) this.realWork('negotiate()');
    return this.awaited(
      new Promise<'OK' | 'BAD'>((resolve, reject) => {
        let timer: ReturnType<typeof setTimeout> | undefined;
        let delay = 5;
        const done = () => {
          clearTimeout(timer);
          this.off('state', onState);
          this.off('close', onClose);
          signal?.removeEventListener('abort', onAbort);
        };
        const onState = (s: NegotiationState) => {
          if (!settled(s)) return;
          done();
          resolve(s);
        };
        const onClose = () => {
          done();
          reject(this.link.closedError());
        };
        const onAbort = () => {
          done();
          reject(abortReason(signal!));
        };
        // INIT again after a NOT_READY (or still INIT: this side was not ready): ask again, backing off to 500 ms.
        const kick = () => {
          if (this.link.closed || settled(this.neg.state)) return;
          this.neg.gpuSend();
          timer = setTimeout(kick, delay);
          delay = Math.min(delay * 2, 500);
        };
        this.on('state', onState);
        this.once('close', onClose);
        signal?.addEventListener('abort', onAbort, { once: true });
        kick();
      }),
    );
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
      copyKernel: this.link.copyKernelStats(),
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

  /**
   * Registers a device buffer with the peer, which makes the matching call
   * (both sides call register in the same order, as with NCCL's buffer
   * registration). Resolves once the peer's buffer is mapped here: the
   * registration holds both, and stays mapped until both sides called
   * `deregister()`. Needs a driver with stream memory operations on both
   * sides (SMCUDA_PERSISTENT_UNSUPPORTED otherwise). `options.timeoutMs`
   * (default 30 000) bounds the wait for the peer's call; a call that fails
   * on either side fails on both, and the next pair still matches.
   */
  register(buffer: DeviceBuffer, options?: RegisterOptions): Promise<Registration> {
    if (this.tellWarmUp) this.realWork('register()');
    return this.awaited(this.registrations.register(buffer, options));
  }

  /**
   * One side of a persistent transfer over registration `reg`: this side's
   * registered buffer is the source ('send') or the destination ('recv');
   * the peer makes the matching call with the other role, the same length,
   * in the same order. `start(stream)` queues one round as stream operations
   * only, so it can be captured in a CUDA graph and replayed without host
   * work; `options.timeoutMs` (default 30 000) bounds the wait for the
   * peer's call, and a call that fails on either side fails on both; see
   * docs/persistent.md.
   */
  persistent(reg: Registration, options: PersistentOptions): Promise<PersistentTransfer> {
    return this.awaited(this.transfers.create(reg, options));
  }

  /** @internal The transport made the descriptor channel to this peer (docs/protocol.md, "File-descriptor memory"). */
  attachFdChannel(channel: FdChannel): void {
    // The path that declares attachFd takes the channel's FD_DESCRIPTOR messages (RGET's descriptor side).
    const taker = this.paths.find((p) => p.attachFd !== undefined);
    this.link.attachFd(channel, (ch) => taker?.attachFd?.(ch));
  }

  /** @internal The transport could not make the descriptor channel: nothing is shared by memory with this peer. */
  descriptorsFailed(err: Error): void {
    this.link.descriptorsFailed(err);
  }

  /** Orderly close: tells the peer, rejects what is pending, releases every mapping. */
  close(reason = 'closed by the application'): void {
    if (this.link.closed) return;
    try {
      // Copies that completed (even on the caller's stream, unseen yet) and receives already
      // resolved: their senders learn it before CLOSE.
      this.link.settleBeforeClose();
      if (!this.channel.closed) this.link.sendFrame({ type: FrameType.CLOSE, reason });
    } catch {
      // the channel failed meanwhile: closing anyway
    }
    if (this.link.closed) return; // a completion settled above failed the endpoint: it is closed already
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
      if (this.tellWarmUp && (arrival.type !== FrameType.EAGER || arrival.fromDevice)) this.realWork('a device message arrived');
      const waiting = this.link.resends.size > 0 ? this.link.resends.get(arrival.seq) : undefined;
      if (waiting) {
        // announced again (an RGET we could not map, now by staging): already matched
        this.link.resends.delete(arrival.seq);
        return this.receiveOn(path, waiting, arrival);
      }
      // Counted before it is queued: past maxBufferedBytes the endpoint fails (PeerLimitError) and nothing is kept.
      this.link.flow.arrived(arrival.type === FrameType.EAGER ? arrival.data.byteLength : 0);
      const recv = this.matches.arrive(arrival.tag, arrival, this.rival);
      if (recv) this.deliver(recv, arrival);
      else if (this.probes.length > 0) this.answerProbes(arrival);
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
      case FrameType.REG_OFFER:
      case FrameType.REG_RELEASE:
      case FrameType.REG_FAIL:
        return this.registrations.onFrame(frame);
      case FrameType.PT_OFFER:
      case FrameType.PT_FAIL:
        if (!this.registrations.agreedWithPeer)
          throw new ProtocolError(`peer ${this.peerId} sent ${FrameType[frame.type]} without both HELLOs announcing REGISTER`, 'SMCUDA_BAD_FRAME');
        return this.transfers.onFrame(frame);
      case FrameType.CLOSE:
        this.shutdown(null, new PeerLostError(`peer ${this.peerId} closed the endpoint: ${frame.reason}`), true);
        this.channel.close();
        return;
      case FrameType.IPC_REQ:
      case FrameType.IPC_ACK:
      case FrameType.IPC_NOTREADY:
      case FrameType.IPC_CONFIRM:
      case FrameType.IPC_ABORT:
        if (this.tellWarmUp) this.realWork("the peer's negotiation");
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

  /**
   * This endpoint's first device work (a send, a receive, the negotiation, an
   * arrival): a data-path warm-up still running gives way at its next step
   * (src/warm-up-yield.ts). Once per endpoint: later messages read only the flag.
   */
  private realWork(what: string): void {
    this.tellWarmUp = false;
    realWorkStarted(this.peerId, what);
  }

  /** A message now waits unmatched: the probe() calls it answers resolve. */
  private answerProbes(arrival: Arrival): void {
    for (let i = 0; i < this.probes.length; ) {
      const p = this.probes[i]!;
      if (p.tag !== ANY_TAG && p.tag !== arrival.tag) {
        i++;
        continue;
      }
      this.probes.splice(i, 1);
      p.cleanup();
      p.resolve(messageInfo(arrival, this.peerId));
    }
  }

  /** A posted receive met its message: it leaves the unexpected queue (flow control) and goes to its path. */
  private deliver(recv: PendingRecv, frame: Arrival): void {
    recv.cleanup();
    if (!this.link.closed) this.link.flow.received(frame.type === FrameType.EAGER ? frame.data.byteLength : 0);
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
    const err = new SmcudaError(
      'SMCUDA_SENDER_FAILED',
      `peer ${this.peerId} could not send message ${seq}: ${message}; the message is lost, the endpoint stays open`,
    );
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
    // Closed: no IPC now, nor pending (a path choice made after this sees neither).
    this.link.ipcOk = false;
    this.link.ipcPending = false;
    // An orderly close (ours, or the peer's CLOSE) leaves the negotiation's
    // outcome as it was; a failure or a lost peer ends it BAD.
    this.neg.stop(orderly);
    this.link.sends.close(reason);
    this.link.flow.close(reason);
    // Messages that arrived whole (EAGER: their bytes are in the frame) stay receivable, as a socket's
    // buffered bytes are read after its peer closed; the others need the peer's memory or rings, gone now.
    const { posted } = this.matches.drainKeeping((a) => a.type === FrameType.EAGER);
    posted.push(...this.link.resends.values());
    this.link.resends.clear();
    for (const r of posted) {
      r.cleanup();
      r.reject(reason);
    }
    this.transfers.close(reason);
    this.registrations.close(reason, this.transfers.graceMs);
    this.ownWatchdog?.close();
    for (const p of this.probes.splice(0)) {
      p.cleanup();
      p.reject(reason);
    }
    for (const path of this.paths) path.close(reason);
    this.link.close();
    for (const off of this.unkeep.splice(0)) off();
    this.channel.off('frame', this.onFrame);
    this.emit('close', error ?? undefined);
  }
}

/**
 * A device `into` must fit its allocation: checked at recv() (by allocation,
 * paths/allocation-ranges.ts), with the message a send's source gets. A pointer
 * the driver does not know (freed) is left to the copy, which fails that
 * receive and tells the sender (FIN FAILED).
 */
export function checkIntoRoom(driver: CudaDriver, into: DeviceBuffer): number | undefined {
  if (into.length === 0 || !driver.isReady()) return undefined;
  try {
    return allocationRanges(driver).check(into, 'options.into');
  } catch (err) {
    if (err instanceof ArgumentRangeError) throw err;
    return undefined;
  }
}

/** A tag: u32, or ANY_TAG where `any` (receives and probes). */
function checkTag(tag: unknown, any: boolean): number {
  if (tag === undefined) return 0;
  if (typeof tag !== 'number') throw new ArgumentTypeError(`tag must be a number, got ${typeof tag}`);
  if (any && tag === ANY_TAG) return tag;
  if (!Number.isInteger(tag) || tag < 0 || tag > 0xffffffff) {
    throw new ArgumentRangeError(`tag must be an integer between 0 and 2^32-1${any ? ' (or ANY_TAG)' : ''}, got ${String(tag)}`);
  }
  return tag;
}

function noop(): void {}
