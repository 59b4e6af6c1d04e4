/**
 * GpuRuntime (src/gpu/gpu-runtime.ts) on the simulated driver: points marked
 * on streams report once the GPU passed them, holds are released only after
 * their last GPU use, the runtime's streams and events go at close only once
 * no point on them is pending (never under a wait: lifetimeViolations), and
 * drain is bounded.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { GpuRuntime } from '../../../src/gpu/gpu-runtime.js';

let d: SimulatedCudaDriver;
beforeEach(() => {
  d = new SimulatedCudaDriver({ env: {} });
  d.init();
  d.setDevice(0);
});
afterEach(() => d.close());

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A slow copy queued on `stream` (the simulator runs it `ms` later). */
function slowCopy(stream: bigint, ms: number): { src: bigint; dst: bigint } {
  const src = d.memAlloc(4096);
  const dst = d.memAlloc(4096);
  d.inject({ copyDelayMs: ms });
  d.memcpyAsync(dst, src, 4096, stream);
  d.inject({ copyDelayMs: 0 });
  return { src, dst };
}

describe('GpuRuntime', () => {
  it('mark calls back once the GPU passed the point, never before it returns; marked and completed are its promises', async () => {
    const gpu = new GpuRuntime(d);
    const s = gpu.stream('watchdog');
    const { src, dst } = slowCopy(s, 30);
    let called = false;
    gpu.mark(s, (err) => {
      expect(err).toBeUndefined();
      called = true;
    });
    expect(called).toBe(false);
    expect(gpu.pending).toBe(1);
    await gpu.marked(s);
    expect(called).toBe(true);
    expect(gpu.pending).toBe(0);
    await gpu.completed(s);
    d.memFree(src);
    d.memFree(dst);
    gpu.close();
    expect(d.liveEvents).toBe(0);
  });

  it('a hold is released only once its holder let go and the last GPU use completed (useUntil)', async () => {
    const gpu = new GpuRuntime(d);
    const s = gpu.stream('poison');
    const { src, dst } = slowCopy(s, 30);
    let released = false;
    const h = gpu.hold(() => {
      released = true;
      d.memFree(src); // what the copy reads: freed under it would be a lifetime violation
    });
    gpu.useUntil(h, s);
    h.close();
    expect(released).toBe(false);
    await gpu.marked(s);
    expect(released).toBe(true);
    expect(d.lifetimeViolations).toEqual([]);
    d.memFree(dst);
    gpu.close();
  });

  it('close with points pending: their events and streams go once the points completed, none under a wait', async () => {
    const gpu = new GpuRuntime(d);
    const s = gpu.stream('watchdog');
    const { src, dst } = slowCopy(s, 30);
    const reached = gpu.marked(s);
    const held = gpu.hold(() => undefined);
    gpu.useUntil(held, s);
    gpu.close();
    expect(d.liveEvents).toBe(2); // the pending points' events are not destroyed under their waits
    await reached;
    await sleep(0);
    expect(d.lifetimeViolations).toEqual([]);
    expect(d.liveEvents).toBe(0);
    expect(() => d.streamSynchronize(s)).toThrow(); // the stream went too, once no point on it was pending
    d.memFree(src);
    d.memFree(dst);
    expect(d.lifetimeViolations).toEqual([]);
  });

  it('a stream per purpose, made on first use', () => {
    const gpu = new GpuRuntime(d);
    const a = gpu.stream('watchdog');
    expect(gpu.stream('watchdog')).toBe(a);
    expect(gpu.stream('poison')).not.toBe(a);
    gpu.close();
  });

  it('drain is bounded: false while a point is pending past the bound, true once every point was reached', async () => {
    const gpu = new GpuRuntime(d);
    const s = gpu.stream('watchdog');
    const { src, dst } = slowCopy(s, 60);
    gpu.mark(s, () => undefined);
    expect(await gpu.drain(5)).toBe(false);
    expect(await gpu.drain(5_000)).toBe(true);
    expect(await gpu.drain(0)).toBe(true);
    d.memFree(src);
    d.memFree(dst);
    gpu.close();
  });

  it("a stream's error reaches mark and completed; marked resolves all the same (a release waits either way)", async () => {
    const gpu = new GpuRuntime(d);
    const s = gpu.stream('watchdog');
    // The stream's work failed: the driver's wait for the point reports it (as cuEventQuery would).
    const failure = new Error('the stream failed');
    d.whenComplete = () => Promise.reject(failure);
    const errors: Array<Error | undefined> = [];
    gpu.mark(s, (err) => errors.push(err));
    await gpu.marked(s);
    await expect(gpu.completed(s)).rejects.toBe(failure);
    expect(errors).toEqual([failure]);
    gpu.close();
  });

  it("ordering events are the runtime's: retired one by one, or destroyed by close", () => {
    const gpu = new GpuRuntime(d);
    const base = d.liveEvents;
    const a = gpu.orderingEvent();
    gpu.orderingEvent({ interprocess: true });
    expect(d.liveEvents).toBe(base + 2);
    gpu.retireEvent(a);
    gpu.retireEvent(a); // once only
    expect(d.liveEvents).toBe(base + 1);
    gpu.close();
    expect(d.liveEvents).toBe(base);
  });

  it("close closes the endpoints' GPU work and the communicators' marks it made, and is idempotent", async () => {
    const gpu = new GpuRuntime(d);
    const work = gpu.work();
    const marks = gpu.streamMarks();
    const s = work.stream;
    await marks.mark(s);
    let workReleased = false;
    work.hold(() => (workReleased = true));
    gpu.close();
    gpu.close();
    expect(workReleased).toBe(true); // the work's holds were let go of (no use was in flight)
    expect(gpu.isClosed).toBe(true);
    expect(d.liveEvents).toBe(0);
  });
});
