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
 * Connection set-up: each side sends HELLO (wire version, pid, transport id,
 * device UUID, job token) as its first frame; the endpoint exists once the
 * peer's HELLO has arrived and checked out.
 */
import { EventEmitter } from 'node:events';
import type { ControlChannel } from './channel/channel.js';
import { ShmChannel } from './channel/shm-channel.js';
import { Spinner } from './channel/spinner.js';
import { connectUnix, listenUnix, type ListenUnixOptions, type UnixListener } from './channel/unix-channel.js';
import type { CudaDriver, DriverKind } from './cuda/driver.js';
import { openDriver } from './cuda/open-driver.js';
import { debug } from './debug.js';
import { sweepDeadSegments } from './segment-owner.js';
import { Endpoint } from './endpoint.js';
import { describeAllocation, ExportTable } from './exports.js';
import { ConfigError, PeerLostError, ProtocolError, SmcudaError } from './errors.js';
import { type ResolvedOptions, resolveOptions, type TransportOptions } from './options.js';
import { TransportInspector, type InspectOption } from './inspect/transport-inspector.js';
import { FileTracer, nowUs, type Tracer } from './trace.js';
import { decodeFrame, encodeFrame } from './wire/codec.js';
import { Feature, FrameType, type HelloFrame, WIRE_VERSION } from './wire/frames.js';

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
  /** Serve a live page of this transport's endpoints on http://127.0.0.1:PORT/ (0: any free port; see `inspectUrl`). */
  inspect?: InspectOption;
  /** How long a new connection may take to say HELLO. */
  helloTimeoutMs?: number;
}

export interface TransportEvents {
  /** A new endpoint (accepted or connected). */
  endpoint: [endpoint: Endpoint];
  /** A connection that failed before it became an endpoint (bad HELLO, wrong token, …). */
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
  private readonly pendingChannels = new Set<ControlChannel>();
  private readonly tracer: Tracer | undefined;
  private readonly inspector: TransportInspector | undefined;
  private readonly helloTimeoutMs: number;
  private readonly exports: ExportTable;
  /** Polls the endpoints' control rings after their frames (channel/spinner.ts). */
  private readonly spinner: Spinner;
  private closed = false;

  private constructor(driver: CudaDriver, reason: string, owns: boolean, opts: ResolvedOptions, create: TransportCreateOptions) {
    super();
    this.driver = driver;
    this.driverKind = driver.kind;
    this.driverReason = reason;
    this.ownsDriver = owns;
    this.opts = opts;
    this.id = opts.id;
    this.helloTimeoutMs = create.helloTimeoutMs ?? 10_000;
    this.exports = new ExportTable(driver);
    this.spinner = new Spinner(opts.controlSpinUs);
    const tracePath = create.trace ?? process.env.SMCUDA_TRACE;
    const fileTracer = tracePath ? new FileTracer(tracePath, this.id) : undefined;
    this.inspector = create.inspect !== undefined ? new TransportInspector(create.inspect, this.id) : undefined;
    this.tracer = this.inspector ? this.inspector.tracer(fileTracer) : fileTracer;
  }

  static async create(options: TransportCreateOptions = {}): Promise<Transport> {
    const opts = resolveOptions(options); // bad options are refused before a driver is opened
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
        throw new ConfigError(`driver must be 'auto', 'native', 'sim' or a CudaDriver, got ${String(choice)}`);
      }
      const opened = await openDriver({ driver: choice });
      driver = opened.driver;
      reason = opened.reason;
      owns = true;
    }
    const t = new Transport(driver, reason, owns, opts, options);
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
    const listener = await listenUnix(
      path,
      (channel) => {
        this.attach(channel).catch((err: Error) => this.emit('refused', err));
      },
      { ...options, onRefused: (err) => this.emit('refused', err) },
    );
    this.sockets.push(listener);
  }

  /** Connects to a peer listening at `path`. */
  async connect(path: string): Promise<Endpoint> {
    this.assertOpen();
    const channel = await connectUnix(path);
    return this.attach(channel);
  }

  /** Makes an endpoint over any ControlChannel (HELLO exchange first). */
  attach(channel: ControlChannel): Promise<Endpoint> {
    this.assertOpen();
    this.pendingChannels.add(channel);
    const ourHello = this.hello();
    let helloSentAt = 0;
    return new Promise<Endpoint>((resolve, reject) => {
      const fail = (err: Error) => {
        debug('transport %s: connection %s refused: %s', this.id, channel.label, err.message);
        cleanup();
        this.pendingChannels.delete(channel);
        channel.close();
        reject(err);
      };
      const timer = setTimeout(() => fail(new PeerLostError(`no HELLO from ${channel.label} within ${this.helloTimeoutMs} ms`)), this.helloTimeoutMs);
      const onClose = (err?: Error) => fail(new PeerLostError(`${channel.label} closed before HELLO${err ? `: ${err.message}` : ''}`, { cause: err }));
      const onFrame = (bytes: Uint8Array) => {
        let hello: HelloFrame;
        try {
          const frame = decodeFrame(bytes);
          if (frame.type !== FrameType.HELLO) throw new ProtocolError(`expected HELLO first, got frame type ${FrameType[frame.type]}`);
          hello = frame;
          this.checkHello(hello);
        } catch (err) {
          fail(err as Error);
          return;
        }
        cleanup();
        this.pendingChannels.delete(channel);
        // Our HELLO left before the peer's id was known: trace it now, at the time it was sent.
        this.tracer?.frame(hello.peerId, 'send', ourHello, helloSentAt);
        this.tracer?.frame(hello.peerId, 'recv', hello);
        // Both sides speak the control rings: the peer's RING_OFFER follows its HELLO.
        const ring = ((ourHello.features ?? 0) & (hello.features ?? 0) & Feature.RING) !== 0;
        const epChannel = ring ? new ShmChannel(channel, { segments: this.driver, spinner: this.spinner }) : channel;
        // Constructed synchronously inside this frame handler, so the next frame already reaches it.
        const ep = new Endpoint(epChannel, { driver: this.driver, options: this.opts, local: this.hello(), exports: this.exports, tracer: this.tracer, spinner: this.spinner }, hello);
        this.endpointsByPeer.set(hello.peerId, ep);
        debug('transport %s: endpoint to %s (pid %d, device %s) over %s', this.id, hello.peerId, hello.pid, hello.deviceUuid || 'none', epChannel.label);
        ep.once('close', () => {
          if (this.endpointsByPeer.get(hello.peerId) === ep) this.endpointsByPeer.delete(hello.peerId);
        });
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
    this.invalidateAllocation(describeAllocation(this.driver, ptr));
  }

  /** Invalidates the allocation on every peer, then frees it (cuMemFree). */
  free(ptr: bigint): void {
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

  /** Closes every endpoint and listener, then the driver if this transport opened it. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const ep of this.endpointsByPeer.values()) ep.close('transport closed');
    this.endpointsByPeer.clear();
    for (const ch of this.pendingChannels) ch.close();
    await Promise.all(this.sockets.map((l) => l.close()));
    this.tracer?.close();
    await this.inspector?.close();
    this.spinner.stop();
    if (this.ownsDriver) this.driver.close();
  }

  private hello(): HelloFrame {
    return {
      type: FrameType.HELLO,
      version: WIRE_VERSION,
      pid: process.pid,
      peerId: this.id,
      deviceUuid: this.deviceUuid,
      token: this.opts.token,
      features: (this.opts.controlRing ? Feature.RING : 0) | Feature.FINS,
    };
  }

  private checkHello(h: HelloFrame): void {
    if (h.version < 1) throw new ProtocolError(`peer speaks wire version ${h.version}; this side needs ≥ 1`, 'SMCUDA_PROTOCOL_VERSION');
    if (h.token !== this.opts.token) {
      throw new SmcudaError('SMCUDA_BAD_TOKEN', `peer ${h.peerId} (pid ${h.pid}) presented a wrong job token: refused. Give both sides the same 'token' option.`);
    }
    if (h.peerId === this.id) throw new ProtocolError(`peer claims this transport's own id ${h.peerId}`, 'SMCUDA_DUPLICATE_PEER');
    if (this.endpointsByPeer.has(h.peerId)) {
      throw new ProtocolError(`a peer with id ${h.peerId} is already connected; ids must be unique in a job`, 'SMCUDA_DUPLICATE_PEER');
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new SmcudaError('SMCUDA_CLOSED', 'transport is closed');
  }
}
