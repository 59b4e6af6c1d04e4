/**
 * How the graph suite replays a captured graph and times it, the same way
 * for the raw mem-op ping-pong and for smcuda's persistent transfers:
 *
 *  - back to back: `replays` launches in a row, stream time between two
 *    events (the half round trip), and the host time of every launch call;
 *  - in bursts of LAUNCH_BURST launches, the host waiting for each burst to
 *    finish before the next: the host time of every launch call while the
 *    stream's queue has room. That is the host work a replay costs.
 *
 * Why both: launched back to back, a replay that the GPU runs more slowly
 * than the host launches it fills the stream's queue, and from then on
 * cuGraphLaunch blocks until the GPU retires earlier work: its time is the
 * GPU's time per replay, not host work. Measured (2×H100, driver 580, the
 * graph suite, 16 ping-pongs of 8 B by stream memory operations): the first
 * 32 launches took a fraction of the later ones, which took the GPU's
 * 16 × 2 half round trips; what `smcuda demo --graph` first reported per
 * replay for 2 transfers was the same effect. The
 * back-to-back times are kept beside the figure, as the first launches (the
 * queue still empty) against the later ones, so a run shows which it was.
 * What is left, the launch call itself, grows with the graph's
 * memory-operation nodes (test/gpu/measure-graph-launch.mjs):
 * hence persistent transfers' `flags: 'kernel'`.
 */
import type { CudaDriver, GraphExecHandle, StreamHandle } from '../cuda/driver.js';
import { summarize } from './stats.js';

/** Launches per burst: far fewer than a stream queues before cuGraphLaunch blocks. */
export const LAUNCH_BURST = 8;

export interface ReplayTimes {
  /** Stream time of the back-to-back launches, µs (events), per replay. */
  streamUsPerReplay: number;
  /** Host time of each launch call in bursts (the queue has room), µs. */
  hostUs: number[];
  /** Host time of each launch call back to back, µs. */
  backToBackUs: number[];
}

/**
 * Replays `exec` on `stream`: `warmup`, then `replays` back to back (timed
 * by events), then `replays` more in bursts. `settle` waits for the stream.
 * Both sides of a ping-pong call it with the same counts.
 */
export async function timeReplays(
  d: CudaDriver,
  exec: GraphExecHandle,
  stream: StreamHandle,
  replays: number,
  warmup: number,
  settle: (what: string) => Promise<void>,
): Promise<ReplayTimes> {
  const start = d.eventCreate();
  const end = d.eventCreate();
  try {
    for (let r = 0; r < warmup; r++) d.graphLaunch(exec, stream);
    await settle(`${warmup} warm-up replays`);
    const backToBackUs: number[] = [];
    d.eventRecord(start, stream);
    for (let r = 0; r < replays; r++) {
      const t0 = process.hrtime.bigint();
      d.graphLaunch(exec, stream);
      backToBackUs.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    d.eventRecord(end, stream);
    await settle(`${replays} replays back to back`);
    const streamUsPerReplay = (d.eventElapsedTime(start, end) * 1000) / Math.max(1, replays);
    const hostUs: number[] = [];
    for (let r = 0; r < replays; r += LAUNCH_BURST) {
      for (let k = r; k < Math.min(replays, r + LAUNCH_BURST); k++) {
        const t0 = process.hrtime.bigint();
        d.graphLaunch(exec, stream);
        hostUs.push(Number(process.hrtime.bigint() - t0) / 1000);
      }
      await settle(`replays ${r + 1}.. in a burst`);
    }
    return { streamUsPerReplay, hostUs, backToBackUs };
  } finally {
    d.eventDestroy(start);
    d.eventDestroy(end);
  }
}

/** The back-to-back launch times as the suite reports them: the first 32 (queue empty) against the second half. */
export function backToBackSummary(us: readonly number[]): { first32MedianUs: number; secondHalfMedianUs: number; medianUs: number } {
  const at = (xs: readonly number[]) => (xs.length > 0 ? summarize([...xs]).median : 0);
  return { first32MedianUs: at(us.slice(0, 32)), secondHalfMedianUs: at(us.slice(Math.floor(us.length / 2))), medianUs: at(us) };
}
