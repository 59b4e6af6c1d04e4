/**
 * The NCCL binding against the real NCCL on a GPU: loadNccl finds PyTorch's
 * wheel (nvidia/nccl/lib) or the system's libnccl.so.2, and a 1-rank
 * communicator allreduces device memory on a stream. Skipped, visibly,
 * where no GPU is usable or no NCCL is installed (the reason is in the
 * suite's name).
 */
import { describe, expect, it } from 'vitest';
import type { Nccl } from '../../src/nccl/nccl.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
let nccl: Nccl | undefined;
let why: string | false = p.skip;
if (why === false) {
  try {
    const { loadNccl } = await import('../../src/nccl/nccl.js');
    nccl = loadNccl();
  } catch (err) {
    why = `NCCL unavailable: ${(err as Error).message.split('\n')[0]}`;
  }
}

describe.skipIf(why !== false)(`NCCL on the GPU${why ? ` (skipped: ${why})` : ''}`, () => {
  it('loads the real NCCL, makes a unique id, and allreduces device memory on one rank', async () => {
    const n = nccl!;
    expect(n.version.major).toBe(2);
    expect(n.version.minor).toBeGreaterThanOrEqual(14);
    expect(n.uniqueId().byteLength).toBe(128);
    const driver = p.make!();
    driver.init();
    driver.setDevice(0);
    const count = 1 << 20;
    const bytes = count * 4;
    const send = driver.memAlloc(bytes);
    const recv = driver.memAlloc(bytes);
    const stream = driver.streamCreate();
    const comm = await n.initRank({ size: 1, rank: 0, id: n.uniqueId(), timeoutMs: 60_000 });
    try {
      expect(comm.asyncError()).toBeUndefined();
      const input = Float32Array.from({ length: count }, (_, i) => (i % 1000) * 0.5);
      driver.memcpyHtoD(send, input);
      driver.memcpyHtoD(recv, new Float32Array(count));
      comm.allReduce({ send, recv, count, dtype: 'f32', op: 'sum', stream });
      driver.streamSynchronize(stream);
      await comm.whenReady('ncclAllReduce', 7, 10_000);
      const out = new Float32Array(count);
      driver.memcpyDtoH(out, recv);
      expect(out).toEqual(input);
      comm.allToAll({ send, recv, count, dtype: 'f32', stream });
      driver.streamSynchronize(stream);
      driver.memcpyDtoH(out, recv);
      expect(out).toEqual(input);
    } finally {
      comm.destroy();
      driver.streamDestroy(stream);
      driver.memFree(send);
      driver.memFree(recv);
      driver.close();
    }
  });
});
