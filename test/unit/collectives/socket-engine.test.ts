/**
 * The inter-node engine's socket twin in one process: engines of three
 * "nodes" (each its own simulated driver) meeting through an in-memory
 * store. Every call's result checked element by element; calls that differ
 * fail on every engine with the field named; a connection that cannot prove
 * the published secret is dropped and never counts as a peer; an abort
 * reaches every peer's calls with its cause; a call's time limit is its own
 * or the engine's call timeout, never the set-up's.
 */
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SocketEngine } from '../../../src/collectives/socket-engine.js';
import { CallMismatchError, CommunicatorAbortedError, CommunicatorTimeoutError } from '../../../src/errors.js';
import { memoryStore, type MemoryStore } from '../../helpers/memory-store.js';
import { simDevice } from '../../helpers/sim-device.js';

const open: SocketEngine[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((e) => e.close()));
});

function engines(n: number, store: MemoryStore = memoryStore(), limits = { setupMs: 5000, timeoutMs: 5000 }): Promise<SocketEngine[]> {
  return Promise.all(
    [...Array(n).keys()].map(async (rank) => {
      const e = await SocketEngine.open({
        store,
        group: 0,
        rank,
        size: n,
        driver: simDevice({ env: {} }),
        reached: async () => {},
        globalRank: (k) => 10 + k,
        ...limits,
        host: '127.0.0.1',
      });
      open.push(e);
      return e;
    }),
  );
}

function f32(driver: ReturnType<typeof simDevice>, values: number[]): bigint {
  const p = driver.memAlloc(Math.max(4, values.length * 4));
  if (values.length > 0) driver.memcpyHtoD(p, new Uint8Array(new Float32Array(values).buffer));
  return p;
}

function read(driver: ReturnType<typeof simDevice>, p: bigint, n: number): number[] {
  const b = new Float32Array(n);
  driver.memcpyDtoH(b, p);
  return [...b];
}

describe('the socket engine', () => {
  it('allreduce, broadcast, reduce, allgather, reduce-scatter and alltoall among 3 nodes, every element', async () => {
    const es = await engines(3);
    const drv = (k: number) => (es[k] as unknown as { o: { driver: ReturnType<typeof simDevice> } }).o.driver;
    const call = <T>(f: (e: SocketEngine, k: number) => Promise<T>) => Promise.all(es.map(f));

    const ar = es.map((_, k) => f32(drv(k), [k, 10 * k, 1.5]));
    await call((e, k) => e.allreduce({ send: ar[k]!, recv: ar[k]!, count: 3, dtype: 'f32', op: 'sum', stream: 0n }));
    for (let k = 0; k < 3; k++) expect(read(drv(k), ar[k]!, 3)).toEqual([3, 30, 4.5]);

    const avg = es.map((_, k) => f32(drv(k), [k * 6]));
    await call((e, k) => e.allreduce({ send: avg[k]!, recv: avg[k]!, count: 1, dtype: 'f32', op: 'sum', avgOver: 6, stream: 0n }));
    for (let k = 0; k < 3; k++) expect(read(drv(k), avg[k]!, 1)).toEqual([3]); // (0 + 6 + 12) / 6

    const bc = es.map((_, k) => f32(drv(k), k === 1 ? [7, 8] : [0, 0]));
    await call((e, k) => e.broadcast({ buf: bc[k]!, count: 2, dtype: 'f32', root: 1, stream: 0n }));
    for (let k = 0; k < 3; k++) expect(read(drv(k), bc[k]!, 2)).toEqual([7, 8]);

    const rs = es.map((_, k) => f32(drv(k), [k, k + 1]));
    const rr = es.map((_, k) => f32(drv(k), [-1, -1]));
    await call((e, k) => e.reduce({ send: rs[k]!, recv: rr[k]!, count: 2, dtype: 'f32', op: 'max', root: 2, stream: 0n }));
    expect(read(drv(2), rr[2]!, 2)).toEqual([2, 3]);
    expect(read(drv(0), rr[0]!, 2)).toEqual([-1, -1]); // written on the root only

    const ag = es.map((_, k) => f32(drv(k), Array(6).fill(-1)));
    const agIn = es.map((_, k) => f32(drv(k), [k, -k]));
    await call((e, k) => e.allgather({ send: agIn[k]!, recv: ag[k]!, count: 2, dtype: 'f32', stream: 0n }));
    for (let k = 0; k < 3; k++) expect(read(drv(k), ag[k]!, 6)).toEqual([0, -0, 1, -1, 2, -2]);

    const sc = es.map((_, k) => f32(drv(k), [k, 10 + k, 100 + k]));
    const scOut = es.map((_, k) => f32(drv(k), [0]));
    await call((e, k) => e.reduceScatter({ send: sc[k]!, recv: scOut[k]!, count: 1, dtype: 'f32', op: 'sum', stream: 0n }));
    expect(es.map((_, k) => read(drv(k), scOut[k]!, 1)[0])).toEqual([3, 33, 303]);

    const a2a = es.map((_, k) => f32(drv(k), [10 * k, 10 * k + 1, 10 * k + 2]));
    const a2aOut = es.map((_, k) => f32(drv(k), [0, 0, 0]));
    await call((e, k) => e.alltoall({ send: a2a[k]!, recv: a2aOut[k]!, count: 1, dtype: 'f32', stream: 0n }));
    for (let k = 0; k < 3; k++) expect(read(drv(k), a2aOut[k]!, 3)).toEqual([k, 10 + k, 20 + k]);

    await call((e) => e.barrier());
  });

  it.each([
    ['count', { count: 2 }],
    ['dtype', { dtype: 'i32' as const }],
    ['op', { op: 'max' as const }],
  ])('calls that differ in %s fail on every engine, before any data is used', async (field, change) => {
    const es = await engines(3);
    const drv = (k: number) => (es[k] as unknown as { o: { driver: ReturnType<typeof simDevice> } }).o.driver;
    const bufs = es.map((_, k) => f32(drv(k), [k, k]));
    const errors: Array<{ onError: Error | undefined }> = es.map(() => ({ onError: undefined }));
    es.forEach((e, k) => e.onError((err) => (errors[k]!.onError = err)));
    const got = await Promise.allSettled(
      es.map((e, k) => e.allreduce({ send: bufs[k]!, recv: bufs[k]!, count: 1, dtype: 'f32', op: 'sum', stream: 0n, ...(k === 2 ? change : {}) })),
    );
    for (const [k, g] of got.entries()) {
      expect(g.status).toBe('rejected');
      const err = (g as PromiseRejectedResult).reason as CommunicatorAbortedError;
      expect(err.code === 'SMCUDA_CALL_MISMATCH' || err.causeCode === 'SMCUDA_CALL_MISMATCH', `${k}: ${err.message}`).toBe(true);
      expect(errors[k]!.onError).toBeDefined();
    }
    // The engines that compared with the odd one name the field, and the ranks by their number in the job.
    const mismatch = got.map((g) => (g as PromiseRejectedResult).reason).find((e) => e instanceof CallMismatchError) as CallMismatchError;
    expect(mismatch.fields).toContain(field);
    expect(mismatch.ranks).toContain(12);
    // Nothing was written: the data of a call that differs is never used.
    for (let k = 0; k < 3; k++) expect(read(drv(k), bufs[k]!, 2)).toEqual([k, k]);
  });

  it('drops a connection that cannot prove the published secret: it never counts as a peer', async () => {
    const twoStore = memoryStore();
    const e0 = SocketEngine.open({
      store: twoStore,
      group: 3,
      rank: 0,
      size: 2,
      driver: simDevice({ env: {} }),
      reached: async () => {},
      globalRank: (k) => k,
      setupMs: 5000,
      timeoutMs: 5000,
      host: '127.0.0.1',
    });
    const where = JSON.parse(Buffer.from(await twoStore.get('internode/3/0')).toString()) as { port: number; secret: string };
    // Claims to be node 1, with a proof made without the secret.
    const closed = await new Promise<boolean>((resolve) => {
      const s = connect({ host: '127.0.0.1', port: where.port }, () => {
        const hello = Buffer.alloc(36);
        hello.writeUInt32LE(1, 0);
        s.write(hello);
      });
      s.on('error', () => {});
      s.on('close', () => resolve(true));
      setTimeout(() => resolve(false), 3000);
    });
    expect(closed).toBe(true);
    // The honest node 1 still joins.
    const e1 = SocketEngine.open({
      store: twoStore,
      group: 3,
      rank: 1,
      size: 2,
      driver: simDevice({ env: {} }),
      reached: async () => {},
      globalRank: (k) => k,
      setupMs: 5000,
      timeoutMs: 5000,
      host: '127.0.0.1',
    });
    const [a, b] = await Promise.all([e0, e1]);
    open.push(a, b);
    await Promise.all([a.barrier(), b.barrier()]);
  });

  it("a call is limited by its own timeoutMs, else by the engine's call timeout, never by the set-up's", async () => {
    // A set-up limit shorter than a call's wait: the call still completes.
    const quick = await engines(2, memoryStore(), { setupMs: 2000, timeoutMs: 30_000 });
    const first = quick[0]!.barrier();
    await new Promise((r) => setTimeout(r, 2500));
    await Promise.all([first, quick[1]!.barrier()]);
    // The call's own limit, and the engine's, where the peer never calls.
    const [own, byDefault] = await Promise.all([
      engines(2, memoryStore(), { setupMs: 30_000, timeoutMs: 30_000 }),
      engines(2, memoryStore(), { setupMs: 30_000, timeoutMs: 300 }),
    ]);
    const t0 = performance.now();
    const [a, b] = await Promise.allSettled([own[0]!.barrier({ timeoutMs: 200 }), byDefault[0]!.barrier()]);
    expect(performance.now() - t0).toBeLessThan(10_000);
    expect((a as PromiseRejectedResult).reason).toBeInstanceOf(CommunicatorTimeoutError);
    expect((a as PromiseRejectedResult).reason.message).toMatch(/within 200 ms/);
    expect((b as PromiseRejectedResult).reason).toBeInstanceOf(CommunicatorTimeoutError);
    expect((b as PromiseRejectedResult).reason.message).toMatch(/within 300 ms/);
  });

  it("an abort reaches every peer's calls and error listener with its cause and the failed rank", async () => {
    const es = await engines(3);
    const heard: Error[] = [];
    es[0]!.onError((e) => heard.push(e));
    const waiting = Promise.allSettled([es[0]!.barrier(), es[1]!.barrier()]);
    es[2]!.abort(new CommunicatorAbortedError('node 2 gave up', 12, 'SMCUDA_PEER_LOST'));
    for (const r of await waiting) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_PEER_LOST', failedRank: 12 });
    }
    expect(heard).toHaveLength(1);
    await expect(es[0]!.barrier()).rejects.toMatchObject({ causeCode: 'SMCUDA_PEER_LOST' });
  });
});
