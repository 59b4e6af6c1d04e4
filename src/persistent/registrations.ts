/**
 * Registered memory, one endpoint's side: a device buffer registered with
 * the peer is mapped once by the peer and stays mapped until both sides
 * deregistered it.
 *
 * Registration is collective, as NCCL's user-buffer registration: both
 * sides call `endpoint.register(buffer)` in the same order. Each call takes
 * the next number (paired-calls.ts: a failed call spends it on both sides),
 * sends REG_OFFER describing its own buffer (remote-memory.ts), and
 * resolves once the peer's REG_OFFER of the same number arrived and its
 * buffer is mapped here: the Registration holds both — `local` (ours) and
 * `peer` (theirs, as mapped here). A call that fails — bad argument,
 * mapping, no peer call within `timeoutMs` — sends REG_FAIL, so the peer's
 * call of that number fails at once instead of waiting for ever.
 *
 * Deregistration waits for the work in flight on the registration (the
 * persistent transfers using it finish their starts, then close), sends
 * REG_RELEASE, and waits for the peer's REG_RELEASE before unmapping the
 * peer's buffer: neither side unmaps while the other may still copy
 * through it. Each mapping is a hold of the GPU runtime (src/gpu/): every
 * eager start and every watchdog write through it is a use until the GPU
 * passed it, so a closed endpoint or a deregistration unmaps it only once
 * the last of them completed. A start captured in a graph is the one use
 * the host cannot see: it keeps the mapping `graceMs` longer (close).
 */
import type { Mapping } from '../../cache/index.js';
import { checkMessageBuffer, isDeviceBuffer, type DeviceBuffer } from '../buffers.js';
import type { DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { GpuHold } from '../gpu/gpu-hold.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';
import { ArgumentRangeError, ArgumentTypeError, PersistentTransferError, ProtocolError } from '../errors.js';
import { refuseUnknownKeys } from '../option-keys.js';
import { FrameType, type RegFailFrame, type RegOfferFrame, type RegReleaseFrame } from '../wire/frames.js';
import { callTimeout, PairedCalls } from './paired-calls.js';
import { describeForPeer, openRegistered, type RemoteMemoryContext } from './remote-memory.js';

export interface RegisterOptions {
  /** How long to wait for the peer's matching register() call (ms); default 30 000. */
  timeoutMs?: number;
}

const REGISTER_OPTION_KEYS = ['timeoutMs'] as const;

export type RegistrationState = 'registered' | 'deregistering' | 'released';

/** Something that uses a registration (a persistent transfer): deregistration waits for it, then closes it. */
export interface RegistrationUser {
  /** Resolves once no work of this user is in flight. */
  quiesce(): Promise<void>;
  close(reason: Error): void;
  /** Captured in a graph: its replays use the registration unseen by the host (close keeps the mapping `graceMs` more). */
  readonly captured: boolean;
}

export class Registration {
  state: RegistrationState = 'registered';
  /** The peer deregistered (REG_RELEASE came). */
  peerReleased = false;
  /** The peer's matching call failed after this side's had resolved (REG_FAIL came): nothing may use it. */
  peerFailure: PersistentTransferError | undefined;
  readonly users = new Set<RegistrationUser>();
  private releasing: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    /** The registration's number on this endpoint (both sides number alike). */
    readonly id: number,
    /** Our buffer. */
    readonly local: DeviceBuffer,
    /** The peer's buffer, as mapped here. */
    readonly peer: { ptr: DevicePtr; length: number },
    mapping: Mapping,
    private readonly owner: Registrations,
    /** Made by smcuda itself (a flag block): the user cannot deregister it. */
    readonly internal = false,
    /** The GPU runtime whose hold keeps the peer's mapping while GPU work goes through it. */
    private readonly runtime: GpuRuntime,
  ) {
    this.hold = runtime.hold(() => mapping.release());
  }

  /** The peer's mapping, held until released and no GPU work through it is in flight (the GPU runtime's hold). */
  readonly hold: GpuHold;

  /** @internal The work queued so far on `stream` goes through the peer's mapping: it stays mapped until the GPU passed it. */
  useUntil(stream: StreamHandle): void {
    this.runtime.useUntil(this.hold, stream);
  }

  /** @internal Work the host cannot see (a captured start's replays) may use the mapping for `ms` more. */
  keepFor(ms: number): void {
    this.hold.use();
    setTimeout(() => this.hold.done(), ms).unref();
  }

  /** Waits for work in flight, tells the peer, and unmaps its buffer once it deregistered too. */
  deregister(): Promise<void> {
    return (this.releasing ??= this.owner.deregister(this));
  }

  /** @internal */
  peerDeregistered(): void {
    this.peerReleased = true;
    this.wake?.();
  }

  /** @internal Resolves once the peer deregistered or `closed()` says to stop waiting. */
  waitForPeer(closed: () => boolean): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (this.peerReleased || closed()) {
          this.wake = undefined;
          resolve();
        }
      };
      this.wake = check;
      check();
    });
  }

  /** @internal Unmaps the peer's buffer (once), as soon as no GPU work through it is in flight. */
  release(): void {
    if (this.state === 'released') return;
    this.state = 'released';
    try {
      this.hold.close();
    } catch {
      // the driver was closed first: nothing left to unmap
    }
    this.wake?.();
  }
}

export class Registrations {
  private readonly calls: PairedCalls<RegOfferFrame>;
  private readonly earlyReleases = new Set<number>();
  private readonly live = new Map<number, Registration>();
  private closeReason: Error | undefined;

  constructor(
    private readonly ctx: RemoteMemoryContext,
    /** Both HELLOs announced Feature.REGISTER. */
    private readonly agreed: boolean,
  ) {
    this.calls = new PairedCalls('register()', ctx.link.peerId, (regId, reason) => this.tellPeer(regId, reason));
  }

  get size(): number {
    return this.live.size;
  }

  get agreedWithPeer(): boolean {
    return this.agreed;
  }

  /** The number the latest register() call took. */
  get lastId(): number {
    return this.calls.last;
  }

  get(id: number): Registration | undefined {
    return this.live.get(id);
  }

  /**
   * Registers `buf` with the peer (the peer makes the matching call); see
   * the file comment. The number is taken first, so a call that fails here
   * — even on a bad argument — spends it on both sides.
   */
  async register(buf: DeviceBuffer, options?: RegisterOptions, internal = false): Promise<Registration> {
    if (this.closeReason) throw this.closeReason;
    if (!this.agreed)
      throw new PersistentTransferError(
        'SMCUDA_PERSISTENT_UNSUPPORTED',
        `peer ${this.ctx.link.peerId} does not register memory (its HELLO lacks Feature.REGISTER, or this driver has no stream memory operations)`,
      );
    const id = this.calls.take();
    try {
      refuseUnknownKeys('register() options', options, REGISTER_OPTION_KEYS);
      const timeoutMs = callTimeout('register()', options?.timeoutMs);
      checkMessageBuffer('buffer', buf);
      if (!isDeviceBuffer(buf)) throw new ArgumentTypeError('register() takes device memory: { ptr: bigint, length: number }');
      if (buf.length === 0) throw new ArgumentRangeError('a registered buffer must hold at least 1 byte');
      const failed = this.calls.takePeerFailure(id);
      if (failed) throw failed;
      // Everything up to the REG_OFFER happens in this call, so numbers follow call order.
      this.ctx.link.sendFrame({ type: FrameType.REG_OFFER, regId: id, ...describeForPeer(this.ctx, buf) });
      const f = await this.calls.offerOf(id, timeoutMs);
      const mapping = await openRegistered(this.ctx, f);
      if (f.offset + f.length > mapping.size) {
        mapping.release();
        throw new ProtocolError(`REG_OFFER ${id} names bytes ${f.offset}..${f.offset + f.length} of a ${mapping.size}-byte mapping`, 'SMCUDA_BAD_REGISTRATION');
      }
      const reg = new Registration(
        id,
        { ptr: buf.ptr, length: buf.length },
        { ptr: mapping.ptr + BigInt(f.offset), length: f.length },
        mapping,
        this,
        internal,
        this.ctx.link.runtime,
      );
      // The peer may have given the number up while the mapping opened.
      const late = this.closeReason ?? this.calls.takePeerFailure(id);
      if (late) {
        reg.release();
        throw late;
      }
      this.live.set(id, reg);
      this.calls.done(id);
      if (this.earlyReleases.delete(id)) reg.peerDeregistered();
      return reg;
    } catch (err) {
      this.calls.fail(id, err as Error);
      throw err;
    }
  }

  /** Spends the next number on an error of this side before any buffer (a flag block that could not be made): the peer's call fails too. */
  spend(err: Error): void {
    if (this.closeReason || !this.agreed) return;
    this.calls.fail(this.calls.take(), err);
  }

  /** @internal Registration.deregister. */
  async deregister(reg: Registration): Promise<void> {
    if (reg.state !== 'registered') return;
    reg.state = 'deregistering';
    const closed = new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `registration ${reg.id} was deregistered`);
    await Promise.all([...reg.users].map((u) => u.quiesce()));
    for (const u of [...reg.users]) u.close(closed);
    // A registration the peer gave up (REG_FAIL) has no peer half to release.
    if (!this.closeReason && !reg.peerFailure) {
      try {
        this.ctx.link.sendFrame({ type: FrameType.REG_RELEASE, regId: reg.id });
      } catch {
        // the channel failed: the endpoint closes, which releases everything
      }
      await reg.waitForPeer(() => this.closeReason !== undefined);
    }
    this.live.delete(reg.id);
    reg.release();
  }

  onFrame(frame: RegOfferFrame | RegReleaseFrame | RegFailFrame): void {
    if (!this.agreed)
      throw new ProtocolError(`peer ${this.ctx.link.peerId} sent ${FrameType[frame.type]} without both HELLOs announcing REGISTER`, 'SMCUDA_BAD_FRAME');
    if (frame.type === FrameType.REG_RELEASE) {
      const reg = this.live.get(frame.regId);
      if (reg) reg.peerDeregistered();
      else this.earlyReleases.add(frame.regId);
      return;
    }
    if (frame.type === FrameType.REG_FAIL) {
      const reg = this.live.get(frame.regId);
      if (reg) return this.peerFailedLive(reg, frame.reason);
      return this.calls.onPeerFailed(frame.regId, frame.reason);
    }
    if (this.live.has(frame.regId)) throw new ProtocolError(`peer ${this.ctx.link.peerId} sent REG_OFFER ${frame.regId} twice`, 'SMCUDA_BAD_REGISTRATION');
    this.calls.onOffer(frame.regId, frame);
  }

  /**
   * The peer's call failed after this side's resolved (its check of our
   * offer, or its mapping, failed): the registration is void — its users
   * close, and deregister() no longer waits for the peer.
   */
  private peerFailedLive(reg: Registration, reason: string): void {
    const err = new PersistentTransferError(
      'SMCUDA_PERSISTENT_PEER_FAILED',
      `peer ${this.ctx.link.peerId}'s matching register() call ${reg.id} failed after this side's resolved: ${reason}; deregister this registration and register again`,
    );
    reg.peerFailure = err;
    for (const u of [...reg.users]) u.close(err);
    reg.peerDeregistered();
  }

  private tellPeer(regId: number, reason: string): void {
    try {
      this.ctx.link.sendFrame({ type: FrameType.REG_FAIL, regId, reason: reason.slice(0, 1000) });
    } catch {
      // the channel is gone: the peer's endpoint closes, failing its call
    }
  }

  /**
   * The endpoint closed: pending registrations reject, users are closed, and
   * every mapping is released — once the GPU passed the work queued through
   * it (its hold's uses), and `graceMs` later where a user was captured in a
   * graph, whose replays the host cannot see.
   */
  close(reason: Error, graceMs = 0): void {
    if (this.closeReason) return;
    this.closeReason = reason;
    this.calls.close(reason);
    // Every registration's users are taken before any is closed (a closed user leaves them all).
    const regs = [...this.live.values()].map((reg) => ({ reg, users: [...reg.users] }));
    for (const { users } of regs) for (const u of users) u.close(reason);
    for (const { reg, users } of regs) {
      // Work already queued may still write through the peer's mapping (its waits were just
      // released): the hold unmaps it once that work has passed, never under it.
      if (users.some((u) => u.captured)) reg.keepFor(graceMs);
      reg.release();
    }
    this.live.clear();
  }
}
