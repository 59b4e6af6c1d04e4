/**
 * Point to point never answers wrong and never hangs: a send and its
 * receive that disagree (count, dtype) fail on both ranks with
 * SMCUDA_P2P_MISMATCH, whichever rank calls first; a bad peer (out of
 * range, self) or buffer is refused at once on the caller and aborts the
 * peer; a receive whose peer never sends times out on every rank; a peer
 * lost or closed under a receive fails it within a bounded time; misused
 * batches are refused. Device path and staged path.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Communicator } from '../../../src/collectives/communicator.js';
import { CommunicatorAbortedError } from '../../../src/errors.js';
import { makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

/** Far below the calls' 30 s timeout; generous for a loaded CI machine. */
const BOUND_MS = 5000;

async function rejection(p: Promise<unknown>): Promise<CommunicatorAbortedError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CommunicatorAbortedError);
  return err as CommunicatorAbortedError;
}

async function within<T>(p: Promise<T>, ms = BOUND_MS): Promise<T> {
  const t0 = performance.now();
  const v = await p;
  expect(performance.now() - t0).toBeLessThan(ms);
  return v;
}

function pair(w: World): [Communicator, Communicator] {
  return w.comms as [Communicator, Communicator];
}

describe.each([
  { staged: false, path: 'device' },
  { staged: true, path: 'staged' },
])('point to point failures, $path path', ({ staged }) => {
  it.each([
    { name: 'count', send: { count: 100, dtype: 'f32' }, recv: { count: 200, dtype: 'f32' }, fields: /count differs/, first: 'sender' },
    { name: 'count', send: { count: 300, dtype: 'f32' }, recv: { count: 40, dtype: 'f32' }, fields: /count differs/, first: 'receiver' },
    { name: 'dtype', send: { count: 64, dtype: 'f32' }, recv: { count: 64, dtype: 'i32' }, fields: /dtype differs/, first: 'sender' },
    { name: 'dtype and count', send: { count: 64, dtype: 'f64' }, recv: { count: 128, dtype: 'f32' }, fields: /dtype and count differ/, first: 'receiver' },
  ] as const)('a $name mismatch ($first first) fails both ranks with SMCUDA_P2P_MISMATCH', async ({ send, recv, fields, first }) => {
    w = await makeWorld(2, { scratchBytes: 4096, ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const b0 = w.sides[0]!.driver.memAlloc(4096);
    const b1 = w.sides[1]!.driver.memAlloc(4096);
    // An agreeing pair first: the mismatch is the pair's second message.
    await Promise.all([c0.send({ buf: b0, count: 8, dtype: 'u8', peer: 1 }), c1.recv({ buf: b1, count: 8, dtype: 'u8', peer: 0 })]);
    const mk = [() => c0.send({ buf: b0, peer: 1, ...send }), () => c1.recv({ buf: b1, peer: 0, ...recv })];
    if (first === 'receiver') mk.reverse();
    const p = mk.map((f) => f());
    const errs = await within(Promise.all(p.map(rejection)));
    for (const e of errs) {
      expect(e.causeCode).toBe('SMCUDA_P2P_MISMATCH');
      expect(e.message).toMatch(/rank 0's send #2 to rank 1 is .* but rank 1's receive #2 from rank 0 is /);
      expect(e.message).toMatch(fields);
    }
    // Every later call fails at once with the same cause.
    for (const c of w.comms) expect((await rejection(c.barrier())).causeCode).toBe('SMCUDA_P2P_MISMATCH');
  });

  it.each([
    { name: 'a peer out of range', peer: 2 },
    { name: 'a negative peer', peer: -1 },
    { name: 'a fractional peer', peer: 0.5 },
    { name: 'itself', peer: 0 },
  ])('a send to $name throws SMCUDA_OUT_OF_RANGE at once, and the peer waiting for it fails too', async ({ peer }) => {
    w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const waiting = c1.recv({ buf: w.sides[1]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 0 });
    expect(() => c0.send({ buf: w!.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer })).toThrow(
      expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE', message: expect.stringMatching(/peer must be/) }),
    );
    const e = await within(rejection(waiting));
    expect(e.causeCode).toBe('SMCUDA_OUT_OF_RANGE');
    expect(e.failedRank).toBe(0);
  });

  it.each([
    { name: 'a pointer that is no device memory', buf: () => 0x7777_0000n, code: 'CUDA_ERROR_INVALID_VALUE' },
    { name: 'a buffer shorter than the call', buf: (w: World) => w.sides[0]!.driver.memAlloc(32), code: 'SMCUDA_OUT_OF_RANGE' },
    { name: 'a misaligned pointer', buf: (w: World) => w.sides[0]!.driver.memAlloc(128) + 2n, code: 'SMCUDA_OUT_OF_RANGE' },
    { name: 'a number for a pointer', buf: () => 4096 as unknown as bigint, code: 'SMCUDA_INVALID_ARG_TYPE' },
    { name: 'a buffer object shorter than the call', buf: (w: World) => ({ ptr: w.sides[0]!.driver.memAlloc(64), length: 32 }), code: 'SMCUDA_OUT_OF_RANGE' },
  ])('a recv into $name throws $code at once, and the sender fails too', async ({ buf, code }) => {
    w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const sending = c1.send({ buf: w.sides[1]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 0 });
    expect(() => c0.recv({ buf: buf(w!), count: 16, dtype: 'f32', peer: 1 })).toThrow(expect.objectContaining({ code }));
    const e = await within(rejection(sending));
    expect(e.causeCode).toBe(code);
  });

  it('a bad count or dtype throws at once, and the peer fails too', async () => {
    w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const waiting = c1.recv({ buf: w.sides[1]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 0 });
    expect(() => c0.send({ buf: w!.sides[0]!.driver.memAlloc(64), count: -1, dtype: 'f32', peer: 1 })).toThrow(
      expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE' }),
    );
    expect((await within(rejection(waiting))).causeCode).toBe('SMCUDA_OUT_OF_RANGE');
    expect(() => c0.send({ buf: 0n, count: 1, dtype: 'f17' as 'f32', peer: 1 })).toThrow(expect.objectContaining({ code: 'SMCUDA_INVALID_ARG_TYPE' }));
  });

  it("a recv whose peer never sends times out with the communicator's timeout, on every rank", async () => {
    w = await makeWorld(2, { scratchBytes: 4096, ipcOpenFails: staged, timeoutMs: 300 });
    const [c0, c1] = pair(w);
    const t0 = performance.now();
    const e = await rejection(c0.recv({ buf: w.sides[0]!.driver.memAlloc(4096), count: 1000, dtype: 'f32', peer: 1 }));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(250);
    expect(e.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
    expect(e.message).toMatch(/recv #1 from rank 1 .* did not complete within 300 ms \(rank 1 never made the send matching this rank's recv #1\)/);
    // Rank 1 learns it too.
    expect((await within(rejection(c1.barrier()))).causeCode).toBe('SMCUDA_COMM_TIMEOUT');
  });

  it('a timeout past what setTimeout takes (2^31 ms) does not fire early', async () => {
    w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const recv = c0.recv({ buf: w.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 1, timeoutMs: 2 ** 32 });
    await new Promise((r) => setTimeout(r, 50));
    await Promise.all([recv, c1.send({ buf: w.sides[1]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 0 })]);
  });

  it('a peer lost during a recv (its transport closes, no goodbye) fails the recv with SMCUDA_PEER_LOST within a bounded time', async () => {
    w = await makeWorld(3, { scratchBytes: 4096 * 3, ipcOpenFails: staged, timeoutMs: 30_000 });
    const bufs = w.sides.map((s) => s.driver.memAlloc(40_000));
    // Rank 0 receives many chunks from rank 2, which sends only part of them before it dies.
    const recv = w.comms[0]!.recv({ buf: bufs[0]!, count: 10_000, dtype: 'f32', peer: 2 });
    const other = w.comms[1]!.recv({ buf: bufs[1]!, count: 10, dtype: 'f32', peer: 2 });
    await new Promise((r) => setTimeout(r, 50));
    await w.sides[2]!.transport.close();
    for (const e of await within(Promise.all([rejection(recv), rejection(other)]))) {
      expect(e.failedRank).toBe(2);
      expect(e.causeCode).toBe('SMCUDA_PEER_LOST');
    }
  });

  it('a peer that closes its communicator without making the matching send fails the recv with SMCUDA_PEER_CLOSED', async () => {
    w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const recv = c0.recv({ buf: w.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 1 });
    await c1.close();
    const e = await within(rejection(recv));
    expect(e.causeCode).toBe('SMCUDA_PEER_CLOSED');
    expect(e.failedRank).toBe(1);
  });

  it('batch misuse is refused with SMCUDA_P2P_BATCH and aborts every rank: a collective inside, a nested batch, an async function, two streams', async () => {
    const cases: Array<(c: Communicator, buf: bigint) => unknown> = [
      (c, buf) => c.batch(() => void c.allreduce({ send: buf, count: 4, dtype: 'f32', op: 'sum' }).catch(() => undefined)),
      (c) => c.batch(() => c.batch(() => undefined)),
      (c) => c.batch(async () => undefined),
      (c, buf) =>
        c.batch(() => {
          c.send({ buf, count: 4, dtype: 'f32', peer: 1 });
          c.send({ buf, count: 4, dtype: 'f32', peer: 1, stream: w!.sides[0]!.driver.streamCreate() });
        }),
    ];
    for (const misuse of cases) {
      w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
      const [c0, c1] = pair(w);
      const buf = w.sides[0]!.driver.memAlloc(64);
      const waiting = c1.recv({ buf: w.sides[1]!.driver.memAlloc(64), count: 4, dtype: 'f32', peer: 0 });
      let thrown: unknown;
      try {
        await misuse(c0, buf);
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toMatchObject({ code: expect.stringMatching(/^SMCUDA_(P2P_BATCH|COMM_ABORTED)$/) });
      const e = await within(rejection(waiting));
      expect(e.causeCode).toBe('SMCUDA_P2P_BATCH');
      await w.close();
      w = undefined;
    }
  });

  it.runIf(staged)('a staged recv posted when the communicator aborts is withdrawn from the endpoint: the endpoint stays usable', async () => {
    w = await makeWorld(2, { ipcOpenFails: true, timeoutMs: 30_000 });
    const [c0, c1] = pair(w);
    const d1 = w.sides[1]!.driver;
    // Rank 1's stream waits on a flag: its send is made (its print reaches rank 0, whose recv is posted) but never moves.
    const stream = d1.streamCreate();
    const flag = d1.memAlloc(8);
    d1.memsetD8(flag, 0, 8);
    d1.streamBatchMemOp(stream, [{ op: 'wait64', addr: flag, value: 1n, condition: 'geq' }]);
    const send = c1.send({ buf: d1.memAlloc(64), count: 16, dtype: 'f32', peer: 0, stream });
    const recv = c0.recv({ buf: w.sides[0]!.driver.memAlloc(64), count: 16, dtype: 'f32', peer: 1 });
    await new Promise((r) => setTimeout(r, 100));
    c0.abort(new Error('the data loader failed'));
    expect((await within(rejection(recv))).message).toMatch(/the data loader failed/);
    // Rank 1's send fails once its stream has left the call (its own wait, released here).
    d1.memcpyHtoD(flag, new Uint8Array(new BigUint64Array([1n]).buffer));
    expect((await within(rejection(send))).message).toMatch(/the data loader failed/);
    // A message on the staged tag now reaches the application's own receive, not the withdrawn one.
    const tag = 0xf0000000;
    const got = w.comms[0]!.endpoint(1).recv({ tag });
    await w.comms[1]!.endpoint(0).send(new Uint8Array([1, 2, 3]), { tag });
    expect([...((await within(got)).data as Uint8Array)]).toEqual([1, 2, 3]);
  });

  it('calls after close reject with SMCUDA_CLOSED; an empty batch resolves with no results', async () => {
    w = await makeWorld(2, { ipcOpenFails: staged, timeoutMs: 30_000 });
    const [c0] = pair(w);
    await expect(c0.batch(() => undefined)).resolves.toEqual([]);
    const buf = w.sides[0]!.driver.memAlloc(64);
    await Promise.all(w.comms.map((c) => c.close()));
    await expect(c0.send({ buf, count: 4, dtype: 'f32', peer: 1 })).rejects.toMatchObject({ causeCode: 'SMCUDA_CLOSED' });
  });
});
