/**
 * A bad operation fails alone (docs/reliability.md, "A bad message fails
 * alone"): on the staging path a freed or invalid source, a bogus stream, a
 * bad `into`, a source freed while its send is in flight, and a receiver that
 * cannot allocate each fail that one send and its receive — both sides, the
 * other side told by a FIN with a status — while the endpoint stays open, an
 * unrelated receive stays pending and the next message goes through. An RGET
 * send refused for a bogus stream leaks no interprocess event.
 */
import { describe, expect, it, vi } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { CudaError, SmcudaError } from '../../../src/errors.js';
import { deviceWith, makePair, randomBytes, reach, readDevice, sameBytes, type Pair } from '../../helpers/transport-pair.js';
import { expectLifetimeViolations } from '../../helpers/lifetime-check.js';

const STAGING = { a: { negotiation: { ipc: false }, staging: { chunkSize: 4096, slots: 2 } }, b: { negotiation: { ipc: false } } };
const BOGUS_STREAM = 0xdead_beefn;

async function outcome<T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> {
  return p.then(
    (value) => ({ value }),
    (error: Error) => ({ error }),
  );
}

/** A receive on another tag, which must stay pending through the failure. */
function bystander(p: Pair) {
  let settled = false;
  const recv = p.b.ep.recv({ tag: 77 }).finally(() => (settled = true));
  return {
    async stillFine(): Promise<void> {
      await new Promise((r) => setTimeout(r, 30));
      expect(settled, 'an unrelated receive settled').toBe(false);
      expect(p.a.ep.closed || p.b.ep.closed, 'an endpoint closed').toBe(false);
      // and the endpoint still carries staged messages, on the bystander's tag too
      const bytes = randomBytes(10_000, 5);
      const src = deviceWith(p.a.driver, bytes);
      await p.a.ep.send(src, { tag: 77 });
      const r = await recv;
      expect(r.path).toBe('staging');
      expect(sameBytes(readDevice(p.b.driver, r.data as DeviceBuffer), bytes)).toBe(true);
      p.a.driver.memFree(src.ptr);
    },
  };
}

describe('staging: one bad operation fails alone', () => {
  it('a freed source: the send rejects at once, the endpoint stays open', async () => {
    const p = await makePair(STAGING);
    try {
      const by = bystander(p);
      const src = deviceWith(p.a.driver, randomBytes(20_000, 1));
      p.a.driver.memFree(src.ptr);
      const sent = await outcome(p.a.ep.send(src, { tag: 1 }));
      expect(sent.error).toBeInstanceOf(CudaError);
      await by.stillFine();
    } finally {
      await p.close();
    }
  });

  it('a source running past its allocation: RangeError at once, the endpoint stays open', async () => {
    const p = await makePair(STAGING);
    try {
      const by = bystander(p);
      const src = deviceWith(p.a.driver, randomBytes(20_000, 1));
      const sent = await outcome(p.a.ep.send({ ptr: src.ptr + 100n, length: 20_000 }, { tag: 1 }));
      expect(sent.error).toBeInstanceOf(RangeError);
      await by.stillFine();
      p.a.driver.memFree(src.ptr);
    } finally {
      await p.close();
    }
  });

  it('a bogus stream: the send rejects, the receive rejects by FIN SENDER_FAILED, the endpoint stays open', async () => {
    const p = await makePair(STAGING);
    try {
      const by = bystander(p);
      const src = deviceWith(p.a.driver, randomBytes(20_000, 1));
      const recv = outcome(p.b.ep.recv({ tag: 1 }));
      const sent = await outcome(p.a.ep.send(src, { tag: 1, stream: BOGUS_STREAM }));
      expect(sent.error).toBeInstanceOf(CudaError);
      const r = await recv;
      expect(r.error).toBeInstanceOf(SmcudaError);
      expect((r.error as SmcudaError).code).toBe('SMCUDA_SENDER_FAILED');
      await by.stillFine();
      p.a.driver.memFree(src.ptr);
    } finally {
      await p.close();
    }
  });

  it('a source freed while the send is in flight: that send and its receive fail, nothing else', async () => {
    const p = await makePair(STAGING);
    try {
      const by = bystander(p);
      const src = deviceWith(p.a.driver, randomBytes(64 << 10, 1));
      const recv = outcome(p.b.ep.recv({ tag: 1 }));
      // The source is freed between two chunks: after the first chunk's copy, before the second's.
      const copy = p.a.driver.memcpyDtoHAsync.bind(p.a.driver);
      let copies = 0;
      // The caller frees memory the GPU still reads: the simulator notes it, as it must (the point of this test).
      expectLifetimeViolations(p.a.driver);
      vi.spyOn(p.a.driver, 'memcpyDtoHAsync').mockImplementation((dst, s, stream) => {
        if (++copies === 2) p.a.driver.memFree(src.ptr);
        copy(dst, s, stream);
      });
      const sent = outcome(p.a.ep.send(src, { tag: 1 }));
      expect((await sent).error).toBeInstanceOf(CudaError);
      expect(((await recv).error as SmcudaError).code).toBe('SMCUDA_SENDER_FAILED');
      vi.mocked(p.a.driver.memcpyDtoHAsync).mockRestore();
      await by.stillFine();
    } finally {
      await p.close();
    }
  });

  it('a bad `into` (freed device memory): the receive rejects, the sender gets FIN FAILED, the endpoint stays open', async () => {
    const p = await makePair(STAGING);
    try {
      const by = bystander(p);
      const src = deviceWith(p.a.driver, randomBytes(20_000, 1));
      const into = p.b.driver.memAlloc(20_000);
      p.b.driver.memFree(into);
      const recv = outcome(p.b.ep.recv({ tag: 1, into: { ptr: into, length: 20_000 } }));
      const sent = await outcome(p.a.ep.send(src, { tag: 1 }));
      expect((await recv).error).toBeInstanceOf(CudaError);
      expect(sent.error).toBeInstanceOf(SmcudaError);
      expect((sent.error as SmcudaError).code).toBe('SMCUDA_REMOTE_COPY_FAILED');
      await by.stillFine();
      p.a.driver.memFree(src.ptr);
    } finally {
      await p.close();
    }
  });

  it('the receiver cannot allocate: the receive rejects with out-of-memory, the send settles by FIN FAILED', async () => {
    const p = await makePair(STAGING);
    try {
      const by = bystander(p);
      const src = deviceWith(p.a.driver, randomBytes(20_000, 1));
      const alloc = vi.spyOn(p.b.driver, 'memAlloc').mockImplementationOnce(() => {
        throw new CudaError('cuMemAlloc', 'CUDA_ERROR_OUT_OF_MEMORY', 2);
      });
      const recv = outcome(p.b.ep.recv({ tag: 1 }));
      const sent = await outcome(p.a.ep.send(src, { tag: 1 }));
      expect(alloc).toHaveBeenCalled();
      alloc.mockRestore();
      expect(((await recv).error as CudaError).code).toBe('CUDA_ERROR_OUT_OF_MEMORY');
      expect((sent.error as SmcudaError).code).toBe('SMCUDA_REMOTE_COPY_FAILED');
      expect(sent.error!.message).toMatch(/OUT_OF_MEMORY/);
      await by.stillFine();
      p.a.driver.memFree(src.ptr);
    } finally {
      await p.close();
    }
  });
});

describe('RGET: every error path releases what it took', () => {
  it('each RGET send refused for a bogus stream leaks no interprocess event', async () => {
    const p = await makePair();
    try {
      const warm = deviceWith(p.a.driver, randomBytes(64 << 10, 1));
      const got = p.b.ep.recv({ tag: 9 });
      await p.a.ep.send(warm, { tag: 9 });
      p.b.driver.memFree(((await got).data as DeviceBuffer).ptr);
      await reach(p.a.ep, 'OK');
      const before = p.a.driver.liveEvents;
      for (let i = 0; i < 20; i++) {
        const sent = await outcome(p.a.ep.send(warm, { tag: 1, stream: BOGUS_STREAM }));
        expect(sent.error).toBeInstanceOf(CudaError);
      }
      expect(p.a.driver.liveEvents).toBe(before);
      expect(p.a.ep.closed).toBe(false);
      p.a.driver.memFree(warm.ptr);
    } finally {
      await p.close();
    }
  });
});
