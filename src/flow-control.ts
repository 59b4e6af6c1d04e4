/**
 * Backpressure for one endpoint: the peer holds at most `maxUnreadBytes`
 * (options.ts) of our messages that no receive of its has matched.
 *
 * A message is worth its inline data (EAGER) plus MESSAGE_COST bytes; RGET
 * and staged messages keep their data in the sender's buffer and are worth
 * MESSAGE_COST. The receiver reports the running total it has matched in a
 * CREDIT frame each time it grew by CREDIT_STEP (frames.ts); the sender keeps
 * what it sent minus that total under the limit. A send that does not fit
 * waits, and every later send queues behind it, so order is kept.
 *
 * While less than CREDIT_STEP is unread any message goes, however large: the
 * peer may have read it all without reporting it yet, and a message larger
 * than the window must still go once the peer has read everything. So a
 * peer that never receives holds at most the limit plus one message.
 *
 * The receiving side keeps the same count of what it holds for the peer
 * (arrived, not yet matched) and bounds it by its own `maxBufferedBytes`: a
 * peer that ignores the window is refused with PeerLimitError.
 */
import { PeerLimitError, ProtocolError } from './errors.js';
import { CREDIT_STEP, MESSAGE_COST } from './wire/frames.js';

/** What this endpoint holds for its peer and the peer for it (backpressure; see options.maxUnreadBytes). */
export interface FlowStats {
  maxUnreadBytes: number;
  /** Bytes sent (inline data + 64 per message) that the peer has not reported received. */
  unreadBytes: number;
  /** Sends waiting for the peer to receive. */
  waitingSends: number;
  /** Messages of the peer's that arrived here and wait for a receive. */
  unexpectedMessages: number;
}

/** A send waiting for room. */
export interface WaitingSend {
  /** Inline bytes it would carry if sent now (its path may change while it waits). */
  inline(): number;
  /** Sends it; the caller's promise settles as this one does. */
  go(): Promise<void>;
}

interface Queued {
  send: WaitingSend;
  resolve: () => void;
  reject: (err: Error) => void;
  cleanup: () => void;
}

export class FlowControl {
  // sender side
  private sent = 0;
  private peerConsumed = 0;
  private readonly queue: Queued[] = [];
  /** hold() without release(): every send queues (in order) meanwhile. */
  private holds = 0;
  // receiver side
  private consumed = 0;
  private arrivedTotal = 0;
  private reported = 0;
  private creditQueued = false;

  constructor(
    readonly maxUnreadBytes: number,
    /** Sends CREDIT{consumed} to the peer (unless the endpoint is closing). */
    private readonly sendCredit: (consumed: number) => void,
    /** Receiver: the most this endpoint holds of the peer's unmatched messages (options.maxBufferedBytes). */
    readonly maxBufferedBytes = Number.POSITIVE_INFINITY,
  ) {}

  /** Receiver: bytes of the peer's messages that arrived and no receive has matched yet (inline data + 64 per message). */
  get held(): number {
    return this.arrivedTotal - this.consumed;
  }

  /**
   * Receiver: one of the peer's messages, carrying `inline` bytes, arrived
   * (before it is matched). Throws PeerLimitError when what this endpoint
   * holds for the peer would pass maxBufferedBytes.
   */
  arrived(inline: number): void {
    this.arrivedTotal += inline + MESSAGE_COST;
    if (this.held > this.maxBufferedBytes) {
      throw new PeerLimitError(
        'SMCUDA_PEER_BUFFER_LIMIT',
        `the peer sent ${this.held} bytes of messages no receive has matched, above maxBufferedBytes (${this.maxBufferedBytes}): it ignores the flow-control window (or its maxUnreadBytes is larger than this side's maxBufferedBytes: raise it)`,
      );
    }
  }

  /** Bytes sent that the peer has not reported received. */
  get unread(): number {
    return this.sent - this.peerConsumed;
  }

  get waiting(): number {
    return this.queue.length;
  }

  /** `unexpected`: the peer's messages waiting here for a receive (the endpoint's matching counts them). */
  stats(unexpected: number): FlowStats {
    return { maxUnreadBytes: this.maxUnreadBytes, unreadBytes: this.unread, waitingSends: this.queue.length, unexpectedMessages: unexpected };
  }

  /** Whether a message carrying `inline` bytes may go now (no hold, nothing queued before it, and room). */
  mayGo(inline: number): boolean {
    return this.holds === 0 && this.queue.length === 0 && this.fits(inline);
  }

  /** Holds every send (they queue, in order) until release(): the endpoint waits for its negotiation. */
  hold(): void {
    this.holds++;
  }

  release(): void {
    if (this.holds > 0 && --this.holds === 0) this.drain();
  }

  /** A message carrying `inline` bytes left. */
  charge(inline: number): void {
    this.sent += inline + MESSAGE_COST;
  }

  /** Queues `send` until it fits; rejects with the signal's reason if it aborts first. */
  wait(send: WaitingSend, signal: AbortSignal | undefined, abortReason: (s: AbortSignal) => Error): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const q: Queued = { send, resolve, reject, cleanup: noop };
      if (signal) {
        const onAbort = () => {
          const i = this.queue.indexOf(q);
          if (i < 0) return;
          this.queue.splice(i, 1);
          reject(abortReason(signal));
          this.drain(); // the sends behind it may fit
        };
        signal.addEventListener('abort', onAbort, { once: true });
        q.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      this.queue.push(q);
    });
  }

  /** CREDIT from the peer: its receives have matched `consumed` bytes of ours in all. */
  credit(consumed: number): void {
    if (consumed < this.peerConsumed || consumed > this.sent) {
      throw new ProtocolError(`CREDIT reports ${consumed} bytes received, outside ${this.peerConsumed}..${this.sent}`, 'SMCUDA_BAD_CREDIT');
    }
    this.peerConsumed = consumed;
    this.drain();
  }

  /** The endpoint closed: every waiting send rejects with `reason`. */
  close(reason: Error): void {
    for (const q of this.queue.splice(0)) {
      q.cleanup();
      q.reject(reason);
    }
  }

  /** Receiver: one of the peer's messages, carrying `inline` bytes, was matched (or withdrawn). */
  received(inline: number): void {
    this.consumed += inline + MESSAGE_COST;
    if (!this.creditQueued && this.consumed - this.reported >= CREDIT_STEP) {
      this.creditQueued = true;
      queueMicrotask(this.flushCredit); // one CREDIT for a burst of receives
    }
  }

  private readonly flushCredit = (): void => {
    this.creditQueued = false;
    this.reported = this.consumed;
    this.sendCredit(this.consumed);
  };

  private fits(inline: number): boolean {
    const unread = this.unread;
    return unread < CREDIT_STEP || unread + inline + MESSAGE_COST <= this.maxUnreadBytes;
  }

  private drain(): void {
    while (this.holds === 0 && this.queue.length > 0) {
      const q = this.queue[0]!;
      if (!this.fits(q.send.inline())) return;
      this.queue.shift();
      q.cleanup();
      q.send.go().then(q.resolve, q.reject);
    }
  }
}

function noop(): void {}
