/**
 * The NCCL engine between nodes (src/collectives/nccl-engine.ts) over the
 * fake libnccl.so.2 (test/fixtures/fake-libnccl.c: one rank, host memory),
 * so that its wiring runs in CI: the unique id through the store, the
 * print allgathered before each call, the call queued with its arguments,
 * NCCL's asynchronous error into the engine's error (the hierarchy's abort
 * path), and destroy on close. "Device" memory is host memory here (the
 * fake reads and writes it). Its own file: NCCL stays loaded in its process.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { NcclEngine } from '../../../src/collectives/nccl-engine.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { CommunicatorAbortedError } from '../../../src/errors.js';
import { loadNccl } from '../../../src/nccl/nccl.js';
import { buildFakeNccl, type FakeNccl, fakeNcclSkip, shm } from '../../helpers/fake-nccl.js';
import { memoryStore } from '../../helpers/memory-store.js';

const skip = fakeNcclSkip;

/** A driver whose "device" memory is host memory at real addresses: what the fake NCCL reads and writes. */
function hostDriver(): CudaDriver & { regions: Map<bigint, Uint8Array> } {
  const regions = new Map<bigint, Uint8Array>();
  const at = (p: bigint, n: number): Uint8Array => {
    for (const [base, b] of regions) if (p >= base && p + BigInt(n) <= base + BigInt(b.byteLength)) return b.subarray(Number(p - base), Number(p - base) + n);
    throw new Error(`0x${p.toString(16)} (${n} bytes) is not memory of this driver`);
  };
  const bytes = (v: ArrayBufferView) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  return {
    regions,
    memAlloc(n: number) {
      const b = new Uint8Array(n);
      const p = shm!.bufferAddress(b.buffer as ArrayBuffer);
      regions.set(p, b);
      return p;
    },
    memFree(p: bigint) {
      regions.delete(p);
    },
    memcpyHtoD(dst: bigint, src: ArrayBufferView) {
      at(dst, src.byteLength).set(bytes(src));
    },
    memcpyDtoH(dst: ArrayBufferView, src: bigint) {
      bytes(dst).set(at(src, dst.byteLength));
    },
  } as unknown as CudaDriver & { regions: Map<bigint, Uint8Array> };
}

describe.skipIf(skip !== false)(`the NCCL engine over a fake libnccl.so.2${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let fake: FakeNccl;

  beforeAll(() => {
    fake = buildFakeNccl();
    vi.stubEnv('FAKE_NCCL_LOG', fake.log);
    loadNccl({ env: { SMCUDA_NCCL_LIBRARY: fake.library } }); // the engine's loadNccl() finds it loaded
  });
  afterAll(() => {
    vi.unstubAllEnvs();
    fake?.remove();
  });

  const open = (driver: CudaDriver) =>
    NcclEngine.open({
      store: memoryStore(),
      group: 0,
      rank: 0,
      size: 1,
      driver,
      reached: async () => {},
      globalRank: (k) => 4 + k,
      setupMs: 5000,
      timeoutMs: 5000,
    });

  it('joins through the store, allgathers the print of each call before it, then queues the call; close destroys the communicator', async () => {
    const driver = hostDriver();
    const e = await open(driver);
    const send = driver.memAlloc(12);
    const recv = driver.memAlloc(12);
    driver.memcpyHtoD(send, new Float32Array([1, 2, 3]));
    const before = fake.lines().length;
    await e.allreduce({ send, recv, count: 3, dtype: 'f32', op: 'sum', stream: 0n });
    const out = new Float32Array(3);
    driver.memcpyDtoH(out, recv);
    expect([...out]).toEqual([1, 2, 3]); // one rank: the sum is its own
    const calls = fake
      .lines()
      .slice(before)
      .map((l) => l.split(' ')[0]);
    expect(calls.filter((c) => c !== 'ncclCommGetAsyncError')).toEqual(['ncclAllGather', 'ncclAllReduce']);
    expect(fake.lines().find((l) => l.startsWith('ncclAllReduce'))).toMatch(/count=3 dtype=7 op=0/);
    await e.close();
    expect(fake.lines().some((l) => l.startsWith('ncclCommDestroy'))).toBe(true);
  });

  it('says what NCCL cannot reduce between nodes: no bitwise op, no integer average', async () => {
    const e = await open(hostDriver());
    expect(e.supports('band', 'u32')).toBe(false);
    expect(e.supports('avg', 'i32')).toBe(false);
    expect(e.supports('avg', 'bf16')).toBe(true);
    expect(e.supports('max', 'i64')).toBe(true);
    await e.close();
  });

  it("NCCL's asynchronous error becomes the engine's error (a CommunicatorAbortedError with NCCL's code), and later calls fail with it", async () => {
    const driver = hostDriver();
    const e = await open(driver);
    const heard = new Promise<Error>((resolve) => e.onError(resolve));
    const b = driver.memAlloc(4);
    vi.stubEnv('FAKE_NCCL_BREAK', '6'); // the next collective breaks the communicator: a remote rank lost
    await e.broadcast({ buf: b, count: 1, dtype: 'f32', root: 0, stream: 0n }).catch(() => {});
    vi.stubEnv('FAKE_NCCL_BREAK', '');
    const err = await heard;
    expect(err).toBeInstanceOf(CommunicatorAbortedError);
    expect(err).toMatchObject({ causeCode: 'SMCUDA_NCCL_REMOTE_ERROR', failedRank: 4 });
    await expect(e.barrier()).rejects.toMatchObject({ causeCode: 'SMCUDA_NCCL_REMOTE_ERROR' });
    await e.close();
    expect(fake.lines().some((l) => l.startsWith('ncclCommAbort'))).toBe(true);
  });
});
