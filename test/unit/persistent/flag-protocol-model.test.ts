/**
 * Model test of the persistent-transfer flag protocol: the operations the
 * implementation queues (senderSteps / receiverSteps of src/persistent/flags.ts,
 * evaluated with the simulator's own wait conditions) on two model streams,
 * with the real Watchdog over a model driver, under arbitrary interleavings
 * of rounds on either side (counts that differ, as mismatched graph
 * replays), stream progress, watchdog ticks, one side's death, a lost peer
 * noticed late, and closing (deregistration) on either side. Then the live
 * side(s) run to the end. Properties:
 *
 *  - never a deadlock: every live stream empties, with the watchdog's help;
 *  - never a torn or stale read: a round the receiver consumes before any
 *    failure holds exactly the bytes of that round (a failure voids the
 *    rounds after it, and both sides are told);
 *  - a new pair of transfers in the slots of a closed pair, after the reset
 *    PersistentTransfers.create makes for a reused slot, delivers every round
 *    (without it, the closed pair's POISON lets a receiver read a stale round).
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import type { CudaDriver, DevicePtr, StreamMemOp } from '../../../src/cuda/driver.js';
import { conditionMet } from '../../../src/cuda/sim/mem-ops.js';
import { ARRIVE, DONE, READY, receiverSteps, senderSteps, slotAddress, STAMP, type StartStep } from '../../../src/persistent/flags.js';
import { GpuRuntime } from '../../../src/gpu/gpu-runtime.js';
import { Watchdog, type WatchedBlock, type WatchedTransfer } from '../../../src/persistent/watchdog.js';

const A_BLOCK = 0x10000n;
const B_BLOCK = 0x20000n;
const TORN = -1;

type Item =
  | { kind: 'batch'; ops: StreamMemOp[]; next: number }
  | { kind: 'produce'; round: number }
  | { kind: 'copyBegin' }
  | { kind: 'copyEnd' }
  | { kind: 'consume' };

class World {
  readonly mem = new Map<DevicePtr, bigint>();
  src = 0;
  dst = 0;
  /** Rounds the receiver consumed: [k-th consume, value read, after a failure?]. */
  readonly consumed: Array<{ k: number; value: number; void: boolean }> = [];
  failedAnywhere = false;

  word(addr: DevicePtr): bigint {
    return this.mem.get(addr) ?? 0n;
  }
}

class Side implements WatchedTransfer {
  readonly queue: Item[] = [];
  dead = false;
  failed = false;
  closing = false;
  forgotten = false;
  stuckTicks = 0;
  rounds = 0;
  consumes = 0;
  peer!: Side;
  readonly slot = 0;
  readonly watchdog: Watchdog;
  private readonly steps: StartStep[];

  constructor(
    readonly role: 'send' | 'recv',
    private readonly w: World,
    readonly ownBlock: DevicePtr,
    readonly peerBlock: DevicePtr,
  ) {
    this.steps = role === 'send' ? senderSteps(slotAddress(ownBlock, peerBlock, 0)) : receiverSteps(slotAddress(ownBlock, peerBlock, 0));
    this.watchdog = new Watchdog(new GpuRuntime(modelDriver(w)), { timeoutMs: 40, tickMs: 10 });
  }

  get ownAwaited(): DevicePtr {
    return this.ownBlock + BigInt(this.role === 'send' ? READY : DONE);
  }

  peerAwaited(): DevicePtr | undefined {
    return this.peerBlock + BigInt(this.role === 'send' ? DONE : READY);
  }

  stuck(): void {
    this.fail();
  }

  /** The host fails the transfer (and tells the peer, whose host fails it too unless dead). */
  fail(): void {
    this.w.failedAnywhere = true;
    if (!this.failed) {
      this.failed = true;
      this.poisonNow([this.ownAwaited, this.peerAwaited()!]);
    }
    if (!this.peer.dead && !this.peer.failed) {
      this.peer.failed = true;
      this.peer.poisonNow([this.peer.ownAwaited]);
    }
  }

  poisonNow(words: DevicePtr[]): void {
    this.watchdog.poison(words);
  }

  /** start(): refused once failed (the host throws), as the implementation does. */
  start(): void {
    if (this.dead || this.failed || this.closing) return;
    const round = ++this.rounds;
    if (this.role === 'send') this.queue.push({ kind: 'produce', round });
    for (const s of this.steps) {
      if (s.kind === 'batch') this.queue.push({ kind: 'batch', ops: s.ops, next: 0 });
      else this.queue.push({ kind: 'copyBegin' }, { kind: 'copyEnd' });
    }
    if (this.role === 'recv') this.queue.push({ kind: 'consume' });
  }

  /** Runs the head of the stream if it can; true if something happened. */
  step(): boolean {
    if (this.dead) return false;
    const head = this.queue[0];
    if (!head) return false;
    const w = this.w;
    switch (head.kind) {
      case 'produce':
        w.src = head.round;
        break;
      case 'copyBegin':
        w.dst = TORN;
        break;
      case 'copyEnd':
        w.dst = w.src;
        break;
      case 'consume':
        this.consumes++;
        w.consumed.push({ k: this.consumes, value: w.dst, void: w.failedAnywhere });
        break;
      case 'batch': {
        let moved = false;
        while (head.next < head.ops.length) {
          const op = head.ops[head.next]!;
          if (op.op === 'wait64') {
            if (!conditionMet(op.condition, w.word(op.addr), op.value, 64)) return moved;
          } else if (op.op === 'write64') {
            w.mem.set(op.addr, op.value);
          }
          head.next++;
          moved = true;
        }
        break;
      }
    }
    this.queue.shift();
    return true;
  }

  /** Closing (deregistration): once no start of ours is in flight, the transfer is closed and forgotten. */
  maybeFinishClose(): void {
    if (this.closing && !this.forgotten && this.queue.length === 0) {
      this.fail();
      this.forgotten = true;
    }
  }

  block(): WatchedBlock {
    return { ptr: this.ownBlock, slots: 1, transfers: () => (this.forgotten || this.dead ? [] : [this]) };
  }
}

/** Just what the watchdog calls: reads and writes land in the model memory at once. */
function modelDriver(w: World): CudaDriver {
  const d = {
    streamCreate: () => 1n,
    eventCreate: () => 2n,
    eventRecord: () => undefined,
    eventDestroy: () => undefined,
    streamDestroy: () => undefined,
    streamSynchronize: () => undefined,
    whenComplete: () => Promise.resolve(),
    memcpyDtoHAsync: (dst: Uint8Array, src: DevicePtr) => {
      const v = new DataView(dst.buffer, dst.byteOffset, dst.byteLength);
      for (let at = 0; at + 8 <= dst.byteLength; at += 8) v.setBigUint64(at, w.word(src + BigInt(at)), true);
    },
    streamBatchMemOp: (_s: bigint, ops: readonly StreamMemOp[]) => {
      for (const op of ops) if (op.op === 'write64') w.mem.set(op.addr, op.value);
    },
  };
  return d as unknown as CudaDriver;
}

type Action =
  | { a: 'start'; side: 0 | 1 }
  | { a: 'step'; side: 0 | 1; n: number }
  | { a: 'tick'; side: 0 | 1 }
  | { a: 'die'; side: 0 | 1 }
  | { a: 'noticeLoss'; side: 0 | 1 }
  | { a: 'close'; side: 0 | 1 };

const side01 = fc.constantFrom<0 | 1>(0, 1);
const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ a: fc.constant('start' as const), side: side01 }) },
  { weight: 8, arbitrary: fc.record({ a: fc.constant('step' as const), side: side01, n: fc.integer({ min: 1, max: 6 }) }) },
  { weight: 2, arbitrary: fc.record({ a: fc.constant('tick' as const), side: side01 }) },
  { weight: 1, arbitrary: fc.record({ a: fc.constant('die' as const), side: side01 }) },
  { weight: 1, arbitrary: fc.record({ a: fc.constant('noticeLoss' as const), side: side01 }) },
  { weight: 1, arbitrary: fc.record({ a: fc.constant('close' as const), side: side01 }) },
);

async function run(actions: Action[], w: World = new World()): Promise<{ w: World; sides: [Side, Side] }> {
  const sender = new Side('send', w, A_BLOCK, B_BLOCK);
  const receiver = new Side('recv', w, B_BLOCK, A_BLOCK);
  sender.peer = receiver;
  receiver.peer = sender;
  const sides: [Side, Side] = [sender, receiver];
  for (const s of sides) s.watchdog.watch(s.block());
  try {
    for (const act of actions) {
      const s = sides[act.side];
      switch (act.a) {
        case 'start':
          s.start();
          break;
        case 'step':
          for (let k = 0; k < act.n; k++) s.step();
          break;
        case 'tick':
          if (!s.dead) await s.watchdog.tickNow();
          break;
        case 'die':
          s.dead = true;
          break;
        case 'noticeLoss':
          // The endpoint's channel closed: this side fails its half (its own wait released).
          if (!s.dead && s.peer.dead) s.fail();
          break;
        case 'close':
          if (!s.dead) s.closing = true;
          break;
      }
      for (const x of sides) x.maybeFinishClose();
    }
    // The end: live sides run, their watchdogs tick, until nothing is left (or it is a deadlock).
    for (let guard = 0; guard < 400; guard++) {
      let moved = false;
      for (const s of sides) while (s.step()) moved = true;
      for (const s of sides) s.maybeFinishClose();
      if (sides.every((s) => s.dead || s.queue.length === 0)) break;
      if (!moved) for (const s of sides) if (!s.dead) await s.watchdog.tickNow();
    }
    return { w, sides };
  } finally {
    for (const s of sides) s.watchdog.close();
  }
}

/** Equal rounds on both sides, each making progress within the timeout. */
function equalRounds(rounds: number, extraSteps = 0): Action[] {
  const acts: Action[] = [];
  for (let r = 0; r < rounds; r++) {
    acts.push({ a: 'start', side: 1 }, { a: 'start', side: 0 }, { a: 'step', side: 0, n: extraSteps + 1 }, { a: 'tick', side: 0 }, { a: 'tick', side: 1 });
    acts.push({ a: 'step', side: 1, n: 6 }, { a: 'step', side: 0, n: 6 }, { a: 'step', side: 1, n: 6 });
  }
  return acts;
}

/**
 * A second pair of transfers in the slots of a first pair that was closed
 * (its words left as the close and the watchdog wrote them: POISON), after
 * what PersistentTransfers.create does for a slot used before: each side's
 * own words zeroed through its watchdog (Watchdog.reset), or not.
 */
async function reusedSlot(first: Action[], rounds: number, reset: boolean): Promise<World> {
  const w1 = new World();
  await run([...first.filter((a) => a.a !== 'die' && a.a !== 'noticeLoss'), { a: 'close', side: 0 }, { a: 'close', side: 1 }], w1);
  const w2 = new World();
  for (const [addr, value] of w1.mem) w2.mem.set(addr, value);
  if (reset) {
    for (const block of [A_BLOCK, B_BLOCK]) {
      const wd = new Watchdog(new GpuRuntime(modelDriver(w2)), { timeoutMs: 40 });
      wd.reset([READY, DONE, ARRIVE, STAMP].map((o) => block + BigInt(o)));
      wd.close();
    }
  }
  await run(equalRounds(rounds), w2);
  return w2;
}

describe('the persistent-transfer flag protocol (model)', () => {
  test.prop([fc.array(action, { maxLength: 40 }), fc.integer({ min: 1, max: 5 })], { numRuns: 150 })(
    'a slot reused after a closed pair, its words reset first: every round of the new pair delivered, no failure',
    async (first, rounds) => {
      const w = await reusedSlot(first, rounds, true);
      expect(w.failedAnywhere).toBe(false);
      expect(w.consumed.map((c) => c.value)).toEqual(Array.from({ length: rounds }, (_, k) => k + 1));
    },
  );

  it("without the reset, the closed pair's POISON lets the new receiver read a stale round (why create resets a reused slot)", async () => {
    const w = await reusedSlot(
      [
        { a: 'start', side: 0 },
        { a: 'start', side: 1 },
      ],
      2,
      false,
    );
    expect(w.consumed.map((c) => c.value)).not.toEqual([1, 2]);
  });

  test.prop([fc.array(action, { maxLength: 60 })], { numRuns: 300 })('never deadlocks, never reads a torn or stale round', async (actions) => {
    const { w, sides } = await run(actions);
    for (const s of sides) if (!s.dead) expect(s.queue, `${s.role} side left work queued: a deadlock`).toEqual([]);
    for (const c of w.consumed) if (!c.void) expect(c.value, `consume ${c.k} read ${c.value === TORN ? 'a torn buffer' : `round ${c.value}`}`).toBe(c.k);
  });

  test.prop([fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 3 })], { numRuns: 50 })(
    'equal round counts on both sides, each making progress within the timeout, deliver every round with no failure',
    async (rounds, extraSteps) => {
      const acts: Action[] = [];
      for (let r = 0; r < rounds; r++) {
        acts.push({ a: 'start', side: 1 }, { a: 'start', side: 0 }, { a: 'step', side: 0, n: extraSteps + 1 }, { a: 'tick', side: 0 }, { a: 'tick', side: 1 });
        acts.push({ a: 'step', side: 1, n: 6 }, { a: 'step', side: 0, n: 6 }, { a: 'step', side: 1, n: 6 });
      }
      const { w, sides } = await run(acts);
      expect(w.failedAnywhere).toBe(false);
      expect(w.consumed.map((c) => c.value)).toEqual(Array.from({ length: rounds }, (_, k) => k + 1));
      expect(sides.every((s) => s.queue.length === 0)).toBe(true);
    },
  );

  test.prop([fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 3 })], { numRuns: 30 })(
    'more rounds on one side than the other: the watchdog fails it on both sides and releases the waits',
    async (rounds, extra) => {
      const acts: Action[] = [];
      for (let r = 0; r < rounds; r++) acts.push({ a: 'start', side: 0 }, { a: 'start', side: 1 });
      for (let r = 0; r < extra; r++) acts.push({ a: 'start', side: 0 });
      const { w, sides } = await run(acts);
      expect(w.failedAnywhere).toBe(true);
      expect(sides[0].failed && sides[1].failed).toBe(true);
      expect(w.consumed.filter((c) => !c.void).map((c) => c.value)).toEqual(Array.from({ length: rounds }, (_, k) => k + 1));
    },
  );
});
