/**
 * gather, scatter, allgatherv, reduce-scatterv and alltoallv on the
 * simulated driver: every dtype, every element checked on every rank
 * against a host reference, on mapped scratch with device steps, staged
 * (no mapping) and forced staged on mapped scratch, with scratch small
 * enough that calls go in pieces; uneven counts with zero-count ranks,
 * roots other than 0, in place, alltoallv with zero counts and a skewed
 * (MoE-like) pattern, every reduction reduce-scatterv takes.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { DeviceSync } from '../../../src/collectives/device-sync.js';
import { stepSlot } from '../../../src/collectives/uneven.js';
import type { Communicator } from '../../../src/collectives/communicator.js';
import type { DevicePtr, StreamMemOp } from '../../../src/cuda/driver.js';
import { DTYPE_BYTES, DTYPES, dtypeOpSupported, REDUCE_OPS, type DType, type ReduceOp } from '../../../src/kernels/dtypes.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

type Mode = 'device' | 'staged' | 'forced-staged';
const worlds = new Map<string, Promise<World>>();
/** Small scratch (pieces): 256 bytes a rank and region, so a landing slot is 256 bytes. */
function world(n: number, mode: Mode): Promise<World> {
  const key = `${n}:${mode}`;
  let w = worlds.get(key);
  if (!w)
    worlds.set(
      key,
      (w = makeWorld(n, {
        scratchBytes: 256 * n,
        ipcOpenFails: mode === 'staged',
        timeoutMs: 20_000,
        ...(mode === 'forced-staged' ? { algorithm: 'staged' as const } : {}),
      })),
    );
  return w;
}
afterAll(async () => {
  for (const w of worlds.values()) await (await w).close();
});

const PREMUL = 0.5;
const argOf = (op: ReduceOp) => (op === 'premul' ? { op: 'premul' as const, factor: PREMUL } : op);

/** A buffer of `count` elements on every rank (with a guard after it), filled with 0xee. */
function alloc(w: World, count: number[] | number, es: number): DevicePtr[] {
  return w.sides.map((s, r) => {
    const n = (Array.isArray(count) ? count[r]! : count) * es + 64;
    const p = s.driver.memAlloc(n);
    s.driver.memsetD8(p, 0xee, n);
    return p;
  });
}

function read(w: World, r: number, p: DevicePtr, bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  if (bytes > 0) w.sides[r]!.driver.memcpyDtoH(out, p);
  return out;
}

function write(w: World, r: number, p: DevicePtr, data: Uint8Array): void {
  if (data.byteLength > 0) w.sides[r]!.driver.memcpyHtoD(p, data);
}

function expectBytes(got: Uint8Array, want: Uint8Array, what: string): void {
  expect(got.byteLength, what).toBe(want.byteLength);
  const at = got.findIndex((b, i) => b !== want[i]);
  expect(at, `${what}: first differing byte`).toBe(-1);
}

const modes: Mode[] = ['device', 'staged', 'forced-staged'];

describe.each(modes)('%s', (mode) => {
  const N = 3;

  it('algorithm and steps are what the mode says', async () => {
    const w = await world(N, mode);
    expect(w.comms[0]!.stats().steps).toBe(mode === 'staged' ? 'host' : 'device');
  });

  it.each(DTYPES)('gather and scatter, root 2 and 1, %s (pieces)', async (dtype) => {
    const w = await world(N, mode);
    const es = DTYPE_BYTES[dtype];
    const count = 150;
    const inputs = w.comms.map((_, r) => elements(dtype, count, r * 31 + es));
    const send = alloc(w, count, es);
    const recv = alloc(w, N * count, es);
    w.comms.forEach((_, r) => write(w, r, send[r]!, inputs[r]!));
    const root = 2;
    const res = await Promise.all(w.comms.map((c, r) => c.gather({ send: send[r]!, recv: recv[r]!, count, dtype, root })));
    expect(res[0]!.algorithm).toBe(mode === 'device' ? 'one-shot' : 'staged');
    expectBytes(read(w, root, recv[root]!, N * count * es), Buffer.concat(inputs), `gather root ${root}`);
    // Off the root, recv is not written.
    expect(read(w, 0, recv[0]!, 4)).toEqual(new Uint8Array([0xee, 0xee, 0xee, 0xee]));

    const all = elements(dtype, N * count, 77 + es);
    const rootSend = alloc(w, N * count, es);
    write(w, 1, rootSend[1]!, all);
    const out = alloc(w, count, es);
    await Promise.all(w.comms.map((c, r) => c.scatter({ ...(r === 1 ? { send: rootSend[1]! } : {}), recv: out[r]!, count, dtype, root: 1 })));
    w.comms.forEach((_, r) => expectBytes(read(w, r, out[r]!, count * es), all.subarray(r * count * es, (r + 1) * count * es), `scatter rank ${r}`));
  });

  it.each(DTYPES)('allgatherv with a zero-count rank, packed and with gaps, %s', async (dtype) => {
    const w = await world(N, mode);
    const es = DTYPE_BYTES[dtype];
    for (const [counts, displs] of [
      [[130, 0, 7], undefined],
      [[0, 0, 0], undefined],
      [
        [3, 200, 0],
        [210, 5, 0],
      ],
    ] as Array<[number[], number[] | undefined]>) {
      const d = displs ?? [0, counts[0]!, counts[0]! + counts[1]!];
      const extent = Math.max(...counts.map((c, k) => (c > 0 ? d[k]! + c : 0)));
      const inputs = counts.map((c, r) => elements(dtype, c, r * 7 + c));
      const send = alloc(w, counts, es);
      const recv = alloc(w, extent, es);
      w.comms.forEach((_, r) => write(w, r, send[r]!, inputs[r]!));
      await Promise.all(w.comms.map((c, r) => c.allgatherv({ send: send[r]!, recv: recv[r]!, counts, ...(displs ? { displs } : {}), dtype })));
      for (let r = 0; r < N; r++) {
        const got = read(w, r, recv[r]!, extent * es + 8);
        const want = new Uint8Array(extent * es + 8).fill(0xee);
        counts.forEach((_, k) => want.set(inputs[k]!, d[k]! * es));
        expectBytes(got, want, `allgatherv ${counts} rank ${r}`);
      }
    }
  });

  it.each(['f32', 'u8', 'f64'] as const)(
    'in place: allgatherv (send inside recv at displs[rank]), gather at the root and scatter at the root, %s',
    async (dtype) => {
      const w = await world(N, mode);
      const es = DTYPE_BYTES[dtype];
      const counts = [70, 0, 200];
      const displs = [205, 0, 3];
      const recv = alloc(w, 300, es);
      const inputs = counts.map((c, r) => elements(dtype, c, r + 11));
      w.comms.forEach((_, r) => write(w, r, recv[r]! + BigInt(displs[r]! * es), inputs[r]!));
      await Promise.all(w.comms.map((c, r) => c.allgatherv({ send: recv[r]! + BigInt(displs[r]! * es), recv: recv[r]!, counts, displs, dtype })));
      for (let r = 0; r < N; r++) {
        const want = new Uint8Array(275 * es).fill(0xee);
        counts.forEach((_, k) => want.set(inputs[k]!, displs[k]! * es));
        expectBytes(read(w, r, recv[r]!, 275 * es), want, `allgatherv in place rank ${r}`);
      }
      const count = 90;
      const g = w.comms.map((_, r) => elements(dtype, count, r + 21));
      const buf = alloc(w, N * count, es);
      const root = 1;
      // The root's input already sits in its block of recv; the others send from their own buffers.
      w.comms.forEach((_, r) => write(w, r, r === root ? buf[r]! + BigInt(root * count * es) : buf[r]!, g[r]!));
      await Promise.all(
        w.comms.map((c, r) =>
          c.gather({ send: r === root ? buf[r]! + BigInt(root * count * es) : buf[r]!, ...(r === root ? { recv: buf[r]! } : {}), count, dtype, root }),
        ),
      );
      expectBytes(read(w, root, buf[root]!, N * count * es), Buffer.concat(g), 'gather in place');
      const out = alloc(w, count, es);
      await Promise.all(
        w.comms.map((c, r) =>
          c.scatter({ ...(r === root ? { send: buf[r]! } : {}), recv: r === root ? buf[r]! + BigInt(root * count * es) : out[r]!, count, dtype, root }),
        ),
      );
      for (let r = 0; r < N; r++)
        expectBytes(read(w, r, r === root ? buf[r]! + BigInt(root * count * es) : out[r]!, count * es), g[r]!, `scatter in place rank ${r}`);
    },
  );

  it.each(DTYPES)('reduce-scatterv with every op %s takes, a zero-count rank, in place on one rank', async (dtype) => {
    const w = await world(N, mode);
    const es = DTYPE_BYTES[dtype];
    const counts = [90, 0, 140];
    const total = counts.reduce((a, b) => a + b, 0);
    const displs = [0, 90, 90];
    for (const op of REDUCE_OPS.filter((o) => dtypeOpSupported(dtype, o))) {
      const inputs = w.comms.map((_, r) => elements(dtype, total, r * 101 + op.length));
      const send = alloc(w, total, es);
      const recv = alloc(w, Math.max(...counts), es);
      w.comms.forEach((_, r) => write(w, r, send[r]!, inputs[r]!));
      // Rank 2 in place: its result lands over its own block of send.
      const recvOf = (r: number) => (r === 2 ? send[r]! + BigInt(displs[r]! * es) : recv[r]!);
      await Promise.all(
        w.comms.map((c, r) => c.reduceScatterv({ send: send[r]!, recv: recvOf(r), counts, displs, dtype, op, ...(op === 'premul' ? { factor: PREMUL } : {}) })),
      );
      for (let r = 0; r < N; r++) {
        const blocks = inputs.map((x) => x.subarray(displs[r]! * es, (displs[r]! + counts[r]!) * es));
        const want = new Uint8Array(counts[r]! * es);
        reduceInto(argOf(op), dtype, want, blocks, counts[r]!);
        expectBytes(read(w, r, recvOf(r), counts[r]! * es), want, `reduce-scatterv ${op} rank ${r}`);
      }
    }
  });

  it.each(DTYPES)('alltoallv, uneven with zero pairs and packed displacements, %s', async (dtype) => {
    const w = await world(N, mode);
    await alltoallvCase(w, dtype, [
      [5, 0, 300],
      [0, 0, 70],
      [129, 1, 0],
    ]);
  });
});

/** Runs alltoallv of `matrix` (matrix[i][j]: elements rank i sends rank j), receive blocks in reverse rank order, and checks every rank's recv. */
async function alltoallvCase(w: World, dtype: DType, matrix: number[][], comms: Communicator[] = w.comms): Promise<void> {
  const N = comms.length;
  const es = DTYPE_BYTES[dtype];
  const sendCounts = matrix;
  const recvCounts = [...Array(N).keys()].map((r) => matrix.map((row) => row[r]!));
  const sendTotal = sendCounts.map((row) => row.reduce((a, b) => a + b, 0));
  const recvTotal = recvCounts.map((col) => col.reduce((a, b) => a + b, 0));
  // recv blocks in reverse rank order, one element apart: displacements that are not packed.
  const recvDispls = recvCounts.map((col) => {
    let at = 0;
    const d = Array<number>(N);
    for (let k = N - 1; k >= 0; k--) {
      d[k] = at;
      at += col[k]! + 1;
    }
    return d;
  });
  const recvExtent = recvTotal.map((t) => t + N);
  const inputs = sendTotal.map((t, r) => elements(dtype, t, r * 13 + t));
  const send = alloc(w, sendTotal, es);
  const recv = alloc(w, recvExtent, es);
  comms.forEach((_, r) => write(w, r, send[r]!, inputs[r]!));
  await Promise.all(
    comms.map((c, r) =>
      c.alltoallv({ send: send[r]!, recv: recv[r]!, sendCounts: sendCounts[r]!, recvCounts: recvCounts[r]!, recvDispls: recvDispls[r]!, dtype }),
    ),
  );
  for (let r = 0; r < N; r++) {
    const want = new Uint8Array(recvExtent[r]! * es).fill(0xee);
    for (let j = 0; j < N; j++) {
      const from = sendCounts[j]!.slice(0, r).reduce((a, b) => a + b, 0);
      want.set(inputs[j]!.subarray(from * es, (from + sendCounts[j]![r]!) * es), recvDispls[r]![j]! * es);
    }
    expectBytes(read(w, r, recv[r]!, recvExtent[r]! * es), want, `alltoallv rank ${r}`);
  }
}

describe('alltoallv patterns', () => {
  it("alltoallv's handshake flags are device-sync.ts's step slots (the layout the steps and the poison use)", () => {
    const blockOf = (k: number) => 0x1000_0000n * BigInt(k + 1);
    for (const [rank, size] of [
      [0, 2],
      [1, 3],
      [5, 8],
    ] as const) {
      const ds = new DeviceSync({ driver: undefined } as never, rank, size, blockOf);
      const others = [...Array(size).keys()].filter((k) => k !== rank);
      for (const p of [0, 1]) {
        const ops = ds.stepOps(p);
        // A step: a signal into every peer's slot [p][rank], then a wait and a reset of own slot [p][k] per peer.
        const addr = (op: StreamMemOp | undefined) => (op && 'addr' in op ? op.addr : undefined);
        others.forEach((k, i) => {
          expect(addr(ops[i])).toBe(stepSlot(blockOf(k), size, p, rank));
          expect(addr(ops[others.length + i])).toBe(stepSlot(blockOf(rank), size, p, k));
        });
      }
    }
  });

  it.each(modes)('%s: every count zero, then a skewed MoE-like pattern on 4 ranks (rank 1 receives most, in many pieces)', async (mode) => {
    const w = await world(4, mode);
    await alltoallvCase(w, 'f32', [
      [0, 0, 0, 0],
      [0, 0, 0, 0],
      [0, 0, 0, 0],
      [0, 0, 0, 0],
    ]);
    await alltoallvCase(w, 'bf16', [
      [3, 900, 0, 1],
      [0, 1200, 2, 0],
      [1, 700, 0, 0],
      [0, 1000, 5, 9],
    ]);
  });

  propTest.prop(
    [
      fc.integer({ min: 2, max: 4 }).chain((n) =>
        fc.record({
          n: fc.constant(n),
          mode: fc.constantFrom(...modes),
          dtype: fc.constantFrom(...DTYPES),
          // Each pair's count: often none, often within a piece, sometimes many pieces.
          matrix: fc.array(fc.array(fc.oneof(fc.constant(0), fc.nat(40), fc.integer({ min: 100, max: 700 })), { minLength: n, maxLength: n }), {
            minLength: n,
            maxLength: n,
          }),
        }),
      ),
    ],
    { numRuns: 30 },
  )('alltoallv of random counts (random ranks, dtype, path): every element on every rank', async ({ n, mode, dtype, matrix }) => {
    await alltoallvCase(await world(n, mode), dtype, matrix);
  });

  it('mapped scratch without stream memory operations (host steps): gather, scatter, allgatherv and reduce-scatterv step through the host, alltoallv is staged; every element checked', async () => {
    const real = SimulatedCudaDriver.prototype.gpuDrivenStatus;
    const spy = vi.spyOn(SimulatedCudaDriver.prototype, 'gpuDrivenStatus').mockImplementation(function (this: SimulatedCudaDriver) {
      return { ...real.call(this), streamMemOps: false, memOps64: false };
    });
    let w: World;
    try {
      w = await makeWorld(3, { scratchBytes: 768, timeoutMs: 20_000 });
    } finally {
      spy.mockRestore();
    }
    try {
      expect(w.comms[0]!.stats()).toMatchObject({ mapped: true, steps: 'host' });
      const es = 2;
      const counts = [300, 0, 5];
      const inputs = counts.map((c, r) => elements('bf16', c, r + 3));
      const send = alloc(w, 300, es);
      const recv = alloc(w, 3 * 300, es);
      w.comms.forEach((_, r) => write(w, r, send[r]!, inputs[r]!));
      const res = await Promise.all(w.comms.map((c, r) => c.allgatherv({ send: send[r]!, recv: recv[r]!, counts, dtype: 'bf16' })));
      expect(res[0]!.algorithm).toBe('one-shot');
      for (let r = 0; r < 3; r++) expectBytes(read(w, r, recv[r]!, 305 * es), Buffer.concat(inputs), `allgatherv rank ${r}`);
      const g = elements('bf16', 300, 9);
      w.comms.forEach((_, r) => write(w, r, send[r]!, g));
      await Promise.all(w.comms.map((c, r) => c.gather({ send: send[r]!, recv: recv[r]!, count: 300, dtype: 'bf16', root: 1 })));
      expectBytes(read(w, 1, recv[1]!, 900 * es), Buffer.concat([g, g, g]), 'gather');
      const all = elements('bf16', 900, 4);
      write(w, 2, recv[2]!, all);
      await Promise.all(w.comms.map((c, r) => c.scatter({ ...(r === 2 ? { send: recv[2]! } : {}), recv: send[r]!, count: 300, dtype: 'bf16', root: 2 })));
      for (let r = 0; r < 3; r++) expectBytes(read(w, r, send[r]!, 300 * es), all.subarray(r * 300 * es, (r + 1) * 300 * es), `scatter rank ${r}`);
      const rin = w.comms.map((_, r) => elements('bf16', 305, r + 40));
      w.comms.forEach((_, r) => write(w, r, recv[r]!, rin[r]!));
      await Promise.all(w.comms.map((c, r) => c.reduceScatterv({ send: recv[r]!, recv: send[r]!, counts, dtype: 'bf16', op: 'max' })));
      for (let r = 0; r < 3; r++) {
        const at = [0, 300, 300][r]!;
        const want = new Uint8Array(counts[r]! * es);
        reduceInto(
          'max',
          'bf16',
          want,
          rin.map((x) => x.subarray(at * es, (at + counts[r]!) * es)),
          counts[r]!,
        );
        expectBytes(read(w, r, send[r]!, counts[r]! * es), want, `reduce-scatterv rank ${r}`);
      }
      await alltoallvCase(w, 'u8', [
        [1, 400, 0],
        [0, 9, 300],
        [2, 0, 0],
      ]);
      expect(w.comms[0]!.stats().byAlgorithm.staged).toBe(1);
    } finally {
      await w.close();
    }
  });

  it('one rank: a copy (and gather, scatter, allgatherv, reduce-scatterv with premul)', async () => {
    const w = await world(1, 'device');
    await alltoallvCase(w, 'i64', [[77]]);
    const c = w.comms[0]!;
    const [send] = alloc(w, 64, 4);
    const [recv] = alloc(w, 64, 4);
    const x = elements('f32', 64, 5);
    write(w, 0, send!, x);
    expect((await c.gather({ send: send!, recv: recv!, count: 64, dtype: 'f32', root: 0 })).algorithm).toBe('local');
    expectBytes(read(w, 0, recv!, 256), x, 'gather');
    await c.reduceScatterv({ send: send!, recv: recv!, counts: [64], dtype: 'f32', op: 'premul', factor: PREMUL });
    const want = new Uint8Array(256);
    reduceInto({ op: 'premul', factor: PREMUL }, 'f32', want, [x], 64);
    expectBytes(read(w, 0, recv!, 256), want, 'reduce-scatterv premul');
  });
});
