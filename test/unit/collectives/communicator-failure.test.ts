/**
 * One rank's failure fails the pending calls of every rank with the original
 * cause, never a hang: an error inside a call, an application abort, a lost
 * rank, a rank that never calls (timeout), and calls after close.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CommunicatorAbortedError } from '../../../src/errors.js';
import { makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

async function rejection(p: Promise<unknown>): Promise<CommunicatorAbortedError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CommunicatorAbortedError);
  return err as CommunicatorAbortedError;
}

describe('a failing rank fails every rank', () => {
  it("a driver error in one rank's call (a pointer that is no device memory) reaches every rank with its code, rank and pid", async () => {
    w = await makeWorld(3);
    const bufs = w.sides.map((s) => s.driver.memAlloc(1024));
    const others = [0, 2].map((r) => w!.comms[r]!.allreduce({ send: bufs[r]!, count: 256, dtype: 'f32', op: 'sum' }));
    // Checked before anything is queued: the caller gets the driver's error at once, and every rank the abort.
    expect(() => w!.comms[1]!.allreduce({ send: 0x7777_0000n, recv: bufs[1]!, count: 256, dtype: 'f32', op: 'sum' })).toThrow(
      expect.objectContaining({ code: 'CUDA_ERROR_INVALID_VALUE' }),
    );
    const errs = await Promise.all(others.map(rejection));
    for (const e of errs) {
      expect(e.failedRank).toBe(1);
      expect(e.failedPid).toBe(process.pid);
      expect(e.causeCode).toBe('CUDA_ERROR_INVALID_VALUE');
      expect(e.code).toBe('SMCUDA_COMM_ABORTED');
      expect(e.message).toMatch(/rank 1 \(pid \d+\) failed: .*not device memory/);
    }
    // Later calls fail at once with the same error, on the failed rank too.
    expect(await rejection(w.comms[0]!.barrier())).toBe(errs[0]);
    expect((await rejection(w.comms[1]!.barrier())).causeCode).toBe('CUDA_ERROR_INVALID_VALUE');
  });

  it("abort() on one rank fails the others' pending calls with its reason", async () => {
    w = await makeWorld(3);
    const pending = [w.comms[0]!.barrier(), w.comms[2]!.barrier()];
    w.comms[1]!.abort(new Error('the data loader failed'));
    for (const e of await Promise.all(pending.map(rejection))) {
      expect(e.message).toMatch(/rank 1 \(pid \d+\) failed: the data loader failed/);
      expect(e.failedRank).toBe(1);
    }
  });

  it('a rank that is lost (its transport closes, no goodbye) fails the others with SMCUDA_PEER_LOST', async () => {
    w = await makeWorld(3);
    const bufs = w.sides.map((s) => s.driver.memAlloc(64));
    const pending = [0, 1].map((r) => w!.comms[r]!.allreduce({ send: bufs[r]!, count: 16, dtype: 'i32', op: 'max' }));
    await w.sides[2]!.transport.close();
    for (const e of await Promise.all(pending.map(rejection))) {
      expect(e.failedRank).toBe(2);
      expect(e.causeCode).toBe('SMCUDA_PEER_LOST');
    }
  });

  it('a rank that never calls: the others time out, and the first timeout reaches every rank', async () => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const pending = [w.comms[0]!.barrier({ timeoutMs: 200 }), w.comms[1]!.barrier({ timeoutMs: 5000 })];
    const errs = await Promise.all(pending.map(rejection));
    for (const e of errs) {
      expect(e.failedRank).toBe(0);
      expect(e.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
    }
    // rank 2 learns it too: its next call fails at once.
    const e2 = await rejection(w.comms[2]!.barrier());
    expect(e2.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
  });

  it('a later call with a shorter timeout times out first (one watchdog per communicator, re-armed for the earliest deadline)', async () => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const bufs = w.sides.map((s) => s.driver.memAlloc(64));
    const t0 = performance.now();
    const first = w.comms[0]!.allreduce({ send: bufs[0]!, count: 16, dtype: 'f32', op: 'sum', timeoutMs: 30_000 });
    const second = w.comms[0]!.allreduce({ send: bufs[0]!, count: 16, dtype: 'f32', op: 'sum', timeoutMs: 200 });
    const [e1, e2] = await Promise.all([rejection(first), rejection(second)]);
    expect(performance.now() - t0).toBeLessThan(20_000);
    for (const e of [e1, e2]) {
      expect(e.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
      expect(e.message).toMatch(/allreduce #2 did not complete within 200 ms/);
    }
  });

  it('a timeout beyond what setTimeout takes (2^31-1 ms) does not fire early', async () => {
    w = await makeWorld(3);
    const bufs = w.sides.map((s) => s.driver.memAlloc(64));
    const results = await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 16, dtype: 'f32', op: 'sum', timeoutMs: 2 ** 33 })));
    for (const r of results) expect(r.op).toBe('allreduce');
    expect(w.comms[0]!.stats().calls).toBe(1);
  });

  it('a rank that never calls while the others wait on the device: they time out, their device waits are released (poisoned), and close drains', async () => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    expect(w.comms[0]!.stats().steps).toBe('device');
    const streams = w.sides.map((s) => s.driver.streamCreate());
    const bufs = w.sides.map((s) => s.driver.memAlloc(64));
    const pending = [0, 1].map((r) =>
      w!.comms[r]!.allreduce({ send: bufs[r]!, count: 16, dtype: 'f32', op: 'sum', stream: streams[r]!, timeoutMs: r === 0 ? 200 : 5000 }),
    );
    const errs = await Promise.all(pending.map(rejection));
    for (const e of errs) {
      expect(e.failedRank).toBe(0);
      expect(e.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
    }
    // The streams that were held by flag waits run to their end (no hang), then the communicators close.
    await Promise.all(
      [0, 1].map(async (r) => {
        const d = w!.sides[r]!.driver;
        const e = d.eventCreate({ disableTiming: true });
        d.eventRecord(e, streams[r]!);
        await d.whenComplete(e).catch(() => {});
        d.eventDestroy(e);
      }),
    );
    await Promise.all(w.comms.map((c) => c.close()));
  });

  it('a rank that closed normally fails a later call that needs it at once (SMCUDA_PEER_CLOSED), not the calls before', async () => {
    w = await makeWorld(2);
    await Promise.all(w.comms.map((c) => c.barrier()));
    await w.comms[1]!.close();
    const t0 = performance.now();
    const e = await rejection(w.comms[0]!.barrier());
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(e.causeCode).toBe('SMCUDA_PEER_CLOSED');
    expect(e.failedRank).toBe(1);
    expect(e.message).toMatch(/rank 1 \(pid \d+\) closed its communicator after call #1/);
    expect(await rejection(w.comms[1]!.barrier())).toBeInstanceOf(CommunicatorAbortedError);
  });

  it('calls issued without awaiting run in call order, each correct', async () => {
    w = await makeWorld(3);
    const bufs = w.sides.map((s, r) => {
      const p = s.driver.memAlloc(12);
      s.driver.memcpyHtoD(p, new Uint8Array(new Int32Array([r, 10 * r, 100 * r]).buffer));
      return p;
    });
    const all = w.comms.map((c, r) => [
      c.allreduce({ send: bufs[r]!, count: 1, dtype: 'i32', op: 'sum' }),
      c.allreduce({ send: bufs[r]! + 4n, count: 1, dtype: 'i32', op: 'max' }),
      c.broadcast({ recv: bufs[r]! + 8n, count: 1, dtype: 'i32', root: 2 }),
      c.allreduce({ send: bufs[r]!, count: 1, dtype: 'i32', op: 'prod' }), // after the sum: 3 × 3 × 3
    ]);
    await Promise.all(all.flat());
    for (const [r, s] of w.sides.entries()) {
      const got = new Uint8Array(12);
      s.driver.memcpyDtoH(got, bufs[r]!);
      expect([...new Int32Array(got.buffer)]).toEqual([27, 20, 200]);
    }
  });

  it("calls on two streams, issued without awaiting, run in call order (each waits for the previous one's stream)", async () => {
    w = await makeWorld(2);
    const streams = w.sides.map((s) => [s.driver.streamCreate(), s.driver.streamCreate()]);
    const bufs = w.sides.map((s, r) => {
      const p = s.driver.memAlloc(4);
      s.driver.memcpyHtoD(p, new Uint8Array(new Int32Array([r + 2]).buffer));
      return p;
    });
    // (2+3)=5 → ×: 25 → +: 50 → ×: 2500, alternating streams.
    const ops = ['sum', 'prod', 'sum', 'prod'] as const;
    const all = w.comms.map((c, r) => ops.map((op, i) => c.allreduce({ send: bufs[r]!, count: 1, dtype: 'i32', op, stream: streams[r]![i % 2]! })));
    await Promise.all(all.flat());
    for (const [r, s] of w.sides.entries()) {
      const got = new Uint8Array(4);
      s.driver.memcpyDtoH(got, bufs[r]!);
      expect(new Int32Array(got.buffer)[0]).toBe(2500);
    }
  });

  it('device-side calls and calls that go through the host (staged, barrier), issued without awaiting, run in call order', async () => {
    w = await makeWorld(2);
    const stream = w.sides.map((s) => s.driver.streamCreate());
    const bufs = w.sides.map((s, r) => {
      const p = s.driver.memAlloc(4);
      s.driver.memcpyHtoD(p, new Uint8Array(new Int32Array([r + 2]).buffer));
      return p;
    });
    // 5 → 25 (staged) → 50 → barrier → 2500 (staged) → 5000
    const all = w.comms.map((c, r) => {
      const a = { send: bufs[r]!, count: 1, dtype: 'i32' as const, stream: stream[r]! };
      return [
        c.allreduce({ ...a, op: 'sum' }),
        c.allreduce({ ...a, op: 'prod', algorithm: 'staged' }),
        c.allreduce({ ...a, op: 'sum' }),
        c.barrier({ stream: stream[r]! }),
        c.allreduce({ ...a, op: 'prod', algorithm: 'staged' }),
        c.allreduce({ ...a, op: 'sum' }),
      ];
    });
    const res = await Promise.all(all.flat());
    // 2 ranks, 4 bytes: the LL one-shot (communicator.ts, LL_AUTO_MAX_BYTES); the barrier is a one-shot.
    expect(res.map((x) => x.algorithm).slice(0, 6)).toEqual(['one-shot-ll', 'staged', 'one-shot-ll', 'one-shot', 'staged', 'one-shot-ll']);
    for (const [r, s] of w.sides.entries()) {
      const got = new Uint8Array(4);
      s.driver.memcpyDtoH(got, bufs[r]!);
      expect(new Int32Array(got.buffer)[0]).toBe(5000);
    }
  });

  it('one rank is a communicator of one: every call is local', async () => {
    w = await makeWorld(1);
    const p = w.sides[0]!.driver.memAlloc(16);
    expect((await w.comms[0]!.allreduce({ send: p, count: 4, dtype: 'f32', op: 'avg' })).algorithm).toBe('local');
    expect((await w.comms[0]!.barrier()).algorithm).toBe('local');
  });

  it('refuses bad arguments before anything runs', async () => {
    w = await makeWorld(1);
    const c = w.comms[0]!;
    expect(() => c.allreduce({ send: 1n, count: 1, dtype: 'f32', op: 'sum' })).toThrow(/aligned/);
    expect(() => c.allreduce({ send: 16n, count: -1, dtype: 'f32', op: 'sum' })).toThrow(RangeError);
    expect(() => c.allreduce({ send: 16n, count: 1, dtype: 'f17' as 'f32', op: 'sum' })).toThrow(TypeError);
    expect(() => c.broadcast({ recv: 16n, count: 1, dtype: 'u8', root: 1 })).toThrow(/root/);
  });
});

describe('fromEndpoints', () => {
  it('refuses endpoints filed under the wrong rank, on both sides', async () => {
    const { makeSide } = await import('../../helpers/transport-pair.js');
    const { createMemoryChannelPair } = await import('../../../src/channel/memory-channel.js');
    const { Communicator } = await import('../../../src/collectives/communicator.js');
    const sides = await Promise.all([0, 1, 2].map((i) => makeSide(`rank${i}`, 0)));
    try {
      const eps: Record<string, import('../../../src/endpoint.js').Endpoint> = {};
      for (const [i, j] of [
        [0, 1],
        [0, 2],
        [1, 2],
      ] as const) {
        const [ci, cj] = createMemoryChannelPair({ names: [`rank${i}`, `rank${j}`] });
        [eps[`${i}${j}`], eps[`${j}${i}`]] = await Promise.all([sides[i]!.transport.attach(ci), sides[j]!.transport.attach(cj)]);
      }
      // rank 0 swaps its endpoints to 1 and 2
      const made = [
        Communicator.fromEndpoints({ transport: sides[0]!.transport, rank: 0, size: 3, endpoints: [undefined, eps['02'], eps['01']], timeoutMs: 5000 }),
        Communicator.fromEndpoints({ transport: sides[1]!.transport, rank: 1, size: 3, endpoints: [eps['10'], undefined, eps['12']], timeoutMs: 5000 }),
        Communicator.fromEndpoints({ transport: sides[2]!.transport, rank: 2, size: 3, endpoints: [eps['20'], eps['21'], undefined], timeoutMs: 5000 }),
      ];
      const results = await Promise.allSettled(made);
      expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']); // the others are not left waiting
      expect(String((results[0] as PromiseRejectedResult).reason.message)).toMatch(/the endpoint given for rank [12] leads to rank [12] of a job of 3/);
      for (const r of results) if (r.status === 'fulfilled') await r.value.close();
    } finally {
      for (const s of sides) {
        await s.transport.close();
        s.driver.close();
      }
    }
  });
});

describe('traces', () => {
  it("a 'collective' listener that throws fails that call with its error, not the communicator", async () => {
    w = await makeWorld(2);
    const boom = new Error('listener failed');
    const listener = () => {
      throw boom;
    };
    w.comms[0]!.once('collective', listener);
    const bufs = w.sides.map((s) => s.driver.memAlloc(64));
    const calls = w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 16, dtype: 'f32', op: 'sum' }));
    await expect(calls[0]).rejects.toBe(boom);
    await calls[1];
    await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 16, dtype: 'f32', op: 'sum' })));
    expect(w.comms[0]!.stats().aborted).toBeUndefined();
  });

  it("each completed call counts in stats(), is stats().last, and is a 'collective' event; the result has op, algorithm, bytes and us", async () => {
    w = await makeWorld(2);
    const events: unknown[] = [];
    w.comms[0]!.on('collective', (e) => events.push(e));
    const bufs = w.sides.map((s) => s.driver.memAlloc(64));
    const [first] = await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 16, dtype: 'i32', op: 'sum' })));
    await Promise.all(w.comms.map((c, r) => c.broadcast({ recv: bufs[r]!, count: 8, dtype: 'f32', root: 1 })));
    expect(Object.keys(first!).sort()).toEqual(['algorithm', 'bytes', 'op', 'us']);
    expect(first).toMatchObject({ op: 'allreduce', algorithm: 'one-shot-ll', bytes: 64 });
    const st = w.comms[0]!.stats();
    expect(st).toMatchObject({ calls: 2, byOp: { allreduce: 1, broadcast: 1 }, byAlgorithm: { 'one-shot-ll': 1, 'one-shot': 1 } });
    expect(st.last).toMatchObject({ op: 'broadcast', algorithm: 'one-shot', bytes: 32, dtype: 'f32', count: 8 });
    expect(events).toEqual([{ op: 'allreduce', algorithm: 'one-shot-ll', bytes: 64, us: first!.us, dtype: 'i32', count: 16 }, { ...st.last }]);
  });

  it('each completed call is a collective record in the trace, which smcuda trace reads', async () => {
    const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { parseTrace } = await import('../../../src/diagram/trace-records.js');
    const { toMermaidSequence } = await import('../../../src/diagram/sequence.js');
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-comm-trace-'));
    const file = join(dir, 'trace.jsonl');
    try {
      w = await makeWorld(2, { trace: file, oneShotMaxBytes: 64 });
      const bufs = w.sides.map((s) => s.driver.memAlloc(400));
      await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 100, dtype: 'f32', op: 'sum' })));
      await w.close();
      w = undefined;
      const records = parseTrace(readFileSync(file, 'utf8'), file).filter((r) => r.kind === 'collective');
      expect(records).toHaveLength(2);
      expect(records[0]).toMatchObject({ peer: '*', op: 'allreduce', dtype: 'f32', count: 100, algorithm: 'two-shot', bytes: 400 });
      expect(toMermaidSequence(records)).toMatch(/allreduce f32×100 by two-shot/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
