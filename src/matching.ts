/**
 * Message matching, with MPI's rule: on one endpoint and tag, messages are
 * matched in the order they were sent (arrivals are in order: the control
 * channel is ordered) and receives in the order they were posted.
 *
 * Wildcards, as MPI_ANY_TAG and MPI_ANY_SOURCE: a receive posted with
 * ANY_TAG takes the earliest waiting message of any tag; an arrival goes to
 * the earliest-posted receive that matches it — of its tag, of ANY_TAG, or a
 * rival queue's (the transport's any-source receives) — by one post order
 * shared by every queue of the process.
 *
 * An arrival with no matching receive waits in the unexpected queue; a
 * receive with no matching arrival waits in the posted queue.
 */

/** A receive's tag that matches every tag (MPI_ANY_TAG). */
export const ANY_TAG = -1;

/** One order for every post and every arrival of the process: "earliest" across tags, endpoints and the transport. */
let order = 0;
export function nextOrder(): number {
  return ++order;
}

interface Entry<T> {
  item: T;
  order: number;
}

/** Receives posted elsewhere that compete for this queue's arrivals (the transport's any-source receives). */
export interface RivalReceives<Posted> {
  /** The post order of the earliest receive there that takes `tag` (Infinity: none). */
  firstOrder(tag: number): number;
  /** Takes that receive. */
  take(tag: number): Posted;
}

export class MatchQueues<Posted, Arrival> {
  private readonly posted = new Map<number, Entry<Posted>[]>();
  /** Receives posted with ANY_TAG, in post order. */
  private readonly anyTag: Entry<Posted>[] = [];
  private readonly unexpected = new Map<number, Entry<Arrival>[]>();
  private unexpectedN = 0;

  /** An arrival: returns the receive it matches (here or the rival's), or queues it and returns undefined. */
  arrive(tag: number, arrival: Arrival, rival?: RivalReceives<Posted>): Posted | undefined {
    const waiting = this.posted.get(tag);
    const mine = waiting !== undefined ? waiting[0]!.order : Infinity;
    const any = this.anyTag.length > 0 ? this.anyTag[0]!.order : Infinity;
    const theirs = rival !== undefined ? rival.firstOrder(tag) : Infinity;
    if (mine < any && mine < theirs) {
      const e = waiting!.shift()!;
      if (waiting!.length === 0) this.posted.delete(tag);
      return e.item;
    }
    if (any < theirs) return this.anyTag.shift()!.item;
    if (theirs !== Infinity) return rival!.take(tag);
    push(this.unexpected, tag, { item: arrival, order: nextOrder() });
    this.unexpectedN++;
    return undefined;
  }

  /** A new receive (`tag` may be ANY_TAG): returns the arrival it matches, or queues it and returns undefined. */
  post(tag: number, recv: Posted): Arrival | undefined {
    const found = this.firstArrival(tag);
    if (found !== undefined) {
      const q = this.unexpected.get(found)!;
      const e = q.shift()!;
      if (q.length === 0) this.unexpected.delete(found);
      this.unexpectedN--;
      return e.item;
    }
    const entry = { item: recv, order: nextOrder() };
    if (tag === ANY_TAG) this.anyTag.push(entry);
    else push(this.posted, tag, entry);
    return undefined;
  }

  /** The arrival a receive of `tag` (or ANY_TAG) posted now would take, left where it is. */
  probe(tag: number): Arrival | undefined {
    const found = this.firstArrival(tag);
    return found === undefined ? undefined : this.unexpected.get(found)![0]!.item;
  }

  /** The post order of that arrival (Infinity: none), to pick the earliest across endpoints. */
  probeOrder(tag: number): number {
    const found = this.firstArrival(tag);
    return found === undefined ? Infinity : this.unexpected.get(found)![0]!.order;
  }

  /** The tag of the queue holding the earliest arrival a receive of `tag` takes. */
  private firstArrival(tag: number): number | undefined {
    if (tag !== ANY_TAG) return this.unexpected.has(tag) ? tag : undefined;
    let best: number | undefined;
    let bestOrder = Infinity;
    for (const [t, q] of this.unexpected) {
      if (q[0]!.order < bestOrder) {
        bestOrder = q[0]!.order;
        best = t;
      }
    }
    return best;
  }

  /** Withdraws a posted receive that has not matched yet; false if it already matched. */
  unpost(tag: number, recv: Posted): boolean {
    if (tag === ANY_TAG) {
      const i = this.anyTag.findIndex((e) => e.item === recv);
      if (i < 0) return false;
      this.anyTag.splice(i, 1);
      return true;
    }
    return remove(this.posted, tag, (e) => e.item === recv);
  }

  /** Withdraws the first unexpected arrival, of any tag, that satisfies `pred`. */
  withdrawArrival(pred: (a: Arrival) => boolean): Arrival | undefined {
    for (const [tag, q] of this.unexpected) {
      const i = q.findIndex((e) => pred(e.item));
      if (i < 0) continue;
      const [a] = q.splice(i, 1);
      if (q.length === 0) this.unexpected.delete(tag);
      this.unexpectedN--;
      return a!.item;
    }
    return undefined;
  }

  /**
   * Empties the posted receives and the arrivals `keep` refuses, returning
   * them (for rejecting on close); the arrivals it keeps stay, in order.
   */
  drainKeeping(keep: (a: Arrival) => boolean): { posted: Posted[]; dropped: Arrival[] } {
    const posted = [...this.posted.values(), this.anyTag].flat().map((e) => e.item);
    this.posted.clear();
    this.anyTag.length = 0;
    const dropped: Arrival[] = [];
    for (const [tag, q] of this.unexpected) {
      const kept: Entry<Arrival>[] = [];
      for (const e of q) {
        if (keep(e.item)) kept.push(e);
        else dropped.push(e.item);
      }
      this.unexpectedN -= q.length - kept.length;
      if (kept.length === 0) this.unexpected.delete(tag);
      else this.unexpected.set(tag, kept);
    }
    return { posted, dropped };
  }

  get postedCount(): number {
    let n = this.anyTag.length;
    for (const q of this.posted.values()) n += q.length;
    return n;
  }

  get unexpectedCount(): number {
    return this.unexpectedN;
  }
}

function push<T>(map: Map<number, T[]>, tag: number, item: T): void {
  const q = map.get(tag);
  if (q) q.push(item);
  else map.set(tag, [item]);
}

function remove<T>(map: Map<number, T[]>, tag: number, pred: (item: T) => boolean): boolean {
  const q = map.get(tag);
  if (!q) return false;
  const i = q.findIndex(pred);
  if (i < 0) return false;
  q.splice(i, 1);
  if (q.length === 0) map.delete(tag);
  return true;
}
