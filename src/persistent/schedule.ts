/**
 * The order of a start's flag operations, chosen so that the GPU does as
 * little as possible between the signals it sees and the copies and signals
 * that follow them.
 *
 * A call of several transfers (startSequence, startGroup) lists each
 * transfer's operations in turn, so between a peer's signal and the copy it
 * releases sat the other transfers' resets and bookkeeping. The stream's
 * memory-operation unit runs a batch's operations one by one, each at a
 * cost, and in the graph suite's 1 MiB ping-pong six of them sat on the
 * path of every half round trip, against one on the raw ping-pong's
 * (docs/benchmarks.md, 'GPU-driven transfers').
 *
 * The order kept (each entry after everything it depends on):
 *  - copies keep their order against every copy, signal (a write into the
 *    peer's memory) and wait: no byte is read or overwritten earlier than
 *    before, and no copy starts before a wait that preceded it;
 *  - a wait never passes a signal of another transfer that preceded it, so
 *    no wait needs more of the peer than before. Signals may go earlier, and
 *    other transfers' signals and waits may swap among themselves: the
 *    peer sees nothing of the order in which this stream passes two waits;
 *  - a transfer's own waits, resets, signals and copy keep their order: a
 *    reset of DONE stays before this side's next READY, a reset of READY
 *    before its next DONE, and each keeps its signal from being lost;
 *  - bookkeeping (ARRIVE, STAMP: what the watchdog reads) keeps its order per
 *    word and against its transfer's waits and copy, so a wait is always
 *    inside its start as the watchdog sees it. Against other transfers it
 *    may move, including across their copies.
 *  test/unit/persistent/schedule.test.ts checks these on random calls, and
 *  runs random pairs of calls to check that nothing that completed as
 *  listed hangs or reads a stale round once scheduled.
 *
 * The order chosen, before each copy: the signals that can go (with the
 * resets they need), those of the copy just made last; the bookkeeping that
 * can go; what the next copy depends on, its own READY wait and reset first;
 * the copy. What else became possible on the way (resets and bookkeeping
 * after a wait) waits for after the copy. In the ping-pong each side then
 * sends READY just before DONE, so the peer has passed its READY wait and
 * reset when DONE arrives, and the path of a half round trip is: the copy,
 * one reset, READY, DONE, the peer's wait, its copy. The raw ping-pong's
 * is: the copy, its signal, the peer's wait and reset, its copy.
 */
import type { DevicePtr } from '../cuda/driver.js';
import type { FlagOp } from '../kernels/sim/flag-ops.js';
import type { QueuedItem } from './start.js';

/** A stream item with the transfer it belongs to (any object that names the transfer: the same for every round of it). */
export interface OwnedItem {
  owner: object;
  item: QueuedItem;
}

/** What an entry is, for the rules in the header. 'other' (an operation flags.ts never makes) keeps its place against everything. */
type Kind = 'signal' | 'wait' | 'reset' | 'book' | 'copy' | 'other';

interface Entry {
  owner: object;
  kind: Kind;
  /** The word it writes or waits on (operations). */
  addr?: DevicePtr;
  op?: FlagOp;
  copy?: QueuedItem & { kind: 'copy' };
  /** Entries it must follow, by index. */
  preds: number[];
  done: boolean;
}

/**
 * `items` in the order the header describes, as batches and copies
 * (batches not merged). `local`: this side's own flag words (a write to any
 * other address is a signal); `bookkeeping`: those of them that only the
 * watchdog reads (ARRIVE, STAMP).
 */
export function scheduleStart(items: readonly OwnedItem[], local: ReadonlySet<DevicePtr>, bookkeeping: ReadonlySet<DevicePtr>): QueuedItem[] {
  const entries: Entry[] = [];
  for (const { owner, item } of items) {
    if (item.kind === 'copy') entries.push({ owner, kind: 'copy', copy: item, preds: [], done: false });
    else
      for (const op of item.ops)
        entries.push({ owner, kind: kindOf(op, local, bookkeeping), addr: 'addr' in op ? op.addr : undefined, op, preds: [], done: false });
  }
  for (let j = 0; j < entries.length; j++) for (let i = 0; i < j; i++) if (mustPrecede(entries[i]!, entries[j]!)) entries[j]!.preds.push(i);

  const out: Entry[] = [];
  const ready = (e: Entry) => !e.done && e.preds.every((i) => entries[i]!.done);
  const emit = (e: Entry) => {
    e.done = true;
    out.push(e);
  };
  // Each copy in turn, then the end of the call (undefined) the same way.
  let lastCopy: object | undefined;
  for (const copy of [...entries.filter((e) => e.kind === 'copy'), undefined]) {
    // Signals first, each with the resets it still needs; the DONE of the copy just made after the others.
    for (const late of [false, true])
      for (let moved = true; moved; ) {
        moved = false;
        for (const e of entries) {
          if (e.kind !== 'signal' || e.done || (e.owner === lastCopy) !== late) continue;
          const missing = e.preds.map((i) => entries[i]!).filter((p) => !p.done);
          if (missing.every((p) => p.kind === 'reset' && ready(p))) {
            for (const p of missing) emit(p);
            emit(e);
            moved = true;
          }
        }
      }
    // Then the bookkeeping that can go.
    for (let moved = true; moved; ) {
      moved = false;
      for (const e of entries) if (e.kind === 'book' && ready(e)) emit(e), (moved = true);
    }
    if (copy === undefined) break;
    // Then what the copy depends on, in the given order (which respects every dependency), and the copy.
    const needed = new Set<number>();
    const visit = (i: number) => {
      for (const p of entries[i]!.preds) if (!entries[p]!.done && !needed.has(p)) needed.add(p), visit(p);
    };
    visit(entries.indexOf(copy));
    // The copy's own chain first (its READY wait and reset), then the other waits it depends on.
    const order = [...needed].sort((a, b) => a - b).map((i) => entries[i]!);
    while (order.some((e) => !e.done)) {
      const e = order.find((x) => !x.done && x.owner === copy.owner && ready(x)) ?? order.find((x) => !x.done && ready(x))!;
      emit(e);
    }
    emit(copy);
    lastCopy = copy.owner;
  }
  for (const e of entries) if (!e.done) emit(e);
  return asItems(out);
}

function kindOf(op: FlagOp, local: ReadonlySet<DevicePtr>, bookkeeping: ReadonlySet<DevicePtr>): Kind {
  if (op.op === 'wait64') return 'wait';
  if (op.op !== 'write64') return 'other';
  if (!local.has(op.addr)) return 'signal';
  return bookkeeping.has(op.addr) ? 'book' : 'reset';
}

/** Whether `a`, listed before `b`, must stay before it (the rules in the header). */
function mustPrecede(a: Entry, b: Entry): boolean {
  if (a.kind === 'other' || b.kind === 'other') return true;
  if (a.kind === 'book' || b.kind === 'book') {
    if (a.kind === 'book' && b.kind === 'book') return a.addr === b.addr;
    const other = a.kind === 'book' ? b : a;
    return a.owner === b.owner && (other.kind === 'wait' || other.kind === 'copy');
  }
  if (a.owner === b.owner) return true;
  if (a.kind === 'copy' || b.kind === 'copy') return a.kind !== 'reset' && b.kind !== 'reset'; // another transfer's reset: free
  return a.kind === 'signal' && b.kind === 'wait'; // a wait never passes a signal; the rest of other transfers' may swap
}

function asItems(entries: readonly Entry[]): QueuedItem[] {
  const out: QueuedItem[] = [];
  let ops: FlagOp[] = [];
  for (const e of entries) {
    if (e.copy !== undefined) {
      if (ops.length > 0) out.push({ kind: 'batch', ops });
      ops = [];
      out.push(e.copy);
    } else ops.push(e.op!);
  }
  if (ops.length > 0) out.push({ kind: 'batch', ops });
  return out;
}
