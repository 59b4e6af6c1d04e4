/**
 * Every collective, by every algorithm, against a reference computed on the
 * host: random rank counts, dtypes, counts (0, not divisible by N, larger
 * than the scratch so calls go in pieces), pointer offsets, in and out of
 * place. The ranks are communicators in one process, each on its own
 * simulated driver, so the kernels that run are the TypeScript twins of the
 * shipped PTX (checked bit for bit against an independent reference in
 * test/unit/kernels/). The reference here reduces with the twin's core.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { afterAll, describe, expect, it } from 'vitest';
import type { Algorithm } from '../../../src/collectives/communicator.js';
import { DTYPE_BYTES, DTYPES, dtypeOpSupported, REDUCE_OPS, type DType, type ReduceOp } from '../../../src/kernels/dtypes.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

const worlds = new Map<string, Promise<World>>();
/** Worlds are kept across runs (making one costs more than a call): small scratch, so larger counts go in pieces. */
function world(n: number, staged: boolean): Promise<World> {
  const key = `${n}:${staged}`;
  let w = worlds.get(key);
  if (!w) worlds.set(key, (w = makeWorld(n, { scratchBytes: 256 * n, ipcOpenFails: staged, timeoutMs: 20_000 })));
  return w;
}
afterAll(async () => {
  for (const w of worlds.values()) await (await w).close();
});

const OPS = ['allreduce', 'broadcast', 'reduce', 'allgather', 'reduce-scatter', 'alltoall'] as const;
type Op = (typeof OPS)[number];

interface Case {
  op: Op;
  n: number;
  dtype: DType;
  rop: ReduceOp;
  count: number;
  root: number;
  inPlace: boolean;
  offset: number;
  algorithm: Exclude<Algorithm, 'local'> | undefined;
  seed: number;
}

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    op: fc.constantFrom(...OPS),
    n: fc.integer({ min: 1, max: 4 }),
    dtype: fc.constantFrom(...DTYPES),
    rop: fc.constantFrom(...REDUCE_OPS),
    count: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 9 }), fc.integer({ min: 10, max: 700 }), fc.integer({ min: 10, max: 700 })),
    root: fc.nat(3),
    inPlace: fc.boolean(),
    offset: fc.nat(5),
    algorithm: fc.constantFrom(undefined, 'one-shot', 'one-shot-ll', 'two-shot', 'ce-pipeline', 'staged'),
    seed: fc.integer(),
  })
  .filter((c) => dtypeOpSupported(c.dtype, c.rop)) // the other pairs are refused (dtypes.ts checkDtypeOp)
  .map((c) => ({ ...c, root: c.root % c.n }));

/** premul's factor in these cases: a power of two, so every product is exact. */
const PREMUL_FACTOR = 0.5;
const factorOf = (c: Case): { factor?: number } => (c.rop === 'premul' ? { factor: PREMUL_FACTOR } : {});

function reduced(c: Case, blocks: Uint8Array[], count: number): Uint8Array {
  const out = new Uint8Array(count * DTYPE_BYTES[c.dtype]);
  reduceInto(c.rop === 'premul' ? { op: 'premul', factor: PREMUL_FACTOR } : c.rop, c.dtype, out, blocks, count);
  return out;
}

/** Sizes in elements of each rank's input and output. */
function shape(c: Case): { inCount: number; outCount: number } {
  const { n, count } = c;
  switch (c.op) {
    case 'allgather':
      return { inCount: count, outCount: n * count };
    case 'reduce-scatter':
      return { inCount: n * count, outCount: count };
    case 'alltoall':
      return { inCount: n * count, outCount: n * count };
    default:
      return { inCount: count, outCount: count };
  }
}

async function runCase(c: Case): Promise<void> {
  const staged = c.algorithm === 'staged';
  const w = await world(c.n, staged);
  const es = DTYPE_BYTES[c.dtype];
  const { inCount, outCount } = shape(c);
  const inputs = [...Array(c.n).keys()].map((r) => elements(c.dtype, inCount, c.seed + r * 7919));
  const B = (x: number) => BigInt(x * es);
  const bufs = w.sides.map((side, r) => {
    const d = side.driver;
    // One allocation per rank, the buffers `offset` elements into it.
    const span = (inCount + outCount + 2 * c.offset + 2) * es;
    const base = d.memAlloc(Math.max(span, 8));
    d.memsetD8(base, 0xee, Math.max(span, 8));
    let send = base + B(c.offset);
    let recv = send + B(inCount + c.offset);
    if (c.inPlace) {
      if (c.op === 'allgather') send = recv + B(r * c.count);
      else if (c.op === 'reduce-scatter') recv = send + B(r * c.count);
      else recv = send;
    }
    if (inputs[r]!.byteLength > 0) d.memcpyHtoD(send, inputs[r]!);
    return { base, send, recv };
  });
  const results = await Promise.all(
    w.comms.map((comm, r) => {
      const { send, recv } = bufs[r]!;
      const a = { send, recv, count: c.count, dtype: c.dtype, algorithm: c.algorithm };
      switch (c.op) {
        case 'allreduce':
          return comm.allreduce({ ...a, op: c.rop, ...factorOf(c) });
        case 'broadcast':
          return comm.broadcast({ ...a, send: c.inPlace ? recv : send, root: c.root });
        case 'reduce':
          return comm.reduce({ ...a, op: c.rop, root: c.root, ...factorOf(c) });
        case 'allgather':
          return comm.allgather(a);
        case 'reduce-scatter':
          return comm.reduceScatter({ ...a, op: c.rop, ...factorOf(c) });
        case 'alltoall':
          return comm.alltoall(a);
      }
    }),
  );
  for (const res of results) {
    if (c.n === 1) expect(res.algorithm).toBe('local');
    else if (staged) expect(res.algorithm).toBe('staged');
    else if (c.op === 'allreduce' && c.algorithm) expect(res.algorithm).toBe(c.algorithm);
  }
  const block = (r: number, k: number) => inputs[r]!.subarray(k * c.count * es, (k + 1) * c.count * es);
  for (let r = 0; r < c.n; r++) {
    let want: Uint8Array | undefined;
    switch (c.op) {
      case 'allreduce':
        want = reduced(c, inputs, c.count);
        break;
      case 'broadcast':
        want = inputs[c.root]!;
        break;
      case 'reduce':
        want = r === c.root ? reduced(c, inputs, c.count) : undefined;
        break;
      case 'allgather':
        want = Buffer.concat(inputs);
        break;
      case 'reduce-scatter':
        want = reduced(
          c,
          inputs.map((_, k) => block(k, r)),
          c.count,
        );
        break;
      case 'alltoall':
        want = Buffer.concat(inputs.map((_, k) => block(k, r)));
        break;
    }
    const d = w.sides[r]!.driver;
    if (want && outCount > 0) {
      const got = new Uint8Array(outCount * es);
      d.memcpyDtoH(got, bufs[r]!.recv);
      expect(Buffer.from(got).equals(Buffer.from(want)), `rank ${r} ${JSON.stringify(c)}`).toBe(true);
    }
    // Nothing written before the buffers (the offset's guard bytes).
    if (c.offset > 0) {
      const guard = new Uint8Array(c.offset * es);
      d.memcpyDtoH(guard, bufs[r]!.base);
      expect(guard.every((b) => b === 0xee)).toBe(true);
    }
    d.memFree(bufs[r]!.base);
  }
}

describe('collectives against a reference, in one process on the simulated driver', () => {
  propTest.prop([caseArb], { numRuns: 300, endOnFailure: true })('every op, dtype, count, algorithm, offset, in and out of place', async (c) => {
    await runCase(c);
  });

  // The algorithms share scratch regions (two-shot's B is the pipeline's reduced landing, one-shot's
  // kernel flags sit beside the pipeline's): calls queued back to back, never awaited in between, on
  // one stream or alternating between two, must each see only their own data.
  propTest.prop(
    [
      fc.record({
        n: fc.integer({ min: 2, max: 4 }),
        twoStreams: fc.boolean(),
        calls: fc.array(
          fc.record({
            algorithm: fc.constantFrom('one-shot', 'one-shot-ll', 'two-shot', 'ce-pipeline'),
            count: fc.integer({ min: 1, max: 900 }),
            inPlace: fc.boolean(),
            seed: fc.integer(),
          }),
          { minLength: 2, maxLength: 6 },
        ),
      }),
    ],
    { numRuns: 40, endOnFailure: true },
  )('allreduce by mixed algorithms queued back to back: every result right', async ({ n, twoStreams, calls }) => {
    const w = await world(n, false);
    const streams = w.sides.map((s) => [s.driver.streamCreate(), s.driver.streamCreate()] as const);
    const bufs = calls.map((c) => w.sides.map((s) => ({ send: s.driver.memAlloc(c.count * 4), recv: s.driver.memAlloc(c.count * 4) })));
    const inputs = calls.map((c) => w.sides.map((_, r) => elements('f32', c.count, c.seed + r * 7919)));
    calls.forEach((_, i) => w.sides.forEach((s, r) => s.driver.memcpyHtoD(bufs[i]![r]!.send, inputs[i]![r]!)));
    const pending = calls.flatMap((c, i) =>
      w.comms.map((comm, r) => {
        const b = bufs[i]![r]!;
        return comm.allreduce({
          send: b.send,
          recv: c.inPlace ? b.send : b.recv,
          count: c.count,
          dtype: 'f32',
          op: 'sum',
          algorithm: c.algorithm,
          stream: streams[r]![twoStreams ? i % 2 : 0],
        });
      }),
    );
    const results = await Promise.all(pending);
    expect(results.map((x) => x.algorithm)).toEqual(calls.flatMap((c) => w.comms.map(() => c.algorithm)));
    calls.forEach((c, i) => {
      const want = new Uint8Array(c.count * 4);
      reduceInto('sum', 'f32', want, inputs[i]!, c.count);
      w.sides.forEach((s, r) => {
        const got = new Uint8Array(c.count * 4);
        const b = bufs[i]![r]!;
        s.driver.memcpyDtoH(got, c.inPlace ? b.send : b.recv);
        expect(Buffer.from(got).equals(Buffer.from(want)), `call ${i} (${c.algorithm}), rank ${r}`).toBe(true);
        s.driver.memFree(b.send);
        s.driver.memFree(b.recv);
      });
    });
    w.sides.forEach((s, r) => streams[r]!.forEach((st) => s.driver.streamDestroy(st)));
  });

  it('allreduce picks one-shot, two-shot and the copy-engine pipeline by size, and says so in stats', async () => {
    const w = await makeWorld(2, { scratchBytes: 4096, oneShotMaxBytes: 64, twoShotMaxBytes: 1024 });
    try {
      const algs: string[] = [];
      for (const count of [4, 100, 1000]) {
        const bufs = w.sides.map((s) => s.driver.memAlloc(count * 4));
        const res = await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count, dtype: 'f32', op: 'sum' })));
        algs.push(res[0]!.algorithm);
        w.sides.forEach((s, r) => s.driver.memFree(bufs[r]!));
      }
      // 2 ranks: the smallest goes by the LL one-shot (measured faster there), within the one-shot's bound.
      expect(algs).toEqual(['one-shot-ll', 'two-shot', 'ce-pipeline']);
      const st = w.comms[0]!.stats();
      expect(st.byAlgorithm).toEqual({ 'one-shot-ll': 1, 'two-shot': 1, 'ce-pipeline': 1 });
      // The LL one-shot reads its own input where it is: nothing; the two-shot kernel copies rank 0's share of peers'
      // results out of B (the 48 elements of rank 1's part: parts are 52, whole 16-byte vectors); the
      // pipeline copies straight from the caller's input into the peers' landing slots: nothing.
      expect(st.scratchCopyBytes).toBe(48 * 4);
      expect(st.mapped).toBe(true);
      expect(st.steps).toBe('device');
    } finally {
      await w.close();
    }
  });

  it('by default one-shot goes up to 2 MiB / N (each rank sends N - 1 copies), two-shot above', async () => {
    for (const n of [2, 4]) {
      const w = await makeWorld(n, { scratchBytes: 4096 });
      try {
        const max = (2 << 20) / n;
        expect(w.comms.map((c) => [c.algorithmFor(max), c.algorithmFor(max + 1)])).toEqual(w.comms.map(() => ['one-shot', 'two-shot']));
      } finally {
        await w.close();
      }
    }
  });

  it('with IPC refused every call is staged, and stats say why', async () => {
    const w = await world(3, true);
    expect(w.comms[1]!.stats().mapped).toBe(false);
    expect(w.comms[1]!.stats().stagedReason).toMatch(/cannot open rank/);
    expect(w.comms[1]!.stats().steps).toBe('host');
  });
});
