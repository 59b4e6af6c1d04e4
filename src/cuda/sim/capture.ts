/**
 * Stream capture and graphs in the simulator.
 *
 * `streamBeginCapture` gives a stream a Capture; from then on the scheduler's
 * `enqueue` (sim/streams.ts) hands every item queued on that stream to the
 * capture instead of running it — copies, memsets, memory operations, event
 * waits, kernel launches alike, because every driver call that queues work
 * goes through `enqueue`. Another stream joins the capture by waiting on an
 * event recorded in it (fork) and must be joined back (the origin, or
 * another stream of the capture, waits on an event recorded at its end)
 * before `streamEndCapture`, or the capture fails UNJOINED, as CUDA's does.
 *
 * The graph is the recorded items in the order they were queued: a valid
 * order of CUDA's dependency graph (a stream's own order and every event
 * wait are kept), but branches captured on forked streams replay one after
 * the other here, where a GPU may run them concurrently. `graphLaunch`
 * queues a fresh copy of every item on the launch stream (an item that
 * keeps state per run, such as a batch of memory operations with its
 * cursor, makes its own copy), so a launch is one stream's worth of work and
 * later work on that stream waits for the whole replay, as with cuGraphLaunch.
 *
 * Simplification: a wait on an event recorded outside the capture is kept
 * as a wait on that event's latest record at launch time (CUDA's external
 * event wait node).
 */
import type { CaptureMode, GraphExecHandle, GraphHandle } from '../driver.js';
import { cudaError } from './result-codes.js';
import type { SimStream, StreamItem } from './streams.js';

export class Capture {
  readonly items: StreamItem[] = [];
  /** The first illegal call made during the capture: the capture ends with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. */
  invalidated: Error | undefined;
  /** Streams forked into this capture and whether each is joined back. */
  readonly joined = new Map<SimStream, boolean>();
  private readonly counts = new Map<SimStream, number>();

  constructor(
    readonly origin: SimStream,
    readonly mode: CaptureMode,
  ) {}

  record(s: SimStream, item: StreamItem): void {
    if (this.invalidated)
      throw cudaError(
        'cuStreamCapture',
        'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED',
        `the capture was invalidated by an earlier call: ${this.invalidated.message}`,
      );
    this.items.push(item);
    this.counts.set(s, this.countOn(s) + 1);
    if (s !== this.origin) this.joined.set(s, false); // new work on a fork: it must be joined again
  }

  /** Items recorded from stream `s` so far (an event record inside the capture marks this count). */
  countOn(s: SimStream): number {
    return this.counts.get(s) ?? 0;
  }

  /** Refuses an operation that cannot be captured and invalidates the capture, as CUDA does. */
  refuse(call: string, why: string): Error {
    const err = cudaError(call, 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED', why);
    this.invalidated ??= err;
    return err;
  }
}

export class SimGraph {
  constructor(readonly items: readonly StreamItem[]) {}
}

/** A copy of an item for one replay. */
export function freshItem(item: StreamItem): StreamItem {
  return item.fresh ? item.fresh() : { ...item };
}

/** The graphs and executable graphs of one driver instance, by handle. */
export class GraphTable {
  private readonly graphs = new Map<GraphHandle, SimGraph>();
  private readonly execs = new Map<GraphExecHandle, SimGraph>();
  private next = 0x6000n;

  addGraph(g: SimGraph): GraphHandle {
    const h = this.next++;
    this.graphs.set(h, g);
    return h;
  }

  graph(h: GraphHandle, call: string): SimGraph {
    const g = this.graphs.get(h);
    if (!g) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `no graph ${h} in this driver (destroyed?)`);
    return g;
  }

  /** An executable graph is a snapshot: destroying or changing the graph later does not change it. */
  instantiate(h: GraphHandle): GraphExecHandle {
    const g = this.graph(h, 'cuGraphInstantiateWithFlags');
    const e = this.next++;
    this.execs.set(e, new SimGraph([...g.items]));
    return e;
  }

  exec(h: GraphExecHandle, call: string): SimGraph {
    const g = this.execs.get(h);
    if (!g) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `no executable graph ${h} in this driver (destroyed?)`);
    return g;
  }

  destroyGraph(h: GraphHandle): void {
    if (!this.graphs.delete(h)) throw cudaError('cuGraphDestroy', 'CUDA_ERROR_INVALID_VALUE', `no graph ${h} in this driver (destroyed already?)`);
  }

  destroyExec(h: GraphExecHandle): void {
    if (!this.execs.delete(h))
      throw cudaError('cuGraphExecDestroy', 'CUDA_ERROR_INVALID_VALUE', `no executable graph ${h} in this driver (destroyed already?)`);
  }

  get size(): { graphs: number; execs: number } {
    return { graphs: this.graphs.size, execs: this.execs.size };
  }

  clear(): void {
    this.graphs.clear();
    this.execs.clear();
  }
}
