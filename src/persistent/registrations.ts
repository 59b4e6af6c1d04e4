/**
 * Registered memory, one endpoint's side: a device buffer registered with
 * the peer is mapped once by the peer and stays mapped until both sides
 * deregistered it.
 *
 * Registration is collective, as NCCL's user-buffer registration: both
 * sides call `endpoint.register(buffer)` in the same order. Each call takes
 * the next number, sends REG_OFFER describing its own buffer
 * (remote-memory.ts), and resolves once the peer's REG_OFFER of the same
 * number arrived and its buffer is mapped here: the Registration holds both
 * — `local` (ours) and `peer` (theirs, as mapped here).
 *
 * Deregistration waits for the work in flight on the registration (the
 * persistent transfers using it finish their starts, then close), sends
 * REG_RELEASE, and waits for the peer's REG_RELEASE before unmapping the
 * peer's buffer: neither side unmaps while the other may still copy
 * through it. A closed endpoint releases everything at once.
 */
import type { Mapping } from '../../cache/index.js';
import { checkMessageBuffer, isDeviceBuffer, type DeviceBuffer } from '../buffers.js';
import type { DevicePtr } from '../cuda/driver.js';
import { ArgumentRangeError, ArgumentTypeError, PersistentTransferError, ProtocolError } from '../errors.js';
import { FrameType, type RegOfferFrame, type RegReleaseFrame } from '../wire/frames.js';
import { describeForPeer, openRegistered, type RemoteMemoryContext } from './remote-memory.js';

export type RegistrationState = 'registered' | 'deregistering' | 'released';

/** Something that uses a registration (a persistent transfer): deregistration waits for it, then closes it. */
export interface RegistrationUser {
  /** Resolves once no work of this user is in flight. */
  quiesce(): Promise<void>;
  close(reason: Error): void;
}

export class Registration {
  state: RegistrationState = 'registered';
  /** The peer deregistered (REG_RELEASE came). */
  peerReleased = false;
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
    private readonly mapping: Mapping,
    private readonly owner: Registrations,
    /** Made by smcuda itself (a flag block): the user cannot deregister it. */
    readonly internal = false,
  ) {}

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

  /** @internal Unmaps the peer's buffer (once). */
  release(): void {
    if (this.state === 'released') return;
    this.state = 'released';
    try {
      this.mapping.release();
    } catch {
      // the driver was closed first: nothing left to unmap
    }
    this.wake?.();
  }
}

export class Registrations {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (f: RegOfferFrame) => void; reject: (e: Error) => void }>();
  /** Peer offers whose matching call was not made here yet. */
  private readonly early = new Map<number, RegOfferFrame>();
  private readonly earlyReleases = new Set<number>();
  private readonly live = new Map<number, Registration>();
  private closeReason: Error | undefined;

  constructor(
    private readonly ctx: RemoteMemoryContext,
    /** Both HELLOs announced Feature.REGISTER. */
    private readonly agreed: boolean,
  ) {}

  get size(): number {
    return this.live.size;
  }

  get agreedWithPeer(): boolean {
    return this.agreed;
  }

  /** The number the latest register() call took. */
  get lastId(): number {
    return this.nextId - 1;
  }

  get(id: number): Registration | undefined {
    return this.live.get(id);
  }

  /** Registers `buf` with the peer (the peer makes the matching call); see the file comment. */
  async register(buf: DeviceBuffer, internal = false): Promise<Registration> {
    checkMessageBuffer('buffer', buf);
    if (!isDeviceBuffer(buf)) throw new ArgumentTypeError('register() takes device memory: { ptr: bigint, length: number }');
    if (buf.length === 0) throw new ArgumentRangeError('a registered buffer must hold at least 1 byte');
    if (this.closeReason) throw this.closeReason;
    if (!this.agreed) throw new PersistentTransferError('SMCUDA_PERSISTENT_UNSUPPORTED', `peer ${this.ctx.link.peerId} does not register memory (its HELLO lacks Feature.REGISTER, or this driver has no stream memory operations)`);
    const id = this.nextId++;
    // Everything up to the REG_OFFER happens in this call, so numbers follow call order.
    this.ctx.link.sendFrame({ type: FrameType.REG_OFFER, regId: id, ...describeForPeer(this.ctx, buf) });
    const f = await this.offerOf(id);
    const mapping = await openRegistered(this.ctx, f);
    if (f.offset + f.length > mapping.size) {
      mapping.release();
      throw new ProtocolError(`REG_OFFER ${id} names bytes ${f.offset}..${f.offset + f.length} of a ${mapping.size}-byte mapping`, 'SMCUDA_BAD_REGISTRATION');
    }
    const reg = new Registration(id, { ptr: buf.ptr, length: buf.length }, { ptr: mapping.ptr + BigInt(f.offset), length: f.length }, mapping, this, internal);
    if (this.closeReason) {
      reg.release();
      throw this.closeReason;
    }
    this.live.set(id, reg);
    if (this.earlyReleases.delete(id)) reg.peerDeregistered();
    return reg;
  }

  /** @internal Registration.deregister. */
  async deregister(reg: Registration): Promise<void> {
    if (reg.state !== 'registered') return;
    reg.state = 'deregistering';
    const closed = new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `registration ${reg.id} was deregistered`);
    await Promise.all([...reg.users].map((u) => u.quiesce()));
    for (const u of [...reg.users]) u.close(closed);
    if (!this.closeReason) {
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

  onFrame(frame: RegOfferFrame | RegReleaseFrame): void {
    if (!this.agreed) throw new ProtocolError(`peer ${this.ctx.link.peerId} sent ${FrameType[frame.type]} without both HELLOs announcing REGISTER`, 'SMCUDA_BAD_FRAME');
    if (frame.type === FrameType.REG_RELEASE) {
      const reg = this.live.get(frame.regId);
      if (reg) reg.peerDeregistered();
      else this.earlyReleases.add(frame.regId);
      return;
    }
    const w = this.waiting.get(frame.regId);
    if (w) {
      this.waiting.delete(frame.regId);
      return w.resolve(frame);
    }
    if (this.early.has(frame.regId) || this.live.has(frame.regId)) throw new ProtocolError(`peer ${this.ctx.link.peerId} sent REG_OFFER ${frame.regId} twice`, 'SMCUDA_BAD_REGISTRATION');
    this.early.set(frame.regId, frame);
  }

  /**
   * The endpoint closed: pending registrations reject, users are closed, and
   * every mapping is released — one that users held, once their work in
   * flight passed and `graceMs` more went by (graph replays already queued
   * write through it; the host cannot see them).
   */
  close(reason: Error, graceMs = 0): void {
    if (this.closeReason) return;
    this.closeReason = reason;
    for (const w of this.waiting.values()) w.reject(reason);
    this.waiting.clear();
    this.early.clear();
    // Every registration's users are taken before any is closed (a closed user leaves them all).
    const regs = [...this.live.values()].map((reg) => ({ reg, users: [...reg.users] }));
    for (const { users } of regs) for (const u of users) u.close(reason);
    for (const { reg, users } of regs) {
      // Work already queued may still write through the peer's mapping (its waits were just
      // released): unmap once it has passed, never under it.
      if (users.length === 0) {
        reg.release();
        continue;
      }
      void Promise.all(users.map((u) => u.quiesce())).finally(() => setTimeout(() => reg.release(), graceMs).unref());
    }
    this.live.clear();
  }

  private offerOf(id: number): Promise<RegOfferFrame> {
    const f = this.early.get(id);
    if (f) {
      this.early.delete(id);
      return Promise.resolve(f);
    }
    return new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject }));
  }
}
