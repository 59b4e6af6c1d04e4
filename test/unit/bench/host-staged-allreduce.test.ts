/**
 * Seed 003's host-staged allreduce, the collectives suite's baseline, on the
 * simulated driver: it computes the right sum and average (against a
 * sequential f32 reference), for any rank count and element count (odd ones
 * included), pageable and pinned, call after call through the same segment;
 * a rank left alone fails with BenchStuckError instead of hanging; and two
 * bench worker processes reproduce seed 003's check.
 */
import { fc, test } from '@fast-check/vitest';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { openDriver } from '../../../src/cuda/open-driver.js';
import { HostStagedAllreduce, seedAverage, seedGradient } from '../../../src/bench/host-staged-allreduce.js';
import { BENCH_WORKER_ENV, type BenchCommand, type BenchWorkerConfig, type BenchWorkerInfo } from '../../../src/bench/protocol.js';
import { BenchStuckError } from '../../../src/bench/stuck.js';
import { WorkerGroup } from '../../../src/bench/worker-group.js';
import type { StagedAllreduceResult } from '../../../src/bench/worker-suites.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let driver: CudaDriver;
beforeAll(async () => {
  driver = (await openDriver({ driver: 'sim' })).driver;
  driver.setDevice(0);
});
afterAll(() => driver.close());

/** `ranks` instances in this process (their waits yield to each other), each over its own device buffer. */
async function allreduce(inputs: Float32Array[], o: { pinned: boolean; reduce: 'sum' | 'avg'; calls: number }): Promise<Float32Array[]> {
  const ranks = inputs.length;
  const bytes = inputs[0]!.length * 4;
  const first = HostStagedAllreduce.create(driver, ranks, bytes, 10_000);
  const all = [first];
  const devs: bigint[] = [];
  try {
    for (let r = 1; r < ranks; r++) all.push(HostStagedAllreduce.open(driver, first.segmentName, r, ranks, bytes, 10_000));
    first.unlink();
    for (const x of inputs) {
      const p = driver.memAlloc(Math.max(4, bytes));
      devs.push(p);
      if (bytes > 0) driver.memcpyHtoD(p, new Uint8Array(x.buffer, x.byteOffset, bytes));
    }
    await Promise.all(all.map((a, r) => a.run(devs[r]!, bytes, { pinned: o.pinned, reduce: o.reduce, iters: o.calls, warmup: 0 })));
    return devs.map((p) => {
      const out = new Float32Array(bytes / 4);
      if (bytes > 0) driver.memcpyDtoH(new Uint8Array(out.buffer), p);
      return out;
    });
  } finally {
    for (const a of all) a.close();
    for (const p of devs) driver.memFree(p);
  }
}

/** The f32 reference: sum in rank order, rounded to f32 at each step, then / N for avg. */
function reference(inputs: Float32Array[], reduce: 'sum' | 'avg', calls: number): Float32Array {
  let cur = inputs.map((x) => Float32Array.from(x));
  for (let c = 0; c < calls; c++) {
    const out = Float32Array.from(cur[0]!);
    for (let r = 1; r < cur.length; r++) for (let i = 0; i < out.length; i++) out[i] = Math.fround(out[i]! + cur[r]![i]!);
    if (reduce === 'avg') for (let i = 0; i < out.length; i++) out[i] = Math.fround(out[i]! / cur.length);
    cur = cur.map(() => out);
  }
  return cur[0]!;
}

describe('host-staged allreduce (seed 003) in one process', () => {
  test.prop(
    [
      fc.integer({ min: 1, max: 4 }).chain((ranks) =>
        fc.tuple(
          fc.constant(ranks),
          fc
            .integer({ min: 0, max: 300 })
            .chain((count) =>
              fc.array(fc.float32Array({ minLength: count, maxLength: count, noNaN: true, min: -1e6, max: 1e6 }), { minLength: ranks, maxLength: ranks }),
            ),
        ),
      ),
      fc.boolean(),
      fc.constantFrom('sum' as const, 'avg' as const),
      fc.integer({ min: 1, max: 3 }),
    ],
    { numRuns: 25 },
  )('every rank gets the f32 reduction of all inputs, call after call', async ([, inputs], pinned, reduce, calls) => {
    const got = await allreduce(inputs, { pinned, reduce, calls });
    const want = reference(inputs, reduce, calls);
    for (const g of got) expect(Array.from(g)).toEqual(Array.from(want));
  });

  it("reproduces seed 003's average: (N-1)/2 + 0.001 i on every rank", async () => {
    const count = 1001;
    const got = await allreduce(
      [0, 1, 2].map((r) => seedGradient(r, count)),
      { pinned: false, reduce: 'avg', calls: 1 },
    );
    for (const g of got) for (const i of [0, 500, 1000]) expect(g[i]).toBeCloseTo(seedAverage(3, i), 4);
  });

  it('a rank whose peer never comes fails with BenchStuckError, not a hang', async () => {
    const a = HostStagedAllreduce.create(driver, 2, 64, 200);
    const p = driver.memAlloc(64);
    try {
      await expect(a.run(p, 64, { pinned: false, reduce: 'sum', iters: 1, warmup: 0 })).rejects.toBeInstanceOf(BenchStuckError);
    } finally {
      a.unlink();
      a.close();
      driver.memFree(p);
    }
  });

  it('checks its arguments before touching memory', () => {
    expect(() => HostStagedAllreduce.create(driver, 0, 64)).toThrow(RangeError);
    expect(() => HostStagedAllreduce.open(driver, '/smcuda-stg-none', 2, 2, 64)).toThrow(/rank must be an integer from 0 to 1/);
  });
});

describe('host-staged allreduce between two bench worker processes (sim driver)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-staged-test-'));
  let g: WorkerGroup<BenchCommand, BenchWorkerInfo> | undefined;
  afterAll(async () => {
    await g?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("each rank verifies seed 003's average, pageable and pinned, at odd and even sizes", async () => {
    const worker = fileURLToPath(new URL('../../../dist/src/bench/worker.js', import.meta.url));
    const configs: BenchWorkerConfig[] = [0, 1].map((rank) => ({ rank: rank as 0 | 1, device: rank, driver: 'sim', dir, token: 'staged-test' }));
    g = await WorkerGroup.start<BenchCommand, BenchWorkerInfo>(worker, configs, { envVar: BENCH_WORKER_ENV });
    const maxBytes = 64 << 10;
    const { segment } = await g.call<{ segment: string }>(0, { op: 'staged-create', ranks: 2, maxBytes, timeoutMs: 20_000 });
    await g.call(1, { op: 'staged-open', segment, ranks: 2, maxBytes, timeoutMs: 20_000 });
    await g.call(0, { op: 'staged-unlink' });
    for (const pinned of [false, true]) {
      for (const bytes of [4, 12, 4096, maxBytes]) {
        const cmd: BenchCommand = { op: 'staged-allreduce', bytes, pinned, reduce: 'sum', verify: true, iters: 3, warmup: 1 };
        const rs = await Promise.all([g.call<StagedAllreduceResult>(0, cmd), g.call<StagedAllreduceResult>(1, cmd)]);
        for (const r of rs) {
          expect(r, `${bytes} B ${pinned ? 'pinned' : 'pageable'}`).toMatchObject({ verified: true, mismatches: 0 });
          expect(r.samples).toHaveLength(3);
          expect(r.samples.every((x) => x > 0)).toBe(true);
          expect(r.breakdown.reduceUs).toBeLessThanOrEqual(r.breakdown.exchangeUs);
        }
      }
    }
    await Promise.all([g.call(0, { op: 'staged-close' }), g.call(1, { op: 'staged-close' })]);
  });
});
