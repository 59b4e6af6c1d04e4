/**
 * The NCCL binding over a fake libnccl.so.2 (test/fixtures/fake-libnccl.c:
 * one rank, host memory), so that the loader, the argument passing, the
 * result mapping and the optional-symbol detection run for real without a
 * GPU or NCCL. The fake logs each call's arguments (FAKE_NCCL_LOG); the
 * assertions read them. Its own file: NCCL stays loaded in its process.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { ArgumentRangeError, ArgumentTypeError, ClosedError, NcclError } from '../../../src/errors.js';
import { type Nccl, NCCL_SPLIT_NOCOLOR, loadNccl } from '../../../src/nccl/nccl.js';
import { buildFakeNccl, type FakeNccl, fakeNcclSkip, shm } from '../../helpers/fake-nccl.js';

const skip = fakeNcclSkip;

/** Host memory the fake reads and writes, and its address. */
function host(values: number[]): { view: Float32Array; ptr: bigint } {
  const view = Float32Array.from(values);
  return { view, ptr: shm!.bufferAddress(view.buffer as ArrayBuffer) };
}

describe.skipIf(skip !== false)(`the binding over a fake libnccl.so.2${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let fake: FakeNccl;
  let nccl: Nccl;

  beforeAll(() => {
    fake = buildFakeNccl();
    vi.stubEnv('FAKE_NCCL_LOG', fake.log);
    nccl = loadNccl({ env: { SMCUDA_NCCL_LIBRARY: fake.library } });
  });
  afterEach(() => {
    vi.stubEnv('FAKE_NCCL_BREAK', '');
    vi.stubEnv('FAKE_NCCL_ID_FAIL', '');
  });
  afterAll(() => {
    vi.unstubAllEnvs();
    fake?.remove();
  });

  const lastLine = () => fake.lines().at(-1);

  it('loads it, with its version, path and every optional entry point found', () => {
    expect(nccl.path).toBe(fake.library);
    expect(nccl.version).toEqual({ code: 22707, major: 2, minor: 27, patch: 7, text: '2.27.7' });
    expect(nccl.symbols).toEqual({
      ncclCommSplit: true,
      ncclGetLastError: true,
      ncclCommRegister: true,
      ncclCommDeregister: true,
      ncclCommWindowRegister: true,
      ncclCommWindowDeregister: true,
      ncclMemAlloc: true,
      ncclMemFree: true,
    });
    expect(nccl.capabilities).toEqual({ split: true, lastError: true, register: true, windowRegister: true, memAlloc: true });
    // Loaded once per process: another search changes nothing.
    expect(loadNccl({ env: { SMCUDA_NCCL_LIBRARY: '/nonexistent' } })).toBe(nccl);
  });

  it('uniqueId: the 128 bytes NCCL made; a failure is an NcclError with NCCL’s words and its last error', () => {
    const id = nccl.uniqueId();
    expect(id.byteLength).toBe(128);
    expect([id[0], id[1], id[127]]).toEqual([0x5a, 1 ^ 0x5a, 127 ^ 0x5a]);
    vi.stubEnv('FAKE_NCCL_ID_FAIL', '2');
    let err: NcclError | undefined;
    try {
      nccl.uniqueId();
    } catch (e) {
      err = e as NcclError;
    }
    expect(err).toBeInstanceOf(NcclError);
    expect(err).toMatchObject({
      code: 'SMCUDA_NCCL_SYSTEM_ERROR',
      call: 'ncclGetUniqueId',
      result: 2,
      detail: 'unhandled system error (run with NCCL_DEBUG=INFO for details)',
      lastError: 'fake: no network interface for the bootstrap',
    });
    expect(err!.message).toContain('NCCL_SOCKET_IFNAME');
  });

  it('initRank: a non-blocking config (NCCL_CONFIG_INITIALIZER of 2.27), polled until ready; the settings reach NCCL', async () => {
    const id = nccl.uniqueId();
    const comm = await nccl.initRank({ size: 1, rank: 0, id });
    expect(lastLine()).toBe(
      'ncclCommInitRankConfig nranks=1 rank=0 id0=90 id127=37 size=72 version=22700 blocking=0 cga=-2147483648 minCTAs=-2147483648 maxCTAs=-2147483648 splitShare=-2147483648',
    );
    expect(comm.asyncError()).toBeUndefined();
    comm.destroy();
    const c2 = await nccl.initRank({ size: 1, rank: 0, id, config: { blocking: true, minCTAs: 2, maxCTAs: 8, cgaClusterSize: 0, splitShare: true } });
    expect(fake.lines().at(-1)).toMatch(/blocking=1 cga=0 minCTAs=2 maxCTAs=8 splitShare=1$/);
    c2.destroy();
  });

  it('refuses bad arguments before NCCL sees them', async () => {
    const id = nccl.uniqueId();
    const before = fake.lines().length;
    await expect(nccl.initRank({ size: 2, rank: 2, id })).rejects.toThrow(ArgumentRangeError);
    await expect(nccl.initRank({ size: 1, rank: 0, id: id.subarray(1) })).rejects.toThrow(ArgumentTypeError);
    await expect(nccl.initRank({ size: 1, rank: 0, id, config: { minCTAs: 4, maxCTAs: 2 } })).rejects.toThrow(/minCTAs \(4\) must not exceed/);
    const comm = await nccl.initRank({ size: 1, rank: 0, id });
    const a = host([1, 2]);
    const calls = fake.lines().length;
    expect(() => comm.allReduce({ send: a.ptr, recv: a.ptr, count: 2, dtype: 'f32', op: 'premul' })).toThrow(ArgumentTypeError);
    expect(() => comm.allReduce({ send: a.ptr, recv: a.ptr, count: 2, dtype: 'f32', op: 'band' })).toThrow(/NCCL's reductions \(sum, prod, max, min, avg\)/);
    expect(() => comm.allReduce({ send: 5 as unknown as bigint, recv: a.ptr, count: 2, dtype: 'f32', op: 'sum' })).toThrow(ArgumentTypeError);
    expect(() => comm.allReduce({ send: a.ptr, recv: a.ptr, count: -1, dtype: 'f32', op: 'sum' })).toThrow(ArgumentRangeError);
    expect(() => comm.allReduce({ send: a.ptr, recv: a.ptr, count: 2, dtype: 'f17' as 'f32', op: 'sum' })).toThrow(ArgumentTypeError);
    expect(() => comm.broadcast({ send: a.ptr, recv: a.ptr, count: 2, dtype: 'f32', root: 1 })).toThrow(ArgumentRangeError);
    expect(() => comm.send({ buffer: a.ptr, count: 2, dtype: 'f32', peer: -1 })).toThrow(ArgumentRangeError);
    await expect(comm.split({ color: -2, key: 0 })).rejects.toThrow(ArgumentRangeError);
    expect(fake.lines().length).toBe(calls);
    expect(before).toBeLessThan(calls);
    comm.destroy();
  });

  it('the collectives pass pointers, count, datatype, op, root and stream as NCCL takes them', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    const a = host([1, 2, 3, 4]);
    const b = host([0, 0, 0, 0]);
    const hex = (p: bigint) => `0x${p.toString(16)}`;
    const c = hex(comm.handle);
    expect(comm.allReduce({ send: a.ptr, recv: b.ptr, count: 4, dtype: 'f32', op: 'sum', stream: 0x1234n })).toBe(0);
    expect(lastLine()).toBe(`ncclAllReduce send=${hex(a.ptr)} recv=${hex(b.ptr)} count=4 dtype=7 op=0 root=-1 comm=${c} stream=0x1234`);
    expect([...b.view]).toEqual([1, 2, 3, 4]);
    comm.allReduce({ send: a.ptr, recv: b.ptr, count: 2, dtype: 'bf16', op: 'max' });
    expect(lastLine()).toBe(`ncclAllReduce send=${hex(a.ptr)} recv=${hex(b.ptr)} count=2 dtype=9 op=2 root=-1 comm=${c} stream=(nil)`);
    comm.broadcast({ send: a.ptr, recv: b.ptr, count: 1, dtype: 'i64', root: 0 });
    expect(lastLine()).toMatch(/^ncclBroadcast .* count=1 dtype=4 op=-1 root=0 /);
    comm.reduce({ send: a.ptr, recv: b.ptr, count: 4, dtype: 'u8', op: 'avg', root: 0 });
    expect(lastLine()).toMatch(/^ncclReduce .* count=4 dtype=1 op=4 root=0 /);
    comm.allGather({ send: a.ptr, recv: b.ptr, count: 3, dtype: 'f16' });
    expect(lastLine()).toMatch(/^ncclAllGather .* count=3 dtype=6 /);
    comm.reduceScatter({ send: a.ptr, recv: b.ptr, count: 2, dtype: 'f64', op: 'prod' });
    expect(lastLine()).toMatch(/^ncclReduceScatter .* count=2 dtype=8 op=1 /);
    comm.destroy();
  });

  it('allToAll is one group of a send and a receive per peer; send/recv outside a group fail as NCCL says', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    const a = host([7, 8, 9]);
    const b = host([0, 0, 0]);
    const n = fake.lines().length;
    expect(comm.allToAll({ send: a.ptr, recv: b.ptr, count: 3, dtype: 'f32' })).toBe(0);
    expect(
      fake
        .lines()
        .slice(n)
        .map((l) => l.split(' ')[0]),
    ).toEqual(['ncclGroupStart', 'ncclSend', 'ncclRecv', 'ncclGroupEnd']);
    expect([...b.view]).toEqual([7, 8, 9]);
    let err: unknown;
    try {
      comm.send({ buffer: a.ptr, count: 3, dtype: 'f32', peer: 0 });
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({
      code: 'SMCUDA_NCCL_INVALID_USAGE',
      call: 'ncclSend',
      result: 5,
      lastError: 'fake: a one-rank fake sends to itself, in a group',
    });
    expect(() => nccl.groupEnd()).toThrow(/ncclGroupEnd failed: SMCUDA_NCCL_INVALID_USAGE \(ncclResult_t 5\)/);
    comm.destroy();
  });

  it('a communicator that never completes (the other ranks never come) times out, typed, and is aborted', async () => {
    const t0 = Date.now();
    const err = await nccl.initRank({ size: 2, rank: 0, id: nccl.uniqueId(), timeoutMs: 50 }).catch((e: unknown) => e);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(err).toBeInstanceOf(NcclError);
    expect(err).toMatchObject({ code: 'SMCUDA_NCCL_TIMEOUT', call: 'ncclCommInitRankConfig' });
    expect(lastLine()).toMatch(/^ncclCommAbort comm=0x/);
  });

  it('an asynchronous error (a remote rank lost) reaches watch() once, typed; after abort every call is refused', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    const seen: NcclError[] = [];
    const got = new Promise<void>((resolve) => comm.watch((e) => (seen.push(e), resolve()), 5));
    const a = host([1]);
    vi.stubEnv('FAKE_NCCL_BREAK', '6');
    comm.allReduce({ send: a.ptr, recv: a.ptr, count: 1, dtype: 'f32', op: 'sum' });
    await got;
    await new Promise((r) => setTimeout(r, 30));
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ code: 'SMCUDA_NCCL_REMOTE_ERROR', result: 6, detail: 'remote process exited or there was a network error' });
    expect(comm.asyncError()?.code).toBe('SMCUDA_NCCL_REMOTE_ERROR');
    comm.abort();
    comm.abort();
    expect(() => comm.allReduce({ send: a.ptr, recv: a.ptr, count: 1, dtype: 'f32', op: 'sum' })).toThrow(ClosedError);
    expect(() => comm.asyncError()).toThrow(/was aborted: make a new one/);
    expect(fake.lines().filter((l) => l.startsWith('ncclCommAbort')).length).toBeGreaterThan(0);
  });

  it('split: a color makes a communicator (rank and size from NCCL), NCCL_SPLIT_NOCOLOR none', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    const child = await comm.split({ color: 3, key: 0, config: { splitShare: true } });
    expect(lastLine()).toMatch(/^ncclCommSplit comm=0x[0-9a-f]+ color=3 key=0 blocking=0$/);
    expect(child).toMatchObject({ rank: 0, size: 1 });
    // Polled until ready: a collective on it goes through.
    const a = host([5]);
    expect(child!.allReduce({ send: a.ptr, recv: a.ptr, count: 1, dtype: 'f32', op: 'sum' })).toBe(0);
    expect(await comm.split({ color: NCCL_SPLIT_NOCOLOR, key: 0 })).toBeUndefined();
    child!.destroy();
    comm.destroy();
  });

  it('registration and windows hand back NCCL’s handles and take them back', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    const a = host([1, 2, 3, 4]);
    const handle = comm.register(a.ptr, 16);
    expect(handle).toBe(a.ptr + 1n);
    comm.deregister(handle);
    expect(lastLine()).toBe(`ncclCommDeregister comm=0x${comm.handle.toString(16)} handle=0x${handle.toString(16)}`);
    expect(() => comm.deregister(0n)).toThrow(expect.objectContaining({ code: 'SMCUDA_NCCL_INVALID_ARGUMENT', lastError: 'fake: NULL handle' }));
    const win = comm.windowRegister(a.ptr, 16, 1);
    expect(lastLine()).toMatch(/size=16 flags=1$/);
    comm.windowDeregister(win);
    comm.destroy();
    comm.destroy();
  });

  it('memAlloc: NCCL’s memory (the fake’s is host memory), for a window; memFree gives it back', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    const ptr = nccl.memAlloc(64);
    expect(lastLine()).toBe(`ncclMemAlloc size=64 ptr=0x${ptr.toString(16)}`);
    const win = comm.windowRegister(ptr, 64, 1);
    expect(win).toBe(ptr + 2n);
    comm.windowDeregister(win);
    nccl.memFree(ptr);
    expect(lastLine()).toBe(`ncclMemFree ptr=0x${ptr.toString(16)}`);
    expect(() => nccl.memAlloc(0)).toThrow(ArgumentRangeError);
    expect(() => nccl.memFree(-1n)).toThrow(ArgumentRangeError);
    comm.destroy();
  });

  it('FAKE_NCCL_PEERS_JOIN: a communicator of several ranks is ready as if every rank had come (the bench’s plumbing)', async () => {
    vi.stubEnv('FAKE_NCCL_PEERS_JOIN', '1');
    try {
      const comm = await nccl.initRank({ size: 2, rank: 1, id: nccl.uniqueId(), config: { blocking: true } });
      expect(comm).toMatchObject({ rank: 1, size: 2 });
      const a = host([5]);
      expect(comm.allReduce({ send: a.ptr, recv: a.ptr, count: 1, dtype: 'f32', op: 'sum' })).toBe(0);
      comm.destroy();
    } finally {
      vi.stubEnv('FAKE_NCCL_PEERS_JOIN', '');
    }
  });
});
