/**
 * gather, scatter and the collectives with counts per rank, when a caller
 * gets them wrong: a bad count, displacement or buffer on one rank throws a
 * typed error there and fails the matching call on every other rank with
 * its cause; counts that differ between ranks (allgatherv's and
 * reduce-scatterv's, alltoallv's pairs, gather's count, scatter's root)
 * fail the call on every rank with SMCUDA_CALL_MISMATCH within a bounded
 * time, on the device path and staged, never as a success or a hang. And a
 * v-call captured in a CUDA graph replays right.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Communicator } from '../../../src/collectives/communicator.js';
import { CallMismatchError, type CommunicatorAbortedError } from '../../../src/errors.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

/** Far below the calls' 30 s timeout; generous for a loaded CI machine. */
const BOUND_MS = 5000;

async function settle(p: Promise<unknown>): Promise<{ ok: true } | { ok: false; err: CommunicatorAbortedError }> {
  return p.then(
    () => ({ ok: true as const }),
    (err: unknown) => ({ ok: false as const, err: err as CommunicatorAbortedError }),
  );
}

/** A good call every rank but `bad` makes; `bad` makes `wrong` instead. */
type Call = (c: Communicator, r: number, b: { send: bigint; recv: bigint; small: bigint }) => Promise<unknown>;

const good = {
  allgatherv: ((c, _r, b) => c.allgatherv({ send: b.send, recv: b.recv, counts: [4, 0, 9], dtype: 'f32' })) as Call,
  reduceScatterv: ((c, _r, b) => c.reduceScatterv({ send: b.send, recv: b.recv, counts: [4, 0, 9], dtype: 'f32', op: 'sum' })) as Call,
  alltoallv: ((c, _r, b) => c.alltoallv({ send: b.send, recv: b.recv, sendCounts: [2, 2, 2], recvCounts: [2, 2, 2], dtype: 'f32' })) as Call,
  gather: ((c, _r, b) => c.gather({ send: b.send, recv: b.recv, count: 8, dtype: 'f32', root: 1 })) as Call,
  scatter: ((c, _r, b) => c.scatter({ send: b.send, recv: b.recv, count: 8, dtype: 'f32', root: 1 })) as Call,
};

const badArgs: Array<{ name: string; call: keyof typeof good; wrong: Call; code: string }> = [
  {
    name: 'counts not an array',
    call: 'allgatherv',
    wrong: (c, _r, b) => c.allgatherv({ send: b.send, recv: b.recv, counts: 13 as never, dtype: 'f32' }),
    code: 'SMCUDA_INVALID_ARG_TYPE',
  },
  {
    name: 'counts of the wrong length',
    call: 'allgatherv',
    wrong: (c, _r, b) => c.allgatherv({ send: b.send, recv: b.recv, counts: [4, 9], dtype: 'f32' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'a negative count',
    call: 'reduceScatterv',
    wrong: (c, _r, b) => c.reduceScatterv({ send: b.send, recv: b.recv, counts: [4, -1, 9], dtype: 'f32', op: 'sum' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'a fractional displacement',
    call: 'reduceScatterv',
    wrong: (c, _r, b) => c.reduceScatterv({ send: b.send, recv: b.recv, counts: [4, 0, 9], displs: [0, 4, 4.5], dtype: 'f32', op: 'sum' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'an op the dtype does not take',
    call: 'reduceScatterv',
    wrong: (c, _r, b) => c.reduceScatterv({ send: b.send, recv: b.recv, counts: [4, 0, 9], dtype: 'f32', op: 'band' }),
    code: 'SMCUDA_INVALID_ARG_TYPE',
  },
  {
    name: 'displacements past the end of recv',
    call: 'allgatherv',
    wrong: (c, _r, b) => c.allgatherv({ send: b.send, recv: b.small, counts: [4, 0, 9], displs: [0, 0, 60], dtype: 'f32' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'receive blocks that overlap',
    call: 'allgatherv',
    wrong: (c, _r, b) => c.allgatherv({ send: b.send, recv: b.recv, counts: [4, 0, 9], displs: [0, 0, 2], dtype: 'f32' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'alltoallv sendDispls past the end of send',
    call: 'alltoallv',
    wrong: (c, _r, b) => c.alltoallv({ send: b.small, recv: b.recv, sendCounts: [2, 2, 2], sendDispls: [0, 2, 63], recvCounts: [2, 2, 2], dtype: 'f32' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'alltoallv in place',
    call: 'alltoallv',
    wrong: (c, _r, b) => c.alltoallv({ send: b.send, recv: b.send, sendCounts: [2, 2, 2], recvCounts: [2, 2, 2], dtype: 'f32' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: "alltoallv: a rank's count to itself differs from its count from itself",
    call: 'alltoallv',
    wrong: (c, _r, b) => c.alltoallv({ send: b.send, recv: b.recv, sendCounts: [2, 3, 2], recvCounts: [2, 2, 2], dtype: 'f32' }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
  {
    name: 'gather at a root without recv',
    call: 'gather',
    wrong: (c, _r, b) => c.gather({ send: b.send, count: 8, dtype: 'f32', root: 1 }),
    code: 'SMCUDA_INVALID_ARG_TYPE',
  },
  {
    name: 'scatter with a root out of range',
    call: 'scatter',
    wrong: (c, _r, b) => c.scatter({ send: b.send, recv: b.recv, count: 8, dtype: 'f32', root: 3 }),
    code: 'SMCUDA_OUT_OF_RANGE',
  },
];

function buffers(world: World) {
  return world.sides.map((s) => ({ send: s.driver.memAlloc(4096), recv: s.driver.memAlloc(4096), small: s.driver.memAlloc(256) }));
}

describe("one rank's bad arguments fail every rank at once", () => {
  for (const k of badArgs) {
    it(`${k.name}: a typed error (${k.code}) there, its cause on the others`, async () => {
      w = await makeWorld(3, { timeoutMs: 60_000 });
      const b = buffers(w);
      const t0 = performance.now();
      // Rank 1 is bad: ranks 0 and 2 make the good call first and wait for it.
      const others = [0, 2].map((r) => settle(good[k.call](w!.comms[r]!, r, b[r]!)));
      expect(() => k.wrong(w!.comms[1]!, 1, b[1]!)).toThrow(expect.objectContaining({ code: k.code }));
      for (const g of await Promise.all(others)) {
        expect(g.ok).toBe(false);
        if (g.ok) continue;
        expect(g.err.failedRank).toBe(1);
        expect(g.err.causeCode).toBe(k.code);
      }
      expect(performance.now() - t0).toBeLessThan(BOUND_MS);
    });
  }
});

const mismatches: Array<{ name: string; fields: string[]; call: Call }> = [
  {
    name: "allgatherv: rank 1's counts differ",
    fields: ['counts'],
    call: (c, r, b) => c.allgatherv({ send: b.send, recv: b.recv, counts: r === 1 ? [4, 0, 8] : [4, 0, 9], dtype: 'f32' }),
  },
  {
    name: "reduce-scatterv: rank 2's counts differ (in pieces)",
    fields: ['counts'],
    call: (c, r, b) => c.reduceScatterv({ send: b.send, recv: b.recv, counts: r === 2 ? [300, 0, 9] : [300, 1, 9], dtype: 'f32', op: 'sum' }),
  },
  {
    name: 'alltoallv: rank 0 sends rank 1 five elements, rank 1 expects three',
    fields: ['counts'],
    call: (c, r, b) =>
      c.alltoallv({ send: b.send, recv: b.recv, sendCounts: r === 0 ? [2, 5, 2] : [2, 2, 2], recvCounts: r === 1 ? [3, 2, 2] : [2, 2, 2], dtype: 'f32' }),
  },
  {
    name: 'alltoallv: rank 2 sends rank 0 many pieces, rank 0 expects none',
    fields: ['counts'],
    call: (c, r, b) =>
      c.alltoallv({ send: b.send, recv: b.recv, sendCounts: r === 2 ? [700, 2, 2] : [2, 2, 2], recvCounts: r === 0 ? [2, 2, 0] : [2, 2, 2], dtype: 'f32' }),
  },
  {
    name: 'alltoallv: rank 1 expects data rank 0 never sends',
    fields: ['counts'],
    call: (c, r, b) =>
      c.alltoallv({
        send: b.send,
        recv: b.recv,
        sendCounts: r === 0 ? [2, 0, 2] : [2, 2, 2],
        recvCounts: r === 1 ? [300, 2, 2] : r === 0 ? [2, 2, 2] : [2, 2, 2],
        dtype: 'f32',
      }),
  },
  {
    name: "gather: rank 1's count differs",
    fields: ['count'],
    call: (c, r, b) => c.gather({ send: b.send, recv: b.recv, count: r === 1 ? 9 : 8, dtype: 'f32', root: 0 }),
  },
  {
    name: "scatter: rank 2's root differs",
    fields: ['root'],
    call: (c, r, b) => c.scatter({ send: b.send, recv: b.recv, count: 8, dtype: 'f32', root: r === 2 ? 2 : 1 }),
  },
];

describe('counts that differ between ranks', () => {
  for (const staged of [false, true]) {
    for (const k of mismatches) {
      it(`${staged ? 'staged' : 'device steps'}, ${k.name}: every rank fails with SMCUDA_CALL_MISMATCH within ${BOUND_MS} ms`, async () => {
        w = await makeWorld(3, { scratchBytes: 768, timeoutMs: 30_000, ipcOpenFails: staged });
        const b = buffers(w);
        const t0 = performance.now();
        const got = await Promise.all(w.comms.map((c, r) => settle(k.call(c, r, b[r]!))));
        expect(performance.now() - t0).toBeLessThan(BOUND_MS);
        for (const g of got) {
          expect(g.ok).toBe(false);
          if (g.ok) continue;
          expect(g.err).toBeInstanceOf(CallMismatchError);
          expect(g.err.code).toBe('SMCUDA_CALL_MISMATCH');
          expect((g.err as CallMismatchError).fields).toEqual(k.fields);
          expect((g.err as CallMismatchError).seq).toBe(1);
        }
        if (k.fields[0] === 'counts' && k.name.startsWith('alltoallv'))
          expect(got[0]!.ok || got[0]!.err.message).toMatch(/sendCounts\[k\] must equal rank k's recvCounts/);
        // Aborted: a later call fails at once.
        expect((await settle(w.comms[0]!.barrier())).ok).toBe(false);
      });
    }
  }
});

describe('a v-call in a CUDA graph', () => {
  it('allgatherv and alltoallv (in pieces, uneven, a zero pair) captured once, replayed 3 times with new inputs, an eager call between: every replay verified', async () => {
    const n = 3;
    w = await makeWorld(n, { scratchBytes: 256 * n, timeoutMs: 20_000 });
    expect(w.comms[0]!.stats().steps).toBe('device');
    const world = w;
    const streams = world.sides.map((s) => s.driver.streamCreate());
    const counts = [100, 0, 37];
    const matrix = [
      [1, 150, 0],
      [64, 0, 3],
      [0, 90, 2],
    ];
    const sendTotal = matrix.map((row) => row.reduce((a, b) => a + b, 0));
    const recvCounts = [0, 1, 2].map((r) => matrix.map((row) => row[r]!));
    const recvTotal = recvCounts.map((col) => col.reduce((a, b) => a + b, 0));
    const bufs = world.sides.map((s) => ({ gs: s.driver.memAlloc(400), gr: s.driver.memAlloc(600), as: s.driver.memAlloc(800), ar: s.driver.memAlloc(1200) }));
    const calls = (c: Communicator, r: number, stream: bigint) => [
      c.allgatherv({ send: bufs[r]!.gs, recv: bufs[r]!.gr, counts, dtype: 'f32', stream }),
      c.alltoallv({ send: bufs[r]!.as, recv: bufs[r]!.ar, sendCounts: matrix[r]!, recvCounts: recvCounts[r]!, dtype: 'f32', stream }),
    ];
    const graphs = world.comms.map((c, r) => {
      const d = world.sides[r]!.driver;
      d.streamBeginCapture(streams[r]!, 'thread-local');
      const ps = calls(c, r, streams[r]!);
      const graph = d.streamEndCapture(streams[r]!);
      return { ps, graph, exec: d.graphInstantiate(graph) };
    });
    for (const g of graphs) for (const p of g.ps) await expect(p).resolves.toMatchObject({ algorithm: 'one-shot' });
    const check = (gin: Uint8Array[], ain: Uint8Array[]) => {
      world.sides.forEach((s, r) => {
        const got = new Uint8Array(137 * 4);
        s.driver.memcpyDtoH(got, bufs[r]!.gr);
        expect(Buffer.from(got).equals(Buffer.concat(gin)), `allgatherv rank ${r}`).toBe(true);
        const a = new Uint8Array(recvTotal[r]! * 4);
        s.driver.memcpyDtoH(a, bufs[r]!.ar);
        const want = Buffer.concat(
          [0, 1, 2].map((j) => {
            const from = matrix[j]!.slice(0, r).reduce((x, y) => x + y, 0);
            return ain[j]!.subarray(from * 4, (from + matrix[j]![r]!) * 4);
          }),
        );
        expect(Buffer.from(a).equals(want), `alltoallv rank ${r}`).toBe(true);
      });
    };
    for (let k = 0; k < 3; k++) {
      const gin = counts.map((c, r) => elements('f32', c, 100 * k + r));
      const ain = sendTotal.map((t, r) => elements('f32', t, 100 * k + r + 50));
      world.sides.forEach((s, r) => {
        if (gin[r]!.byteLength > 0) s.driver.memcpyHtoD(bufs[r]!.gs, gin[r]!);
        s.driver.memcpyHtoD(bufs[r]!.as, ain[r]!);
        s.driver.memsetD8(bufs[r]!.gr, 0, 600);
        s.driver.memsetD8(bufs[r]!.ar, 0, 1200);
      });
      world.sides.forEach((s, r) => s.driver.graphLaunch(graphs[r]!.exec, streams[r]!));
      await Promise.all(
        world.sides.map(async (s, r) => {
          const e = s.driver.eventCreate({ disableTiming: true });
          s.driver.eventRecord(e, streams[r]!);
          await s.driver.whenComplete(e);
          s.driver.eventDestroy(e);
        }),
      );
      check(gin, ain);
      if (k === 1) {
        // Eager calls between replays, on the same buffers and streams.
        await Promise.all(world.comms.flatMap((c, r) => calls(c, r, streams[r]!)));
        check(gin, ain);
      }
    }
    world.sides.forEach((s, r) => {
      s.driver.graphExecDestroy(graphs[r]!.exec);
      s.driver.graphDestroy(graphs[r]!.graph);
    });
  });
});
