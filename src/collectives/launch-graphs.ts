/**
 * Repeated kernel launches replayed as one-node CUDA graphs. Why: small
 * allreduces are bound by the host, and most of a call's host time is its
 * one launch. Through the driver binding, cuGraphLaunch of a graph holding
 * a launch cost the host about a third of cuLaunchKernel of it (2 × H100,
 * driver 580, fill kernel, one block, 8 × 2000 calls in three processes). A training step calls allreduce on the same buckets
 * every step, so the same launch (function, grid, arguments) comes back:
 * the second time it is captured into a graph on a private stream, and from
 * then on the graph is launched instead. Back-to-back allreduce f32 on
 * 2 × H100 (test/gpu/measure-collectives.mjs, alternating with the build
 * before): less host time per call at 256 KiB and 1 MiB, and less time per
 * call on the stream at 8 B (256 KiB and up are now bound by the GPU).
 *
 * A launch seen once is launched directly (a call on fresh buffers each
 * time never pays for a capture). At most CAPACITY launches are kept; the
 * oldest graph goes first. Graphs are only made where the driver has
 * graphs (gpuDrivenStatus), outside any capture of the caller's (the
 * caller's capture records the launch itself), and the capture is
 * thread-local, so it never disturbs a capture elsewhere in the process.
 * A launch the driver would not capture is launched directly from then on.
 */
import type { CudaDriver, FunctionHandle, GraphExecHandle, KernelArg, LaunchConfig, StreamHandle } from '../cuda/driver.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';

const CAPACITY = 256;

/** A launch seen once (1), one the driver would not capture (false), or its graph. */
type Seen = 1 | false | GraphExecHandle;

export class LaunchGraphs {
  private readonly seen = new Map<string, Seen>();
  private captureStream: StreamHandle | undefined;
  /** The driver has graphs: without them every launch is direct (a caller need not build keys). */
  readonly enabled: boolean;

  private readonly driver: CudaDriver;

  /** `gpu`: the transport's GPU runtime, whose stream the captures go on. */
  constructor(private readonly gpu: GpuRuntime) {
    this.driver = gpu.driver;
    this.enabled = this.driver.gpuDrivenStatus().graphs;
  }

  /**
   * Launches `fn` with `args` on `stream`, or the graph of the same launch.
   * `key` names the launch whole (function, grid and every argument):
   * equal keys must mean equal launches; undefined launches directly (the
   * caller's stream is capturing: CUDA refuses cuGraphLaunch there, as it
   * did to an allreduce captured after eager calls on the same buffers,
   * 2 × H200). `args` is only called when the launch is not replayed.
   */
  launch(key: string | undefined, fn: FunctionHandle, config: LaunchConfig, args: () => KernelArg[], stream: StreamHandle): void {
    let seen = key === undefined || !this.enabled ? false : this.seen.get(key);
    if (seen === undefined)
      this.remember(key!, 1); // first time: direct
    else if (seen === 1) this.seen.set(key!, (seen = this.capture(fn, config, args()) ?? false)); // second: its graph
    if (typeof seen === 'bigint') this.driver.graphLaunch(seen, stream);
    else this.driver.launchKernel(fn, config, args(), stream);
  }

  /** Graphs kept now. */
  get size(): number {
    let n = 0;
    for (const s of this.seen.values()) if (typeof s === 'bigint') n++;
    return n;
  }

  /** Destroys every graph and the capture stream. */
  close(): void {
    for (const s of this.seen.values()) if (typeof s === 'bigint') this.destroy(s);
    this.seen.clear();
    if (this.captureStream !== undefined) this.gpu.giveStream(this.captureStream);
    this.captureStream = undefined;
  }

  private remember(key: string, value: Seen): void {
    if (this.seen.size >= CAPACITY) {
      const [oldKey, old] = this.seen.entries().next().value as [string, Seen];
      this.seen.delete(oldKey);
      if (typeof old === 'bigint') this.destroy(old);
    }
    this.seen.set(key, value);
  }

  /** The launch captured on the private stream and instantiated; undefined where the driver refuses. */
  private capture(fn: FunctionHandle, config: LaunchConfig, args: KernelArg[]): GraphExecHandle | undefined {
    const d = this.driver;
    const s = (this.captureStream ??= this.gpu.ownStream());
    let graph;
    try {
      d.streamBeginCapture(s, 'thread-local');
      try {
        d.launchKernel(fn, config, args, s);
      } finally {
        graph = d.streamEndCapture(s);
      }
      return d.graphInstantiate(graph);
    } catch {
      return undefined;
    } finally {
      if (graph !== undefined) d.graphDestroy(graph);
    }
  }

  private destroy(exec: GraphExecHandle): void {
    try {
      this.driver.graphExecDestroy(exec);
    } catch {
      // the driver closed
    }
  }
}
