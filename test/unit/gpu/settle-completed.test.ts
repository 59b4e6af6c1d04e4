/**
 * GpuWork.settleCompleted (and GpuEventQueue's): what an endpoint's close
 * calls before CLOSE, so that a copy whose GPU work completed (the caller
 * synchronized its stream) reports it — its FIN — while the channel is still
 * open, though neither the engine's poll nor the native thread saw it yet.
 * Every test runs real copies on the simulated driver.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CudaError } from '../../../src/errors.js';
import { GpuWork } from '../../../src/gpu/gpu-work.js';
import { copies, recorder, until } from '../../helpers/gpu-work-harness.js';
import { simDevice } from '../../helpers/sim-device.js';

const works: GpuWork[] = [];
afterEach(() => {
  vi.restoreAllMocks();
  for (const g of works.splice(0)) g.close();
});

function setup(spinUs = 0) {
  const d = simDevice({ env: {} });
  const g = new GpuWork(d, spinUs);
  works.push(g);
  return { d, g };
}

/** A few event-loop turns: time for a second (wrong) call to show up. */
async function turns(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
}

describe('settleCompleted', () => {
  it('a wait still in the open batch: its event is recorded and, the work done, it settles now, once', async () => {
    const { d, g } = setup();
    const [c] = copies(d, 1, 3 << 20);
    d.memcpyAsync(c!.dst, c!.src, 3 << 20, g.stream);
    d.streamSynchronize(g.stream);
    const rec = recorder();
    g.whenDone(g.stream, 3 << 20, rec.cb()); // joins the batch: no event before the microtask
    g.settleCompleted(2);
    expect(rec.calls).toEqual([[undefined]]);
    await turns();
    expect(rec.calls).toEqual([[undefined]]);
    expect(g.outstanding).toBe(0);
  });

  it('a wait handed to the native thread: settled now, once; its event is not destroyed under the thread', async () => {
    const { d, g } = setup();
    const [c] = copies(d, 1, 4096);
    d.inject({ copyDelayMs: 40 });
    g.copy(g.stream, c!.dst, c!.src, 4096, recorder().cb());
    const rec = recorder();
    g.whenDone(g.stream, 4096, rec.cb());
    await Promise.resolve(); // the batch flushed: the native thread waits on its event
    await new Promise((r) => setTimeout(r, 5));
    expect(rec.total()).toBe(0);
    d.streamSynchronize(g.stream);
    g.settleCompleted(2);
    expect(rec.calls).toEqual([[undefined]]);
    expect(c!.landed()).toBe(true);
    await until(() => g.outstanding === 0 && d.lifetimeViolations.length === 0);
    await turns();
    expect(rec.calls).toEqual([[undefined]]);
    expect(d.lifetimeViolations).toEqual([]);
  });

  it('a copy still running past the bound is left alone: it settles later, once', async () => {
    const { d, g } = setup();
    const [c] = copies(d, 1, 4096);
    d.inject({ copyDelayMs: 200 });
    const rec = recorder();
    g.copy(g.stream, c!.dst, c!.src, 4096, rec.cb());
    const t0 = performance.now();
    g.settleCompleted(2);
    expect(performance.now() - t0).toBeLessThan(150); // bounded: it did not wait for the copy
    expect(rec.total()).toBe(0);
    await until(() => rec.total() === 1);
    await turns();
    expect(rec.calls).toEqual([[undefined]]);
    expect(c!.landed()).toBe(true);
  });

  it('a failed query reaches the callback as its error, once', async () => {
    const { d, g } = setup();
    const rec = recorder();
    g.whenDone(g.stream, 8 << 20, rec.cb()); // over a batch: its own event, recorded now
    const err = new CudaError('cuEventQuery', 'CUDA_ERROR_ILLEGAL_ADDRESS', 700, 'injected by the test');
    vi.spyOn(d, 'eventQuery').mockImplementationOnce(() => {
      throw err;
    });
    g.settleCompleted(2);
    expect(rec.calls).toEqual([[err]]);
    await turns();
    expect(rec.calls).toEqual([[err]]);
  });

  it('after close it does nothing', () => {
    const { g } = setup();
    const rec = recorder();
    g.whenDone(g.stream, 16, rec.cb());
    g.close();
    expect(() => g.settleCompleted(2)).not.toThrow();
  });
});
