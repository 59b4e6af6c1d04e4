/**
 * Message matching per tag, with MPI's rule: on one endpoint and tag,
 * messages are matched in the order they were sent (arrivals are in order:
 * the control channel is ordered) and receives in the order they were posted.
 *
 * An arrival with no posted receive waits in the unexpected queue; a receive
 * with no arrival waits in the posted queue. Only one of the two queues of a
 * tag is ever non-empty.
 */

export class MatchQueues<Posted, Arrival> {
  private readonly posted = new Map<number, Posted[]>();
  private readonly unexpected = new Map<number, Arrival[]>();

  /** An arrival: returns the receive it matches, or queues it and returns undefined. */
  arrive(tag: number, arrival: Arrival): Posted | undefined {
    const waiting = this.posted.get(tag);
    if (waiting && waiting.length > 0) {
      const recv = waiting.shift()!;
      if (waiting.length === 0) this.posted.delete(tag);
      return recv;
    }
    push(this.unexpected, tag, arrival);
    return undefined;
  }

  /** A new receive: returns the arrival it matches, or queues it and returns undefined. */
  post(tag: number, recv: Posted): Arrival | undefined {
    const queued = this.unexpected.get(tag);
    if (queued && queued.length > 0) {
      const arrival = queued.shift()!;
      if (queued.length === 0) this.unexpected.delete(tag);
      return arrival;
    }
    push(this.posted, tag, recv);
    return undefined;
  }

  /** Withdraws a posted receive that has not matched yet; false if it already matched. */
  unpost(tag: number, recv: Posted): boolean {
    return remove(this.posted, tag, (r) => r === recv);
  }

  /** Withdraws the first unexpected arrival, of any tag, that satisfies `pred`. */
  withdrawArrival(pred: (a: Arrival) => boolean): Arrival | undefined {
    for (const [tag, q] of this.unexpected) {
      const i = q.findIndex(pred);
      if (i < 0) continue;
      const [a] = q.splice(i, 1);
      if (q.length === 0) this.unexpected.delete(tag);
      return a;
    }
    return undefined;
  }

  /** Empties both queues, returning what was in them (for rejecting on close). */
  drain(): { posted: Posted[]; unexpected: Arrival[] } {
    const posted = [...this.posted.values()].flat();
    const unexpected = [...this.unexpected.values()].flat();
    this.posted.clear();
    this.unexpected.clear();
    return { posted, unexpected };
  }

  get postedCount(): number {
    let n = 0;
    for (const q of this.posted.values()) n += q.length;
    return n;
  }

  get unexpectedCount(): number {
    let n = 0;
    for (const q of this.unexpected.values()) n += q.length;
    return n;
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
