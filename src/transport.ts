/**
 * A Transport is one process's presence in a job: it owns the CUDA driver and
 * device, listens for and connects to peers, and keeps one Endpoint per peer.
 *
 *   const t = await Transport.create({ driver: 'auto' });
 *   await t.listen('/tmp/job/rank0.sock');          // or: const ep = await t.connect(path)
 *   t.on('endpoint', (ep) => ep.recv({ tag: 1 }));
 *
 * A runtime with its own control plane calls `attach(channel)` with any
 * ControlChannel instead of listen/connect. Shared memory with a peer (the
 * control rings, the staging rings) needs a descriptor channel: listen and
 * connect make one beside the socket; attach() has one only if it is given
 * (`descriptors`). Without one, nothing is shared by memory: every frame and
 * every device message that would be staged travels on the channel itself
 * (docs/reliability.md, "Trust").
 *
 * Connection set-up (src/auth/handshake.ts): each side sends HELLO (wire
 * version, pid, transport id, device UUID, a fresh nonce) as its first frame,
 * then PROOF, an HMAC of both nonces keyed with the job token; the token
 * itself never crosses the wire. The endpoint exists once the peer's PROOF
 * has verified. Until then a Unix channel takes only handshake-sized frames.
 */
import { EventEmitter } from 'node:events';
import { warmNegotiation } from '../machines/warm-up.js';
import { warmDataPath } from './data-path-warm-up.js';
import type { ControlChannel } from './channel/channel.js';
import { ShmChannel } from './channel/shm-channel.js';
import { GpuRuntime } from './gpu/gpu-runtime.js';
import { Watchdog } from './persistent/watchdog.js';
import { ProgressEngine } from './progress/engine.js';
import { KeepAlive } from './progress/keep-alive.js';
import { envTracePath } from './env.js';
import { clearStaleSocket, connectUnix, listenUnix, type ListenUnixOptions, type UnixChannelOptions, type UnixListener } from './channel/unix-channel.js';
import { Handshake, MAX_HANDSHAKE_FRAME_BYTES } from './auth/handshake.js';
import type { CudaDriver, DriverKind } from './cuda/driver.js';
import { openDriver } from './cuda/open-driver.js';
import { loadAddon } from './cuda/addon.js';
import type { FdChannel } from './channel/fd-channel.js';
import { debug } from './debug.js';
import { sweepDeadSegments } from './segment-owner.js';
import { checkIntoRoom, Endpoint, RECV_OPTION_KEYS, type RecvOptions } from './endpoint.js';
import { type FdRole, fdSocketPath, OwnedFdListener, setUpFdChannel } from './fd-setup.js';
import { describeAllocation, ExportTable } from './exports.js';
import { AnySourceReceives, type AnySourceWaiting, type ReceivedFrom } from './any-source.js';
import { checkMessageBuffer, isDeviceBuffer, type MessageBuffer } from './buffers.js';
import { assertHandle } from './cuda/validate.js';
import { ArgumentRangeError, ArgumentTypeError, ClosedError, ConfigError, PeerLostError, ProtocolError, type SmcudaError } from './errors.js';
import { ANY_TAG, nextOrder } from './matching.js';
import { abortReason } from './paths/pending-sends.js';
import type { MessageInfo, ReceivedData } from './received.js';
import { refuseUnknownKeys } from './option-keys.js';
import { type ResolvedOptions, resolveOptions, type TransportOptions } from './options.js';
import type { InspectOption, TransportInspector } from './inspect/transport-inspector.js';
import { FileTracer, nowUs, type Tracer } from './trace.js';
import { decodeFrame, encodeFrame } from './wire/codec.js';
import { Feature, type Frame, FrameType, type HelloFrame, NONCE_BYTES, WIRE_VERSION } from './wire/frames.js';

export interface TransportCreateOptions extends TransportOptions {
  /** A driver instance, or which one to open: 'auto' (default: native where a GPU is usable, else simulated), 'native', 'sim'. */
  driver?: CudaDriver | 'auto' | 'native' | 'sim';
  /**
   * Initialise CUDA now on `device` (default), or not until `useDevice()` is
   * called (`lazyDevice: true`): until then this process answers IPC
   * requests with NOT_READY, as in the smcuda design.
   */
  lazyDevice?: boolean;
  /** Append a JSON-lines trace to this file (default: $SMCUDA_TRACE, else off). */
  trace?: string;
  /** Serve a live page of this transport's endpoints on http://127.0.0.1:PORT/SECRET/ (0: any free port; see `inspectUrl`). */
  inspect?: InspectOption;
  /** How long a new connection may take to complete the handshake (HELLO and PROOF). Default 10000. */
  helloTimeoutMs?: number;
  /**
   * On Unix sockets: a frame begun must be complete within this many ms, or
   * the connection is dropped (a peer trickling a frame). Default 30000; 0: no limit.
   */
  frameTimeoutMs?: number;
  /**
   * With the native driver, run smcuda's data path once in the background
   * after create (two in-memory endpoints on the simulated driver, once per
   * process), so that a fresh process's first message does not pay for code
   * running for the first time: src/data-path-warm-up.ts. It takes the JS
   * thread tens of milliseconds once per process, and loads the simulated driver's
   * modules then (not before). It gives way to real work: once an endpoint
   * of this process starts device work (a device send or receive,
   * `negotiate()`, `register()`, the peer's negotiation, a device message
   * arriving), it stops after the step it is in and closes what it opened a
   * little later, off the first message's way; if real work came first, it
   * does not start (docs/benchmarks.md, "The data path's warm-up on the
   * first message"). Default true; `false` leaves it out (and the simulator
   * unloaded); ignored with the simulated driver.
   */
  warmUp?: boolean;
}

let warnedNoToken = false;

/**
 * Once per process: a transport without a job token admits any process of
 * the same user that can reach its socket (docs/reliability.md, "Trust").
 * The CLI makes one per job; a library user passes `token`.
 */
function warnNoToken(): void {
  if (warnedNoToken) return;
  warnedNoToken = true;
  process.emitWarning(
    'smcuda: a Transport was created without a job token: any process of this user that can reach its socket can connect as a peer. ' +
      "Pass `token` (e.g. crypto.randomBytes(16).toString('hex'), shared by the job's processes) to Transport.create.",
    { type: 'SmcudaWarning', code: 'SMCUDA_NO_TOKEN' },
  );
}

const DUPLICATE_PEER = 'SMCUDA_DUPLICATE_PEER';

/**
 * How long close() lets the watchdog release the queued starts of the
 * persistent transfers that failed as the endpoints closed (one POISON per
 * start, a tick of RELEASE_TICK_MS apart: milliseconds). Past it, the GPU
 * runtime's close still waits for nothing: the stream left waiting is the
 * caller's, as a graph's replays are.
 */
const WATCHDOG_RELEASE_MS = 2000;

/**
 * A refused handshake tells the other side why with a CLOSE frame (within the
 * handshake's frame bound): a duplicate id would otherwise reach the
 * connecting side as "closed during the handshake".
 */
function tellRefused(channel: ControlChannel, message: string): void {
  try {
    // At most 240 bytes: the other side takes only handshake-sized frames yet.
    const reason = Buffer.from(`${DUPLICATE_PEER}: ${message}`).subarray(0, 240).toString();
    channel.send(encodeFrame({ type: FrameType.CLOSE, reason }));
  } catch {
    // the channel is already gone: the other side sees it closed
  }
}

/** The error for a CLOSE received during the handshake: the other side refused this connection. */
function refusal(reason: string, label: string): Error {
  if (reason.startsWith(`${DUPLICATE_PEER}: `)) {
    return new ProtocolError(`${label} refused the connection: ${reason.slice(DUPLICATE_PEER.length + 2)}`, DUPLICATE_PEER);
  }
  return new PeerLostError(`${label} refused the connection: ${reason}`);
}

/** TransportCreateOptions' keys beyond TransportOptions (resolveOptions refuses any key in neither). */
const CREATE_ONLY_KEYS = ['driver', 'lazyDevice', 'trace', 'inspect', 'helloTimeoutMs', 'frameTimeoutMs', 'warmUp'] as const satisfies readonly Exclude<
  keyof TransportCreateOptions,
  keyof TransportOptions
>[];

const allCreateKeys: [Exclude<keyof TransportCreateOptions, keyof TransportOptions | (typeof CREATE_ONLY_KEYS)[number]>] extends [never] ? true : false = true;
void allCreateKeys;

export interface TransportEvents {
  /** A new endpoint (accepted or connected). */
  endpoint: [endpoint: Endpoint];
  /**
   * A connection that failed before it became an endpoint (bad HELLO, wrong
   * token, oversized or unexpected frame, handshake timeout, …). A connection
   * closed before sending anything (such as another listener's liveness
   * probe) is not reported.
   */
  refused: [error: Error];
}

/**
 * One process's presence in a job: it owns the CUDA driver and device,
 * listens for and connects to peers, and keeps one Endpoint per peer.
 * Make one with `Transport.create()`.
 */
export class Transport extends EventEmitter<TransportEvents> {
  /** This transport's id (TransportOptions.id): peers know it as the endpoint's `peerId`. */
  readonly id: string;
  /** The CUDA driver in use (allocate, copy and free device memory with it). */
  readonly driver: CudaDriver;
  /** Which driver this transport uses: 'native' (a GPU through libcuda) or 'sim' (the simulated driver). */
  readonly driverKind: DriverKind;
  /** Why that driver, in words (e.g. "simulated driver: libcuda.so.1 not found: …"). */
  readonly driverReason: string;
  private readonly opts: ResolvedOptions;
  private readonly ownsDriver: boolean;
  private readonly endpointsByPeer = new Map<string, Endpoint>();
  private readonly sockets: UnixListener[] = [];
  /** The descriptor sockets beside the control sockets (fd-setup.ts). */
  private readonly fdListeners: OwnedFdListener[] = [];
  private readonly pendingChannels = new Set<ControlChannel>();
  private readonly tracer: Tracer | undefined;
  private readonly inspector: TransportInspector | undefined;
  private readonly helloTimeoutMs: number;
  private readonly channelOptions: UnixChannelOptions;
  /** listen() and connect() calls still setting up their socket: close() waits for them. */
  private readonly settingUp = new Set<Promise<unknown>>();
  private readonly exports: ExportTable;
  /** Polls the endpoints' control rings and GPU completions (src/progress/engine.ts). */
  private readonly progress: ProgressEngine;
  /** Watches the flags of every persistent transfer of this transport's endpoints (src/persistent/watchdog.ts). */
  private readonly watchdog: Watchdog;
  /**
   * @internal The GPU runtime (src/gpu/): the events, stream marks, holds and
   * streams of this transport's endpoints, watchdog and communicators.
   */
  readonly gpu: GpuRuntime;
  private closed = false;
  /** recv() calls from any peer still waiting (any-source.ts). */
  private readonly anySource = new AnySourceReceives();
  /** Its sockets and listeners keep the process alive only while something is pending (progress/keep-alive.ts). */
  private readonly keepAlive = new KeepAlive();
  /** Transport-level recv() calls not settled yet. */
  private receivingAny = 0;
  /** Promises given to keepAliveWhile not settled yet. */
  private awaiting = 0;

  private constructor(
    driver: CudaDriver,
    reason: string,
    owns: boolean,
    opts: ResolvedOptions,
    create: TransportCreateOptions,
    fileTracer: FileTracer | undefined,
    inspector: TransportInspector | undefined,
  ) {
    super();
    this.driver = driver;
    this.driverKind = driver.kind;
    this.driverReason = reason;
    this.ownsDriver = owns;
    this.opts = opts;
    this.id = opts.id;
    this.helloTimeoutMs = create.helloTimeoutMs ?? 10_000;
    this.channelOptions = { handshakeFrameBytes: MAX_HANDSHAKE_FRAME_BYTES, frameTimeoutMs: create.frameTimeoutMs };
    this.exports = new ExportTable(driver);
    this.progress = new ProgressEngine(opts.controlSpinUs);
    this.gpu = new GpuRuntime(driver, { engine: this.progress, spinUs: opts.completionSpinUs });
    this.watchdog = new Watchdog(this.gpu, { timeoutMs: opts.persistent.timeoutMs });
    this.inspector = inspector;
    this.tracer = this.inspector ? this.inspector.tracer(fileTracer) : fileTracer;
    // Pending here: a socket set up, a handshake, an any-source receive, or a listener someone waits on ('endpoint' listeners).
    this.keepAlive.addSource(
      () =>
        this.settingUp.size > 0 ||
        this.pendingChannels.size > 0 ||
        this.receivingAny > 0 ||
        this.awaiting > 0 ||
        (this.sockets.length > 0 && this.listenerCount('endpoint') > 0),
    );
    (this as EventEmitter).on('newListener', (event: string | symbol) => {
      if (event === 'endpoint') this.keepAlive.busy();
    });
  }

  static async create(options: TransportCreateOptions = {}): Promise<Transport> {
    // Bad options (unknown keys too) are refused before a driver is opened.
    const opts = resolveOptions(options, CREATE_ONLY_KEYS, 'Transport.create options');
    if (opts.token === '') warnNoToken();
    const helloMs = options.helloTimeoutMs;
    if (helloMs !== undefined && (typeof helloMs !== 'number' || !(helloMs > 0) || helloMs > 2 ** 31 - 1)) {
      throw new ConfigError(`helloTimeoutMs must be a positive number of milliseconds (at most 2147483647), got ${String(helloMs)}`);
    }
    if (options.warmUp !== undefined && typeof options.warmUp !== 'boolean') throw new ConfigError(`warmUp must be a boolean, got ${typeof options.warmUp}`);
    const frameMs = options.frameTimeoutMs;
    if (frameMs !== undefined && (typeof frameMs !== 'number' || !(frameMs >= 0) || frameMs > 2 ** 31 - 1)) {
      throw new ConfigError(`frameTimeoutMs must be a number of milliseconds in 0..2147483647 (0: no limit), got ${String(frameMs)}`);
    }
    // Loaded only when asked for (the page's HTTP server and diagrams are no part of `import 'smcuda'`); its option is checked before anything is opened.
    const inspector =
      options.inspect !== undefined ? new (await import('./inspect/transport-inspector.js')).TransportInspector(options.inspect, opts.id) : undefined;
    // The trace file first: a path it must refuse (a link, another user's file) fails before anything is opened.
    const tracePath = options.trace ?? envTracePath();
    const fileTracer = tracePath ? new FileTracer(tracePath, opts.id) : undefined;
    // Segments of processes that died without cleaning up (SIGKILL, a staged send never granted):
    // only dead owners' on this boot and in this pid namespace, of this uid (src/segment-owner.ts).
    const swept = sweepDeadSegments();
    if (swept.length > 0) debug('transport: removed %d shared-memory segment(s) of dead processes: %s', swept.length, swept.join(', '));
    let driver: CudaDriver;
    let reason: string;
    let owns: boolean;
    if (typeof options.driver === 'object' && options.driver !== null) {
      driver = options.driver;
      reason = `${driver.kind} driver given by the application`;
      owns = false;
    } else {
      const choice = options.driver ?? 'auto';
      if (choice !== 'auto' && choice !== 'native' && choice !== 'sim') {
        fileTracer?.close();
        throw new ConfigError(`driver must be 'auto', 'native', 'sim' or a CudaDriver, got ${String(choice)}`);
      }
      const opened = await openDriver({ driver: choice }).catch((err: unknown) => {
        fileTracer?.close();
        throw err;
      });
      driver = opened.driver;
      reason = opened.reason;
      owns = true;
    }
    const t = new Transport(driver, reason, owns, opts, options, fileTracer, inspector);
    // The negotiation's code, then the data path's, compiled while the application connects, not on its first device message's way
    // (machines/warm-up.ts, data-path-warm-up.ts; the data path only for the native driver: the simulator's first message is no target;
    // it gives way to the first real device work, src/warm-up-yield.ts).
    const warmData = driver.kind === 'native' && options.warmUp !== false;
    setImmediate(() => void warmNegotiation().then(() => (warmData ? warmDataPath((o) => Transport.create(o)) : undefined)));
    if (!options.lazyDevice) t.useDevice(t.opts.device);
    debug('transport %s: %s', t.id, reason);
    if (t.inspector) {
      try {
        await t.inspector.listen();
      } catch (err) {
        await t.close();
        throw err;
      }
    }
    return t;
  }

  /** Initialises CUDA on `device` (if not yet): from now on IPC requests are answered. */
  useDevice(device: number = this.opts.device): void {
    this.assertOpen();
    this.driver.init();
    const count = this.driver.deviceCount();
    if (device >= count) {
      throw new ConfigError(`device ${device} does not exist: this process sees ${count} device(s) (${this.driver.kind} driver); check CUDA_VISIBLE_DEVICES`);
    }
    if (this.driver.currentDevice() !== device) this.driver.setDevice(device);
  }

  /** The UUID of this process's device, or '' before useDevice. */
  get deviceUuid(): string {
    const dev = this.driver.currentDevice();
    return dev < 0 ? '' : this.driver.deviceInfo(dev).uuid;
  }

  /**
   * Accepts peers on a Unix socket at `path` (mode 0600, in a directory only
   * this user can use); peers of another uid and wrong tokens are refused and
   * reported as 'refused'.
   */
  async listen(path: string, options: Pick<ListenUnixOptions, 'privateDir' | 'peerUids'> = {}): Promise<void> {
    this.assertOpen();
    refuseUnknownKeys('listen options', options, ['privateDir', 'peerUids']);
    const fd: { listener: OwnedFdListener | undefined } = { listener: undefined };
    const setup = listenUnix(path, (channel) => this.accept(channel, fd), {
      ...this.channelOptions,
      ...options,
      onRefused: (err) => this.emit('refused', err),
      // The descriptor socket is served before peers can reach the control socket: a peer accepted
      // in between would handshake without descriptors (no rings, no staging, no shared call table).
      beforeReachable: async () => {
        if (!this.descriptorsCapable()) return;
        // Only a dead process's socket is replaced at <path>.fd; a user's file or a live socket there fails listen().
        await clearStaleSocket(fdSocketPath(path));
        fd.listener = OwnedFdListener.open(path, { peerUids: options.peerUids, onRefused: (err) => this.emit('refused', err) });
        if (fd.listener) this.fdListeners.push(fd.listener);
      },
    });
    // listen() failed after the descriptor socket was served (e.g. `path` appeared meanwhile): it goes too.
    setup.catch(() => this.dropFdListener(fd.listener));
    await this.whileOpen(
      setup.then(async (listener) => {
        if (this.closed) {
          // close() ran while the socket was being set up: nothing may be left listening.
          await listener.close();
          this.dropFdListener(fd.listener);
          throw new ClosedError(`transport ${this.id} was closed while listen(${path}) was in progress`);
        }
        this.sockets.push(listener);
        this.keepAlive.add(listener);
      }),
    );
  }

  /** Closes a descriptor listener of a listen() that failed or was cut short by close(). */
  private dropFdListener(l: OwnedFdListener | undefined): void {
    if (l === undefined) return;
    const i = this.fdListeners.indexOf(l);
    if (i >= 0) this.fdListeners.splice(i, 1);
    l.close();
  }

  /** Connects to a peer listening at `path`. Rejects with NoListenerError when nothing listens there. */
  async connect(path: string): Promise<Endpoint> {
    this.assertOpen();
    const channel = await this.whileOpen(connectUnix(path, this.channelOptions));
    if (this.closed) {
      channel.close();
      throw new ClosedError(`transport ${this.id} was closed while connect(${path}) was in progress`);
    }
    return this.handshake(channel, undefined, { connectTo: path });
  }

  /** Tracks a listen/connect socket set-up (not a handshake: close() ends those) so that close() can wait for it. */
  private whileOpen<T>(setup: Promise<T>): Promise<T> {
    this.keepAlive.busy();
    this.settingUp.add(setup);
    const done = () => this.settingUp.delete(setup);
    setup.then(done, done);
    return setup;
  }

  /** A listener's new channel: the handshake, then an endpoint; failures are 'refused'. */
  private accept(channel: ControlChannel, fd: FdRole): void {
    if (this.closed) {
      channel.close();
      return;
    }
    let probe = false;
    this.handshake(channel, () => (probe = true), fd).catch((err: Error) => {
      // A connection closed before it sent anything presented nothing to refuse:
      // another listener's liveness probe of this path looks like that.
      if (probe) debug('transport %s: %s closed before its first frame (a probe?)', this.id, channel.label);
      else if (!(err instanceof ClosedError)) this.emit('refused', err); // ClosedError: our own close() ended it
    });
  }

  /**
   * Makes an endpoint over any ControlChannel (the HELLO/PROOF handshake
   * first). `descriptors`: a descriptor channel connected to the same peer
   * (FdChannel, e.g. one end of `FdChannel.pair()` for a peer in this
   * process); the application vouches that it reaches the peer at the other
   * end of `channel`. With it, rings and staging work as over listen/connect;
   * without it nothing is shared by memory with that peer.
   */
  attach(channel: ControlChannel, options: { descriptors?: FdChannel } = {}): Promise<Endpoint> {
    this.assertOpen();
    const given = options.descriptors;
    const p = this.handshake(channel, undefined, given !== undefined ? { given } : undefined);
    if (given !== undefined) p.catch(() => given.close());
    return p;
  }

  /**
   * `onSilentClose`: called (before the rejection) when the peer closes the channel before its first frame.
   * `fd`: this connection's side of the descriptor channel (none for attached channels).
   */
  private handshake(channel: ControlChannel, onSilentClose?: () => void, fd?: FdRole | { given: FdChannel }): Promise<Endpoint> {
    this.keepAlive.busy();
    this.pendingChannels.add(channel);
    // Shared memory only where descriptors can travel: our listener's or connector's descriptor socket, or one given to attach().
    const descriptors = fd !== undefined && ('given' in fd || ('listener' in fd ? fd.listener !== undefined : this.descriptorsCapable()));
    const hs = new Handshake({
      id: this.id,
      token: this.opts.token,
      deviceUuid: this.deviceUuid,
      features: this.features(descriptors),
      peerPid: channel.peerPid,
    });
    const ourHello = hs.hello;
    let helloSentAt = 0;
    let frames = 0;
    const handshakeFrames: ['send' | 'recv', Frame, number][] = [];
    return new Promise<Endpoint>((resolve, reject) => {
      const fail = (err: Error) => {
        debug('transport %s: connection %s refused: %s', this.id, channel.label, err.message);
        if ((err as SmcudaError).code === DUPLICATE_PEER) tellRefused(channel, err.message); // so the other side learns why
        cleanup();
        this.pendingChannels.delete(channel);
        channel.close();
        reject(err);
      };
      const timer = setTimeout(
        () => fail(new PeerLostError(`${channel.label} did not complete the handshake within ${this.helloTimeoutMs} ms`)),
        this.helloTimeoutMs,
      );
      const onClose = (err?: Error) => {
        if (this.closed) return fail(new ClosedError(`transport ${this.id} was closed during the handshake with ${channel.label}`));
        if (err instanceof ProtocolError) return fail(err);
        if (frames === 0) onSilentClose?.();
        fail(new PeerLostError(`${channel.label} closed during the handshake${err ? `: ${err.message}` : ''}`, { cause: err }));
      };
      const onFrame = (bytes: Uint8Array) => {
        frames++;
        let hello: HelloFrame;
        try {
          const frame = decodeFrame(bytes);
          if (frame.type === FrameType.CLOSE && frame.reason.startsWith(`${DUPLICATE_PEER}: `)) throw refusal(frame.reason, channel.label);
          const step = hs.receive(frame);
          this.checkPeerId(step.peer);
          if (step.kind === 'proof') {
            // Traced only once the peer has proved the token (below): a peer that fails the PROOF never
            // reaches the trace or the inspector page, whatever id it claimed.
            handshakeFrames.push(['send', ourHello, helloSentAt], ['recv', step.peer, nowUs()]);
            channel.send(encodeFrame(step.proof));
            handshakeFrames.push(['send', step.proof, nowUs()]);
            return;
          }
          hello = step.peer;
          for (const [dir, f, at] of handshakeFrames) this.tracer?.frame(hello.peerId, dir, f, at);
          this.tracer?.frame(hello.peerId, 'recv', frame);
        } catch (err) {
          fail(err as Error);
          return;
        }
        cleanup();
        this.pendingChannels.delete(channel);
        channel.handshakeDone?.();
        // Both sides speak the control rings and pass descriptors: the rings upgrade once the descriptor channel is up.
        const both = (ourHello.features ?? 0) & (hello.features ?? 0);
        const ring = (both & Feature.RING) !== 0 && (both & Feature.DESCRIPTORS) !== 0;
        const epChannel = ring ? new ShmChannel(channel, { progress: this.progress }) : channel;
        // Constructed synchronously inside this frame handler, so the next frame already reaches it.
        const ep = new Endpoint(
          epChannel,
          {
            driver: this.driver,
            options: this.opts,
            local: this.hello(descriptors),
            exports: this.exports,
            tracer: this.tracer,
            progress: this.progress,
            watchdog: this.watchdog,
            gpu: this.gpu,
            keepAlive: this.keepAlive,
          },
          hello,
        );
        ep.rival = this.anySource.rivalFor(ep);
        this.endpointsByPeer.set(hello.peerId, ep);
        debug('transport %s: endpoint to %s (pid %d, device %s) over %s', this.id, hello.peerId, hello.pid, hello.deviceUuid || 'none', epChannel.label);
        ep.once('close', () => {
          if (this.endpointsByPeer.get(hello.peerId) === ep) this.endpointsByPeer.delete(hello.peerId);
        });
        if (fd !== undefined && 'given' in fd) {
          if ((both & Feature.DESCRIPTORS) !== 0) ep.attachFdChannel(fd.given);
          else fd.given.close();
        } else {
          setUpFdChannel(ep, fd, this.opts.token, ourHello, hello, undefined, channel.peerPid ?? hello.pid);
        }
        this.emit('endpoint', ep);
        resolve(ep);
      };
      const cleanup = () => {
        clearTimeout(timer);
        channel.off('frame', onFrame);
        channel.off('close', onClose);
      };
      channel.on('frame', onFrame);
      channel.on('close', onClose);
      try {
        helloSentAt = nowUs();
        channel.send(encodeFrame(ourHello));
      } catch (err) {
        fail(err as Error);
      }
    });
  }

  /**
   * Tells every peer to drop its mapping of the allocation holding `ptr`
   * (INVALIDATE), so that freeing it really frees the device memory.
   */
  invalidate(ptr: bigint): void {
    this.assertOpen();
    this.invalidateAllocation(describeAllocation(this.driver, ptr));
  }

  /** Invalidates the allocation on every peer, then frees it (cuMemFree). */
  free(ptr: bigint): void {
    this.assertOpen();
    const alloc = describeAllocation(this.driver, ptr);
    this.invalidateAllocation(alloc);
    this.exports.forget(alloc.base);
    this.driver.memFree(ptr);
  }

  private invalidateAllocation(alloc: { base: bigint; bufferId: bigint; device: number }): void {
    for (const ep of this.endpointsByPeer.values()) ep.invalidateAllocation(alloc);
  }

  /**
   * Receives the next message from any peer (MPI_ANY_SOURCE), with `tag` or
   * any tag (`ANY_TAG`); resolves with the message and the endpoint it came
   * by. Among receives posted on endpoints and here, the earliest-posted
   * that matches a message takes it. Rejects when the transport closes or
   * `signal` aborts; an endpoint closing does not end it.
   */
  recv<Into extends MessageBuffer | undefined = undefined>(options: RecvOptions & { into?: Into } = {}): Promise<ReceivedFrom<ReceivedData<Into>>> {
    this.assertOpen();
    refuseUnknownKeys('recv options', options, RECV_OPTION_KEYS);
    const tag = this.validateRecv(options);
    const first = this.firstArrival(tag);
    if (first !== undefined) {
      const ep = first;
      return ep.recv<Into>(options).then((r) => Object.assign(r, { endpoint: ep }));
    }
    if (options.signal?.aborted) return Promise.reject(abortReason(options.signal));
    this.keepAlive.busy();
    this.receivingAny++;
    const p = new Promise<ReceivedFrom<ReceivedData<Into>>>((resolve, reject) => {
      const w: AnySourceWaiting = { tag, order: nextOrder(), into: options.into, stream: options.stream, resolve: resolve as never, reject, cleanup: () => {} };
      const signal = options.signal;
      if (signal) {
        const onAbort = () => {
          if (this.anySource.remove(w)) reject(abortReason(signal));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        w.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      this.anySource.add(w);
    });
    const done = () => void this.receivingAny--;
    p.then(done, done);
    return p;
  }

  /**
   * @internal Keeps the process alive until `p` settles: for a layer above
   * (the Communicator) whose call waits on more than this transport's sends
   * and receives, which count by themselves. An idle transport lets the
   * process exit (progress/keep-alive.ts).
   */
  keepAliveWhile<T>(p: Promise<T>): Promise<T> {
    this.keepAlive.busy();
    this.awaiting++;
    const done = () => void this.awaiting--;
    p.then(done, done);
    return p;
  }

  /** What the next message from any peer that `recv({ tag })` would take is, without receiving it; undefined if none waits. */
  tryProbe(options: { tag?: number } = {}): MessageInfo | undefined {
    this.assertOpen();
    const tag = this.validateRecv({ tag: options.tag });
    return this.firstArrival(tag)?.tryProbe(options);
  }

  /** The endpoint whose message matching `tag` arrived first (MPI's any-source order), if any waits. */
  private firstArrival(tag: number): Endpoint | undefined {
    let first: Endpoint | undefined;
    let firstOrder = Infinity;
    for (const ep of this.endpointsByPeer.values()) {
      const order = ep.arrivalOrder(tag);
      if (order < firstOrder) {
        firstOrder = order;
        first = ep;
      }
    }
    return first;
  }

  /** The argument checks of an endpoint's recv(), for a receive no endpoint takes yet; returns the tag. */
  private validateRecv(options: RecvOptions): number {
    const tag = options.tag ?? 0;
    if (typeof tag !== 'number') throw new ArgumentTypeError(`tag must be a number, got ${typeof tag}`);
    if (tag !== ANY_TAG && (!Number.isInteger(tag) || tag < 0 || tag > 0xffffffff)) {
      throw new ArgumentRangeError(`tag must be an integer between 0 and 2^32-1 (or ANY_TAG), got ${String(tag)}`);
    }
    const into = options.into;
    if (into !== undefined) {
      checkMessageBuffer('options.into', into);
      if (isDeviceBuffer(into)) checkIntoRoom(this.driver, into);
    }
    if (options.stream !== undefined) assertHandle('options.stream', options.stream);
    return tag;
  }

  /** The inspector page's address, when created with `inspect`. */
  get inspectUrl(): string | undefined {
    return this.inspector?.url;
  }

  /** The open endpoint to the peer whose transport id is `peerId`, if any. */
  endpoint(peerId: string): Endpoint | undefined {
    return this.endpointsByPeer.get(peerId);
  }

  /** Every open endpoint of this transport (a copy: closing one while iterating is fine). */
  endpoints(): Endpoint[] {
    return [...this.endpointsByPeer.values()];
  }

  /**
   * Closes every endpoint and listener, then the driver if this transport
   * opened it. A listen() or connect() still in progress rejects with
   * ClosedError and leaves nothing open; every later call throws ClosedError.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.settingUp]);
    for (const ep of this.endpointsByPeer.values()) ep.close('transport closed');
    this.endpointsByPeer.clear();
    this.anySource.rejectAll(new ClosedError(`transport ${this.id} was closed`));
    for (const ch of this.pendingChannels) ch.close();
    await Promise.all(this.sockets.map((l) => l.close()));
    for (const l of this.fdListeners) l.close();
    this.tracer?.close();
    await this.inspector?.close();
    // The endpoints' persistent transfers failed as they closed; their starts still queued wait
    // on flags only the watchdog releases, and it needs the progress engine: both go after.
    await this.watchdog.released(WATCHDOG_RELEASE_MS);
    this.progress.stop();
    this.keepAlive.close();
    this.watchdog.close();
    this.gpu.close(new ClosedError(`transport ${this.id} was closed`));
    if (this.ownsDriver) this.driver.close();
  }

  /** `descriptors`: this connection has (or will have) a descriptor channel. */
  private features(descriptors: boolean): number {
    const register = this.registerCapable() ? Feature.REGISTER : 0;
    if (!descriptors) return Feature.FINS | register;
    return (this.opts.controlRing ? Feature.RING : 0) | Feature.FINS | Feature.DESCRIPTORS | (this.fdCapable() ? Feature.FD_MEMORY : 0) | register;
  }

  /** Whether the addon can make sealed segments and pass descriptors (then listen/connect make a descriptor channel). */
  private descriptorsCapable(): boolean {
    if (this.descriptors === undefined) {
      try {
        const a = loadAddon() as Partial<ReturnType<typeof loadAddon>>;
        this.descriptors = typeof a.sealedCreate === 'function' && typeof a.fdListen === 'function';
      } catch {
        this.descriptors = false;
      }
    }
    return this.descriptors;
  }
  private descriptors: boolean | undefined;

  /** Whether this driver can export and import VMM and pool memory by descriptor (then HELLO announces FD_MEMORY). */
  private fdCapable(): boolean {
    return (this.fdMemory ??= this.driver.status().fdMemory === true);
  }
  private fdMemory: boolean | undefined;

  /** Whether this driver runs the stream memory operations persistent transfers are made of (then HELLO announces REGISTER). */
  private registerCapable(): boolean {
    if (this.register === undefined) {
      const st = this.driver.gpuDrivenStatus();
      this.register = st.streamMemOps && st.memOps64;
    }
    return this.register;
  }
  private register: boolean | undefined;

  /** This process's HELLO as the endpoint keeps it (the nonce is the handshake's business). */
  private hello(descriptors: boolean): HelloFrame {
    return {
      type: FrameType.HELLO,
      version: WIRE_VERSION,
      pid: process.pid,
      peerId: this.id,
      deviceUuid: this.deviceUuid,
      nonce: new Uint8Array(NONCE_BYTES),
      features: this.features(descriptors),
    };
  }

  private checkPeerId(h: HelloFrame): void {
    if (this.endpointsByPeer.has(h.peerId)) {
      throw new ProtocolError(
        `a peer with id ${JSON.stringify(h.peerId)} is already connected to ${JSON.stringify(this.id)}; ids must be unique in a job (TransportOptions.id)`,
        DUPLICATE_PEER,
      );
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError(`transport ${this.id} is closed: create a new Transport`);
  }
}
