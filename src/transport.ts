/**
 * A Transport is one process's presence in a job: it owns the CUDA driver and
 * device, listens for and connects to peers, and keeps one Endpoint per peer.
 *
 *   const t = await Transport.create({ driver: 'auto' });
 *   await t.listen('/tmp/job/rank0.sock');          // or: const ep = await t.connect(path)
 *   t.on('endpoint', (ep) => ep.recv({ tag: 1 }));
 *
 * A runtime with its own control plane calls `attach(channel)` with any
 * ControlChannel instead of listen/connect.
 *
 * Connection set-up (src/auth/handshake.ts): each side sends HELLO (wire
 * version, pid, transport id, device UUID, a fresh nonce) as its first frame,
 * then PROOF, an HMAC of both nonces keyed with the job token; the token
 * itself never crosses the wire. The endpoint exists once the peer's PROOF
 * has verified. Until then a Unix channel takes only handshake-sized frames.
 */
import { EventEmitter } from 'node:events';
import type { ControlChannel } from './channel/channel.js';
import { ShmChannel } from './channel/shm-channel.js';
import { ProgressEngine } from './progress/engine.js';
import { envTracePath } from './env.js';
import { clearStaleSocket, connectUnix, listenUnix, type ListenUnixOptions, type UnixChannelOptions, type UnixListener } from './channel/unix-channel.js';
import { Handshake, MAX_HANDSHAKE_FRAME_BYTES } from './auth/handshake.js';
import type { CudaDriver, DriverKind } from './cuda/driver.js';
import { openDriver } from './cuda/open-driver.js';
import { debug } from './debug.js';
import { sweepDeadSegments } from './segment-owner.js';
import { Endpoint } from './endpoint.js';
import { type FdRole, fdSocketPath, OwnedFdListener, setUpFdChannel } from './fd-setup.js';
import { describeAllocation, ExportTable } from './exports.js';
import { ClosedError, ConfigError, PeerLostError, ProtocolError } from './errors.js';
import { type ResolvedOptions, resolveOptions, type TransportOptions } from './options.js';
import { TransportInspector, type InspectOption } from './inspect/transport-inspector.js';
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
}

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

export class Transport extends EventEmitter<TransportEvents> {
  readonly id: string;
  readonly driver: CudaDriver;
  /** Which driver, and why it was chosen. */
  readonly driverKind: DriverKind;
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
  private closed = false;

  private constructor(driver: CudaDriver, reason: string, owns: boolean, opts: ResolvedOptions, create: TransportCreateOptions, fileTracer: FileTracer | undefined) {
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
    this.inspector = create.inspect !== undefined ? new TransportInspector(create.inspect, this.id) : undefined;
    this.tracer = this.inspector ? this.inspector.tracer(fileTracer) : fileTracer;
  }

  static async create(options: TransportCreateOptions = {}): Promise<Transport> {
    const opts = resolveOptions(options); // bad options are refused before a driver is opened
    const helloMs = options.helloTimeoutMs;
    if (helloMs !== undefined && (typeof helloMs !== 'number' || !(helloMs > 0) || helloMs > 2 ** 31 - 1)) {
      throw new ConfigError(`helloTimeoutMs must be a positive number of milliseconds (at most 2147483647), got ${String(helloMs)}`);
    }
    const frameMs = options.frameTimeoutMs;
    if (frameMs !== undefined && (typeof frameMs !== 'number' || !(frameMs >= 0) || frameMs > 2 ** 31 - 1)) {
      throw new ConfigError(`frameTimeoutMs must be a number of milliseconds in 0..2147483647 (0: no limit), got ${String(frameMs)}`);
    }
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
    const t = new Transport(driver, reason, owns, opts, options, fileTracer);
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
    const fd: { listener: OwnedFdListener | undefined } = { listener: undefined };
    const setup = listenUnix(path, (channel) => this.accept(channel, fd), {
      ...this.channelOptions,
      ...options,
      onRefused: (err) => this.emit('refused', err),
    });
    await this.whileOpen(
      setup.then(async (listener) => {
        if (this.closed) {
          // close() ran while the socket was being set up: nothing may be left listening.
          await listener.close();
          throw new ClosedError(`transport ${this.id} was closed while listen(${path}) was in progress`);
        }
        if (this.fdCapable()) {
          // Only a dead process's socket is replaced at <path>.fd; a user's file or a live socket there fails listen().
          await clearStaleSocket(fdSocketPath(path)).catch(async (err: unknown) => {
            await listener.close();
            throw err;
          });
        }
        this.sockets.push(listener);
        if (this.fdCapable()) {
          fd.listener = OwnedFdListener.open(path, { peerUids: options.peerUids, onRefused: (err) => this.emit('refused', err) });
          if (fd.listener) this.fdListeners.push(fd.listener);
        }
      }),
    );
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

  /** Makes an endpoint over any ControlChannel (the HELLO/PROOF handshake first). */
  attach(channel: ControlChannel): Promise<Endpoint> {
    this.assertOpen();
    return this.handshake(channel);
  }

  /**
   * `onSilentClose`: called (before the rejection) when the peer closes the channel before its first frame.
   * `fd`: this connection's side of the descriptor channel (none for attached channels).
   */
  private handshake(channel: ControlChannel, onSilentClose?: () => void, fd?: FdRole): Promise<Endpoint> {
    this.pendingChannels.add(channel);
    const hs = new Handshake({ id: this.id, token: this.opts.token, deviceUuid: this.deviceUuid, features: this.features(), peerPid: channel.peerPid });
    const ourHello = hs.hello;
    let helloSentAt = 0;
    let frames = 0;
    const handshakeFrames: ['send' | 'recv', Frame, number][] = [];
    return new Promise<Endpoint>((resolve, reject) => {
      const fail = (err: Error) => {
        debug('transport %s: connection %s refused: %s', this.id, channel.label, err.message);
        cleanup();
        this.pendingChannels.delete(channel);
        channel.close();
        reject(err);
      };
      const timer = setTimeout(() => fail(new PeerLostError(`${channel.label} did not complete the handshake within ${this.helloTimeoutMs} ms`)), this.helloTimeoutMs);
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
        // Both sides speak the control rings: the peer's RING_OFFER follows its PROOF.
        const ring = ((ourHello.features ?? 0) & (hello.features ?? 0) & Feature.RING) !== 0;
        const epChannel = ring ? new ShmChannel(channel, { segments: this.driver, progress: this.progress }) : channel;
        // Constructed synchronously inside this frame handler, so the next frame already reaches it.
        const ep = new Endpoint(epChannel, { driver: this.driver, options: this.opts, local: this.hello(), exports: this.exports, tracer: this.tracer, progress: this.progress }, hello);
        this.endpointsByPeer.set(hello.peerId, ep);
        debug('transport %s: endpoint to %s (pid %d, device %s) over %s', this.id, hello.peerId, hello.pid, hello.deviceUuid || 'none', epChannel.label);
        ep.once('close', () => {
          if (this.endpointsByPeer.get(hello.peerId) === ep) this.endpointsByPeer.delete(hello.peerId);
        });
        setUpFdChannel(ep, fd, this.opts.token, ourHello, hello, undefined, channel.peerPid ?? hello.pid);
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

  /** The inspector page's address, when created with `inspect`. */
  get inspectUrl(): string | undefined {
    return this.inspector?.url;
  }

  endpoint(peerId: string): Endpoint | undefined {
    return this.endpointsByPeer.get(peerId);
  }

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
    for (const ch of this.pendingChannels) ch.close();
    await Promise.all(this.sockets.map((l) => l.close()));
    for (const l of this.fdListeners) l.close();
    this.tracer?.close();
    await this.inspector?.close();
    this.progress.stop();
    if (this.ownsDriver) this.driver.close();
  }

  private features(): number {
    return (this.opts.controlRing ? Feature.RING : 0) | Feature.FINS | (this.fdCapable() ? Feature.FD_MEMORY : 0);
  }

  /** Whether this driver can export and import VMM and pool memory by descriptor (then HELLO announces FD_MEMORY). */
  private fdCapable(): boolean {
    return (this.fdMemory ??= this.driver.status().fdMemory === true);
  }
  private fdMemory: boolean | undefined;

  /** This process's HELLO as the endpoint keeps it (the nonce is the handshake's business). */
  private hello(): HelloFrame {
    return { type: FrameType.HELLO, version: WIRE_VERSION, pid: process.pid, peerId: this.id, deviceUuid: this.deviceUuid, nonce: new Uint8Array(NONCE_BYTES), features: this.features() };
  }

  private checkPeerId(h: HelloFrame): void {
    if (this.endpointsByPeer.has(h.peerId)) {
      throw new ProtocolError(`a peer with id ${h.peerId} is already connected; ids must be unique in a job`, 'SMCUDA_DUPLICATE_PEER');
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError(`transport ${this.id} is closed: create a new Transport`);
  }
}
