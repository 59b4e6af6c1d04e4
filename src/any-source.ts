/**
 * Receives from any peer (MPI_ANY_SOURCE): `transport.recv()` takes the next
 * matching message of whichever endpoint has one. A receive that finds none
 * waits here; each endpoint asks this queue (RivalReceives) before it queues
 * an arrival, and the earliest-posted receive that matches wins, whether it
 * was posted on the endpoint or here (one post order, src/matching.ts).
 */
import type { MessageBuffer } from './buffers.js';
import type { StreamHandle } from './cuda/driver.js';
import type { Endpoint } from './endpoint.js';
import { ANY_TAG, type RivalReceives } from './matching.js';
import type { PendingRecv } from './paths/index.js';
import { asTypeOfInto, type Received } from './received.js';

/** A receive from any source resolves to the message and the endpoint it came by. */
export type ReceivedFrom<D = Received['data']> = Received<D> & { endpoint: Endpoint };

interface Waiting {
  tag: number;
  order: number;
  into: MessageBuffer | undefined;
  stream: StreamHandle | undefined;
  resolve: (r: ReceivedFrom) => void;
  reject: (err: Error) => void;
  cleanup: () => void;
}

export class AnySourceReceives {
  private readonly waiting: Waiting[] = [];

  add(w: Waiting): void {
    this.waiting.push(w);
  }

  /** Withdraws a receive that has not matched; false if it already did. */
  remove(w: Waiting): boolean {
    const i = this.waiting.indexOf(w);
    if (i < 0) return false;
    this.waiting.splice(i, 1);
    return true;
  }

  /** The queue as one endpoint's rival: what it takes resolves with that endpoint. */
  rivalFor(ep: Endpoint): RivalReceives<PendingRecv> {
    return {
      firstOrder: (tag) => {
        if (this.waiting.length === 0) return Infinity;
        const w = this.find(tag);
        return w === undefined ? Infinity : w.order;
      },
      take: (tag) => {
        const w = this.find(tag)!;
        this.remove(w);
        w.cleanup();
        return {
          tag: w.tag,
          into: w.into,
          stream: w.stream,
          resolve: (r) => {
            const into = w.into;
            const data = into !== undefined && !(into instanceof Uint8Array) ? asTypeOfInto(r.data, into) : r.data;
            w.resolve(Object.assign(r, { endpoint: ep, data }) as ReceivedFrom);
          },
          reject: w.reject,
          cleanup: noop,
        };
      },
    };
  }

  /** Rejects every waiting receive (the transport closes). */
  rejectAll(err: Error): void {
    for (const w of this.waiting.splice(0)) {
      w.cleanup();
      w.reject(err);
    }
  }

  private find(tag: number): Waiting | undefined {
    for (const w of this.waiting) if (w.tag === ANY_TAG || w.tag === tag) return w;
    return undefined;
  }
}

export type { Waiting as AnySourceWaiting };

function noop(): void {}
