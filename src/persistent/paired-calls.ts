/**
 * Calls the two sides of an endpoint make together — `register()` and
 * `persistent()` — matched by number: each side's k-th call of a kind is
 * pair k. This holds the numbering and the wait for the peer's half.
 *
 * Why a failed pair consumes its number on both sides (and numbers are not
 * negotiated by id): the matching rule users already follow is call order,
 * as NCCL's registration; keeping it needs only that every call takes its
 * number first, before anything can fail, and that a failure is told. So:
 *
 *  - a call takes the next number at once, then checks its arguments;
 *  - a call that fails here — bad argument, driver error, timeout — tells
 *    the peer (REG_FAIL / PT_FAIL with the reason); the peer's call of that
 *    number, pending or still to come, fails at once with
 *    SMCUDA_PERSISTENT_PEER_FAILED naming the reason, and this side drops
 *    the peer's half of that number if it comes late;
 *  - no call waits longer than its `timeoutMs` for the peer's half.
 *
 * Both sides therefore leave every number behind together, and pair k+1
 * matches pair k+1 whatever became of pair k.
 */
import { ArgumentRangeError, PersistentTransferError, ProtocolError } from '../errors.js';

/** How long a register() or persistent() call waits for the peer's matching call, by default (ms). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/** The peer's halves and failures held for calls not made here yet: an honest peer is never this far ahead. */
export const MAX_AHEAD = 1024;

interface Pending<F> {
  resolve: (offer: F) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class PairedCalls<F> {
  private nextId = 1;
  private readonly waiting = new Map<number, Pending<F>>();
  /** The peer's halves whose call was not made here yet. */
  private readonly early = new Map<number, F>();
  /** Numbers the peer failed, whose call here has not heard it yet. */
  private readonly peerFailed = new Map<number, string>();
  /** Numbers whose call here has not finished: a half or failure for a number finished here is void. */
  private readonly inProgress = new Set<number>();
  /** Numbers the peer failed, until this side's call of it failed too (it is not told back). */
  private readonly heard = new Set<number>();
  private closeReason: Error | undefined;

  constructor(
    /** The call, for messages: 'register()' or 'persistent()'. */
    private readonly call: string,
    private readonly peerId: string,
    /** Sends the failure of number `id` to the peer (REG_FAIL / PT_FAIL). */
    private readonly tellPeer: (id: number, reason: string) => void,
  ) {}

  /** Takes the next number: the first thing a call does, before anything can fail. */
  take(): number {
    const id = this.nextId++;
    this.inProgress.add(id);
    return id;
  }

  /** This side's call `id` succeeded. */
  done(id: number): void {
    this.inProgress.delete(id);
  }

  /** Made and finished here (succeeded or failed): what the peer says of it now changes nothing. */
  private finished(id: number): boolean {
    return id < this.nextId && !this.inProgress.has(id);
  }

  /** The number the latest call took. */
  get last(): number {
    return this.nextId - 1;
  }

  /** The peer's failure of `id`, if it came (taken: asked once). */
  takePeerFailure(id: number): PersistentTransferError | undefined {
    const reason = this.peerFailed.get(id);
    if (reason === undefined) return undefined;
    this.peerFailed.delete(id);
    return this.peerError(id, reason);
  }

  /**
   * Resolves with the peer's half of `id`; rejects at once when the peer
   * failed it, or after `timeoutMs`. A half that came before the peer's
   * failure is still given, so the call can find a cause of its own (halves
   * that do not match); it then asks takePeerFailure.
   */
  offerOf(id: number, timeoutMs: number): Promise<F> {
    if (this.closeReason) return Promise.reject(this.closeReason);
    const f = this.early.get(id);
    if (f !== undefined) {
      this.early.delete(id);
      return Promise.resolve(f);
    }
    const failed = this.takePeerFailure(id);
    if (failed) return Promise.reject(failed);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(
          new PersistentTransferError(
            'SMCUDA_PERSISTENT_TIMEOUT',
            `${this.call} call ${id} with peer ${this.peerId}: the peer's matching call did not come within ${timeoutMs} ms; both sides must make the same calls in the same order (the peer's call of this number now fails at once; later pairs still match)`,
          ),
        );
      }, timeoutMs);
      timer.unref();
      this.waiting.set(id, { resolve, reject, timer });
    });
  }

  /** This side's call `id` failed: the peer hears why (unless the failure came from it), and its half is dropped. */
  fail(id: number, err: Error): void {
    const w = this.waiting.get(id);
    if (w) {
      clearTimeout(w.timer);
      this.waiting.delete(id);
    }
    this.early.delete(id);
    this.inProgress.delete(id);
    if (this.closeReason) return;
    if (this.heard.delete(id)) return; // the peer failed it first: it knows
    this.tellPeer(id, `${err.name}${(err as { code?: string }).code ? ` ${(err as { code?: string }).code}` : ''}: ${err.message}`);
  }

  /** The peer's half of `id` came. */
  onOffer(id: number, offer: F): void {
    if (this.finished(id)) return; // this side gave the number up (or is past it): the pair is void
    const w = this.waiting.get(id);
    if (w) {
      clearTimeout(w.timer);
      this.waiting.delete(id);
      return w.resolve(offer);
    }
    if (this.early.has(id)) throw new ProtocolError(`peer ${this.peerId} sent its half of ${this.call} ${id} twice`, 'SMCUDA_BAD_REGISTRATION');
    this.refuseTooFarAhead();
    this.early.set(id, offer);
  }

  /**
   * The peer failed its call `id` (a pair not made yet, or in progress here):
   * the pending call rejects now, a later one at once.
   */
  onPeerFailed(id: number, reason: string): void {
    if (this.finished(id)) return; // both sides failed it, or this side is past it: nothing waits
    const w = this.waiting.get(id);
    if (!w) this.refuseTooFarAhead();
    this.heard.add(id);
    if (w) {
      clearTimeout(w.timer);
      this.waiting.delete(id);
      return w.reject(this.peerError(id, reason));
    }
    this.peerFailed.set(id, reason);
  }

  /** The endpoint closed: every pending call rejects with `reason`. */
  close(reason: Error): void {
    if (this.closeReason) return;
    this.closeReason = reason;
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(reason);
    }
    this.waiting.clear();
    this.early.clear();
  }

  /** A peer that sends more halves or failures ahead of this side's calls than MAX_AHEAD is not following the protocol. */
  private refuseTooFarAhead(): void {
    if (this.early.size + this.peerFailed.size >= MAX_AHEAD) {
      throw new ProtocolError(
        `peer ${this.peerId} is more than ${MAX_AHEAD} ${this.call} calls ahead of this side (halves and failures held for calls not made here)`,
        'SMCUDA_BAD_REGISTRATION',
      );
    }
  }

  private peerError(id: number, reason: string): PersistentTransferError {
    return new PersistentTransferError(
      'SMCUDA_PERSISTENT_PEER_FAILED',
      `peer ${this.peerId}'s matching ${this.call} call ${id} failed: ${reason}; fix the call there (this side's number ${id} is spent too, so the next pair still matches)`,
    );
  }
}

/** Validates a call's `timeoutMs` (undefined: the default). */
export function callTimeout(where: string, timeoutMs: unknown): number {
  if (timeoutMs === undefined) return DEFAULT_CALL_TIMEOUT_MS;
  if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0 || timeoutMs > 2 ** 31 - 1) {
    throw new ArgumentRangeError(`${where}: timeoutMs must be a positive number of milliseconds (at most 2^31 - 1), got ${String(timeoutMs)}`);
  }
  return timeoutMs;
}
