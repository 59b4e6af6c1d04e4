/**
 * How the bench times smcuda's collective (timeCollective, under-test.ts),
 * with a stand-in implementation on the simulated driver: the calls it makes
 * (warm-up, then `iters` per run, all on the bench's stream, in place, f32),
 * one sample per run, the algorithm it reports, and a capture that the
 * driver refuses surfacing as an error (the suite then lists the figure as
 * skipped with it).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { openDriver } from '../../../src/cuda/open-driver.js';
import { type CollectiveCall, type CollectiveUnderTest, timeCollective } from '../../../src/bench/under-test.js';

let driver: CudaDriver;
/** Whether the simulator models capture (then there is no refusal to see). */
const simCaptures = await (async () => {
  const { driver: d } = await openDriver({ driver: 'sim' });
  const graphs = d.gpuDrivenStatus().graphs;
  d.close();
  return graphs;
})();
beforeAll(async () => {
  driver = (await openDriver({ driver: 'sim' })).driver;
  driver.setDevice(0);
});
afterAll(() => driver.close());

function standIn(): CollectiveUnderTest & { calls: CollectiveCall[] } {
  const calls: CollectiveCall[] = [];
  return {
    calls,
    capturable: false,
    // Stream-ordered work on the caller's stream, as a real collective would enqueue.
    collectiveUnderTest: (c) => {
      calls.push(c);
      driver.memsetD8Async(c.recv, calls.length & 0xff, c.count * 4, c.stream);
    },
    algorithmFor: (bytes) => (bytes <= 256 << 10 ? 'one-shot' : 'two-shot'),
    close: async () => {},
  };
}

describe('timeCollective', () => {
  it('warm-up then iters calls per run, in place on one stream, one µs sample per run, and the chosen algorithm', async () => {
    const sut = standIn();
    const buf = driver.memAlloc(4096);
    try {
      const t = await timeCollective(driver, sut, buf, 4096, { iters: 4, warmup: 2, runs: 3, timeoutMs: 10_000 });
      expect(t.runsUs).toHaveLength(3);
      expect(t.runsUs.every((x) => x > 0)).toBe(true);
      expect(t.algorithm).toBe('one-shot');
      expect(sut.calls).toHaveLength(2 + 3 * 4);
      const streams = new Set(sut.calls.map((c) => c.stream));
      expect(streams.size).toBe(1);
      for (const c of sut.calls) expect(c).toMatchObject({ op: 'allreduce', reduce: 'sum', dtype: 'f32', count: 1024, send: buf, recv: buf });
      // The work was really enqueued and completed: the last call's value is in the buffer.
      const out = new Uint8Array(4096);
      driver.memcpyDtoH(out, buf);
      expect(out[0]).toBe(sut.calls.length & 0xff);
    } finally {
      driver.memFree(buf);
    }
  });

  it('a forced algorithm and avg are passed through and reported', async () => {
    const sut = standIn();
    const buf = driver.memAlloc(1 << 20);
    try {
      const t = await timeCollective(driver, sut, buf, 1 << 20, { iters: 1, warmup: 0, runs: 1, reduce: 'avg', algorithm: 'pipeline', timeoutMs: 10_000 });
      expect(t.algorithm).toBe('pipeline');
      expect(sut.calls.every((c) => c.algorithm === 'pipeline' && c.reduce === 'avg')).toBe(true);
    } finally {
      driver.memFree(buf);
    }
  });

  it.skipIf(simCaptures)('graph mode where the driver cannot capture: the driver error comes out', async () => {
    const sut = standIn();
    const buf = driver.memAlloc(64);
    try {
      await expect(timeCollective(driver, sut, buf, 64, { iters: 2, warmup: 1, runs: 1, graph: true, timeoutMs: 10_000 })).rejects.toThrow(
        /cuStreamBeginCapture/,
      );
    } finally {
      driver.memFree(buf);
    }
  });
});
