/**
 * The bench's smcuda side of the collectives suite (under-test.ts): the
 * Communicator plugged in, on two simulated drivers in this process. A call
 * queued through `collectiveUnderTest` is on the stream when it returns
 * (the bench times calls back to back), the result is right, and
 * `timeCollective` runs eagerly and from a captured graph.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { COLLECTIVES_UNDER_TEST, timeCollective, type CollectiveUnderTest } from '../../../src/bench/under-test.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-sut-'));
const drivers = [0, 1].map(() => new SimulatedCudaDriver());
let suts: CollectiveUnderTest[] = [];
afterAll(async () => {
  await Promise.all(suts.map((s) => s.close()));
  for (const d of drivers) d.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the Communicator as the collectives suite's smcuda side (simulated driver)", () => {
  it('opens, queues an allreduce on the stream at once, with the right result; times eager and graph runs', async () => {
    suts = await Promise.all(
      drivers.map((driver, rank) => COLLECTIVES_UNDER_TEST.factory!({ driver, rank, ranks: 2, device: rank, dir, token: 'a'.repeat(32), timeoutMs: 20_000 })),
    );
    expect(suts.every((s) => s.capturable)).toBe(true);
    expect(suts[0]!.algorithmFor?.(8, 'f32')).toBe('one-shot-ll'); // 2 ranks, 8 B: the LL one-shot (communicator.ts, LL_AUTO_MAX_BYTES)
    const count = 100;
    const bufs = drivers.map((d, r) => {
      const p = d.memAlloc(count * 4);
      d.memcpyHtoD(p, new Uint8Array(new Float32Array(count).fill(r + 1).buffer));
      return p;
    });
    const streams = drivers.map((d) => d.streamCreate());
    await Promise.all(
      suts.map((s, r) => s.collectiveUnderTest({ op: 'allreduce', reduce: 'sum', dtype: 'f32', count, send: bufs[r]!, recv: bufs[r]!, stream: streams[r]! })),
    );
    // Queued already: an event recorded now completes after the call.
    await Promise.all(
      drivers.map(async (d, r) => {
        const e = d.eventCreate({ disableTiming: true });
        d.eventRecord(e, streams[r]!);
        await d.whenComplete(e);
        const got = new Uint8Array(count * 4);
        d.memcpyDtoH(got, bufs[r]!);
        expect([...new Float32Array(got.buffer)].every((x) => x === 3)).toBe(true);
        d.eventDestroy(e);
      }),
    );
    for (const graph of [false, true]) {
      const t = await Promise.all(suts.map((s, r) => timeCollective(drivers[r]!, s, bufs[r]!, 64, { runs: 3, iters: 4, warmup: 1, timeoutMs: 20_000, graph })));
      for (const x of t) {
        expect(x.runsUs).toHaveLength(3);
        expect(x.algorithm).toBe('one-shot-ll');
      }
    }
  });
});
