/**
 * Collectives captured in a CUDA graph on the simulated driver: each rank
 * captures its calls on its own stream, instantiates, and replays K times
 * with new inputs written between replays (the graph reads scratch and the
 * caller's buffers at replay time); every replay is verified on every rank,
 * and eager calls between replays still work (the device-side steps keep
 * fixed values, so baked batches stay valid). A call that needs the host
 * between its steps (staged) refuses capture with a typed error.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { DevicePtr } from '../../../src/cuda/driver.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

const worlds: World[] = [];
afterAll(async () => {
  for (const w of worlds) await w.close();
});

async function complete(w: World, streams: bigint[]): Promise<void> {
  await Promise.all(
    w.sides.map(async (s, r) => {
      const e = s.driver.eventCreate({ disableTiming: true });
      s.driver.eventRecord(e, streams[r]!);
      await s.driver.whenComplete(e);
      s.driver.eventDestroy(e);
    }),
  );
}

describe('collectives in a CUDA graph (simulated driver)', () => {
  it.each([
    { n: 2, count: 37, algorithm: 'one-shot' as const },
    { n: 3, count: 700, algorithm: 'two-shot' as const },
    { n: 3, count: 500, algorithm: 'ce-pipeline' as const },
  ])(
    '$n ranks, allreduce of $count f32 by $algorithm (in pieces): captured once, replayed 4 times, every replay verified; eager calls between replays',
    async ({ n, count, algorithm }) => {
      const w = await makeWorld(n, { scratchBytes: 512 * n, timeoutMs: 20_000 });
      worlds.push(w);
      expect(w.comms[0]!.stats().steps).toBe('device');
      const streams = w.sides.map((s) => s.driver.streamCreate());
      const bufs = w.sides.map((s) => ({ send: s.driver.memAlloc(count * 4), recv: s.driver.memAlloc(count * 4) }));
      // Capture: the call is queued whole before allreduce returns, so ending the capture right after holds it.
      const graphs = w.comms.map((c, r) => {
        const d = w.sides[r]!.driver;
        d.streamBeginCapture(streams[r]!, 'thread-local');
        const p = c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream: streams[r]!, algorithm });
        const graph = d.streamEndCapture(streams[r]!);
        return { p, exec: d.graphInstantiate(graph), graph };
      });
      for (const g of graphs) await expect(g.p).resolves.toMatchObject({ algorithm });
      const check = (inputs: Uint8Array[], recv: (r: number) => DevicePtr) => {
        const want = new Uint8Array(count * 4);
        reduceInto('sum', 'f32', want, inputs, count);
        w.sides.forEach((s, r) => {
          const got = new Uint8Array(count * 4);
          s.driver.memcpyDtoH(got, recv(r));
          expect(Buffer.from(got).equals(Buffer.from(want)), `rank ${r}`).toBe(true);
        });
      };
      for (let k = 0; k < 4; k++) {
        const inputs = w.sides.map((s, r) => {
          const x = elements('f32', count, 1000 * k + r);
          s.driver.memcpyHtoD(bufs[r]!.send, x);
          s.driver.memsetD8(bufs[r]!.recv, 0, count * 4);
          return x;
        });
        w.sides.forEach((s, r) => s.driver.graphLaunch(graphs[r]!.exec, streams[r]!));
        await complete(w, streams);
        check(inputs, (r) => bufs[r]!.recv);
        if (k % 2 === 1) {
          // An eager call (odd step count included: two-shot) between replays, on the same buffers.
          const eager = await Promise.all(
            w.comms.map((c, r) =>
              c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream: streams[r]!, algorithm: 'two-shot' }),
            ),
          );
          expect(eager[0]!.algorithm).toBe('two-shot');
          check(inputs, (r) => bufs[r]!.recv);
        }
      }
      w.sides.forEach((s, r) => {
        s.driver.graphExecDestroy(graphs[r]!.exec);
        s.driver.graphDestroy(graphs[r]!.graph);
      });
    },
  );

  it('a call captured while a barrier before it is still to be queued is refused (it would land outside the graph), on every rank', async () => {
    const w = await makeWorld(2, { timeoutMs: 20_000 });
    worlds.push(w);
    expect(w.comms[0]!.stats().steps).toBe('device');
    const results = w.comms.map((c, r) => {
      const d = w.sides[r]!.driver;
      const stream = d.streamCreate();
      const buf = d.memAlloc(64);
      const barrier = c.barrier(); // host steps: queued once the ranks have met
      d.streamBeginCapture(stream, 'thread-local');
      const p = c.allreduce({ send: buf, count: 16, dtype: 'f32', op: 'sum', stream });
      d.graphDestroy(d.streamEndCapture(stream));
      return { barrier, p };
    });
    for (const { p } of results) await expect(p).rejects.toMatchObject({ code: 'SMCUDA_CAPTURE_UNSUPPORTED' });
    for (const { barrier } of results) await barrier.catch(() => undefined);
    for (const c of w.comms) await expect(c.barrier()).rejects.toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_CAPTURE_UNSUPPORTED' });
  });

  it('a staged call refuses capture with SMCUDA_CAPTURE_UNSUPPORTED, and that aborts the communicator on every rank', async () => {
    const w = await makeWorld(2, { ipcOpenFails: true, timeoutMs: 20_000 });
    worlds.push(w);
    expect(w.comms[0]!.stats().steps).toBe('host');
    const results = w.comms.map((c, r) => {
      const d = w.sides[r]!.driver;
      const stream = d.streamCreate();
      const buf = d.memAlloc(64);
      d.streamBeginCapture(stream, 'thread-local');
      const p = c.allreduce({ send: buf, count: 16, dtype: 'f32', op: 'sum', stream });
      d.graphDestroy(d.streamEndCapture(stream));
      return p;
    });
    for (const p of results) await expect(p).rejects.toMatchObject({ code: 'SMCUDA_CAPTURE_UNSUPPORTED' });
    // One rank's refused call would leave the others' matching call waiting: the refusal aborts every rank.
    for (const c of w.comms) await expect(c.barrier()).rejects.toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_CAPTURE_UNSUPPORTED' });
  });

  it.each(['allreduce', 'send/recv'] as const)(
    'a peer that closes while a rank holds a captured %s: that rank aborts at once (SMCUDA_PEER_CLOSED), and its replay waiting on the peer is released',
    async (kind) => {
      const w = await makeWorld(2, { timeoutMs: 20_000 });
      worlds.push(w);
      const count = 64;
      const streams = w.sides.map((s) => s.driver.streamCreate());
      const bufs = w.sides.map((s) => ({ send: s.driver.memAlloc(count * 4), recv: s.driver.memAlloc(count * 4) }));
      const execs = w.comms.map((c, r) => {
        const d = w.sides[r]!.driver;
        const stream = streams[r]!;
        d.streamBeginCapture(stream, 'thread-local');
        const p =
          kind === 'allreduce'
            ? c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream, algorithm: 'one-shot' })
            : c.batch(() => {
                c.send({ buf: bufs[r]!.send, count, dtype: 'f32', peer: 1 - r, stream });
                c.recv({ buf: bufs[r]!.recv, count, dtype: 'f32', peer: 1 - r, stream });
              });
        const exec = d.graphInstantiate(d.streamEndCapture(stream));
        return { p, exec };
      });
      await Promise.all(execs.map((e) => e.p));
      w.sides.forEach((s, r) => s.driver.graphLaunch(execs[r]!.exec, streams[r]!));
      await complete(w, streams); // one replay both sides: fine
      const aborted = new Promise<Error>((resolve) => w.comms[1]!.once('abort', resolve));
      await w.comms[0]!.close();
      const err = (await aborted) as Error & { causeCode?: string; failedRank?: number };
      expect(err).toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_PEER_CLOSED', failedRank: 0 });
      expect(err.message).toMatch(/captured in CUDA graphs/);
      // Rank 1 replays alone: it waits on rank 0, and the abort's poison releases it.
      const d1 = w.sides[1]!.driver;
      d1.graphLaunch(execs[1]!.exec, streams[1]!);
      const t0 = performance.now();
      const e = d1.eventCreate({ disableTiming: true });
      d1.eventRecord(e, streams[1]!);
      const released = await Promise.race([d1.whenComplete(e).then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5000))]);
      expect(released).toBe(true);
      expect(performance.now() - t0).toBeLessThan(2000);
      d1.eventDestroy(e);
      // The scratch and the mappings stayed for replays unseen; close() (the replays done) releases them.
      const c0 = performance.now();
      await w.comms[1]!.close();
      expect(performance.now() - c0).toBeLessThan(2000);
      expect(d1.lifetimeViolations).toEqual([]);
    },
  );
});
