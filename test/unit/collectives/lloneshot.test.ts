/**
 * The LL one-shot allreduce (reduce.cu's smcuda_lloneshot, algorithm
 * 'one-shot-ll') through the Communicator on the simulated driver: every
 * dtype × op pair the one-shot takes against a reference, in pieces and in
 * place; captured in a graph and replayed between eager calls of its own
 * and of the one-shot (its epoch is read when a launch runs, so they mix);
 * a rank that never calls: the others' waits are released by the poison.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { DevicePtr, StreamHandle } from '../../../src/cuda/driver.js';
import { DTYPE_BYTES, DTYPES, REDUCE_OPS, dtypeOpSupported, type DType, type ReduceArg, type ReduceOp } from '../../../src/kernels/dtypes.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { abortOf, elements, makeWorld, type World } from '../../helpers/comm-world.js';

const worlds: World[] = [];
afterAll(async () => {
  for (const w of worlds) await w.close();
});

async function world(n: number, options: Parameters<typeof makeWorld>[1] = {}): Promise<World> {
  const w = await makeWorld(n, { timeoutMs: 20_000, ...options });
  worlds.push(w);
  expect(w.comms[0]!.stats().steps).toBe('device');
  return w;
}

/** premul's factor: a power of two, so every product is exact. */
const FACTOR = 0.5;
const argOf = (op: ReduceOp): ReduceArg => (op === 'premul' ? { op, factor: FACTOR } : op);

function want(dtype: DType, op: ReduceOp, inputs: Uint8Array[], count: number): Buffer {
  const out = new Uint8Array(count * DTYPE_BYTES[dtype]);
  reduceInto(argOf(op), dtype, out, inputs, count);
  return Buffer.from(out);
}

function read(w: World, r: number, ptr: DevicePtr, bytes: number): Buffer {
  const got = new Uint8Array(bytes);
  w.sides[r]!.driver.memcpyDtoH(got, ptr);
  return Buffer.from(got);
}

/** Resolves once every rank's stream reached what is queued on it. */
async function complete(w: World, streams: StreamHandle[]): Promise<void> {
  await Promise.all(
    w.sides.map(async (s, r) => {
      const e = s.driver.eventCreate({ disableTiming: true });
      s.driver.eventRecord(e, streams[r]!);
      await s.driver.whenComplete(e).catch(() => undefined);
      s.driver.eventDestroy(e);
    }),
  );
}

describe("allreduce by 'one-shot-ll' (simulated driver)", () => {
  it('every dtype × op pair the kernels take, 3 ranks: the reference bits, out of place and in place, three calls each (the later ones replayed from a launch graph)', async () => {
    const w = await world(3);
    const count = 37; // a short last line for every dtype but the 8-byte ones
    for (const dtype of DTYPES) {
      const bytes = count * DTYPE_BYTES[dtype];
      const bufs = w.sides.map((s) => ({ send: s.driver.memAlloc(bytes), recv: s.driver.memAlloc(bytes) }));
      for (const op of REDUCE_OPS.filter((o) => dtypeOpSupported(dtype, o))) {
        for (let call = 0; call < 3; call++) {
          const inPlace = call === 2;
          const inputs = w.sides.map((s, r) => {
            const x = elements(dtype, count, 7 * call + 31 * r + op.length);
            s.driver.memcpyHtoD(bufs[r]!.send, x);
            return x;
          });
          const res = await Promise.all(
            w.comms.map((c, r) =>
              c.allreduce({
                send: bufs[r]!.send,
                recv: inPlace ? bufs[r]!.send : bufs[r]!.recv,
                count,
                dtype,
                op,
                ...(op === 'premul' ? { factor: FACTOR } : {}),
                algorithm: 'one-shot-ll',
              }),
            ),
          );
          for (const x of res) expect(x.algorithm).toBe('one-shot-ll');
          const expected = want(dtype, op, inputs, count);
          for (let r = 0; r < 3; r++)
            expect(read(w, r, inPlace ? bufs[r]!.send : bufs[r]!.recv, bytes).equals(expected), `${dtype} ${op} rank ${r} call ${call}`).toBe(true);
        }
      }
      for (const [r, s] of w.sides.entries()) for (const p of [bufs[r]!.send, bufs[r]!.recv]) s.driver.memFree(p);
    }
    expect(w.comms[0]!.stats().byAlgorithm['one-shot-ll']).toBeGreaterThan(100);
  }, 120_000);

  it('in pieces (a small scratch: 128 data bytes a piece), odd byte counts and unaligned buffers', async () => {
    const w = await world(2, { scratchBytes: 1024 });
    for (const [dtype, count, offset] of [
      ['u8', 1, 0],
      ['u8', 301, 3],
      ['f16', 99, 1],
      ['f64', 50, 0],
      ['f8e4m3', 257, 5],
    ] as const) {
      const es = DTYPE_BYTES[dtype];
      const base = w.sides.map((s) => s.driver.memAlloc((count + offset) * es));
      const send = base.map((b) => b + BigInt(offset * es));
      const inputs = w.sides.map((s, r) => {
        const x = elements(dtype, count, 100 * r + count);
        s.driver.memcpyHtoD(send[r]!, x);
        return x;
      });
      await Promise.all(w.comms.map((c, r) => c.allreduce({ send: send[r]!, count, dtype, op: 'sum', algorithm: 'one-shot-ll' })));
      const expected = want(dtype, 'sum', inputs, count);
      for (let r = 0; r < 2; r++) expect(read(w, r, send[r]!, count * es).equals(expected), `${dtype} ${count} rank ${r}`).toBe(true);
      for (const [r, s] of w.sides.entries()) s.driver.memFree(base[r]!);
    }
  });

  it('captured in a graph, replayed 4 times, with eager LL and one-shot calls between the replays: every result verified', async () => {
    const n = 3;
    const count = 301; // 10 pieces of 128 bytes with this scratch
    const w = await world(n, { scratchBytes: 512 * n });
    const streams = w.sides.map((s) => s.driver.streamCreate());
    const bufs = w.sides.map((s) => ({ send: s.driver.memAlloc(count * 4), recv: s.driver.memAlloc(count * 4) }));
    const graphs = w.comms.map((c, r) => {
      const d = w.sides[r]!.driver;
      d.streamBeginCapture(streams[r]!, 'thread-local');
      const p = c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream: streams[r]!, algorithm: 'one-shot-ll' });
      const graph = d.streamEndCapture(streams[r]!);
      return { p, exec: d.graphInstantiate(graph), graph };
    });
    for (const g of graphs) await expect(g.p).resolves.toMatchObject({ algorithm: 'one-shot-ll' });
    const check = (inputs: Uint8Array[]) => {
      const expected = want('f32', 'sum', inputs, count);
      for (let r = 0; r < n; r++) expect(read(w, r, bufs[r]!.recv, count * 4).equals(expected), `rank ${r}`).toBe(true);
    };
    const fill = (k: number) =>
      w.sides.map((s, r) => {
        const x = elements('f32', count, 1000 * k + r);
        s.driver.memcpyHtoD(bufs[r]!.send, x);
        s.driver.memsetD8(bufs[r]!.recv, 0, count * 4);
        return x;
      });
    for (let k = 0; k < 4; k++) {
      let inputs = fill(k);
      w.sides.forEach((s, r) => s.driver.graphLaunch(graphs[r]!.exec, streams[r]!));
      await complete(w, streams);
      check(inputs);
      // Eager calls between replays: the LL kernel's own (they advance the same launch count) and the one-shot's.
      for (const algorithm of k % 2 === 0 ? (['one-shot-ll'] as const) : (['one-shot', 'one-shot-ll', 'one-shot-ll'] as const)) {
        inputs = fill(10 + k);
        const eager = await Promise.all(
          w.comms.map((c, r) => c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream: streams[r]!, algorithm })),
        );
        expect(eager[0]!.algorithm).toBe(algorithm);
        check(inputs);
      }
    }
    w.sides.forEach((s, r) => {
      s.driver.graphExecDestroy(graphs[r]!.exec);
      s.driver.graphDestroy(graphs[r]!.graph);
    });
  });

  it('a rank that never calls: the others time out, the poison releases their waits on the device, and close drains', async () => {
    const w = await world(3, { timeoutMs: 60_000 });
    const streams = w.sides.map((s) => s.driver.streamCreate());
    const bufs = w.sides.map((s) => s.driver.memAlloc(256));
    // One call that completes first (the launch count is 1 on every rank), then one rank 2 never makes.
    await Promise.all(
      w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 64, dtype: 'f32', op: 'sum', stream: streams[r]!, algorithm: 'one-shot-ll' })),
    );
    const pending = [0, 1].map((r) =>
      w.comms[r]!.allreduce({
        send: bufs[r]!,
        count: 64,
        dtype: 'f32',
        op: 'sum',
        stream: streams[r]!,
        timeoutMs: r === 0 ? 200 : 5000,
        algorithm: 'one-shot-ll',
      }),
    );
    for (const e of await Promise.all(pending.map(abortOf))) {
      expect(e.failedRank).toBe(0);
      expect(e.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
    }
    // The streams held by the kernel's waits run to their end.
    await complete(w, streams);
    await Promise.all(w.comms.map((c) => c.close()));
  });

  it('is the automatic choice where it was measured faster (2 ranks, up to 64 KiB), one-shot above and with 3 ranks (not measured)', async () => {
    const two = await world(2);
    for (const bytes of [8, 4096, 64 * 1024]) expect(two.comms[0]!.algorithmFor(bytes)).toBe('one-shot-ll');
    expect(two.comms[0]!.algorithmFor(64 * 1024 + 4)).toBe('one-shot');
    const three = await world(3);
    for (const bytes of [8, 4096]) expect(three.comms[0]!.algorithmFor(bytes)).toBe('one-shot');
  });
});
