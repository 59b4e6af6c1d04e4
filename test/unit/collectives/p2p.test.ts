/**
 * Point to point on the simulated driver, device path (mapped scratch,
 * stream memory operations) and staged path (IPC refused): exchanges of
 * every size class and several dtypes with every byte checked, ordering
 * with the collectives on one stream, a pipeline ring through batch() at
 * sizes of many slots (every rank's sends before its receives), and a
 * captured send/receive replayed 100 times with every byte checked each
 * replay.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { DevicePtr } from '../../../src/cuda/driver.js';
import type { Communicator } from '../../../src/collectives/communicator.js';
import { DTYPE_BYTES, type DType } from '../../../src/kernels/dtypes.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

/** Small scratch: 4096-byte regions, so with 2 ranks a p2p slot is 1024 bytes (4 ranks: 512). */
const SCRATCH = 4096;

const worlds = new Map<string, Promise<World>>();
function world(n: number, staged: boolean): Promise<World> {
  const key = `${n}:${staged}`;
  let w = worlds.get(key);
  if (!w) worlds.set(key, (w = makeWorld(n, { scratchBytes: SCRATCH, ipcOpenFails: staged, timeoutMs: 20_000 })));
  return w;
}
afterAll(async () => {
  for (const w of worlds.values()) await (await w).close();
});

function slotBytes(n: number): number {
  return Math.floor(SCRATCH / (2 * n) / 16) * 16;
}

function read(w: World, r: number, ptr: DevicePtr, bytes: number): Buffer {
  const out = new Uint8Array(bytes);
  if (bytes > 0) w.sides[r]!.driver.memcpyDtoH(out, ptr);
  return Buffer.from(out);
}

function alloc(w: World, r: number, bytes: number, fill?: Uint8Array): DevicePtr {
  const d = w.sides[r]!.driver;
  const p = d.memAlloc(Math.max(16, bytes));
  d.memsetD8(p, 0xee, Math.max(16, bytes));
  if (fill && fill.length > 0) d.memcpyHtoD(p, fill);
  return p;
}

/** Sizes in elements: 0, tiny, exactly one slot, several slots and a part. */
function sizes(n: number, dtype: DType): Array<[string, number]> {
  const per = slotBytes(n) / DTYPE_BYTES[dtype];
  return [
    ['zero', 0],
    ['tiny', 3],
    ['one chunk', per],
    ['many chunks', 5 * per + 7],
  ];
}

describe.each([
  { staged: false, path: 'device' },
  { staged: true, path: 'staged' },
])('point to point, $path path (simulated driver)', ({ staged, path }) => {
  it('the world takes the expected path', async () => {
    const w = await world(2, staged);
    expect(w.comms[0]!.stats().steps).toBe(staged ? 'host' : 'device');
  });

  for (const dtype of ['f32', 'u8', 'f64', 'bf16', 'i64'] as const) {
    it.each(sizes(2, dtype))(
      `${dtype}: %s (%d elements) both ways, ordered (send, recv / recv, send) and batched, every byte checked`,
      async (_name, count) => {
        const w = await world(2, staged);
        const bytes = count * DTYPE_BYTES[dtype];
        const data = [elements(dtype, count, 11 + count), elements(dtype, count, 29 + count)];
        const src = [alloc(w, 0, bytes, data[0]), alloc(w, 1, bytes, data[1])];
        // Ordered: rank 0 sends first, rank 1 receives first; a send larger than two slots waits for its receive.
        let dst = [alloc(w, 0, bytes), alloc(w, 1, bytes)];
        const [c0, c1] = w.comms as [Communicator, Communicator];
        const before = c0.stats().p2p;
        const r = await Promise.all([
          c0.send({ buf: src[0]!, count, dtype, peer: 1 }),
          c0.recv({ buf: dst[0]!, count, dtype, peer: 1 }),
          c1.recv({ buf: dst[1]!, count, dtype, peer: 0 }),
          c1.send({ buf: src[1]!, count, dtype, peer: 0 }),
        ]);
        expect(r.map((x) => [x.op, x.peer, x.bytes, x.path])).toEqual([
          ['send', 1, bytes, path],
          ['recv', 1, bytes, path],
          ['recv', 0, bytes, path],
          ['send', 0, bytes, path],
        ]);
        expect(read(w, 1, dst[1]!, bytes).equals(Buffer.from(data[0]!))).toBe(true);
        expect(read(w, 0, dst[0]!, bytes).equals(Buffer.from(data[1]!))).toBe(true);
        const after = c0.stats().p2p;
        const p = path as 'device' | 'staged';
        expect([after.sends - before.sends, after.recvs - before.recvs, after.bytesSent - before.bytesSent, after.byPath[p] - before.byPath[p]]).toEqual([
          1,
          1,
          bytes,
          2,
        ]);
        // Batched: both ranks send first.
        dst = [alloc(w, 0, bytes), alloc(w, 1, bytes)];
        const b = await Promise.all(
          w.comms.map((c, me) =>
            c.batch(() => {
              c.send({ buf: src[me]!, count, dtype, peer: 1 - me });
              c.recv({ buf: dst[me]!, count, dtype, peer: 1 - me });
            }),
          ),
        );
        expect(b.map((x) => x.map((y) => y.op))).toEqual([
          ['send', 'recv'],
          ['send', 'recv'],
        ]);
        expect(b[0]![0]!.n).toBe(r[0]!.n + 1);
        expect(read(w, 1, dst[1]!, bytes).equals(Buffer.from(data[0]!))).toBe(true);
        expect(read(w, 0, dst[0]!, bytes).equals(Buffer.from(data[1]!))).toBe(true);
        // The collectives' call sequence did not move: their call check still passes.
        await Promise.all(w.comms.map((c) => c.barrier()));
      },
    );
  }

  it('ordered with the collectives on one stream: a send after an allreduce sends the reduced data; an allreduce after a recv reduces the received data', async () => {
    const w = await world(2, staged);
    const count = 3 * (slotBytes(2) / 4) + 5;
    const bytes = count * 4;
    const inputs = [elements('f32', count, 1), elements('f32', count, 2)];
    const sum = new Uint8Array(bytes);
    reduceInto('sum', 'f32', sum, inputs, count);
    const streams = w.sides.map((s) => s.driver.streamCreate());
    const bufs = w.sides.map((_, r) => alloc(w, r, bytes, inputs[r]));
    const got = alloc(w, 1, bytes);
    const [c0, c1] = w.comms as [Communicator, Communicator];
    // Nothing awaited between the calls: the order is the stream's.
    const calls = [
      c0.allreduce({ send: bufs[0]!, count, dtype: 'f32', op: 'sum', stream: streams[0]! }),
      c1.allreduce({ send: bufs[1]!, count, dtype: 'f32', op: 'sum', stream: streams[1]! }),
      c0.send({ buf: bufs[0]!, count, dtype: 'f32', peer: 1, stream: streams[0]! }),
      c1.recv({ buf: got, count, dtype: 'f32', peer: 0, stream: streams[1]! }),
      // Rank 1 reduces what it received (the sum) with rank 0's sum: twice the sum.
      c0.allreduce({ send: bufs[0]!, count, dtype: 'f32', op: 'sum', stream: streams[0]! }),
      c1.allreduce({ send: got, count, dtype: 'f32', op: 'sum', stream: streams[1]! }),
    ];
    await Promise.all(calls);
    const twice = new Uint8Array(bytes);
    reduceInto('sum', 'f32', twice, [sum, sum], count);
    expect(read(w, 0, bufs[0]!, bytes).equals(Buffer.from(twice))).toBe(true);
    expect(read(w, 1, got, bytes).equals(Buffer.from(twice))).toBe(true);
  });

  it('a send made before an allreduce on one rank and the recv after it on the other (per-pair sequence, not the collectives’): both complete', async () => {
    const w = await world(2, staged);
    const count = 100;
    const x = elements('i32', count, 5);
    const src = alloc(w, 0, count * 4, x);
    const dst = alloc(w, 1, count * 4);
    const ar = w.sides.map((_, r) => alloc(w, r, 64, elements('i32', 16, r)));
    const [c0, c1] = w.comms as [Communicator, Communicator];
    const p0 = [c0.send({ buf: src, count, dtype: 'i32', peer: 1 }), c0.allreduce({ send: ar[0]!, count: 16, dtype: 'i32', op: 'max' })];
    const p1 = [c1.allreduce({ send: ar[1]!, count: 16, dtype: 'i32', op: 'max' }), c1.recv({ buf: dst, count, dtype: 'i32', peer: 0 })];
    await Promise.all([...p0, ...p1]);
    expect(read(w, 1, dst, count * 4).equals(Buffer.from(x))).toBe(true);
  });

  it('made right after a barrier (a host-path call) on the same stream: queued once the barrier is, in call order', async () => {
    const w = await world(2, staged);
    const count = 2 * (slotBytes(2) / 8) + 1;
    const x = elements('f64', count, 77);
    const src = alloc(w, 0, count * 8, x);
    const dst = alloc(w, 1, count * 8);
    const [c0, c1] = w.comms as [Communicator, Communicator];
    const calls = [c0.barrier(), c0.send({ buf: src, count, dtype: 'f64', peer: 1 }), c1.barrier(), c1.recv({ buf: dst, count, dtype: 'f64', peer: 0 })];
    const r = await Promise.all(calls);
    expect((r[3] as { path: string }).path).toBe(path);
    expect(read(w, 1, dst, count * 8).equals(Buffer.from(x))).toBe(true);
  });

  it('buffer objects ({ ptr, length }) as the collectives take them', async () => {
    const w = await world(2, staged);
    const count = 40;
    const x = elements('u32', count, 3);
    const src = { ptr: alloc(w, 0, count * 4, x), length: count * 4 };
    const dst = { ptr: alloc(w, 1, count * 4), length: count * 4 };
    await Promise.all([w.comms[0]!.send({ buf: src, count, dtype: 'u32', peer: 1 }), w.comms[1]!.recv({ buf: dst, count, dtype: 'u32', peer: 0 })]);
    expect(read(w, 1, dst.ptr, count * 4).equals(Buffer.from(x))).toBe(true);
  });

  it('a pipeline ring through batch(): 4 ranks each send to rank + 1 and receive from rank - 1, sends first, many slots each, 3 rounds, no deadlock', async () => {
    const n = 4;
    const w = await world(n, staged);
    const count = 7 * (slotBytes(n) / 4) + 3;
    const bytes = count * 4;
    const stream = w.sides.map((s) => s.driver.streamCreate());
    for (let round = 0; round < 3; round++) {
      const data = w.sides.map((_, r) => elements('f32', count, 100 * round + r));
      const src = w.sides.map((_, r) => alloc(w, r, bytes, data[r]));
      const dst = w.sides.map((_, r) => alloc(w, r, bytes));
      await Promise.all(
        w.comms.map((c, r) =>
          c.batch(() => {
            c.send({ buf: src[r]!, count, dtype: 'f32', peer: (r + 1) % n, stream: stream[r]! });
            c.recv({ buf: dst[r]!, count, dtype: 'f32', peer: (r + n - 1) % n, stream: stream[r]! });
          }),
        ),
      );
      for (let r = 0; r < n; r++) expect(read(w, r, dst[r]!, bytes).equals(Buffer.from(data[(r + n - 1) % n]!)), `round ${round}, rank ${r}`).toBe(true);
    }
  });

  it('in groups split from the world: ranks are group ranks, and sends of a group and of the world at once never take each other’s data', async () => {
    const w = await world(4, staged);
    const groups = await Promise.all(w.comms.map((c, r) => c.split({ color: r % 2, key: r })));
    const count = 3 * (slotBytes(4) / 4) + 1;
    const bytes = count * 4;
    const data = w.sides.map((_, r) => [elements('i32', count, 500 + r), elements('i32', count, 600 + r)]);
    const src = w.sides.map((_, r) => [alloc(w, r, bytes, data[r]![0]), alloc(w, r, bytes, data[r]![1])]);
    const dst = w.sides.map((_, r) => [alloc(w, r, bytes), alloc(w, r, bytes)]);
    // Group rank g of color c is world rank 2g + c: each group swaps between its two ranks while the world runs a ring.
    await Promise.all(
      w.comms.flatMap((c, r) => {
        const g = groups[r]!;
        return [
          g.batch(() => {
            g.send({ buf: src[r]![0]!, count, dtype: 'i32', peer: 1 - g.rank });
            g.recv({ buf: dst[r]![0]!, count, dtype: 'i32', peer: 1 - g.rank });
          }),
          c.batch(() => {
            c.send({ buf: src[r]![1]!, count, dtype: 'i32', peer: (r + 1) % 4 });
            c.recv({ buf: dst[r]![1]!, count, dtype: 'i32', peer: (r + 3) % 4 });
          }),
        ];
      }),
    );
    for (let r = 0; r < 4; r++) {
      expect(read(w, r, dst[r]![0]!, bytes).equals(Buffer.from(data[r ^ 2]![0]!)), `group, rank ${r}`).toBe(true);
      expect(read(w, r, dst[r]![1]!, bytes).equals(Buffer.from(data[(r + 3) % 4]![1]!)), `world, rank ${r}`).toBe(true);
    }
    await Promise.all(groups.map((g) => g!.close()));
  });

  it('a batch with two sends to one peer and a single recv for each on the other side (lanes keep the pair’s order)', async () => {
    const w = await world(2, staged);
    const per = slotBytes(2) / 4;
    const counts = [3 * per + 1, per - 3];
    const data = counts.map((c, i) => elements('f32', c, 40 + i));
    const src = counts.map((c, i) => alloc(w, 0, c * 4, data[i]));
    const dst = counts.map((c) => alloc(w, 1, c * 4));
    const [c0, c1] = w.comms as [Communicator, Communicator];
    const sent = c0.batch(() => {
      for (let i = 0; i < 2; i++) c0.send({ buf: src[i]!, count: counts[i]!, dtype: 'f32', peer: 1 });
    });
    const got = [0, 1].map((i) => c1.recv({ buf: dst[i]!, count: counts[i]!, dtype: 'f32', peer: 0 }));
    await Promise.all([sent, ...got]);
    for (let i = 0; i < 2; i++) expect(read(w, 1, dst[i]!, counts[i]! * 4).equals(Buffer.from(data[i]!)), `message ${i}`).toBe(true);
  });
});

describe('point to point in a CUDA graph (simulated driver)', () => {
  it('a ring batch captured once on every rank, replayed 100 times with new data each time, every byte checked every replay; eager calls between replays', async () => {
    const n = 3;
    const w = await makeWorld(n, { scratchBytes: SCRATCH, timeoutMs: 20_000 });
    try {
      const count = 2 * (slotBytes(n) / 4) + 9; // three chunks
      const bytes = count * 4;
      const streams = w.sides.map((s) => s.driver.streamCreate());
      const src = w.sides.map((_, r) => alloc(w, r, bytes));
      const dst = w.sides.map((_, r) => alloc(w, r, bytes));
      const graphs = w.comms.map((c, r) => {
        const d = w.sides[r]!.driver;
        d.streamBeginCapture(streams[r]!, 'thread-local');
        const p = c.batch(() => {
          c.send({ buf: src[r]!, count, dtype: 'f32', peer: (r + 1) % n, stream: streams[r]! });
          c.recv({ buf: dst[r]!, count, dtype: 'f32', peer: (r + n - 1) % n, stream: streams[r]! });
        });
        const graph = d.streamEndCapture(streams[r]!);
        return { p, graph, exec: d.graphInstantiate(graph) };
      });
      for (const g of graphs) expect((await g.p).map((x) => x.path)).toEqual(['device', 'device']);
      for (let k = 0; k < 100; k++) {
        const data = w.sides.map((s, r) => {
          const x = elements('f32', count, 1000 * k + r);
          s.driver.memcpyHtoD(src[r]!, x);
          s.driver.memsetD8(dst[r]!, 0, bytes);
          return x;
        });
        w.sides.forEach((s, r) => s.driver.graphLaunch(graphs[r]!.exec, streams[r]!));
        await Promise.all(
          w.sides.map(async (s, r) => {
            const e = s.driver.eventCreate({ disableTiming: true });
            s.driver.eventRecord(e, streams[r]!);
            await s.driver.whenComplete(e);
            s.driver.eventDestroy(e);
          }),
        );
        for (let r = 0; r < n; r++) expect(read(w, r, dst[r]!, bytes).equals(Buffer.from(data[(r + n - 1) % n]!)), `replay ${k}, rank ${r}`).toBe(true);
        if (k % 25 === 24) {
          // Eager calls between replays start from the flags' resting state, as the replays do.
          const eager = w.sides.map((_, r) => alloc(w, r, bytes));
          await Promise.all(
            w.comms.map((c, r) =>
              c.batch(() => {
                c.send({ buf: src[r]!, count, dtype: 'f32', peer: (r + 1) % n, stream: streams[r]! });
                c.recv({ buf: eager[r]!, count, dtype: 'f32', peer: (r + n - 1) % n, stream: streams[r]! });
              }),
            ),
          );
          for (let r = 0; r < n; r++) expect(read(w, r, eager[r]!, bytes).equals(Buffer.from(data[(r + n - 1) % n]!))).toBe(true);
          await Promise.all(w.comms.map((c, r) => c.allreduce({ send: src[r]!, count, dtype: 'f32', op: 'sum', stream: streams[r]! })));
        }
      }
      w.sides.forEach((s, r) => {
        s.driver.graphExecDestroy(graphs[r]!.exec);
        s.driver.graphDestroy(graphs[r]!.graph);
      });
    } finally {
      await w.close();
    }
  });

  it('a staged send refuses capture with SMCUDA_CAPTURE_UNSUPPORTED, and that aborts every rank', async () => {
    const w = await makeWorld(2, { ipcOpenFails: true, timeoutMs: 20_000 });
    try {
      const d = w.sides[0]!.driver;
      const stream = d.streamCreate();
      const buf = d.memAlloc(64);
      const other = w.comms[1]!.recv({ buf: alloc(w, 1, 64), count: 16, dtype: 'f32', peer: 0 });
      d.streamBeginCapture(stream, 'thread-local');
      const p = w.comms[0]!.send({ buf, count: 16, dtype: 'f32', peer: 1, stream });
      d.graphDestroy(d.streamEndCapture(stream));
      await expect(p).rejects.toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_CAPTURE_UNSUPPORTED' });
      await expect(other).rejects.toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_CAPTURE_UNSUPPORTED', failedRank: 0 });
    } finally {
      await w.close();
    }
  });
});
