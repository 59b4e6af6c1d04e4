/**
 * GpuRuntime: the GPU side of one transport, and the only code (with the
 * drivers) that creates, records, waits on or destroys events and
 * synchronises streams. Everything that must know when the GPU is done with
 * something asks it:
 *
 *   - `mark(stream, cb)` / `marked(stream)`: a point recorded on a stream,
 *     reported once the GPU passed it (pooled events, polled by the
 *     transport's progress engine, then the native completion thread);
 *   - `hold(release)` and `useUntil(hold, stream)`: a resource released only
 *     once its holder let go of it and the last GPU use of it completed;
 *   - `stream(purpose)`: the runtime's own streams, one per purpose (the
 *     watchdog's, the poison writes'), made on first use;
 *   - `work(sameGpu)`: one endpoint's GPU work (its stream, copy batcher,
 *     completion queue and holds: gpu-work.ts), on this runtime's engine;
 *   - `streamMarks()`: a communicator's marks on its callers' streams
 *     (stream-marks.ts);
 *   - `orderingEvent()`, `order()` and `retireEvent()`: events that only
 *     order streams (cuStreamWaitEvent), or that a peer opens by IPC handle;
 *   - `synchronize(stream)`: the few blocking waits the host needs (a
 *     value a peer reads at once, a slot reset before reuse);
 *   - `drain(ms)` and `close()`.
 *
 * Resources are released only from completion, in the reverse order of
 * their making (UCX cuda_ipc's model): close() lets go of every hold (each
 * goes once its last use completed), closes the endpoints' GPU work left
 * open, and destroys its streams once the marks recorded on them were
 * reached; an event still awaited is destroyed when its wait settles.
 */
import type { CudaDriver, EventHandle, StreamHandle } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { ProgressEngine } from '../progress/engine.js';
import { callReporting, type Completion, GpuEventQueue } from './gpu-event-queue.js';
import { GpuHold } from './gpu-hold.js';
import { GpuWork } from './gpu-work.js';
import { StreamMarks } from './stream-marks.js';

/** The runtime's own streams: what each is for. */
export type StreamPurpose = 'watchdog' | 'poison';

export interface GpuRuntimeOptions {
  /** The transport's progress engine; without one (an endpoint made alone, tools, tests) an engine that never polls: inline spins, then the native thread. */
  engine?: ProgressEngine;
  /** How long a lone small copy's completion is polled inline (µs; 0: never). */
  spinUs?: number;
}

export class GpuRuntime {
  readonly engine: ProgressEngine;
  private readonly spinUs: number;
  /** The runtime's own points on streams (mark): its own pool of events. */
  private readonly points: GpuEventQueue;
  /** Points recorded and not reported yet, per stream (a stream goes only once none is left). */
  private readonly inFlight = new Map<StreamHandle, number>();
  private readonly drained: Array<() => void> = [];
  private readonly streams = new Map<StreamPurpose, StreamHandle>();
  /** Streams made for callers (ownStream), until given back. */
  private readonly lent = new Set<StreamHandle>();
  private readonly holds = new Set<GpuHold>();
  private readonly works = new Set<GpuWork>();
  private readonly marks = new Set<StreamMarks>();
  private readonly ordering = new Set<EventHandle>();
  private closed = false;

  constructor(
    readonly driver: CudaDriver,
    options: GpuRuntimeOptions = {},
  ) {
    this.engine = options.engine ?? new ProgressEngine(0);
    this.spinUs = options.spinUs ?? 0;
    this.points = new GpuEventQueue(driver, this.engine, 0);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Points recorded by `mark` and not reported yet. */
  get pending(): number {
    let n = 0;
    for (const k of this.inFlight.values()) n += k;
    return n;
  }

  /**
   * Records a point on `stream` behind the work queued so far and calls `cb`
   * once the GPU passed it (with the stream's error, if it failed). Never
   * calls back before it returns. Works after close too (the point's event
   * is destroyed when it completes): a release may still need to wait.
   */
  mark(stream: StreamHandle, cb: Completion): void {
    this.inFlight.set(stream, (this.inFlight.get(stream) ?? 0) + 1);
    this.points.record(
      stream,
      Number.POSITIVE_INFINITY,
      (err) => {
        const left = (this.inFlight.get(stream) ?? 1) - 1;
        if (left === 0) this.inFlight.delete(stream);
        else this.inFlight.set(stream, left);
        callReporting(cb, err);
        if (this.inFlight.size === 0) for (const d of this.drained.splice(0)) d();
        if (left === 0 && this.closed) this.destroyStreamOf(stream);
      },
      false,
    );
  }

  /** `mark` as a promise: resolves once the GPU passed the point, whatever the stream's outcome (the work is over either way). */
  marked(stream: StreamHandle): Promise<void> {
    return new Promise((resolve) => this.mark(stream, () => resolve()));
  }

  /** `mark` as a promise that rejects with the stream's error (a tool that reports it; `marked` for a release, which waits either way). */
  completed(stream: StreamHandle): Promise<void> {
    return new Promise((resolve, reject) => this.mark(stream, (err) => (err ? reject(err) : resolve())));
  }

  /** Holds a resource the GPU may use: `release` runs once the hold is closed (or the runtime closes) and no use is in flight. */
  hold(release: () => void): GpuHold {
    return new GpuHold(release, this.holds);
  }

  /** The work queued so far on `stream` is a use of `hold`, given back once the GPU passed it. */
  useUntil(hold: GpuHold, stream: StreamHandle): void {
    hold.use();
    this.mark(stream, () => hold.done());
  }

  /** The runtime's stream for `purpose` (non-blocking, made on first use, destroyed at close once its points were reached). */
  stream(purpose: StreamPurpose): StreamHandle {
    let s = this.streams.get(purpose);
    if (s === undefined) {
      s = this.driver.streamCreate();
      this.streams.set(purpose, s);
    }
    return s;
  }

  /**
   * A stream of the caller's own (a communicator's pipeline lanes, its
   * private capture stream), destroyed by giveStream() or by close(),
   * whichever comes first. cuStreamDestroy with work still queued is
   * allowed: the stream goes once that work is done.
   */
  ownStream(): StreamHandle {
    const s = this.driver.streamCreate();
    this.lent.add(s);
    return s;
  }

  /** A stream of ownStream() is no longer used. */
  giveStream(stream: StreamHandle): void {
    if (this.lent.delete(stream)) quietly(() => this.driver.streamDestroy(stream));
  }

  /**
   * Blocks until everything queued on `stream` completed, and throws the
   * stream's error. Only where the host must know at once (a value a peer
   * reads through its mapping, a flag slot zeroed before reuse, a device
   * send's data read by EAGER); everything else uses `mark`.
   */
  synchronize(stream: StreamHandle): void {
    this.driver.streamSynchronize(stream);
  }

  /** One endpoint's GPU work, on this runtime's engine; closed by the endpoint, or by the runtime's close. */
  work(sameGpu?: { device: number; uuid: string }): GpuWork {
    const w = new GpuWork(this.driver, this.spinUs, this.engine, sameGpu, () => this.works.delete(w));
    this.works.add(w);
    return w;
  }

  /** A communicator's marks on its callers' streams (stream-marks.ts); destroyed with the communicator, or by close. */
  streamMarks(): StreamMarks {
    const m = new StreamMarks(this.driver, () => this.marks.delete(m));
    this.marks.add(m);
    return m;
  }

  /**
   * An event that orders streams (recorded on one, waited on by another:
   * cuStreamWaitEvent), or that a peer opens by IPC handle (`interprocess`).
   * No completion wait queries it; it goes with retireEvent or close.
   */
  orderingEvent(options: { interprocess?: boolean } = {}): EventHandle {
    const ev = this.driver.eventCreate({ disableTiming: true, ...(options.interprocess ? { interprocess: true } : {}) });
    this.ordering.add(ev);
    return ev;
  }

  /**
   * Orders streams: every stream of `waiters` waits (cuStreamWaitEvent) for
   * the work queued on `after` so far, through `ev`, one of orderingEvent()'s
   * (re-recorded at each call: a wait takes the record before it). Nothing on
   * the host waits.
   */
  order(ev: EventHandle, after: StreamHandle, waiters: readonly StreamHandle[]): void {
    this.driver.eventRecord(ev, after);
    for (const s of waiters) this.driver.streamWaitEvent(s, ev);
  }

  /**
   * An ordering event is no longer used: destroyed now. A record still
   * pending is fine (the driver frees the event once it completes); only a
   * completion wait must not query a destroyed event, and none queries these.
   */
  retireEvent(ev: EventHandle): void {
    if (!this.ordering.delete(ev)) return;
    quietly(() => this.driver.eventDestroy(ev));
  }

  /** Resolves true once every point marked so far was reached, false after `ms`. */
  async drain(ms: number): Promise<boolean> {
    if (this.inFlight.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        new Promise<true>((resolve) => this.drained.push(() => resolve(true))),
        new Promise<false>((resolve) => {
          timer = setTimeout(() => resolve(false), ms);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Lets go of everything, in the reverse order of making: the holds (each
   * released once its last use completed), the endpoints' GPU work left
   * open, the communicators' marks, the ordering events, the event pool, and
   * the streams (each once no point on it is pending). Idempotent.
   */
  close(reason?: Error): void {
    if (this.closed) return;
    this.closed = true;
    for (const h of [...this.holds]) h.close();
    for (const w of [...this.works]) w.close(reason);
    for (const m of [...this.marks]) m.destroy();
    for (const ev of [...this.ordering]) this.retireEvent(ev);
    this.points.close(reason);
    for (const s of [...this.streams.values()]) if (!this.inFlight.has(s)) this.destroyStreamOf(s);
    for (const s of [...this.lent]) this.giveStream(s);
  }

  private destroyStreamOf(stream: StreamHandle): void {
    for (const [purpose, s] of this.streams) {
      if (s !== stream) continue;
      this.streams.delete(purpose);
      quietly(() => this.driver.streamDestroy(s));
      debug('gpu runtime: %s stream destroyed', purpose);
    }
  }
}

/** A release after the driver closed: what it releases went with the driver. */
function quietly(fn: () => void): void {
  try {
    fn();
  } catch {
    // the driver was closed first (it destroyed everything)
  }
}
