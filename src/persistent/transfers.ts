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
 *
 * Making one is a paired call (paired-calls.ts): it takes its numbers first
 * — the flag block's registration with the first call, then its own — so a
 * call that fails on either side (bad argument, driver error, no peer call
 * within the call's `timeoutMs`) spends them on both and fails both calls
 * (PT_FAIL), and the next pair still matches. Flag blocks of different
 * sizes (`persistent.flagSlots` unlike on the two sides) are refused at the
 * first call on both sides.
 *
 * What a transfer used is released once the GPU passed it, not after a
 * fixed time: the peer's mappings (its buffer, its flag block) are holds of
 * the GPU runtime (src/gpu/), and each eager start and each watchdog write
 * through them is a use until the GPU passed it (a point on its stream,
 * pooled events). Two things stay timed, for what the host cannot see: a
 * transfer captured in a graph (its replays) keeps its waits poisoned, and
 * the mappings it used, for `graceMs`; and this side's flag block, which
 * the peer maps, is freed `graceMs` after this side is done with it, as the
 * peer's release of its mapping cannot be heard once the endpoint closed.
 */
import { createActor, type Actor } from 'xstate';
import { persistentMachine, type PersistentMachineEvent, type PersistentMachineState } from '../../machines/persistent.js';
import type { CudaDriver, DevicePtr, FunctionHandle, StreamHandle } from '../cuda/driver.js';
import type { GpuHold } from '../gpu/gpu-hold.js';
import { flagKernel, type QueuedItem, startGroup, wordsOf } from './start.js';
import { debug } from '../debug.js';
import { ArgumentRangeError, ArgumentTypeError, PersistentTransferError, ProtocolError } from '../errors.js';
import { refuseUnknownKeys } from '../option-keys.js';
import { FrameType, PtRole, type PtFailFrame, type PtOfferFrame } from '../wire/frames.js';
import { awaitedOffset, peerAwaitedOffset, receiverSteps, senderSteps, SLOT_BYTES, slotAddress, type StartStep } from './flags.js';
import { callTimeout, DEFAULT_CALL_TIMEOUT_MS, PairedCalls } from './paired-calls.js';
import { Registration, type Registrations } from './registrations.js';
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
  /** How long to wait for the peer's matching persistent() call (ms); default 30 000. */
  timeoutMs?: number;
}

const PERSISTENT_OPTION_KEYS = ['role', 'length', 'offset', 'flags', 'timeoutMs'] as const;

/** A persistent() call's options, checked. */
interface CheckedOptions {
  role: PersistentRole;
  length: number;
  offset: number;
  flagsBy: 'memops' | 'kernel';
  timeoutMs: number;
}

function checkOptions(reg: Registration, options: PersistentOptions): CheckedOptions {
  if (options === null || typeof options !== 'object') throw new ArgumentTypeError("options must be an object like { role: 'send', length }");
  refuseUnknownKeys('persistent() options', options, PERSISTENT_OPTION_KEYS);
  const { role, length } = options;
  const offset = options.offset ?? 0;
  if (role !== 'send' && role !== 'recv') throw new ArgumentTypeError(`role must be 'send' or 'recv', got ${String(role)}`);
  for (const [name, v] of [
    ['length', length],
    ['offset', offset],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 0) throw new ArgumentRangeError(`${name} must be a non-negative integer, got ${String(v)}`);
  }
  if (offset + length > reg.local.length) throw new ArgumentRangeError(`offset + length (${offset + length}) exceeds the registered ${reg.local.length} bytes`);
  const flagsBy = options.flags ?? 'memops';
  if (flagsBy !== 'memops' && flagsBy !== 'kernel') throw new ArgumentTypeError(`flags must be 'memops' or 'kernel', got ${String(flagsBy)}`);
  return { role, length, offset, flagsBy, timeoutMs: callTimeout('persistent()', options.timeoutMs) };
}

/** The two halves of transfer `id` agree (roles, length, registration), or SMCUDA_PERSISTENT_MISMATCH. */
function checkMatch(id: number, peerId: string, reg: Registration, o: CheckedOptions, peer: PtOfferFrame): void {
  const peerRole = peer.role === PtRole.SEND ? 'send' : 'recv';
  const mismatch =
    peerRole === o.role
      ? `both sides said ${o.role}`
      : peer.length !== o.length
        ? `lengths differ (${o.length} here, ${peer.length} there)`
        : peer.regId !== reg.id
          ? `the peer names registration ${peer.regId}, this side ${reg.id}`
          : undefined;
  if (mismatch)
    throw new PersistentTransferError('SMCUDA_PERSISTENT_MISMATCH', `persistent transfer ${id} with ${peerId}: the two calls do not match: ${mismatch}`);
}

/** The call's timeout where it is valid, else the default (the flag block's registration is made before the options are checked). */
function timeoutOrDefault(options: unknown): number {
  try {
    return callTimeout('persistent()', (options as { timeoutMs?: unknown } | null)?.timeoutMs);
  } catch {
    return DEFAULT_CALL_TIMEOUT_MS;
  }
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
  /** Eager starts (not captured) whose stream has not passed them yet: each its stream's mark. */
  private readonly inFlight = new Set<Promise<void>>();
  /** A start of it was captured: graphs may replay it, unseen by the host. */
  captured = false;
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

  /** @internal Eager starts still queued (the watchdog releases a failed transfer's one by one, quickly). */
  get releasing(): boolean {
    return this.inFlight.size > 0;
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
    this.starts++;
    this.tell({ type: 'START' });
    if (capturing) {
      this.captured = true; // the graph owner synchronizes its replays
      return;
    }
    // The round goes through the peer's mappings (its buffer, its flag block): they stay mapped until the GPU passed it.
    this.registration.useUntil(stream);
    this.peerFlags.useUntil(stream);
    this.owner.useOwnBlock(this, stream);
    const done: Promise<void> = this.owner.watchdog.gpu.marked(stream).then(() => {
      this.inFlight.delete(done);
      if (this.inFlight.size === 0) this.tell({ type: 'IDLE' });
    });
    this.inFlight.add(done);
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

  /** @internal The watchdog queued a write through the peer's flag block on `stream`: it stays mapped until the GPU passed it. */
  peerWritten(stream: StreamHandle): void {
    this.peerFlags.useUntil(stream);
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
    while (this.inFlight.size > 0) await Promise.race(this.inFlight);
  }

  /**
   * Resolves once the GPU passed every use of its memory the host can see:
   * its eager starts and the watchdog's writes so far. Captured: `graceMs`
   * more, while the watchdog keeps its waits poisoned for replays unseen.
   */
  async settled(graceMs: number): Promise<void> {
    await this.quiesce();
    if (this.captured) await new Promise((r) => setTimeout(r, graceMs).unref());
    await this.owner.watchdog.flushed();
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
    this.owner.watchdog.poison(peer !== undefined ? [this.ownAwaited, peer] : [this.ownAwaited], (stream) => {
      this.owner.useOwnBlock(this, stream);
      if (peer !== undefined) this.peerWritten(stream);
    });
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
  /** The block's memory, freed once let go of and no GPU work on it (an eager start, a watchdog read or write) is in flight. */
  hold: GpuHold;
}

export class PersistentTransfers {
  private readonly calls: PairedCalls<PtOfferFrame>;
  /** The flag block, made (and registered) with the first call; a failed one is made again by the next call. */
  private flags: Promise<FlagBlock> | undefined;
  /** Its registration's number, known as soon as the first call is made. */
  private flagRegId = 0;
  private block: FlagBlock | undefined;
  private unwatch: (() => void) | undefined;
  private readonly live = new Map<number, PersistentTransfer>();
  private readonly reserved = new Set<number>();
  /** Slots of the block some transfer has had (their words may hold its last values). */
  private usedSlots = new Set<number>();
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
    this.calls = new PairedCalls('persistent()', this.peerId, (id, reason) => this.tellPeer(id, reason));
  }

  /** How long a closed endpoint keeps poisoning the waits of transfers captured in graphs (their replays are unseen). */
  get graceMs(): number {
    return Math.max(1000, 4 * this.watchdog.timeoutMs);
  }

  /** Transfers not closed (failed ones included until closed). */
  get size(): number {
    return this.live.size;
  }

  /** Makes this side of a persistent transfer; the peer makes the other, in the same order (see the file comment). */
  async create(reg: Registration, options: PersistentOptions): Promise<PersistentTransfer> {
    if (this.closeReason) throw this.closeReason;
    if (!this.registrations.agreedWithPeer)
      throw new PersistentTransferError(
        'SMCUDA_PERSISTENT_UNSUPPORTED',
        `peer ${this.peerId} does not run persistent transfers (its HELLO lacks Feature.REGISTER, or this driver has no stream memory operations)`,
      );
    // Numbers first, before anything can fail: the flag block's registration (first call), then this transfer's.
    const flags = this.flagBlock(timeoutOrDefault(options));
    const id = this.calls.take();
    let actor: PersistentActor | undefined;
    let slot: number | undefined;
    try {
      if (!(reg instanceof Registration) || this.registrations.get(reg.id) !== reg)
        throw new ArgumentTypeError('persistent() takes a Registration this endpoint made (from its register())');
      const o = checkOptions(reg, options);
      if (reg.peerFailure) throw new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `registration ${reg.id} is void: ${reg.peerFailure.message}`);
      if (reg.state !== 'registered') throw new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `registration ${reg.id} is ${reg.state}`);
      const st = this.driver.gpuDrivenStatus();
      if (!st.streamMemOps || !st.memOps64)
        throw new PersistentTransferError(
          'SMCUDA_PERSISTENT_UNSUPPORTED',
          `persistent transfers need 64-bit stream memory operations: ${st.reason ?? 'not offered by this driver'}`,
        );
      if (o.flagsBy === 'kernel' && !st.modules)
        throw new PersistentTransferError(
          'SMCUDA_PERSISTENT_UNSUPPORTED',
          `flags: 'kernel' needs modules and kernel launch: ${st.reason ?? 'not offered by this driver'}; use flags: 'memops'`,
        );
      const kernel = o.flagsBy === 'kernel' ? flagKernel(this.driver) : undefined;
      const failed = this.calls.takePeerFailure(id);
      if (failed) throw failed;
      const deadline = Date.now() + o.timeoutMs;
      slot = this.freeSlot();
      this.reserved.add(slot);
      // A slot used before holds its last transfer's words (POISON, from its close): zero them, after
      // the watchdog's writes, before the peer hears of the slot.
      if (this.usedSlots.has(slot) && this.block) this.watchdog.reset(wordsOf(this.block.ptr + BigInt(slot * SLOT_BYTES)));
      this.usedSlots.add(slot);
      this.ctx.link.sendFrame({
        type: FrameType.PT_OFFER,
        ptId: id,
        role: o.role === 'send' ? PtRole.SEND : PtRole.RECV,
        regId: reg.id,
        offset: o.offset,
        length: o.length,
        flagRegId: this.flagRegId,
        slot,
      });
      actor = startMachine(this, id, o.role);
      // The block first: its failure (flag slots unlike) is the cause, on both sides, not the peer's PT_FAIL that follows it.
      const block = await flags;
      const peer = await this.calls.offerOf(id, Math.max(1, deadline - Date.now()));
      checkMatch(id, this.peerId, reg, o, peer);
      const late = this.closeReason ?? this.calls.takePeerFailure(id);
      if (late) throw late;
      const t = this.matched(id, reg, o, slot, block, peer, actor);
      t.flagKernel = kernel;
      this.calls.done(id);
      return t;
    } catch (err) {
      this.calls.fail(id, err as Error);
      if (actor) {
        actor.send({ type: 'FAIL', code: (err as { code?: string }).code ?? 'SMCUDA_PERSISTENT_MISMATCH' });
        actor.stop();
      }
      throw err;
    } finally {
      if (slot !== undefined) this.reserved.delete(slot);
    }
  }

  /** Both halves are here: checks they match and makes this side's transfer. */
  private matched(
    id: number,
    reg: Registration,
    o: CheckedOptions,
    slot: number,
    block: FlagBlock,
    peer: PtOfferFrame,
    actor: PersistentActor,
  ): PersistentTransfer {
    const { role, length, offset } = o;
    if (peer.offset + peer.length > reg.peer.length)
      throw new ProtocolError(
        `PT_OFFER ${id}: bytes ${peer.offset}..${peer.offset + peer.length} exceed the peer's registered ${reg.peer.length}`,
        'SMCUDA_BAD_REGISTRATION',
      );
    const peerFlags = this.registrations.get(peer.flagRegId);
    if (!peerFlags || peer.slot >= peerFlags.peer.length / SLOT_BYTES)
      throw new ProtocolError(`PT_OFFER ${id} names flag registration ${peer.flagRegId} slot ${peer.slot}, which it does not hold`, 'SMCUDA_BAD_REGISTRATION');
    const mine = reg.local.ptr + BigInt(offset);
    const theirs = reg.peer.ptr + BigInt(peer.offset);
    const ownSlot = block.ptr + BigInt(slot * SLOT_BYTES);
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
    block.used[slot] = t;
    this.live.set(id, t);
    // Deregistration and the endpoint's close wait for its work on the data and on the flags.
    const user = {
      quiesce: () => t.quiesce(),
      close: (e: Error) => t.closeFor(e),
      get captured() {
        return t.captured;
      },
    };
    for (const r of [reg, block.registration, peerFlags]) r.users.add(user);
    t.onForget = () => {
      for (const r of [reg, block.registration, peerFlags]) r.users.delete(user);
    };
    actor.send({ type: 'MATCHED' });
    return t;
  }

  onFrame(frame: PtOfferFrame | PtFailFrame): void {
    if (frame.type === FrameType.PT_FAIL) {
      const t = this.live.get(frame.ptId);
      if (t)
        return t.fail(
          new PersistentTransferError('SMCUDA_PERSISTENT_PEER_FAILED', `peer ${this.peerId} failed persistent transfer ${frame.ptId}: ${frame.reason}`),
          false,
        );
      return this.calls.onPeerFailed(frame.ptId, frame.reason);
    }
    if (this.live.has(frame.ptId)) throw new ProtocolError(`peer ${this.peerId} sent PT_OFFER ${frame.ptId} twice`, 'SMCUDA_BAD_REGISTRATION');
    this.calls.onOffer(frame.ptId, frame);
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

  /** @internal Work on `stream` reads or writes `t`'s slot of its flag block: the block outlives it. */
  useOwnBlock(t: PersistentTransfer, stream: StreamHandle): void {
    const block = this.block;
    if (block !== undefined && block.used[t.slot] === t) this.watchdog.gpu.useUntil(block.hold, stream);
  }

  /** @internal A closed transfer leaves its slot (a failed one keeps it: its waits stay poisoned until closed). */
  forget(t: PersistentTransfer): void {
    if (this.live.get(t.id) !== t) return;
    this.live.delete(t.id);
    t.onForget?.();
    // Once the endpoint is closed no slot is reused: a closed transfer's waits stay poisoned
    // by the watchdog until the block is freed, so replays already queued run through.
    if (this.closeReason) return;
    // At once: a watchdog tick must not poison the slot once a new transfer has it.
    if (this.block?.used[t.slot] === t) this.block.used[t.slot] = undefined;
  }

  /**
   * The endpoint closed: every transfer fails (its waits released); the flag
   * block is freed once the GPU passed every transfer's work (settled).
   */
  close(reason: Error): void {
    if (this.closeReason) return;
    const err =
      reason instanceof PersistentTransferError
        ? reason
        : new PersistentTransferError('SMCUDA_PERSISTENT_CLOSED', `the endpoint to ${this.peerId} closed: ${reason.message}`, { cause: reason });
    this.closeReason = err; // first: the peer's mappings go with the endpoint, so only our own waits are released
    this.calls.close(err);
    const transfers = [...this.live.values()];
    for (const t of transfers) t.fail(err, false, 'closed');
    const block = this.block;
    const unwatch = this.unwatch;
    void Promise.all(transfers.map((t) => t.settled(this.graceMs))).then(() => {
      // Failed transfers' waits were poisoned by the watchdog until now (graceMs more for a captured
      // one); its writes so far are uses of the block's hold.
      unwatch?.();
      if (!block) return;
      // This side is done with the block, but the peer may still have it mapped: freeing exported
      // memory before the importer closed it is undefined in CUDA, and after the close the peer's
      // release cannot be heard. Its close follows ours, so the block is held graceMs more.
      block.hold.use();
      setTimeout(() => block.hold.done(), this.graceMs).unref();
      block.hold.close();
    });
  }

  private freeSlot(): number {
    // A slot never used first (nothing to reset), then the lowest free one.
    if (this.usedSlots.size < this.flagSlots) {
      for (let s = 0; s < this.flagSlots; s++) if (!this.usedSlots.has(s) && !this.reserved.has(s)) return s;
    }
    // Slots in use: the block's live transfers and those being made now.
    for (let s = 0; s < this.flagSlots; s++) {
      if (this.reserved.has(s)) continue;
      let taken = false;
      for (const t of this.live.values()) if (t.slot === s) taken = true;
      if (!taken) return s;
    }
    throw new PersistentTransferError(
      'SMCUDA_PERSISTENT_SLOTS',
      `all ${this.flagSlots} flag slots of the endpoint to ${this.peerId} are in use: close transfers, or raise the transport option persistent.flagSlots`,
    );
  }

  /**
   * The flag block, made with the first call (both sides make their first
   * call together, so its registration is paired too). One whose making
   * failed, or whose peer gave it up, is made again by the next call — on
   * both sides, as both saw the failure.
   */
  private flagBlock(timeoutMs: number): Promise<FlagBlock> {
    if (this.flags && !this.block?.registration.peerFailure) return this.flags;
    if (this.block) this.dropBlock(this.block);
    const made = this.makeFlags(timeoutMs);
    this.flags = made;
    made.catch(() => {
      if (this.flags === made) this.flags = undefined;
    });
    return made;
  }

  private makeFlags(timeoutMs: number): Promise<FlagBlock> {
    const d = this.driver;
    const bytes = this.flagSlots * SLOT_BYTES;
    let ptr: DevicePtr | undefined;
    try {
      ptr = d.memAlloc(bytes);
      d.memsetD8(ptr, 0, bytes);
    } catch (err) {
      if (ptr !== undefined) this.freeBlock(ptr);
      this.registrations.spend(err as Error); // the peer's flag registration of this number fails too
      this.flagRegId = this.registrations.lastId;
      return Promise.reject(err as Error);
    }
    const at = ptr;
    const registering = this.registrations.register({ ptr: at, length: bytes }, { timeoutMs }, true);
    this.flagRegId = this.registrations.lastId;
    this.usedSlots = new Set();
    return registering.then(
      (registration) => {
        if (registration.peer.length !== bytes) {
          // Both sides see the sizes differ and give their blocks up together.
          void registration.deregister().finally(() => this.freeBlock(at));
          throw new PersistentTransferError(
            'SMCUDA_PERSISTENT_MISMATCH',
            `the flag blocks of the endpoint to ${this.peerId} differ: ${this.flagSlots} slots here, ${registration.peer.length / SLOT_BYTES} there; set the transport option persistent.flagSlots alike on both sides`,
          );
        }
        const block: FlagBlock = {
          ptr: at,
          slots: this.flagSlots,
          registration,
          used: new Array<PersistentTransfer | undefined>(this.flagSlots).fill(undefined),
          transfers: () => block.used.filter((t): t is PersistentTransfer => t !== undefined),
          hold: this.watchdog.gpu.hold(() => this.freeBlock(at)),
          touched: (stream) => this.watchdog.gpu.useUntil(block.hold, stream),
        };
        if (this.closeReason) {
          registration.release();
          block.hold.close();
          throw this.closeReason;
        }
        this.unwatch = this.watchdog.watch(block);
        this.block = block;
        return block;
      },
      (err: unknown) => {
        this.freeBlock(at);
        throw err;
      },
    );
  }

  /** A block whose peer gave it up: its transfers closed with it; it goes once the GPU passed the work on it (its hold). */
  private dropBlock(block: FlagBlock): void {
    this.block = undefined;
    const unwatch = this.unwatch;
    this.unwatch = undefined;
    unwatch?.();
    void block.registration.deregister().finally(() => block.hold.close());
  }

  private freeBlock(ptr: DevicePtr): void {
    try {
      this.driver.memFree(ptr);
    } catch {
      // the driver closed first (it frees everything)
    }
  }
}
