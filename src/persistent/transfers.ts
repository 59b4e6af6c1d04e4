/**
 * Persistent transfers, one endpoint's side. Matching calls on the two
 * sides — `endpoint.persistent(reg, { role: 'send' | 'recv', length })`, in
 * the same order — make one transfer: the sender's registered source is
 * copied into the receiver's registered destination each round. Several per
 * endpoint, either direction.
 *
 * `start(stream)` queues stream operations only (flags.ts; start.ts queues
 * them, as memory operations or the flag kernel): nothing on the host per round, so a CUDA graph can capture any number of starts and
 * replay them with no host work. Each side owns a flag block of
 * `flagSlots` slots (device memory registered with the peer by the first
 * transfer, as both sides make their first transfer together); the
 * transport's watchdog (watchdog.ts) watches it, so a start that cannot
 * finish fails the transfer on both sides within `timeoutMs` instead of
 * hanging a stream.
 */
import { createActor, type Actor } from 'xstate';
import { persistentMachine, type PersistentMachineEvent, type PersistentMachineState } from '../../machines/persistent.js';
import type { CudaDriver, DevicePtr, EventHandle, FunctionHandle, StreamHandle } from '../cuda/driver.js';
import { flagKernel, type QueuedItem, startGroup, wordsOf } from './start.js';
import { debug } from '../debug.js';
import { ArgumentRangeError, ArgumentTypeError, PersistentTransferError, ProtocolError } from '../errors.js';
import { FrameType, PtRole, type PtFailFrame, type PtOfferFrame } from '../wire/frames.js';
import { awaitedOffset, peerAwaitedOffset, receiverSteps, senderSteps, SLOT_BYTES, slotAddress, type StartStep } from './flags.js';
import type { Registration, Registrations } from './registrations.js';
import type { RemoteMemoryContext } from './remote-memory.js';
import type { Tracer } from '../trace.js';
import type { WatchedBlock, WatchedTransfer, Watchdog } from './watchdog.js';

export { flagOpsArgs, KERNEL_COPY_MAX, mergeBatches, startGroup, startSequence } from './start.js';

export type PersistentRole = 'send' | 'recv';
export type PersistentState = 'armed' | 'failed' | 'closed';

export interface PersistentOptions {
  /** 'send': this side's registered buffer is the source; 'recv': the destination. */
  role: PersistentRole;
  /** Bytes per round (the peer's call must say the same). */
  length: number;
  /** From the start of this side's registered buffer; default 0. */
  offset?: number;
  /**
   * Who runs this side's flag operations: 'memops' (default) the stream's
   * memory operations (cuStreamBatchMemOp); 'kernel' one GPU thread of a
   * small PTX kernel (src/kernels/flag-ops.ptx.ts), which a CUDA graph
   * replays for far less host time per replay. The same protocol and
   * watchdog either way; each side chooses for itself.
   */
  flags?: 'memops' | 'kernel';
}


type PersistentActor = Actor<typeof persistentMachine>;

/** The transfer's life as a machine (machines/persistent.ts), traced at every change of state. */
function startMachine(owner: PersistentTransfers, id: number, role: PersistentRole): PersistentActor {
  const actor = createActor(persistentMachine, { input: { id, role, peerId: owner.peerId } });
  let prev = actor.getSnapshot().value as string;
  actor.subscribe((snap) => {
    const next = snap.value as string;
    if (next === prev) return;
    owner.tracer?.persistent?.(owner.peerId, id, prev, next, snap.context.failure ? { role, reason: snap.context.failure } : { role });
    prev = next;
  });
  actor.start();
  return actor;
}

export class PersistentTransfer implements WatchedTransfer {
  state: PersistentState = 'armed';
  error: PersistentTransferError | undefined;
  stuckTicks = 0;
  /** Eager starts (not captured) whose stream has not passed them yet. */
  private readonly inFlight = new Set<EventHandle>();
  private readonly steps: StartStep[];
  private readonly failedWaiters: Array<(e: PersistentTransferError) => void> = [];
  /** @internal Called when the transfer is closed: it stops using its registrations. */
  onForget: (() => void) | undefined;
  /** Starts queued (eager or captured; a captured start replays without counting here). */
  starts = 0;
  /** @internal The flag kernel, where this side runs its flag operations in one ('kernel'). */
  flagKernel: FunctionHandle | undefined;

  constructor(
    readonly id: number,
    readonly role: PersistentRole,
    readonly length: number,
    readonly slot: number,
    /** Source and destination as this process addresses them (the peer's side through its mapping). */
    private readonly src: DevicePtr,
    private readonly dst: DevicePtr,
    readonly ownAwaited: DevicePtr,
    private readonly peerWord: DevicePtr,
    private readonly owner: PersistentTransfers,
    readonly registration: Registration,
    /** The peer's flag block, as mapped here. */
    private readonly peerFlags: Registration,
    /** Its life (machines/persistent.ts). */
    private readonly actor: PersistentActor,
  ) {
    const a = slotAddress(ownAwaited - BigInt(awaitedOffset(role)), peerWord - BigInt(peerAwaitedOffset(role)), 0);
    this.steps = role === 'send' ? senderSteps(a) : receiverSteps(a);
  }

  get failed(): boolean {
    return this.state !== 'armed';
  }

  /** @internal This side's slot in its own flag block. */
  get ownSlot(): DevicePtr {
    return this.ownAwaited - BigInt(awaitedOffset(this.role));
  }

  /** Sends `event` to its machine while it runs (once closed, it hears nothing more). */
  private tell(event: PersistentMachineEvent): void {
    if (this.actor.getSnapshot().status === 'active') this.actor.send(event);
  }

  /** Where its machine is: registered, armed, replaying, stuck or closed. */
  get machineState(): PersistentMachineState {
    return this.actor.getSnapshot().value as PersistentMachineState;
  }

  /** @internal The watchdog's reading this tick: a start in progress or not. */
  observed(inProgress: boolean): void {
    if (inProgress) this.tell({ type: 'BUSY' });
    else if (this.inFlight.size === 0) this.tell({ type: 'IDLE' });
  }

  /**
   * Queues one round on `stream`: stream operations and one cuMemcpyAsync
   * only (never a batch copy, which a capture would drop), so it can be
   * captured. Throws the transfer's error once it failed.
   */
  start(stream: StreamHandle): void {
    startGroup(stream, [this]);
  }

  /** @internal The stream items of part of a start: 'post' (a receiver's READY), 'run' (a sender's whole start), 'wait' (a receiver's wait). */
  items(part: 'post' | 'run' | 'wait'): QueuedItem[] {
    const steps = this.role === 'send' ? (part === 'run' ? this.steps : []) : part === 'post' ? [this.steps[0]!] : part === 'wait' ? [this.steps[1]!] : [];
    const out: QueuedItem[] = [];
    for (const step of steps) {
      if (step.kind === 'batch') out.push({ kind: 'batch', ops: step.ops });
      else if (this.length > 0) out.push({ kind: 'copy', dst: this.dst, src: this.src, length: this.length });
    }
    return out;
  }

  /** @internal After its start was queued: counts it, and tracks it until the stream passes it (eager starts only). */
  queued(stream: StreamHandle, capturing: boolean): void {
    const d = this.owner.driver;
    this.starts++;
    this.tell({ type: 'START' });
    if (capturing) return; // captured: the graph owner synchronizes its replays
    const ev = d.eventCreate({ disableTiming: true });
    d.eventRecord(ev, stream);
    this.inFlight.add(ev);
    d.whenComplete(ev)
      .catch(() => undefined)
      .finally(() => {
        this.inFlight.delete(ev);
        if (this.inFlight.size === 0) this.tell({ type: 'IDLE' });
        try {
          d.eventDestroy(ev);
        } catch {
          // the driver closed
        }
      });
  }

  /** @internal */
  driverOf(): CudaDriver {
    return this.owner.driver;
  }

  /** Throws the transfer's error if it failed (a cheap check for a loop that replays a graph). */
  check(): void {
    if (this.error) throw this.error;
  }

  /** Resolves with the error once the transfer fails (never resolves while it works). */
  whenFailed(): Promise<PersistentTransferError> {
    if (this.error) return Promise.resolve(this.error);
    return new Promise((resolve) => this.failedWaiters.push(resolve));
  }

  peerAwaited(): DevicePtr | undefined {
    return this.owner.open && this.peerFlags.state !== 'released' ? this.peerWord : undefined;
  }

  /** @internal The watchdog found this transfer's start stuck. */
  stuck(ms: number): void {
    this.tell({ type: 'STUCK' });
    this.fail(
      new PersistentTransferError(
        'SMCUDA_PERSISTENT_STUCK',
        `persistent transfer ${this.id} (${this.role}) to ${this.owner.peerId}: a start did not finish within ${ms} ms (the peer is gone, stopped starting its side, or started it a different number of times); its waits were released and the transfer failed on both sides: create a new one`,
      ),
      true,
    );
  }

  /** Resolves once no eager start of this transfer is in flight. */
  async quiesce(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.race([...this.inFlight].map((ev) => this.owner.driver.whenComplete(ev).catch(() => undefined)));
  }

  /** Waits for eager starts in flight, then closes the transfer on both sides. */
  async close(): Promise<void> {
    await this.quiesce();
    this.fail(new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `persistent transfer ${this.id} was closed`), true, 'closed');
    this.owner.forget(this);
  }

  /** @internal Fails the transfer (once): its own wait is poisoned now and by every watchdog tick; `tell`: PT_FAIL to the peer. */
  fail(err: Error, tell: boolean, state: PersistentState = 'failed'): void {
    if (this.error) {
      if (state === 'closed') this.state = 'closed';
      return;
    }
    this.error = err instanceof PersistentTransferError ? err : new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', err.message, { cause: err });
    this.state = state;
    debug('persistent transfer %d to %s: %s', this.id, this.owner.peerId, this.error.message);
    const peer = this.peerAwaited();
    this.owner.watchdog.poison(peer !== undefined ? [this.ownAwaited, peer] : [this.ownAwaited]);
    if (tell) this.owner.tellPeer(this.id, this.error.message);
    this.tell(this.error.code === 'SMCUDA_PERSISTENT_CLOSED' ? { type: 'CLOSE' } : { type: 'FAIL', code: this.error.code });
    this.actor.stop();
    for (const w of this.failedWaiters.splice(0)) w(this.error);
  }

  /** RegistrationUser.close: the registration went (deregistered, or the endpoint closed). */
  closeFor(reason: Error): void {
    this.fail(reason, true, 'closed');
    this.owner.forget(this);
  }
}


/** A flag block: SLOT_BYTES per slot, one allocation, registered with the peer. */
interface FlagBlock extends WatchedBlock {
  registration: Registration;
  used: (PersistentTransfer | undefined)[];
}

export class PersistentTransfers {
  private nextId = 1;
  private flags: Promise<FlagBlock> | undefined;
  private flagAlloc: DevicePtr | undefined;
  private flagRegId = 0;
  private unwatch: (() => void) | undefined;
  private readonly waiting = new Map<number, { resolve: (f: PtOfferFrame) => void; reject: (e: Error) => void }>();
  private readonly early = new Map<number, PtOfferFrame>();
  private readonly live = new Map<number, PersistentTransfer>();
  private readonly failedEarly = new Map<number, string>();
  private closeReason: Error | undefined;
  readonly peerId: string;
  readonly driver: CudaDriver;
  readonly tracer: Tracer | undefined;

  constructor(
    private readonly ctx: RemoteMemoryContext,
    private readonly registrations: Registrations,
    readonly watchdog: Watchdog,
    private readonly flagSlots: number,
  ) {
    this.peerId = ctx.link.peerId;
    this.driver = ctx.link.driver;
    this.tracer = ctx.link.tracer;
  }

  /** How long a closed endpoint keeps its flag block (and the peer's mappings) for replays already queued. */
  get graceMs(): number {
    return Math.max(1000, 4 * this.watchdog.timeoutMs);
  }

  /** Transfers not closed (failed ones included until closed). */
  get size(): number {
    return this.live.size;
  }

  /** Makes this side of a persistent transfer; the peer makes the other, in the same order. */
  async create(reg: Registration, options: PersistentOptions): Promise<PersistentTransfer> {
    if (this.closeReason) throw this.closeReason;
    if (options === null || typeof options !== 'object') throw new ArgumentTypeError("options must be an object like { role: 'send', length }");
    const { role, length } = options;
    const offset = options.offset ?? 0;
    if (role !== 'send' && role !== 'recv') throw new ArgumentTypeError(`role must be 'send' or 'recv', got ${String(role)}`);
    for (const [name, v] of [['length', length], ['offset', offset]] as const) {
      if (!Number.isSafeInteger(v) || v < 0) throw new ArgumentRangeError(`${name} must be a non-negative integer, got ${String(v)}`);
    }
    if (offset + length > reg.local.length) throw new ArgumentRangeError(`offset + length (${offset + length}) exceeds the registered ${reg.local.length} bytes`);
    const flagsBy = options.flags ?? 'memops';
    if (flagsBy !== 'memops' && flagsBy !== 'kernel') throw new ArgumentTypeError(`flags must be 'memops' or 'kernel', got ${String(flagsBy)}`);
    if (reg.state !== 'registered') throw new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `registration ${reg.id} is ${reg.state}`);
    const st = this.driver.gpuDrivenStatus();
    if (!st.streamMemOps || !st.memOps64) throw new PersistentTransferError('SMCUDA_PERSISTENT_UNSUPPORTED', `persistent transfers need 64-bit stream memory operations: ${st.reason ?? 'not offered by this driver'}`);
    if (flagsBy === 'kernel' && !st.modules) throw new PersistentTransferError('SMCUDA_PERSISTENT_UNSUPPORTED', `flags: 'kernel' needs modules and kernel launch: ${st.reason ?? 'not offered by this driver'}; use flags: 'memops'`);
    const kernel = flagsBy === 'kernel' ? flagKernel(this.driver) : undefined;
    // Everything that takes a number (the flag block's registration, this transfer's) happens in this call, in order.
    const flags = (this.flags ??= this.makeFlags());
    const id = this.nextId++;
    const block0 = this.flagAlloc!;
    const slot = this.freeSlot();
    // A slot used before holds its last transfer's words (POISON, from its close): zero them, after
    // the watchdog's writes, before the peer hears of the slot.
    if (this.usedSlots.has(slot)) this.watchdog.reset(wordsOf(block0 + BigInt(slot * SLOT_BYTES)));
    this.usedSlots.add(slot);
    this.ctx.link.sendFrame({ type: FrameType.PT_OFFER, ptId: id, role: role === 'send' ? PtRole.SEND : PtRole.RECV, regId: reg.id, offset, length, flagRegId: this.flagRegId, slot });
    const reserved = { slot };
    this.reserved.add(reserved.slot);
    const actor = startMachine(this, id, role);
    try {
      const [peer, block] = await Promise.all([this.offerOf(id), flags]);
      if (this.closeReason) throw this.closeReason;
      const peerRole = peer.role === PtRole.SEND ? 'send' : 'recv';
      const mismatch =
        peerRole === role ? `both sides said ${role}` : peer.length !== length ? `lengths differ (${length} here, ${peer.length} there)` : peer.regId !== reg.id ? `the peer names registration ${peer.regId}, this side ${reg.id}` : undefined;
      if (mismatch) throw new PersistentTransferError('SMCUDA_PERSISTENT_MISMATCH', `persistent transfer ${id} with ${this.peerId}: the two calls do not match: ${mismatch}`);
      if (peer.offset + peer.length > reg.peer.length) throw new ProtocolError(`PT_OFFER ${id}: bytes ${peer.offset}..${peer.offset + peer.length} exceed the peer's registered ${reg.peer.length}`, 'SMCUDA_BAD_REGISTRATION');
      const peerFlags = this.registrations.get(peer.flagRegId);
      if (!peerFlags || peer.slot >= peerFlags.peer.length / SLOT_BYTES) throw new ProtocolError(`PT_OFFER ${id} names flag registration ${peer.flagRegId} slot ${peer.slot}, which it does not hold`, 'SMCUDA_BAD_REGISTRATION');
      const mine = reg.local.ptr + BigInt(offset);
      const theirs = reg.peer.ptr + BigInt(peer.offset);
      const ownSlot = block0 + BigInt(slot * SLOT_BYTES);
      const peerSlot = peerFlags.peer.ptr + BigInt(peer.slot * SLOT_BYTES);
      const t = new PersistentTransfer(
        id,
        role,
        length,
        slot,
        role === 'send' ? mine : theirs,
        role === 'send' ? theirs : mine,
        ownSlot + BigInt(awaitedOffset(role)),
        peerSlot + BigInt(peerAwaitedOffset(role)),
        this,
        reg,
        peerFlags,
        actor,
      );
      t.flagKernel = kernel;
      block.used[slot] = t;
      this.live.set(id, t);
      // Deregistration and the endpoint's close wait for its work on the data and on the flags.
      const user = { quiesce: () => t.quiesce(), close: (e: Error) => t.closeFor(e) };
      for (const r of [reg, block.registration, peerFlags]) r.users.add(user);
      t.onForget = () => {
        for (const r of [reg, block.registration, peerFlags]) r.users.delete(user);
      };
      const early = this.failedEarly.get(id);
      actor.send({ type: 'MATCHED' });
      if (early !== undefined) t.fail(new PersistentTransferError('SMCUDA_PERSISTENT_PEER_FAILED', `peer ${this.peerId} failed persistent transfer ${id}: ${early}`), false);
      return t;
    } catch (err) {
      this.waiting.delete(id);
      actor.send({ type: 'FAIL', code: (err as { code?: string }).code ?? 'SMCUDA_PERSISTENT_MISMATCH' });
      actor.stop();
      throw err;
    } finally {
      this.reserved.delete(reserved.slot);
    }
  }

  private readonly reserved = new Set<number>();
  /** Slots some transfer has had (their words may hold its last values). */
  private readonly usedSlots = new Set<number>();
  private block: FlagBlock | undefined;

  onFrame(frame: PtOfferFrame | PtFailFrame): void {
    if (frame.type === FrameType.PT_FAIL) {
      const t = this.live.get(frame.ptId);
      const err = new PersistentTransferError('SMCUDA_PERSISTENT_PEER_FAILED', `peer ${this.peerId} failed persistent transfer ${frame.ptId}: ${frame.reason}`);
      if (t) t.fail(err, false);
      else this.failedEarly.set(frame.ptId, frame.reason);
      return;
    }
    const w = this.waiting.get(frame.ptId);
    if (w) {
      this.waiting.delete(frame.ptId);
      return w.resolve(frame);
    }
    if (this.early.has(frame.ptId) || this.live.has(frame.ptId)) throw new ProtocolError(`peer ${this.peerId} sent PT_OFFER ${frame.ptId} twice`, 'SMCUDA_BAD_REGISTRATION');
    this.early.set(frame.ptId, frame);
  }

  /** @internal */
  tellPeer(id: number, reason: string): void {
    if (this.closeReason) return;
    try {
      this.ctx.link.sendFrame({ type: FrameType.PT_FAIL, ptId: id, reason: reason.slice(0, 1000) });
    } catch {
      // the channel is gone: the peer's endpoint closes, failing its half
    }
  }

  /** @internal The endpoint is open (the peer's mappings are held). */
  get open(): boolean {
    return this.closeReason === undefined;
  }

  /** @internal A closed transfer leaves its slot (a failed one keeps it: its waits stay poisoned until closed). */
  forget(t: PersistentTransfer): void {
    if (this.live.get(t.id) !== t) return;
    this.live.delete(t.id);
    t.onForget?.();
    // Once the endpoint is closed no slot is reused: a closed transfer's waits stay poisoned
    // by the watchdog until the block is freed, so replays already queued run through.
    if (this.closeReason) return;
    // At once where the block is there: a watchdog tick must not poison the slot once a new transfer has it.
    if (this.block?.used[t.slot] === t) this.block.used[t.slot] = undefined;
    void this.flags?.then((b) => {
      if (b.used[t.slot] === t) b.used[t.slot] = undefined;
    });
  }

  /** The endpoint closed: every transfer fails (its waits released); the flag block is freed once none is left. */
  close(reason: Error): void {
    if (this.closeReason) return;
    const err = reason instanceof PersistentTransferError ? reason : new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `the endpoint to ${this.peerId} closed: ${reason.message}`, { cause: reason });
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
    this.closeReason = err; // first: the peer's mappings go with the endpoint, so only our own waits are released
    for (const t of this.live.values()) t.fail(err, false, 'closed');
    // Failed transfers' waits stay poisoned by the watchdog for a while, so that
    // streams still replaying them run through; then the block goes.
    const alloc = this.flagAlloc;
    const unwatch = this.unwatch;
    if (alloc !== undefined) {
      setTimeout(() => {
        unwatch?.();
        try {
          this.driver.memFree(alloc);
        } catch {
          // the driver closed first (it frees everything)
        }
      }, this.graceMs).unref();
    }
  }

  private freeSlot(): number {
    // A slot never used first (nothing to reset), then the lowest free one.
    if (this.usedSlots.size < this.flagSlots) {
      for (let s = 0; s < this.flagSlots; s++) if (!this.usedSlots.has(s)) return s;
    }
    // Slots in use: the block's live transfers and those being made now.
    for (let s = 0; s < this.flagSlots; s++) {
      if (this.reserved.has(s)) continue;
      let taken = false;
      for (const t of this.live.values()) if (t.slot === s) taken = true;
      if (!taken) return s;
    }
    throw new PersistentTransferError('SMCUDA_PERSISTENT_SLOTS', `all ${this.flagSlots} flag slots of the endpoint to ${this.peerId} are in use: close transfers, or raise the transport option persistent.flagSlots`);
  }

  private makeFlags(): Promise<FlagBlock> {
    const d = this.driver;
    const bytes = this.flagSlots * SLOT_BYTES;
    const ptr = d.memAlloc(bytes);
    d.memsetD8(ptr, 0, bytes);
    this.flagAlloc = ptr;
    // Both sides make their first transfer together, so this registration is collective too.
    const registering = this.registrations.register({ ptr, length: bytes }, true);
    this.flagRegId = this.registrations.lastId;
    return registering.then((registration) => {
      const block: FlagBlock = {
        ptr,
        slots: this.flagSlots,
        registration,
        used: new Array(this.flagSlots).fill(undefined),
        transfers: () => block.used.filter((t): t is PersistentTransfer => t !== undefined),
      };
      this.unwatch = this.watchdog.watch(block);
      this.block = block;
      return block;
    });
  }

  private offerOf(id: number): Promise<PtOfferFrame> {
    const f = this.early.get(id);
    if (f) {
      this.early.delete(id);
      return Promise.resolve(f);
    }
    return new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject }));
  }
}
