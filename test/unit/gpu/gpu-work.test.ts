/**
 * GpuWork (src/gpu-work.ts): the completions of an endpoint's own copies.
 * whenDone calls of one synchronous run on one stream share one event; the
 * event is then noticed by a spin (a lone small batch), by the progress
 * engine's poll of its event queue, or by the native completion thread (driver.whenComplete). Every test runs
 * real copies on the simulated driver, whose eventQuery runs the work that is
 * already due (zero simulated duration here, unless a test says otherwise).
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { EventHandle, StreamHandle } from '../../../src/cuda/driver.js';
import type { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { CudaError } from '../../../src/errors.js';
import { GpuWork } from '../../../src/gpu/gpu-work.js';
import { ProgressEngine, type ProgressSource } from '../../../src/progress/engine.js';
import { copies, pattern, recorder, until } from '../../helpers/gpu-work-harness.js';
import { simDevice } from '../../helpers/sim-device.js';

const KiB = 1024;
const MiB = 1024 * KiB;

const works: GpuWork[] = [];

/** An initialised simulated driver on device 0, closed after the test (after its GpuWork). */
const sim = (batchOrderSeed?: number): SimulatedCudaDriver => simDevice({ env: {}, ...(batchOrderSeed === undefined ? {} : { batchOrderSeed }) });

function gpuWork(d: SimulatedCudaDriver, spinUs = 0, engine?: ProgressEngine): GpuWork {
  const g = new GpuWork(d, spinUs, engine);
  works.push(g);
  return g;
}

/** whenDone as a promise (GpuWork itself only calls back). */
function done(g: GpuWork, stream: StreamHandle, bytes = Infinity): Promise<void> {
  return new Promise<void>((resolve, reject) => g.whenDone(stream, bytes, (err) => (err ? reject(err) : resolve())));
}

afterEach(() => {
  vi.restoreAllMocks();
  for (const g of works.splice(0)) g.close();
});

/**
 * Queues a device-to-device copy of `size` pattern bytes on `stream` (the
 * destination starts zeroed) and returns a check that reads the destination
 * back: true once the copy has landed.
 */
function queueCopy(d: SimulatedCudaDriver, stream: StreamHandle, size: number, seed: number): () => boolean {
  const want = pattern(size, seed);
  const src = d.memAlloc(size);
  const dst = d.memAlloc(size);
  d.memcpyHtoD(src, want);
  d.memsetD8(dst, 0, size);
  d.memcpyAsync(dst, src, size, stream);
  return () => {
    const out = new Uint8Array(size);
    d.memcpyDtoH(out, dst);
    return Buffer.compare(out, want) === 0;
  };
}

/** A few more event-loop turns: time for a second (wrong) call to show up. */
async function settleLoop(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
}

/**
 * Errors thrown by microtasks queued with queueMicrotask (how GpuWork reports
 * a callback that threw) are collected here instead of failing the run.
 * Restored by vi.restoreAllMocks in afterEach.
 */
function catchMicrotaskErrors(): unknown[] {
  const reported: unknown[] = [];
  const realQueueMicrotask = globalThis.queueMicrotask;
  vi.spyOn(globalThis, 'queueMicrotask').mockImplementation((fn) =>
    realQueueMicrotask(() => {
      try {
        fn();
      } catch (e) {
        reported.push(e);
      }
    }),
  );
  return reported;
}

/** A progress engine that never polls by itself: the test calls events.poll() / events.watch(false). */
class ManualEngine extends ProgressEngine {
  readonly watched: ProgressSource[] = [];
  pollsGpu = true;
  constructor() {
    super(1000);
  }
  override get polling(): boolean {
    return this.pollsGpu;
  }
  override kick(src: ProgressSource): void {
    this.watched.push(src);
  }
  get gpuWaits(): number {
    return this.loopWaiting;
  }
}

function spinnerStub() {
  const stub = new ManualEngine();
  return { stub, spinner: stub, watched: stub.watched };
}

describe('batching: one event per synchronous run and stream', () => {
  it('three calls on one stream record one event; each callback runs once, after its copy landed', async () => {
    const d = sim();
    const g = gpuWork(d);
    const s = g.stream;
    const record = vi.spyOn(d, 'eventRecord');
    const rec = recorder();
    const landed: boolean[] = [];
    const checks = [1, 2, 3].map((seed) => {
      const check = queueCopy(d, s, 4 * KiB, seed);
      g.whenDone(
        s,
        4 * KiB,
        rec.cb(() => landed.push(checks.every((c) => c()))),
      );
      return check;
    });
    expect(record).not.toHaveBeenCalled(); // recorded in a microtask, after the last call
    await Promise.resolve();
    expect(record).toHaveBeenCalledTimes(1);
    expect(record.mock.calls[0]![1]).toBe(s);
    await until(() => rec.total() === 3);
    await settleLoop();
    expect(rec.calls).toEqual([[undefined], [undefined], [undefined]]);
    // Inside every callback, all three copies (queued before the shared event) had landed.
    expect(landed).toEqual([true, true, true]);
    expect(record).toHaveBeenCalledTimes(1);
  });

  it('calls on two streams record two events, one on each stream', async () => {
    const d = sim();
    const g = gpuWork(d);
    const s1 = d.streamCreate();
    const s2 = d.streamCreate();
    const record = vi.spyOn(d, 'eventRecord');
    const rec = recorder();
    const c1 = queueCopy(d, s1, 1 * KiB, 1);
    g.whenDone(s1, 1 * KiB, rec.cb());
    g.whenDone(s1, 1 * KiB, rec.cb());
    const c2 = queueCopy(d, s2, 1 * KiB, 2);
    g.whenDone(s2, 1 * KiB, rec.cb());
    await until(() => rec.total() === 3);
    expect(record.mock.calls.map(([, stream]) => stream)).toEqual([s1, s2]);
    expect(new Set(record.mock.calls.map(([ev]) => ev)).size).toBe(2);
    expect(rec.allOnce()).toBe(true);
    expect([c1(), c2()]).toEqual([true, true]);
  });

  it('going back to a stream after another one starts a new batch (s1, s2, s1: three events)', async () => {
    const d = sim();
    const g = gpuWork(d);
    const s1 = d.streamCreate();
    const s2 = d.streamCreate();
    const record = vi.spyOn(d, 'eventRecord');
    const rec = recorder();
    g.whenDone(s1, 1, rec.cb());
    g.whenDone(s2, 1, rec.cb());
    g.whenDone(s1, 1, rec.cb());
    await until(() => rec.total() === 3);
    expect(record.mock.calls.map(([, stream]) => stream)).toEqual([s1, s2, s1]);
  });

  it('two synchronous runs on the same stream record two events, and the idle event is reused', async () => {
    const d = sim();
    const g = gpuWork(d);
    const record = vi.spyOn(d, 'eventRecord');
    const create = vi.spyOn(d, 'eventCreate');
    const rec = recorder();
    g.whenDone(g.stream, 1, rec.cb());
    g.whenDone(g.stream, 1, rec.cb());
    await until(() => rec.total() === 2);
    g.whenDone(g.stream, 1, rec.cb());
    await until(() => rec.total() === 3);
    expect(record).toHaveBeenCalledTimes(2);
    expect(create).toHaveBeenCalledTimes(1); // the first event went back to the pool
    expect(record.mock.calls[0]![0]).toBe(record.mock.calls[1]![0]);
  });

  it('whenDone calls back after the copy landed', async () => {
    const d = sim();
    const g = gpuWork(d);
    const check = queueCopy(d, g.stream, 8 * KiB, 5);
    const p = done(g, g.stream, 8 * KiB);
    expect(check()).toBe(false);
    await p;
    expect(check()).toBe(true);
  });
});

describe('callbacks are never called inside whenDone', () => {
  /** Makes `calls` (stream, bytes) calls in one run; returns how many callbacks ran during each call. */
  function callsDuringWhenDone(g: GpuWork, calls: Array<[StreamHandle, number]>, rec: ReturnType<typeof recorder>): number[] {
    return calls.map(([s, bytes]) => {
      const before = rec.total();
      g.whenDone(s, bytes, rec.cb());
      return rec.total() - before;
    });
  }

  it('native path (spinUs 0): not inside the calls, not even when a second stream flushes the first batch', async () => {
    const d = sim();
    const g = gpuWork(d);
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    const rec = recorder();
    expect(
      callsDuringWhenDone(
        g,
        [
          [s1, 16],
          [s1, 16],
          [s2, 16],
          [s1, 16],
        ],
        rec,
      ),
    ).toEqual([0, 0, 0, 0]);
    expect(rec.total()).toBe(0);
    await until(() => rec.total() === 4);
    expect(rec.allOnce()).toBe(true);
  });

  it('spin path (spinUs > 0, one stream): the spin runs in the microtask, after the run', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const rec = recorder();
    expect(
      callsDuringWhenDone(
        g,
        [
          [g.stream, 16],
          [g.stream, 16],
        ],
        rec,
      ),
    ).toEqual([0, 0]);
    await Promise.resolve();
    expect(rec.calls).toEqual([[undefined], [undefined]]); // the spin completed it in the flush microtask
  });

  // A call for another stream flushes the open batch at once (its event is
  // recorded before the new copies), but none of its callbacks may run inside
  // that call: a spin or an eventRecord error is left to a microtask.
  it('spin path (spinUs > 0): a call for a second stream does not complete the first batch inside it', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    queueCopy(d, s1, 16, 1);
    const rec = recorder();
    expect(
      callsDuringWhenDone(
        g,
        [
          [s1, 16],
          [s2, 16],
        ],
        rec,
      ),
    ).toEqual([0, 0]);
    await until(() => rec.total() === 2);
  });

  it('a failed eventRecord for the first batch is not reported inside the call for a second stream', async () => {
    const d = sim();
    const g = gpuWork(d);
    const bad = 0xdead_beefn; // no such stream: eventRecord throws CUDA_ERROR_INVALID_HANDLE
    const rec = recorder();
    expect(
      callsDuringWhenDone(
        g,
        [
          [bad, 16],
          [g.stream, 16],
        ],
        rec,
      ),
    ).toEqual([0, 0]);
    await until(() => rec.total() === 2);
    expect(rec.calls[0]![0]).toBeInstanceOf(CudaError);
    expect(rec.calls[1]).toEqual([undefined]);
  });

  // The same bug's worst case: the first batch's (lone) callback throws inside
  // the second call, which throws in turn and never registers its callback.
  it('a throwing callback of the first batch neither escapes the call for a second stream nor loses its callback', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    catchMicrotaskErrors(); // where a fixed GpuWork may report the throw
    const rec = recorder();
    g.whenDone(
      s1,
      16,
      rec.cb(() => {
        throw new Error('bug in a completion');
      }),
    );
    let escaped: unknown;
    try {
      g.whenDone(s2, 16, rec.cb());
    } catch (e) {
      escaped = e;
    }
    expect(escaped).toBeUndefined();
    await until(() => rec.total() === 2);
  });
});

describe('which path notices a completion', () => {
  it('a lone small batch is spun on: settled by eventQuery in the flush microtask, no whenComplete', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const query = vi.spyOn(d, 'eventQuery');
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    const check = queueCopy(d, g.stream, 64 * KiB, 3);
    g.whenDone(
      g.stream,
      32 * KiB,
      rec.cb(() => expect(check()).toBe(true)),
    );
    g.whenDone(g.stream, 32 * KiB, rec.cb()); // 64 KiB in all: still small
    await Promise.resolve();
    expect(rec.calls).toEqual([[undefined], [undefined]]);
    expect(query).toHaveBeenCalled();
    expect(native).not.toHaveBeenCalled();
  });

  it('a batch over 64 KiB is not spun on: the native poller takes it', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const query = vi.spyOn(d, 'eventQuery');
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    g.whenDone(g.stream, 64 * KiB, rec.cb());
    g.whenDone(g.stream, 1, rec.cb()); // one byte more than 64 KiB in the batch
    await until(() => rec.total() === 2);
    expect(query).not.toHaveBeenCalled();
    expect(native).toHaveBeenCalledTimes(1);
    expect(rec.allOnce()).toBe(true);
  });

  it('a small batch while another is in flight is not spun on', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    const query = vi.spyOn(d, 'eventQuery');
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    g.whenDone(s1, 1 * MiB, rec.cb()); // big: native, stays in flight
    g.whenDone(s2, 16, rec.cb()); // small, but not alone
    await until(() => rec.total() === 2);
    expect(query).not.toHaveBeenCalled();
    expect(native).toHaveBeenCalledTimes(2);
  });

  it('spinUs 0 never spins and, without a spinner, waits through driver.whenComplete', async () => {
    const d = sim();
    const g = gpuWork(d, 0);
    const query = vi.spyOn(d, 'eventQuery');
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    g.whenDone(g.stream, 16, rec.cb());
    await until(() => rec.total() === 1);
    expect(query).not.toHaveBeenCalled();
    expect(native).toHaveBeenCalledTimes(1);
  });
});

describe('errors reach every callback of the batch', () => {
  const failure = () => new CudaError('cuEventQuery', 'CUDA_ERROR_ILLEGAL_ADDRESS', 700, 'injected by the test');

  it('an eventQuery that throws while spinning', async () => {
    const d = sim();
    const g = gpuWork(d, 1000);
    const err = failure();
    vi.spyOn(d, 'eventQuery').mockImplementationOnce(() => {
      throw err;
    });
    const rec = recorder();
    for (let i = 0; i < 3; i++) g.whenDone(g.stream, 16, rec.cb());
    await until(() => rec.total() === 3);
    await settleLoop();
    expect(rec.calls).toEqual([[err], [err], [err]]);
    // The event went back to the pool and works again.
    await expect(done(g, g.stream, 16)).resolves.toBeUndefined();
  });

  it('an eventQuery that throws in pollGpu', async () => {
    const d = sim();
    const { spinner } = spinnerStub();
    const g = gpuWork(d, 0, spinner);
    const err = failure();
    const rec = recorder();
    for (let i = 0; i < 3; i++) g.whenDone(g.stream, 16, rec.cb());
    await Promise.resolve();
    vi.spyOn(d, 'eventQuery').mockImplementationOnce(() => {
      throw err;
    });
    expect(g.events.poll()).toBe(true);
    expect(rec.calls).toEqual([[err], [err], [err]]);
    expect(g.events.pending).toBe(false);
  });

  it('a whenComplete that rejects', async () => {
    const d = sim();
    const g = gpuWork(d);
    const err = failure();
    vi.spyOn(d, 'whenComplete').mockReturnValueOnce(Promise.reject(err));
    const rec = recorder();
    for (let i = 0; i < 3; i++) g.whenDone(g.stream, 16, rec.cb());
    await until(() => rec.total() === 3);
    expect(rec.calls).toEqual([[err], [err], [err]]);
    await expect(done(g, g.stream)).resolves.toBeUndefined();
  });

  it('an eventRecord that throws (no such stream); a later wait on it fails with it too', async () => {
    const d = sim();
    const g = gpuWork(d);
    const rec = recorder();
    g.whenDone(0xbad0n, 16, rec.cb());
    g.whenDone(0xbad0n, 16, rec.cb());
    await until(() => rec.total() === 2);
    const [[a], [b]] = rec.calls as [[CudaError], [CudaError]];
    expect(a).toBeInstanceOf(CudaError);
    expect(a.code).toBe('CUDA_ERROR_INVALID_HANDLE');
    expect(b).toBe(a);
    await expect(done(g, 0xbad0n)).rejects.toMatchObject({ code: 'CUDA_ERROR_INVALID_HANDLE' });
  });

  it('a callback that throws does not keep the others of its batch from running; the error is reported', async () => {
    const d = sim();
    const g = gpuWork(d);
    const reported = catchMicrotaskErrors();
    const boom = new Error('bug in a completion');
    const rec = recorder();
    g.whenDone(g.stream, 16, rec.cb());
    g.whenDone(
      g.stream,
      16,
      rec.cb(() => {
        throw boom;
      }),
    );
    g.whenDone(g.stream, 16, rec.cb());
    await until(() => rec.total() === 3 && reported.length > 0);
    expect(rec.calls).toEqual([[undefined], [undefined], [undefined]]);
    expect(reported).toEqual([boom]);
  });
});

/** Spies on the driver calls that launch copies and record their events. */
function launchSpies(d: SimulatedCudaDriver) {
  return { batch: vi.spyOn(d, 'memcpyBatchAsync'), single: vi.spyOn(d, 'memcpyAsync'), record: vi.spyOn(d, 'eventRecord') };
}

describe('copy: the copies of one run are launched together', () => {
  it('three small copies: nothing launched inside copy(), then one memcpyBatchAsync and one event', async () => {
    const d = sim();
    const g = gpuWork(d);
    const { batch, single, record } = launchSpies(d);
    const rec = recorder();
    const cs = copies(d, 3, 4 * KiB);
    for (const c of cs)
      g.copy(
        g.stream,
        c.dst,
        c.src,
        c.size,
        rec.cb(() => expect(c.landed()).toBe(true)),
      );
    expect(batch).not.toHaveBeenCalled();
    expect(single).not.toHaveBeenCalled();
    await Promise.resolve();
    expect(batch).toHaveBeenCalledTimes(1);
    expect(batch.mock.calls[0]![3]).toBe(3);
    expect(single).not.toHaveBeenCalled();
    expect(record).toHaveBeenCalledTimes(1);
    await until(() => rec.total() === 3);
    await settleLoop();
    expect(rec.calls).toEqual([[undefined], [undefined], [undefined]]);
  });

  it('a lone copy is one memcpyAsync', async () => {
    const d = sim();
    const g = gpuWork(d);
    const batch = vi.spyOn(d, 'memcpyBatchAsync');
    const single = vi.spyOn(d, 'memcpyAsync');
    const [c] = copies(d, 1, 64);
    let landed = false;
    g.copy(g.stream, c!.dst, c!.src, c!.size, () => (landed = c!.landed()));
    await until(() => landed);
    expect(single).toHaveBeenCalledTimes(1);
    expect(batch).not.toHaveBeenCalled();
  });

  it('a copy over 4 MiB is launched inside copy(), after the open batch, with an event of its own', async () => {
    const d = sim();
    const g = gpuWork(d);
    const order: string[] = [];
    const realBatch = d.memcpyBatchAsync.bind(d);
    const realSingle = d.memcpyAsync.bind(d);
    vi.spyOn(d, 'memcpyBatchAsync').mockImplementation((...a) => (order.push(`batch ${a[3]}`), realBatch(...a)));
    vi.spyOn(d, 'memcpyAsync').mockImplementation((...a) => (order.push(`single ${a[2]}`), realSingle(...a)));
    const record = vi.spyOn(d, 'eventRecord');
    const rec = recorder();
    const small = copies(d, 2, 1 * KiB);
    const [big] = copies(d, 1, 4 * MiB + 1, 9);
    for (const c of small) g.copy(g.stream, c.dst, c.src, c.size, rec.cb());
    g.copy(
      g.stream,
      big!.dst,
      big!.src,
      big!.size,
      rec.cb(() => expect(big!.landed()).toBe(true)),
    );
    expect(order).toEqual(['batch 2', `single ${4 * MiB + 1}`]);
    expect(record).toHaveBeenCalledTimes(2);
    await until(() => rec.total() === 3);
    expect(small.every((c) => c.landed())).toBe(true);
  });

  it('copies on two streams: one launch and one event on each stream', async () => {
    const d = sim();
    const g = gpuWork(d);
    const s2 = d.streamCreate();
    const batch = vi.spyOn(d, 'memcpyBatchAsync');
    const record = vi.spyOn(d, 'eventRecord');
    const rec = recorder();
    const [a, b, c, e] = copies(d, 4, 512);
    g.copy(g.stream, a!.dst, a!.src, 512, rec.cb());
    g.copy(g.stream, b!.dst, b!.src, 512, rec.cb());
    g.copy(s2, c!.dst, c!.src, 512, rec.cb());
    g.copy(s2, e!.dst, e!.src, 512, rec.cb());
    await until(() => rec.total() === 4);
    expect(batch.mock.calls.map((call) => [call[3], call[4]])).toEqual([
      [2, g.stream],
      [2, s2],
    ]);
    expect(record.mock.calls.map((call) => call[1])).toEqual([g.stream, s2]);
    expect([a, b, c, e].every((x) => x!.landed())).toBe(true);
  });

  it('more copies than one batch takes (64) go in two launches', async () => {
    const d = sim();
    const g = gpuWork(d);
    const batch = vi.spyOn(d, 'memcpyBatchAsync');
    const rec = recorder();
    const cs = copies(d, 65, 16);
    for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, rec.cb());
    await until(() => rec.total() === 65);
    expect(batch.mock.calls.map((call) => call[3])).toEqual([64]);
    expect(rec.allOnce()).toBe(true);
    expect(cs.every((c) => c.landed())).toBe(true);
  });

  it('a batch the driver refuses is retried one by one: only the bad copy fails, never inside copy()', async () => {
    const d = sim();
    const g = gpuWork(d);
    vi.spyOn(d, 'memcpyBatchAsync').mockImplementation(() => {
      throw new CudaError('cuMemcpyBatchAsync', 'CUDA_ERROR_INVALID_VALUE', 1, 'refused');
    });
    const rec = recorder();
    const [a, b] = copies(d, 2, 256);
    g.copy(
      g.stream,
      a!.dst,
      a!.src,
      256,
      rec.cb(() => expect(a!.landed()).toBe(true)),
    );
    g.copy(g.stream, 0xdead0000n, b!.src, 256, rec.cb()); // not an allocation: cuMemcpyAsync refuses it
    g.copy(
      g.stream,
      b!.dst,
      b!.src,
      256,
      rec.cb(() => expect(b!.landed()).toBe(true)),
    );
    expect(rec.total()).toBe(0);
    await until(() => rec.total() === 3);
    await settleLoop();
    expect(rec.calls[0]).toEqual([undefined]);
    expect(rec.calls[1]).toEqual([expect.any(CudaError)]);
    expect(rec.calls[2]).toEqual([undefined]);
  });

  it('a batch queued one by one that stops at copy k: copies 0..k-1 are not queued twice, the rest go one by one', async () => {
    const d = sim();
    const g = gpuWork(d);
    // As the native driver without cuMemcpyBatchAsync (or on the legacy
    // stream) does: one cuMemcpyAsync each, stopping at the first failure,
    // whose error says how many were queued before it.
    const single = vi.spyOn(d, 'memcpyAsync');
    vi.spyOn(d, 'memcpyBatchAsync').mockImplementation((dsts, srcs, sizes, count, stream) => {
      for (let k = 0; k < count; k++) {
        try {
          d.memcpyAsync(dsts[k]!, srcs[k]!, sizes[k]!, stream);
        } catch (err) {
          (err as { queued?: number }).queued = k;
          throw err;
        }
      }
    });
    const rec = recorder();
    const cs = copies(d, 4, 256);
    g.copy(g.stream, cs[0]!.dst, cs[0]!.src, 256, rec.cb());
    g.copy(g.stream, cs[1]!.dst, cs[1]!.src, 256, rec.cb());
    g.copy(g.stream, 0xdead0000n, cs[2]!.src, 256, rec.cb()); // copy 2 fails
    g.copy(g.stream, cs[3]!.dst, cs[3]!.src, 256, rec.cb());
    await until(() => rec.total() === 4);
    await settleLoop();
    expect(rec.calls).toEqual([[undefined], [undefined], [expect.any(CudaError)], [undefined]]);
    expect(cs.filter((_, i) => i !== 2).every((c) => c.landed())).toBe(true);
    // 0 and 1 queued once (inside the batch call), 3 once (after it); 2 tried again alone, and refused again.
    const times = (dst: bigint) => single.mock.calls.filter((c) => c[0] === dst).length;
    expect([times(cs[0]!.dst), times(cs[1]!.dst), times(0xdead0000n), times(cs[3]!.dst)]).toEqual([1, 1, 2, 1]);
  });

  it('when every copy of a batch fails, no event is recorded', async () => {
    const d = sim();
    const g = gpuWork(d);
    const record = vi.spyOn(d, 'eventRecord');
    const rec = recorder();
    const [a] = copies(d, 1, 256);
    g.copy(g.stream, 0xdead0000n, a!.src, 256, rec.cb());
    g.copy(g.stream, 0xdeae0000n, a!.src, 256, rec.cb());
    await until(() => rec.total() === 2);
    expect(rec.calls.map((c) => c[0])).toEqual([expect.any(CudaError), expect.any(CudaError)]);
    expect(record).not.toHaveBeenCalled();
  });

  it('a copy into memory another copy of the batch writes starts a new batch: the later copy wins', async () => {
    const d = sim();
    const g = gpuWork(d);
    const { batch, single, record } = launchSpies(d);
    const rec = recorder();
    const [a, b, c] = copies(d, 3, 4 * KiB);
    const want = pattern(4 * KiB, 2); // copies() fills source k with pattern(size, 1 + k)
    g.copy(g.stream, a!.dst, a!.src, 4 * KiB, rec.cb());
    g.copy(g.stream, c!.dst, c!.src, 4 * KiB, rec.cb());
    // b's bytes into a's destination, shifted by 1 KiB: overlaps the first copy
    g.copy(g.stream, a!.dst + 1024n, b!.src, 3 * KiB, rec.cb());
    await until(() => rec.total() === 3);
    expect(batch.mock.calls.map((call) => call[3])).toEqual([2]);
    expect(single).toHaveBeenCalledTimes(1);
    expect(record).toHaveBeenCalledTimes(2);
    const out = new Uint8Array(4 * KiB);
    d.memcpyDtoH(out, a!.dst);
    expect(Buffer.compare(out.subarray(1024), want.subarray(0, 3 * KiB))).toBe(0);
    expect(c!.landed()).toBe(true);
  });

  it('receives into overlapping memory land in message order, whatever order the driver runs a batch in', async () => {
    // The simulator runs a batch's copies in a seeded order, as a GPU runs
    // them in no promised order: without the overlap guard some of these
    // seeds run the later copy first and the earlier message's bytes win.
    for (let seed = 1; seed <= 12; seed++) {
      const d = sim(seed);
      const g = gpuWork(d);
      const rec = recorder();
      const [a, b, c] = copies(d, 3, 4 * KiB);
      const want = pattern(4 * KiB, 2); // source of b
      g.copy(g.stream, a!.dst, a!.src, 4 * KiB, rec.cb());
      g.copy(g.stream, c!.dst, c!.src, 4 * KiB, rec.cb());
      g.copy(g.stream, a!.dst + 1024n, b!.src, 3 * KiB, rec.cb());
      await until(() => rec.total() === 3);
      const out = new Uint8Array(4 * KiB);
      d.memcpyDtoH(out, a!.dst);
      expect(Buffer.compare(out.subarray(1024), want.subarray(0, 3 * KiB)), `batchOrderSeed ${seed}`).toBe(0);
      expect(Buffer.compare(out.subarray(0, 1024), pattern(4 * KiB, 1).subarray(0, 1024)), `batchOrderSeed ${seed}`).toBe(0);
    }
  });

  it('a whenDone that joins a batch of copies is called back after they landed', async () => {
    const d = sim();
    const g = gpuWork(d);
    const rec = recorder();
    const cs = copies(d, 2, 2 * KiB);
    for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, rec.cb());
    g.whenDone(
      g.stream,
      0,
      rec.cb(() => expect(cs.every((c) => c.landed())).toBe(true)),
    );
    await until(() => rec.total() === 3);
    await settleLoop();
    expect(rec.allOnce()).toBe(true);
  });
});

describe('with a spinner', () => {
  it('polled completions are settled by pollGpu, not by the native poller', async () => {
    const d = sim();
    const { stub, spinner, watched } = spinnerStub();
    const g = gpuWork(d, 0, spinner);
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    const checks = [1, 2].map((seed) => queueCopy(d, g.stream, 2 * KiB, seed));
    g.whenDone(
      g.stream,
      2 * KiB,
      rec.cb(() => expect(checks.map((c) => c())).toEqual([true, true])),
    );
    g.whenDone(g.stream, 2 * KiB, rec.cb());
    expect(g.events.pending).toBe(false); // nothing recorded yet
    await Promise.resolve();
    expect(watched).toEqual([g.events]);
    expect(g.events.pending).toBe(true);
    expect(rec.total()).toBe(0);
    expect(g.events.poll()).toBe(true); // the query runs the due copies
    expect(rec.calls).toEqual([[undefined], [undefined]]);
    expect(g.events.pending).toBe(false);
    expect(g.events.poll()).toBe(false);
    await settleLoop();
    expect(rec.allOnce()).toBe(true);
    expect(native).not.toHaveBeenCalled();
    expect(stub.gpuWaits).toBe(0);
  });

  it('pollGpu settles oldest first; handOff gives the rest to driver.whenComplete, counted in gpuWaits', async () => {
    const d = sim();
    const { stub, spinner } = spinnerStub();
    const g = gpuWork(d, 0, spinner);
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    const events: EventHandle[] = [];
    const realRecord = d.eventRecord.bind(d);
    vi.spyOn(d, 'eventRecord').mockImplementation((ev, s) => {
      events.push(ev);
      realRecord(ev, s);
    });
    // The first batch's event reads as not yet complete (a long copy), however far the GPU got.
    const realQuery = d.eventQuery.bind(d);
    vi.spyOn(d, 'eventQuery').mockImplementation((ev) => (ev === events[0] ? false : realQuery(ev)));
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    const c1 = queueCopy(d, s1, 1 * KiB, 1);
    g.whenDone(
      s1,
      1 * KiB,
      rec.cb(() => expect(c1()).toBe(true)),
    );
    const c2 = queueCopy(d, s2, 1 * KiB, 2);
    g.whenDone(
      s2,
      1 * KiB,
      rec.cb(() => expect(c2()).toBe(true)),
    );
    g.whenDone(s2, 1 * KiB, rec.cb());
    await Promise.resolve();
    expect(events).toHaveLength(2);
    expect(g.events.poll()).toBe(false); // the second batch waits behind the first
    expect(rec.total()).toBe(0);
    g.events.watch(false);
    expect(g.events.pending).toBe(false);
    expect(stub.gpuWaits).toBe(2);
    expect(native.mock.calls.map(([ev]) => ev)).toEqual(events);
    await until(() => rec.total() === 3);
    await settleLoop();
    expect(rec.calls).toEqual([[undefined], [undefined], [undefined]]);
    expect(stub.gpuWaits).toBe(0);
  });

  it('a spinner that does not poll the GPU (pollsGpu false) is passed over: native poller, counted', async () => {
    const d = sim();
    const { stub, spinner, watched } = spinnerStub();
    stub.pollsGpu = false;
    const g = gpuWork(d, 0, spinner);
    const rec = recorder();
    g.whenDone(g.stream, 16, rec.cb());
    await Promise.resolve();
    expect(watched).toEqual([]);
    expect(stub.gpuWaits).toBe(1);
    await until(() => rec.total() === 1);
    expect(stub.gpuWaits).toBe(0);
  });

  it('with a real Spinner, fast and slow copies all complete once, in stream order', async () => {
    const d = sim();
    const spinner = new ProgressEngine(250);
    try {
      const g = gpuWork(d, 0, spinner);
      const rec = recorder();
      const order: number[] = [];
      const checks: Array<() => boolean> = [];
      for (let run = 0; run < 4; run++) {
        d.inject({ copyDelayMs: run % 2 === 0 ? 0 : 5 }); // every other run copies slowly
        for (let i = 0; i < 3; i++) {
          const n = run * 3 + i;
          const check = queueCopy(d, g.stream, 1 * KiB, n + 1);
          checks.push(check);
          g.whenDone(
            g.stream,
            1 * KiB,
            rec.cb(() => {
              order.push(n);
              expect(check()).toBe(true);
            }),
          );
        }
        await Promise.resolve();
      }
      await until(() => rec.total() === 12);
      await settleLoop();
      expect(rec.calls.every((c) => c.length === 1 && c[0] === undefined)).toBe(true);
      expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      expect(spinner.loopWaiting).toBe(0);
      expect(g.events.pending).toBe(false);
    } finally {
      spinner.stop();
    }
  });
});

describe("whenEvent (a peer's event)", () => {
  it('is awaited through the native thread, counted on the engine meanwhile, and calls back once', async () => {
    const d = sim();
    const { stub, spinner } = spinnerStub();
    const g = gpuWork(d, 1000, spinner);
    const native = vi.spyOn(d, 'whenComplete');
    const ev = d.eventCreate({ disableTiming: true });
    const check = queueCopy(d, g.stream, 4 * KiB, 4);
    d.eventRecord(ev, g.stream);
    const rec = recorder();
    g.whenEvent(
      ev,
      rec.cb(() => expect(check()).toBe(true)),
    );
    expect(native).toHaveBeenCalledWith(ev);
    expect(stub.gpuWaits).toBe(1);
    await until(() => rec.total() === 1);
    await settleLoop();
    expect(rec.calls).toEqual([[undefined]]);
    expect(stub.gpuWaits).toBe(0);
    d.eventDestroy(ev); // not the queue's: the caller's to destroy
  });

  it('a failed wait reaches the callback', async () => {
    const d = sim();
    const g = gpuWork(d);
    const err = new CudaError('cuEventQuery', 'CUDA_ERROR_ILLEGAL_ADDRESS', 700, 'injected by the test');
    vi.spyOn(d, 'whenComplete').mockReturnValueOnce(Promise.reject(err));
    const rec = recorder();
    g.whenEvent(1n as EventHandle, rec.cb());
    await until(() => rec.total() === 1);
    expect(rec.calls).toEqual([[err]]);
  });
});

describe('close()', () => {
  it('records the open batch, destroys the stream, and destroys the event once its callbacks ran', async () => {
    const d = sim();
    const g = new GpuWork(d);
    const s = g.stream;
    const record = vi.spyOn(d, 'eventRecord');
    const destroyStream = vi.spyOn(d, 'streamDestroy');
    const destroyEvent = vi.spyOn(d, 'eventDestroy');
    const rec = recorder();
    const check = queueCopy(d, s, 4 * KiB, 9);
    g.whenDone(
      s,
      4 * KiB,
      rec.cb(() => expect(check()).toBe(true)),
    );
    g.whenDone(s, 4 * KiB, rec.cb());
    g.close();
    expect(record).toHaveBeenCalledTimes(1); // the open batch was flushed by close
    expect(destroyStream).toHaveBeenCalledWith(s);
    expect(destroyEvent).not.toHaveBeenCalled(); // still awaited
    await until(() => rec.total() === 2);
    expect(rec.calls).toEqual([[undefined], [undefined]]);
    expect(destroyEvent).toHaveBeenCalledTimes(1);
    expect(destroyEvent).toHaveBeenCalledWith(record.mock.calls[0]![0]);
    g.close(); // twice is fine
    expect(destroyStream).toHaveBeenCalledTimes(1);
  });

  it('destroys the idle (pooled) events', async () => {
    const d = sim();
    const g = new GpuWork(d);
    const create = vi.spyOn(d, 'eventCreate');
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    await Promise.all([done(g, s1, 16), done(g, s2, 16)]);
    const made = create.mock.results.map((r) => r.value as EventHandle);
    expect(made).toHaveLength(2);
    const destroyEvent = vi.spyOn(d, 'eventDestroy');
    g.close();
    expect(destroyEvent.mock.calls.map(([ev]) => ev).sort()).toEqual([...made].sort());
  });

  it('hands the polled waits to the native poller', async () => {
    const d = sim();
    const { stub, spinner } = spinnerStub();
    const g = new GpuWork(d, 0, spinner);
    const native = vi.spyOn(d, 'whenComplete');
    const rec = recorder();
    g.whenDone(g.stream, 16, rec.cb());
    await Promise.resolve();
    expect(g.events.pending).toBe(true);
    g.close();
    expect(g.events.pending).toBe(false);
    expect(native).toHaveBeenCalledTimes(1);
    expect(stub.gpuWaits).toBe(1);
    await until(() => rec.total() === 1);
    expect(rec.calls).toEqual([[undefined]]);
    expect(stub.gpuWaits).toBe(0);
  });
});

describe('property: copies and whenDone calls mixed over 1-3 streams', () => {
  type Mode = 'native' | 'spin' | 'stub';
  // Byte counts around the batch bound (4 MiB): small ones share events (and launches), larger ones get their own.
  const callArb = fc.record({
    stream: fc.integer({ min: 0, max: 2 }),
    bytes: fc.constantFrom(64, 1 * MiB, 3 * MiB, 4 * MiB, 5 * MiB),
    copy: fc.boolean(),
  });
  const runsArb = fc.array(fc.array(callArb, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 4 });
  const EDGE = 64;

  propTest.prop([runsArb, fc.constantFrom<Mode>('native', 'spin', 'stub')], { numRuns: 40 })(
    'each copy lands before its callback; launches and events follow the model; nothing runs inside a call',
    async (runs, mode) => {
      const d = sim();
      try {
        const { spinner } = spinnerStub();
        const g = new GpuWork(d, mode === 'spin' ? 200 : 0, mode === 'stub' ? spinner : undefined);
        const streams = [d.streamCreate(), d.streamCreate(), d.streamCreate()];
        const src = d.memAlloc(5 * MiB);
        const srcBytes = pattern(5 * MiB, 3);
        d.memcpyHtoD(src, srcBytes);
        const dstSize = 6 * 5 * MiB;
        const dst = d.memAlloc(dstSize);
        const record = vi.spyOn(d, 'eventRecord');
        const single = vi.spyOn(d, 'memcpyAsync');
        const batch = vi.spyOn(d, 'memcpyBatchAsync');
        const rec = recorder();
        // The model: in one synchronous run, consecutive calls on one stream
        // share an event (and their copies one launch) while their bytes add
        // up to at most 4 MiB; a call above 4 MiB has its own (a copy: its
        // own cuMemcpyAsync, at once).
        let groups = 0;
        let singles = 0;
        let batches = 0;
        const closeGroup = (copies: number) => {
          groups++;
          if (copies === 1) singles++;
          else if (copies > 1) batches++;
        };
        for (const run of runs) {
          d.memsetD8(dst, 0, dstSize);
          let open: { stream: number; bytes: number; copies: number } | undefined;
          let at = 0;
          for (const c of run) {
            const isCopy = c.copy;
            if (c.bytes > 4 * MiB) {
              if (open) closeGroup(open.copies);
              open = undefined;
              groups++;
              if (isCopy) singles++;
            } else if (open && open.stream === c.stream && open.bytes + c.bytes <= 4 * MiB) {
              open.bytes += c.bytes;
              if (isCopy) open.copies++;
            } else {
              if (open) closeGroup(open.copies);
              open = { stream: c.stream, bytes: c.bytes, copies: isCopy ? 1 : 0 };
            }
            const s = streams[c.stream]!;
            const before = rec.total();
            if (isCopy) {
              const off = at;
              at += c.bytes;
              const n = c.bytes;
              g.copy(
                s,
                dst + BigInt(off),
                src,
                n,
                rec.cb(() => {
                  // The first and last bytes of the copy are the source's.
                  const head = new Uint8Array(Math.min(EDGE, n));
                  const tail = new Uint8Array(Math.min(EDGE, n));
                  d.memcpyDtoH(head, dst + BigInt(off));
                  d.memcpyDtoH(tail, dst + BigInt(off + n - tail.length));
                  expect(Buffer.compare(head, srcBytes.subarray(0, head.length))).toBe(0);
                  expect(Buffer.compare(tail, srcBytes.subarray(n - tail.length, n))).toBe(0);
                }),
              );
            } else {
              d.memsetD8Async(dst + BigInt(dstSize - 64), 1, 64, s);
              g.whenDone(s, c.bytes, rec.cb());
            }
            expect(rec.total()).toBe(before); // never called back inside the call
          }
          if (open) closeGroup(open.copies);
          await Promise.resolve(); // the run ends: its last batch is launched and recorded
          if (mode !== 'stub') {
            const want = rec.calls.length;
            await until(() => rec.total() >= want); // the destination is zeroed again by the next run
          } else {
            g.events.poll();
            g.events.watch(false);
            const want = rec.calls.length;
            await until(() => rec.total() >= want);
          }
        }
        await settleLoop();
        expect(rec.calls.every((c) => c.length === 1 && c[0] === undefined)).toBe(true);
        expect(record).toHaveBeenCalledTimes(groups);
        expect(single).toHaveBeenCalledTimes(singles);
        expect(batch).toHaveBeenCalledTimes(batches);
        g.close();
      } finally {
        vi.restoreAllMocks();
        d.close();
      }
    },
  );
});
