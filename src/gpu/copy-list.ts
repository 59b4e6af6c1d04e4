/**
 * Copies between two processes on one GPU, launched by smcuda's copy kernel
 * (src/kernels/copy.cu) instead of the driver's copy calls: GpuWork's batches
 * of copies whose source and destination are both memory of this endpoint's
 * device (its peer runs on the same GPU).
 *
 * Why: on one GPU the driver's copy calls cost the host more than the copy
 * costs the GPU, and its batch call saves nothing per copy. On an H200,
 * 1 MiB copies back to back: each cuMemcpyAsync costs the host several
 * times what the copy costs the GPU, and cuMemcpyBatchAsync as much per
 * copy; the receiver of a same-GPU stream spent about half its time in
 * that call. `launch` costs the host one launch whatever the number of
 * copies. Two processes on one H200 streaming 1 MiB messages (window 8)
 * came closer to raw copies with it; 4 MiB messages (a copy a run, left to
 * the driver) stayed where they were (bench/results-history.md, session
 * 10; docs/benchmarks.md, 'Same GPU, 1–16 MiB').
 *
 * How: SLOTS lists of copies in one pinned host buffer, and for each list
 * a graph of two nodes, made the first time its slot is used: a copy of the
 * list into device memory, then one smcuda_copy_list launch over that copy.
 * (The kernel reading the list from pinned memory itself took far longer
 * than its copies, its 132 blocks' loads over PCIe one after another.) The
 * list's copy costs the GPU more than a 1 MiB copy by the kernel alone, so GpuWork keeps a lone copy with
 * cuMemcpyAsync and hands this runs of two or more. A batch takes a free
 * slot, writes its copies into the list and launches the slot's graph on
 * its stream; the slot is free again once the batch's completion ran
 * (`release`). With every slot in flight, or where the kernel cannot be set
 * up, `launch` says so and the caller copies by the driver. The lists and
 * graphs go in `close`, which GpuWork calls only once no launch is in
 * flight (it holds this as a GpuHold).
 */
import type { CudaDriver, DevicePtr, FunctionHandle, GraphExecHandle, PinnedHostBuffer, StreamHandle } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { COPY_PTX } from '../kernels/copy.ptx.js';
import { COPY_LIST_MAX } from '../kernels/copy-list-max.js';

/** Same-GPU receives copied by smcuda's copy kernel, not the driver (an endpoint's stats().copyKernel). */
export interface CopyKernelStats {
  /** Graph launches of the kernel, and the copies (messages) they made. */
  launches: number;
  copies: number;
  /** Why the kernel could not be set up here, when it could not (every copy is then the driver's). */
  unavailable?: string;
}

/** Lists in flight at most: batches beyond them are copied by the driver. */
const SLOTS = 16;
/** Words of one list: the count, then (destination, source, bytes) per copy, rounded up to 2 KiB. */
const LIST_WORDS = 256;
const LIST_BYTES = LIST_WORDS * 8;
/** Threads a block (copy_bytes keeps four 16-byte loads in flight a thread). */
const BLOCK = 512;

/** The copy kernel of each driver and device, loaded once (the module stays loaded while the driver is open). */
const kernels = new WeakMap<CudaDriver, Map<number, FunctionHandle>>();

function copyKernel(d: CudaDriver, device: number): FunctionHandle {
  let byDevice = kernels.get(d);
  if (byDevice === undefined) kernels.set(d, (byDevice = new Map()));
  let fn = byDevice.get(device);
  if (fn === undefined) {
    const { module } = d.moduleLoadData(COPY_PTX);
    fn = d.moduleGetFunction(module, 'smcuda_copy_list');
    byDevice.set(device, fn);
  }
  return fn;
}

export class CopyList {
  private lists: PinnedHostBuffer | undefined;
  private words: BigUint64Array | undefined;
  /** The lists' device copies, one LIST_BYTES slot each, which the kernel reads. */
  private deviceLists: DevicePtr | undefined;
  private readonly execs: Array<GraphExecHandle | undefined> = new Array<GraphExecHandle | undefined>(SLOTS);
  private readonly free: number[] = [];
  /** Why set-up failed (no module, no pinned memory, no graph), once it did: every batch goes to the driver from then on. */
  unavailable: string | undefined;
  private closed = false;

  constructor(
    private readonly driver: CudaDriver,
    /** The device whose memory the copies read and write (the endpoint's). */
    private readonly device: number,
  ) {
    for (let k = SLOTS - 1; k >= 0; k--) this.free.push(k);
  }

  /**
   * Launches copies `dsts[k] <- srcs[k]` (`sizes[k]` bytes), k < n, on
   * `stream` as one kernel and returns the slot to `release` once they
   * completed; -1 when no slot is free or the kernel is unavailable here
   * (nothing was queued: copy them by the driver). Throws when the launch
   * failed (nothing was queued either).
   */
  launch(dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, n: number, stream: StreamHandle): number {
    if (this.unavailable !== undefined || this.closed || n > COPY_LIST_MAX || this.free.length === 0) return -1;
    const slot = this.free[this.free.length - 1]!;
    const exec = this.execs[slot] ?? this.prepare(slot);
    if (exec === undefined) return -1;
    const w = this.words!;
    const at = slot * LIST_WORDS;
    w[at] = BigInt(n);
    for (let k = 0; k < n; k++) {
      w[at + 1 + 3 * k] = dsts[k]!;
      w[at + 2 + 3 * k] = srcs[k]!;
      w[at + 3 + 3 * k] = BigInt(sizes[k]!);
    }
    this.driver.graphLaunch(exec, stream);
    this.free.pop();
    return slot;
  }

  /** The copies launched from `slot` completed (or failed): the slot takes a new list. */
  release(slot: number): void {
    this.free.push(slot);
  }

  /** Frees the lists and graphs; only once no launch is in flight (GpuWork's hold). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (let k = 0; k < SLOTS; k++) {
      const exec = this.execs[k];
      this.execs[k] = undefined;
      if (exec !== undefined) {
        try {
          this.driver.graphExecDestroy(exec);
        } catch {
          // the driver was closed: the graph went with it
        }
      }
    }
    this.words = undefined;
    const lists = this.lists;
    const deviceLists = this.deviceLists;
    this.lists = undefined;
    this.deviceLists = undefined;
    try {
      lists?.free();
    } catch {
      // as above
    }
    try {
      if (deviceLists !== undefined) this.driver.memFree(deviceLists);
    } catch {
      // as above
    }
  }

  /** Slot `slot`'s graph (and the lists, the first time); undefined, and unavailable from now on, where that fails. */
  private prepare(slot: number): GraphExecHandle | undefined {
    const d = this.driver;
    let capture: StreamHandle | undefined;
    try {
      const fn = copyKernel(d, this.device);
      if (this.lists === undefined) {
        this.deviceLists = d.memAlloc(SLOTS * LIST_BYTES);
        this.lists = d.hostAlloc(SLOTS * LIST_BYTES);
        this.words = new BigUint64Array(this.lists.bytes.buffer, this.lists.bytes.byteOffset, SLOTS * LIST_WORDS);
      }
      const list: DevicePtr = this.lists.devicePtr + BigInt(slot * LIST_BYTES);
      const onDevice: DevicePtr = this.deviceLists! + BigInt(slot * LIST_BYTES);
      // Its own stream: the capture records only these two steps, whatever else runs.
      capture = d.streamCreate();
      d.streamBeginCapture(capture, 'thread-local');
      d.memcpyAsync(onDevice, list, LIST_BYTES, capture);
      d.launchKernel(fn, { grid: [d.deviceInfo(this.device).multiprocessors], block: [BLOCK] }, [{ type: 'ptr', value: onDevice }], capture);
      const graph = d.streamEndCapture(capture);
      try {
        this.execs[slot] = d.graphInstantiate(graph);
      } finally {
        d.graphDestroy(graph);
      }
      return this.execs[slot];
    } catch (err) {
      // The driver copies instead, as before this existed; the failure is the kernel's, not the message's.
      this.unavailable = (err as Error).message;
      debug('copy kernel unavailable on device %d (same-GPU copies go to the driver): %s', this.device, this.unavailable);
      return undefined;
    } finally {
      if (capture !== undefined) {
        try {
          if (d.streamIsCapturing(capture)) d.graphDestroy(d.streamEndCapture(capture));
        } catch {
          // nothing more to undo
        }
        try {
          d.streamDestroy(capture);
        } catch {
          // as above
        }
      }
    }
  }
}
