/**
 * One collective call of a Communicator while it is in flight, and the
 * context its algorithm runs with. Both are plain classes with their
 * methods on the prototype, because a training step makes its calls back
 * to back and each call makes one of each: the closures, object spreads and
 * promise chains they replace were most of the host cost of a call.
 */
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import type { DType } from '../kernels/dtypes.js';
import { Steps, type Algorithm, type CallContext } from './algorithms.js';
import type { RankSync } from './control.js';
import type { CePipeline } from './ce-pipeline.js';
import type { DeviceSync } from './device-sync.js';
import type { ReduceKernels } from './reduce-kernels.js';
import type { Scratch } from './scratch.js';
import type { MarkWaiter } from '../gpu/stream-marks.js';
import type { CollectiveOp, CollectiveResult } from './communicator.js';

/** What the calls of one communicator share. */
export interface CallShared {
  driver: CudaDriver;
  rank: number;
  size: number;
  scratch: Scratch;
  sync: RankSync;
  kernels: ReduceKernels;
  pipeline: CePipeline | undefined;
  endpoint(rank: number): Endpoint;
  dataTag: number;
  streamDone(stream: StreamHandle): Promise<void>;
  stagedRecv(k: number, into: DevicePtr, bytes: number): Promise<void>;
  copied(bytes: number): void;
}

/** The context of one call (CallContext), over what the communicator's calls share. */
export class CallState implements CallContext {
  readonly steps: Steps;
  constructor(
    private readonly shared: CallShared,
    readonly seq: number,
    readonly stream: StreamHandle,
    readonly device: DeviceSync | undefined,
    /** The caller's stream is capturing: launches go into its graph as they are (launch-graphs.ts is not used). */
    readonly capturing: boolean,
  ) {
    this.steps = new Steps(this);
  }
  get driver(): CudaDriver {
    return this.shared.driver;
  }
  get rank(): number {
    return this.shared.rank;
  }
  get size(): number {
    return this.shared.size;
  }
  get scratch(): Scratch {
    return this.shared.scratch;
  }
  get sync(): RankSync {
    return this.shared.sync;
  }
  get kernels(): ReduceKernels {
    return this.shared.kernels;
  }
  get pipeline(): CePipeline | undefined {
    return this.shared.pipeline;
  }
  endpoint(rank: number): Endpoint {
    return this.shared.endpoint(rank);
  }
  get dataTag(): number {
    return this.shared.dataTag;
  }
  streamDone(): Promise<void> {
    return this.shared.streamDone(this.stream);
  }
  stagedRecv(k: number, into: DevicePtr, bytes: number): Promise<void> {
    return this.shared.stagedRecv(k, into, bytes);
  }
  copied(bytes: number): void {
    this.shared.copied(bytes);
  }
}

/** The record of a completed call (stats().last, traces, the 'collective' event). */
export interface CallRecord {
  op: CollectiveOp;
  algorithm: Algorithm;
  bytes: number;
  us: number;
  dtype?: DType;
  count?: number;
}

/**
 * A call not settled yet: its completion, its deadline (the communicator's
 * watchdog) or the communicator's abort settles it, whichever comes first;
 * `settled` makes the others no-ops. On the device path it is also the
 * waiter of its stream mark.
 */
export class PendingCall implements MarkWaiter {
  settled = false;
  /** run() resolved (the device path: its work is queued) and the stream reached the call's mark. */
  ranOk = false;
  marked = false;
  /** The watchdog compared this call with the other ranks' once it had been in flight a while. */
  stallChecked = false;
  us = 0;
  readonly deadline: number;
  ran!: Promise<void>;
  resolve!: (result: CollectiveResult) => void;
  reject!: (err: Error) => void;
  constructor(
    private readonly onMark: (p: PendingCall, err?: Error) => void,
    readonly op: CollectiveOp,
    readonly algorithm: Algorithm,
    readonly bytes: number,
    readonly dtype: DType | undefined,
    readonly count: number | undefined,
    readonly seq: number,
    /** performance.now() when the call was made. */
    readonly started: number,
    readonly timeoutMs: number,
    readonly stream: StreamHandle,
  ) {
    this.deadline = started + timeoutMs;
  }

  reached(err?: Error): void {
    this.onMark(this, err);
  }

  record(): CallRecord {
    const r: CallRecord = { op: this.op, algorithm: this.algorithm, bytes: this.bytes, us: this.us };
    if (this.dtype) {
      r.dtype = this.dtype;
      r.count = this.count;
    }
    return r;
  }
}
