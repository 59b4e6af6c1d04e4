/**
 * FIN OK batching. With FINS (both HELLOs announced Feature.FINS), the FIN
 * OKs of one synchronous run — the copies one completion event covered —
 * leave together, in a microtask queued before the receives they complete
 * resolve: one frame to encode, write and decode instead of one per message.
 */
import { microtask } from './progress/microtask.js';
import { FinStatus, FrameType, MAX_FINS, type Frame } from './wire/frames.js';

export class FinBatcher {
  private out: number[] = [];

  constructor(
    /** Both HELLOs announced Feature.FINS. */
    readonly enabled: boolean,
    /** Sends a frame; throws if the channel failed. */
    private readonly sendFrame: (frame: Frame) => void,
    /** Whether frames may still be sent (the endpoint and its channel are open). */
    private readonly open: () => boolean,
  ) {}

  /** FIN OK for `seq`: at once without FINS, else with the rest of this run. */
  ok(seq: number): void {
    if (!this.enabled) return this.sendFrame({ type: FrameType.FIN, seq, status: FinStatus.OK, message: '' });
    if (this.out.push(seq) === 1) microtask(this.flush);
  }

  /** Sends what is waiting (close() calls it so that senders learn of resolved receives before CLOSE). */
  readonly flush = (): void => {
    const seqs = this.out;
    if (seqs.length === 0) return;
    this.out = [];
    if (!this.open()) return;
    for (let i = 0; i < seqs.length; i += MAX_FINS) {
      const part = seqs.length <= MAX_FINS ? seqs : seqs.slice(i, i + MAX_FINS);
      if (part.length === 1) this.sendFrame({ type: FrameType.FIN, seq: part[0]!, status: FinStatus.OK, message: '' });
      else this.sendFrame({ type: FrameType.FINS, seqs: part });
    }
  };
}
