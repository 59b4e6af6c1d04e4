/**
 * scheduleStart (src/persistent/schedule.ts): the reordering of a start's
 * flag operations keeps every rule the protocol's safety rests on, and
 * never turns a pair of starts that completes into one that hangs or reads
 * stale bytes.
 *
 *  - Structure, on random calls (startSequence or startGroup order, random
 *    transfers and roles): the same operations; each transfer's own order
 *    (its bookkeeping against its waits and copy, and per word); copies in
 *    their order against every copy, signal and wait; no wait before a
 *    signal that preceded it.
 *  - Behaviour, on random pairs of calls run by two model streams in random
 *    interleavings: where the calls as queued before complete, the
 *    scheduled ones complete too, and every round the receiver sees done
 *    holds that round's bytes, written after the receiver's READY for it.
 *  - The graph suite's ping-pong: the wait for the peer's DONE right before
 *    each copy; after it, the next READY, then the copy's DONE.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import type { DevicePtr } from '../../../src/cuda/driver.js';
import { conditionMet } from '../../../src/cuda/sim/mem-ops.js';
import type { FlagOp } from '../../../src/kernels/sim/flag-ops.js';
import { ARRIVE, DONE, READY, receiverSteps, senderSteps, slotAddress, SLOT_BYTES, STAMP } from '../../../src/persistent/flags.js';
import { type OwnedItem, scheduleStart } from '../../../src/persistent/schedule.js';
import { wordsOf, type QueuedItem } from '../../../src/persistent/start.js';

const BLOCK = [0x10000n, 0x20000n] as const;
const DATA = [0x100000n, 0x200000n] as const;

/** Transfer t between side 0 and side 1; `from` is the sending side. */
interface Pair {
  t: number;
  from: 0 | 1;
}

/** One side's view of a transfer: its owner object and its items by part (as PersistentTransfer.items gives them). */
class SideTransfer {
  constructor(
    readonly pair: Pair,
    readonly side: 0 | 1,
  ) {}
  get role(): 'send' | 'recv' {
    return this.pair.from === this.side ? 'send' : 'recv';
  }
  get ownSlot(): DevicePtr {
    return BLOCK[this.side] + BigInt(this.pair.t * SLOT_BYTES);
  }
  items(part: 'post' | 'run' | 'wait'): QueuedItem[] {
    const a = slotAddress(BLOCK[this.side], BLOCK[1 - this.side]!, this.pair.t);
    if (this.role === 'send') {
      if (part !== 'run') return [];
      const [head, , tail] = senderSteps(a);
      const src = DATA[this.side] + BigInt(this.pair.t * 64);
      const dst = DATA[1 - this.side]! + BigInt(this.pair.t * 64);
      return [
        { kind: 'batch', ops: (head as { ops: FlagOp[] }).ops },
        { kind: 'copy', dst, src, length: 8 },
        { kind: 'batch', ops: (tail as { ops: FlagOp[] }).ops },
      ];
    }
    const [post, wait] = receiverSteps(a);
    if (part === 'post') return [{ kind: 'batch', ops: (post as { ops: FlagOp[] }).ops }];
    return part === 'wait' ? [{ kind: 'batch', ops: (wait as { ops: FlagOp[] }).ops }] : [];
  }
}

/** The owned items of one call, as startSequence or startGroup order them. */
function callItems(transfers: SideTransfer[], mode: 'sequence' | 'group'): OwnedItem[] {
  const own = (t: SideTransfer, part: 'post' | 'run' | 'wait') => t.items(part).map((item) => ({ owner: t, item }));
  if (mode === 'sequence') return transfers.flatMap((t) => [...own(t, 'post'), ...own(t, 'run'), ...own(t, 'wait')]);
  return [...transfers.flatMap((t) => own(t, 'post')), ...transfers.flatMap((t) => own(t, 'run')), ...transfers.flatMap((t) => own(t, 'wait'))];
}

function localWords(transfers: SideTransfer[]): Set<DevicePtr> {
  return new Set(transfers.flatMap((t) => wordsOf(t.ownSlot)));
}

function bookWords(transfers: SideTransfer[]): Set<DevicePtr> {
  return new Set(transfers.flatMap((t) => [t.ownSlot + BigInt(ARRIVE), t.ownSlot + BigInt(STAMP)]));
}

const schedule = (owned: OwnedItem[], transfers: SideTransfer[]) => scheduleStart(owned, localWords(transfers), bookWords(transfers));

type Flat = { owner: object; op?: FlagOp; copy?: QueuedItem };
function flatten(items: readonly OwnedItem[] | readonly QueuedItem[], owners?: readonly object[]): Flat[] {
  const out: Flat[] = [];
  items.forEach((x, i) => {
    const item = 'item' in x ? x.item : x;
    const owner = 'owner' in x ? x.owner : owners![i]!;
    if (item.kind === 'copy') out.push({ owner, copy: item });
    else for (const op of item.ops) out.push({ owner, op });
  });
  return out;
}

/** The scheduled items back as owned entries (each operation and copy object is unique, so it finds its owner). */
function ownersOf(original: Flat[], scheduled: QueuedItem[]): Flat[] {
  const owner = new Map<unknown, object>();
  for (const e of original) owner.set(e.op ?? e.copy, e.owner);
  return scheduled.flatMap((item): Flat[] =>
    item.kind === 'copy' ? [{ owner: owner.get(item)!, copy: item }] : item.ops.map((op) => ({ owner: owner.get(op)!, op })),
  );
}

const arbCall = fc.record({
  directions: fc.array(fc.constantFrom<0 | 1>(0, 1), { minLength: 2, maxLength: 4 }),
  picks: fc.array(fc.nat(3), { minLength: 2, maxLength: 10 }),
  mode: fc.constantFrom<'sequence' | 'group'>('sequence', 'group'),
});

describe('scheduleStart: structure', () => {
  test.prop([arbCall])(
    'keeps what each transfer needs in order, copies in place, and no wait before a signal that preceded it',
    ({ directions, picks, mode }) => {
      const mine = directions.map((from, t) => new SideTransfer({ t, from }, 0));
      // startGroup takes each transfer once; startSequence any number of times.
      const call = mode === 'group' ? mine : picks.map((p) => mine[p % mine.length]!);
      const owned = callItems(call, mode);
      const local = localWords(call);
      const book = bookWords(call);
      const before = flatten(owned);
      const after = ownersOf(before, schedule(owned, call));
      const key = (e: Flat) => e.op ?? e.copy;
      expect(new Set(after.map(key))).toEqual(new Set(before.map(key)));
      expect(after).toHaveLength(before.length);
      const addr = (e: Flat) => (e.op !== undefined && 'addr' in e.op ? e.op.addr : undefined);
      const kind = (e: Flat) => (e.copy ? 'copy' : e.op!.op === 'wait64' ? 'wait' : !local.has(addr(e)!) ? 'signal' : book.has(addr(e)!) ? 'book' : 'reset');
      // Written out again here, independently of schedule.ts's mustPrecede: the pairs whose order must hold.
      const kept = (a: Flat, b: Flat): boolean => {
        const [ka, kb] = [kind(a), kind(b)];
        if (ka === 'book' && kb === 'book') return addr(a) === addr(b);
        if (ka === 'book') return a.owner === b.owner && (kb === 'wait' || kb === 'copy');
        if (kb === 'book') return a.owner === b.owner && (ka === 'wait' || ka === 'copy');
        if (a.owner === b.owner) return true;
        if (ka === 'copy' || kb === 'copy') return ka !== 'reset' && kb !== 'reset';
        return ka === 'signal' && kb === 'wait';
      };
      const pos = new Map(after.map((e, i) => [key(e), i]));
      for (let i = 0; i < before.length; i++)
        for (let j = i + 1; j < before.length; j++) if (kept(before[i]!, before[j]!)) expect(pos.get(key(before[i]!))!).toBeLessThan(pos.get(key(before[j]!))!);
    },
  );
});

/** One model stream: its flat operations, run in order; a wait holds it until its word is >= the value. */
class ModelStream {
  next = 0;
  constructor(
    readonly side: 0 | 1,
    readonly ops: Flat[],
  ) {}
  get done(): boolean {
    return this.next === this.ops.length;
  }
}

interface Run {
  completed: boolean;
  errors: string[];
}

/**
 * Runs the two sides' operations with `choices` picking which stream moves
 * (a blocked stream is skipped). Data model: a copy of transfer t writes
 * its round number into t's destination; a receiver's passed wait for DONE
 * must find the round it waits for; a copy must come after the receiver's
 * READY of the same round.
 */
function run(sides: [Flat[], Flat[]], choices: number[]): Run {
  const mem = new Map<DevicePtr, bigint>();
  const word = (a: DevicePtr) => mem.get(a) ?? 0n;
  const streams = [new ModelStream(0, sides[0]), new ModelStream(1, sides[1])];
  const landed = new Map<DevicePtr, number>(); // destination -> round written
  const copies = new Map<DevicePtr, number>(); // destination -> copies so far
  const readies = new Map<DevicePtr, number>(); // READY word -> READY posts so far
  const dones = new Map<DevicePtr, number>(); // DONE word -> DONE waits passed so far
  const errors: string[] = [];
  let c = 0;
  for (let steps = 0; steps < 100_000; steps++) {
    const movable = streams.filter((s) => {
      if (s.done) return false;
      const op = s.ops[s.next]!.op;
      return !(op?.op === 'wait64' && !conditionMet(op.condition, word(op.addr), op.value, 64));
    });
    if (movable.length === 0) return { completed: streams.every((s) => s.done), errors };
    const s = movable[(choices[c++ % Math.max(1, choices.length)] ?? 0) % movable.length]!;
    const e = s.ops[s.next++]!;
    if (e.copy !== undefined) {
      const { dst } = e.copy as { dst: DevicePtr };
      const round = (copies.get(dst) ?? 0) + 1;
      copies.set(dst, round);
      // The receiver's READY for this round: its word is in the sender's block, at the transfer's slot.
      const t = Number((dst - DATA[1 - s.side]!) / 64n);
      const readyWord = BLOCK[s.side] + BigInt(t * SLOT_BYTES + READY);
      if ((readies.get(readyWord) ?? 0) < round) errors.push(`copy ${round} of transfer ${t} before the receiver's READY`);
      landed.set(dst, round);
    } else if (e.op!.op === 'wait64') {
      const op = e.op!;
      if (op.addr % BigInt(SLOT_BYTES) === BigInt(DONE) && op.addr >= BLOCK[s.side] && op.addr < BLOCK[s.side] + 0x1000n) {
        const round = (dones.get(op.addr) ?? 0) + 1;
        dones.set(op.addr, round);
        const t = Number((op.addr - BLOCK[s.side]) / BigInt(SLOT_BYTES));
        const got = landed.get(DATA[s.side] + BigInt(t * 64)) ?? 0;
        if (got !== round) errors.push(`receiver of transfer ${t} saw round ${got} at DONE ${round}`);
      }
    } else if (e.op!.op === 'write64') {
      const op = e.op as { addr: DevicePtr; value: bigint };
      mem.set(op.addr, op.value);
      const other = BLOCK[1 - s.side]!;
      if (op.value === 1n && op.addr >= other && op.addr < other + 0x1000n && (op.addr - other) % BigInt(SLOT_BYTES) === BigInt(READY))
        readies.set(op.addr, (readies.get(op.addr) ?? 0) + 1);
    }
  }
  return { completed: false, errors: ['step limit'] };
}

const arbExchange = fc.record({
  transfers: fc.integer({ min: 1, max: 3 }),
  directions: fc.array(fc.constantFrom<0 | 1>(0, 1), { minLength: 3, maxLength: 3 }),
  rounds: fc.integer({ min: 1, max: 4 }),
  orders: fc.array(fc.array(fc.nat(2), { minLength: 3, maxLength: 3 }), { minLength: 2, maxLength: 2 }),
  modes: fc.array(fc.constantFrom<'sequence' | 'group'>('sequence', 'group'), { minLength: 2, maxLength: 2 }),
  choices: fc.array(fc.nat(7), { minLength: 1, maxLength: 64 }),
});

describe('scheduleStart: behaviour', () => {
  test.prop([arbExchange], { numRuns: 300 })(
    'what completes as queued completes scheduled, with every round fresh',
    ({ transfers, directions, rounds, orders, modes, choices }) => {
      const pairs: Pair[] = Array.from({ length: transfers }, (_, t) => ({ t, from: directions[t]! }));
      const sides = ([0, 1] as const).map((side) => {
        const mine = pairs.map((p) => new SideTransfer(p, side));
        // Each round starts every transfer once, in this side's own order (a permutation picked by `orders`):
        // as one startSequence call of all rounds, or one startGroup call per round.
        const order = [...mine].sort((a, b) => orders[side]![a.pair.t]! - orders[side]![b.pair.t]! || a.pair.t - b.pair.t);
        const calls = modes[side] === 'sequence' ? [Array.from({ length: rounds }, () => order).flat()] : Array.from({ length: rounds }, () => order);
        const owned = calls.map((call) => callItems(call, modes[side]!));
        const local = localWords(mine);
        return { queued: owned.flatMap((o) => flatten(o)), scheduled: owned.flatMap((o) => ownersOf(flatten(o), scheduleStart(o, local, bookWords(mine)))) };
      });
      const before = run([sides[0]!.queued, sides[1]!.queued], choices);
      const after = run([sides[0]!.scheduled, sides[1]!.scheduled], choices);
      expect(before.errors).toEqual([]);
      expect(after.errors).toEqual([]);
      if (before.completed) expect(after.completed).toBe(true);
    },
  );
});

describe('scheduleStart: the graph suite ping-pong', () => {
  it("waits for the peer's DONE right before each copy, and sends the next READY just before the copy's DONE", () => {
    const ping: Pair = { t: 0, from: 1 };
    const reply: Pair = { t: 1, from: 0 };
    const init = [new SideTransfer(ping, 1), new SideTransfer(reply, 1)];
    const resp = [new SideTransfer(ping, 0), new SideTransfer(reply, 0)];
    for (const [mine, order] of [
      [init, [init[0]!, init[1]!]],
      [resp, [resp[0]!, resp[1]!]],
    ] as const) {
      const call = Array.from({ length: 4 }, () => order).flat();
      const items = schedule(callItems(call, 'sequence'), [...mine]);
      const sender = mine.find((t) => t.role === 'send')!;
      const receiver = mine.find((t) => t.role === 'recv')!;
      const word = (t: SideTransfer, off: number, own: boolean) => (own ? t.ownSlot : BLOCK[1 - t.side]! + BigInt(t.pair.t * SLOT_BYTES)) + BigInt(off);
      let checked = 0;
      items.forEach((it, i) => {
        if (it.kind !== 'copy' || i < 2) return;
        // Before the copy (after the first round): its READY wait and reset, then the wait for the receive's DONE.
        const prev = items[i - 1]!;
        if (prev.kind !== 'batch') throw new Error('a copy right after a copy');
        expect(prev.ops.slice(-3)).toEqual([
          { op: 'wait64', addr: word(sender, READY, true), value: 1n, condition: 'geq' },
          { op: 'write64', addr: word(sender, READY, true), value: 0n },
          { op: 'wait64', addr: word(receiver, DONE, true), value: 1n, condition: 'geq' },
        ]);
        // After it: the receive's reset and READY to the peer (but after the last copy), then this copy's DONE.
        const next = items[i + 1];
        if (next?.kind !== 'batch') return;
        const done = { op: 'write64', addr: word(sender, DONE, false), value: 1n };
        if (!next.ops.some((o) => o.op === 'write64' && o.addr === word(receiver, READY, false))) return expect(next.ops[0]).toEqual(done);
        expect(next.ops.slice(0, 3)).toEqual([
          { op: 'write64', addr: word(receiver, DONE, true), value: 0n },
          { op: 'write64', addr: word(receiver, READY, false), value: 1n },
          done,
        ]);
        checked++;
      });
      expect(checked).toBeGreaterThanOrEqual(2);
    }
  });
});
