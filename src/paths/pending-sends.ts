/**
 * Sender: the sends waiting for their FIN (RGET and staging; EAGER sends
 * settle at once), by seq. A FIN settles one; close rejects them all.
 */
import { SmcudaError, TruncationError } from '../errors.js';
import { FinStatus } from '../wire/frames.js';
import { count, type DataPath as PathKind, type DirectionCounters } from '../endpoint-stats.js';

export interface PendingSend {
  seq: number;
  tag: number;
  length: number;
  path: PathKind;
  resolve: () => void;
  reject: (err: Error) => void;
  /** Called once the send settles, whatever the outcome (frees events, listeners). */
  cleanup: () => void;
  cancelRequested: boolean;
  signal: AbortSignal | undefined;
  /**
   * RGET sends: what to announce again by staging if the peer cannot map it
   * (plain fields, not a closure: this is made for every send).
   */
  restage?: { buf: { ptr: bigint; length: number }; stream: unknown };
}

export class PendingSends {
  private readonly bySeq = new Map<number, PendingSend>();

  constructor(
    private readonly peerId: string,
    private readonly sent: DirectionCounters,
    /** Sends CANCEL{seq} (throws once the endpoint is closing). */
    private readonly sendCancel: (seq: number) => void,
  ) {}

  /** Sends waiting for their FIN (the transport keeps the process alive while there are some). */
  get size(): number {
    return this.bySeq.size;
  }

  get(seq: number): PendingSend | undefined {
    return this.bySeq.get(seq);
  }

  has(seq: number): boolean {
    return this.bySeq.has(seq);
  }

  /** Registers a send that completes on FIN; wires its AbortSignal to CANCEL. `restage`: see PendingSend. */
  pend(
    seq: number,
    tag: number,
    length: number,
    path: PathKind,
    signal: AbortSignal | undefined,
    release: () => void,
    restage?: PendingSend['restage'],
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const p: PendingSend = { seq, tag, length, path, resolve, reject, cleanup: release, cancelRequested: false, signal, restage };
      if (signal) {
        const onAbort = () => {
          if (p.cancelRequested || !this.bySeq.has(seq)) return;
          p.cancelRequested = true;
          try {
            this.sendCancel(seq);
          } catch {
            // the endpoint is closing: the send rejects with that
          }
        };
        signal.addEventListener('abort', onAbort, { once: true });
        p.cleanup = () => {
          signal.removeEventListener('abort', onAbort);
          release();
        };
      }
      this.bySeq.set(seq, p);
    });
  }

  /** The FIN for `seq` arrived (any status but RESTAGE): the send settles. */
  settle(p: PendingSend, status: FinStatus, message: string): void {
    this.bySeq.delete(p.seq);
    p.cleanup();
    switch (status) {
      case FinStatus.OK:
        count(this.sent, p.path, p.length);
        p.resolve();
        return;
      case FinStatus.CANCELLED:
        p.reject(p.signal ? abortReason(p.signal) : new SmcudaError('SMCUDA_CANCELLED', `send ${p.seq} was cancelled`));
        return;
      case FinStatus.TRUNCATED:
        p.reject(new TruncationError(`peer ${this.peerId} could not receive message ${p.seq} (tag ${p.tag}): ${message}`));
        return;
      default:
        p.reject(
          new SmcudaError(
            status === FinStatus.REFUSED ? 'SMCUDA_REFUSED' : 'SMCUDA_REMOTE_COPY_FAILED',
            `peer ${this.peerId} failed message ${p.seq} (tag ${p.tag}): ${message}`,
          ),
        );
    }
  }

  /** Send `seq` failed here: it rejects with `err` (no-op if it already settled). */
  fail(seq: number, err: Error): void {
    const p = this.bySeq.get(seq);
    if (!p) return;
    this.bySeq.delete(seq);
    p.cleanup();
    p.reject(err);
  }

  /** The endpoint closed: every send rejects with `reason`. */
  close(reason: Error): void {
    for (const p of this.bySeq.values()) {
      p.cleanup();
      p.reject(reason);
    }
    this.bySeq.clear();
  }
}

/** What an aborted operation rejects with: the signal's reason, or an AbortError. */
export function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new DOMException('The operation was aborted', 'AbortError');
}
