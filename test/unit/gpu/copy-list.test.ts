/**
 * Same-GPU copies by the copy kernel (src/copy-list.ts through GpuWork.copy):
 * a run of two or more copies whose destinations are on the device the
 * endpoint shares with its peer is one launch of a graph (the list copied
 * from pinned memory, then the kernel over it); a lone copy, any other run,
 * or a run with no free list goes to the driver's copy calls. Real copies on the simulated driver, whose twin of
 * smcuda_copy_list reads the list when the stream reaches the launch.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { GpuWork } from '../../../src/gpu/gpu-work.js';
import { ProgressEngine } from '../../../src/progress/engine.js';
import { copies, pattern, recorder, until } from '../../helpers/gpu-work-harness.js';
import { simDevice } from '../../helpers/sim-device.js';

const KiB = 1024;
const MiB = 1024 * KiB;

const works: GpuWork[] = [];

const sim = () => simDevice({ env: {} });

/** GpuWork of an endpoint whose peer shares device 0. */
function sameGpuWork(d: SimulatedCudaDriver): GpuWork {
  const g = new GpuWork(d, 0, new ProgressEngine(0), { device: 0, uuid: d.deviceInfo(0).uuid });
  works.push(g);
  return g;
}

afterEach(() => {
  vi.restoreAllMocks();
  for (const g of works.splice(0)) g.close();
});

function spies(d: SimulatedCudaDriver) {
  return {
    graph: vi.spyOn(d, 'graphLaunch'),
    batch: vi.spyOn(d, 'memcpyBatchAsync'),
    single: vi.spyOn(d, 'memcpyAsync'),
    record: vi.spyOn(d, 'eventRecord'),
  };
}

describe('same-GPU copies by the copy kernel', () => {
  it('a run of copies into the shared device is one graph launch and one event; each lands before its callback', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const { graph, batch, single, record } = spies(d);
    const rec = recorder();
    const cs = copies(d, 3, 64 * KiB + 3); // an odd size: the kernel's byte path
    for (const c of cs)
      g.copy(
        g.stream,
        c.dst,
        c.src,
        c.size,
        rec.cb(() => expect(c.landed()).toBe(true)),
        undefined,
        0,
      );
    expect(graph).not.toHaveBeenCalled();
    await Promise.resolve();
    expect(graph).toHaveBeenCalledTimes(1);
    expect(g.copyKernelStats()).toEqual({ launches: 1, copies: 3 });
    expect(batch).not.toHaveBeenCalled();
    // The only driver copy is the one the graph was captured with (its list, on a stream of its own).
    expect(single.mock.calls.filter((c) => c[3] === g.stream)).toEqual([]);
    expect(record).toHaveBeenCalledTimes(1);
    await until(() => rec.total() === 3);
    expect(rec.calls).toEqual([[undefined], [undefined], [undefined]]);
  });

  it('a copy whose destination device is unknown or another one sends the whole run to the driver', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const { graph, batch } = spies(d);
    const rec = recorder();
    const cs = copies(d, 3, 4 * KiB);
    g.copy(g.stream, cs[0]!.dst, cs[0]!.src, cs[0]!.size, rec.cb(), undefined, 0);
    g.copy(g.stream, cs[1]!.dst, cs[1]!.src, cs[1]!.size, rec.cb(), undefined, undefined);
    g.copy(g.stream, cs[2]!.dst, cs[2]!.src, cs[2]!.size, rec.cb(), undefined, 1);
    await until(() => rec.total() === 3);
    expect(graph).not.toHaveBeenCalled();
    expect(batch).toHaveBeenCalledTimes(1);
    expect(cs.every((c) => c.landed())).toBe(true);
  });

  it('same-GPU copies share a launch up to 16 MiB (other batches up to 4 MiB): five 4 MiB copies in one run are two launches', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const { graph, batch, single } = spies(d);
    const rec = recorder();
    const cs = copies(d, 5, 4 * MiB);
    for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, 0);
    await until(() => rec.total() === 5);
    // Four in the first launch (16 MiB), the fifth alone: a lone copy goes to the driver.
    expect(graph).toHaveBeenCalledTimes(1);
    expect(g.copyKernelStats()).toEqual({ launches: 1, copies: 4 });
    expect(single.mock.calls.filter((c) => c[3] === g.stream)).toHaveLength(1);
    expect(batch).not.toHaveBeenCalled();
    expect(cs.every((c) => c.landed())).toBe(true);
    // Copies with no destination device are batched up to 4 MiB: each 4 MiB copy goes alone, to the driver.
    const across = copies(d, 2, 4 * MiB, 7);
    for (const c of across) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, undefined);
    await until(() => rec.total() === 7);
    expect(graph).toHaveBeenCalledTimes(1);
    expect(single.mock.calls.filter((c) => c[3] === g.stream)).toHaveLength(3);
  });

  it('without a same-GPU peer, copies into device 0 go to the driver', async () => {
    const d = sim();
    const g = new GpuWork(d, 0);
    works.push(g);
    const { graph, batch } = spies(d);
    const rec = recorder();
    const cs = copies(d, 2, 4 * KiB);
    for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, 0);
    await until(() => rec.total() === 2);
    expect(graph).not.toHaveBeenCalled();
    expect(batch).toHaveBeenCalledTimes(1);
  });

  it('a lone copy goes to cuMemcpyAsync', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const { graph, single } = spies(d);
    const [c] = copies(d, 1, 4 * KiB);
    let landed = false;
    g.copy(g.stream, c!.dst, c!.src, c!.size, () => (landed = c!.landed()), undefined, 0);
    await until(() => landed);
    expect(graph).not.toHaveBeenCalled();
    expect(single.mock.calls.filter((x) => x[3] === g.stream)).toHaveLength(1);
  });

  it('with every list in flight a run goes to the driver; a completed run frees its list for the next', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const { graph, batch } = spies(d);
    const rec = recorder();
    // 17 runs of two before any completion is seen: 16 lists, the 17th by the driver.
    const cs = copies(d, 34, 4 * KiB);
    for (let k = 0; k < 34; k += 2) {
      for (const c of [cs[k]!, cs[k + 1]!]) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, 0);
      await Promise.resolve(); // the run ends: its batch is launched
    }
    expect(graph).toHaveBeenCalledTimes(16);
    expect(batch).toHaveBeenCalledTimes(1);
    await until(() => rec.total() === 34);
    expect(cs.every((c) => c.landed())).toBe(true);
    const next = copies(d, 2, 4 * KiB);
    for (const c of next) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, 0);
    await until(() => rec.total() === 36);
    expect(next.every((c) => c.landed())).toBe(true);
    expect(graph).toHaveBeenCalledTimes(17);
  });

  it('each list gets its graph once: later runs on a list launch the same graph', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const instantiate = vi.spyOn(d, 'graphInstantiate');
    const load = vi.spyOn(d, 'moduleLoadData');
    for (let round = 0; round < 3; round++) {
      const cs = copies(d, 2, 1 * KiB);
      let landed = 0;
      for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, () => (landed += c.landed() ? 1 : 0), undefined, 0);
      await until(() => landed === 2);
    }
    expect(instantiate).toHaveBeenCalledTimes(1); // one list in use at a time: the same slot each round
    expect(load.mock.calls.length).toBeLessThanOrEqual(1); // the kernel is loaded once per driver and device
  });

  it('where the kernel cannot be set up, the driver copies, and the set-up is not tried again', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    const load = vi.spyOn(d, 'moduleLoadData').mockImplementation(() => {
      throw new Error('no JIT here');
    });
    const capture = vi.spyOn(d, 'streamBeginCapture').mockImplementation(() => {
      throw new Error('no capture here');
    });
    const { graph, batch } = spies(d);
    for (let round = 0; round < 2; round++) {
      const cs = copies(d, 2, 1 * KiB);
      let landed = 0;
      for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, () => (landed += c.landed() ? 1 : 0), undefined, 0);
      await until(() => landed === 2);
    }
    expect(graph).not.toHaveBeenCalled();
    expect(batch).toHaveBeenCalledTimes(2);
    expect(load.mock.calls.length + capture.mock.calls.length).toBe(1);
    expect(g.copyKernelStats()).toEqual({ launches: 0, copies: 0, unavailable: expect.stringMatching(/no (JIT|capture) here/) });
  });

  it('a graph launch that fails sends its run to the driver: nothing is lost', async () => {
    const d = sim();
    const g = sameGpuWork(d);
    vi.spyOn(d, 'graphLaunch').mockImplementation(() => {
      throw new Error('launch refused');
    });
    const rec = recorder();
    const cs = copies(d, 2, 2 * KiB);
    for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, 0);
    await until(() => rec.total() === 2);
    expect(rec.calls).toEqual([[undefined], [undefined]]);
    expect(cs.every((c) => c.landed())).toBe(true);
  });

  it('close() with runs in flight frees the lists and graphs only once their copies completed', async () => {
    const d = sim();
    const g = new GpuWork(d, 0, new ProgressEngine(0), { device: 0, uuid: d.deviceInfo(0).uuid });
    const freed: string[] = [];
    const realAlloc = d.hostAlloc.bind(d);
    vi.spyOn(d, 'hostAlloc').mockImplementation((bytes) => {
      const b = realAlloc(bytes);
      return { bytes: b.bytes, devicePtr: b.devicePtr, free: () => (freed.push('lists'), b.free()) };
    });
    const execDestroy = vi.spyOn(d, 'graphExecDestroy');
    const rec = recorder();
    const cs = copies(d, 2, 256 * KiB);
    for (const c of cs) g.copy(g.stream, c.dst, c.src, c.size, rec.cb(), undefined, 0);
    await Promise.resolve(); // launched
    g.close();
    expect(freed).toEqual([]); // the kernel has not run yet: its lists stay
    expect(execDestroy).not.toHaveBeenCalled();
    await until(() => rec.total() === 2);
    await until(() => freed.length === 1);
    expect(execDestroy).toHaveBeenCalledTimes(1);
    expect(cs.every((c) => c.landed())).toBe(true);
  });
});

describe('property: runs of same-GPU and other copies', () => {
  const callArb = fc.record({ bytes: fc.constantFrom(1, 17, 4 * KiB, 1 * MiB + 5, 3 * MiB), local: fc.constantFrom<0 | 1 | undefined>(0, 0, 0, 1, undefined) });
  const runsArb = fc.array(fc.array(callArb, { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 5 });
  propTest.prop([runsArb], { numRuns: 30 })(
    'every copy lands before its callback, once; a batch (16 MiB of local copies, else 4 MiB) is one graph launch exactly when it holds two or more copies, all local',
    async (runs) => {
      const d = sim();
      const g = sameGpuWork(d);
      const graph = vi.spyOn(d, 'graphLaunch');
      const src = d.memAlloc(3 * MiB);
      const srcBytes = pattern(3 * MiB, 5);
      d.memcpyHtoD(src, srcBytes);
      const dst = d.memAlloc(8 * 3 * MiB + 64);
      const rec = recorder();
      let launches = 0;
      for (const run of runs) {
        d.memsetD8(dst, 0, 8 * 3 * MiB + 64);
        // The model: GpuWork's batches (at most 4 MiB each, 16 MiB while every copy is local), a graph launch for a batch of local copies only.
        let open: { bytes: number; local: boolean; copies: number } | undefined;
        const close = () => {
          if (open?.local && open.copies > 1) launches++;
          open = undefined;
        };
        let at = 0;
        for (const c of run) {
          if (!open || open.bytes + c.bytes > (open.local && c.local === 0 ? 16 * MiB : 4 * MiB)) {
            close();
            open = { bytes: 0, local: true, copies: 0 };
          }
          open.bytes += c.bytes;
          open.copies++;
          if (c.local !== 0) open.local = false;
          const off = at;
          at += c.bytes;
          g.copy(
            g.stream,
            dst + BigInt(off),
            src,
            c.bytes,
            rec.cb(() => {
              const out = new Uint8Array(c.bytes);
              d.memcpyDtoH(out, dst + BigInt(off));
              expect(Buffer.compare(out, srcBytes.subarray(0, c.bytes))).toBe(0);
            }),
            undefined,
            c.local,
          );
        }
        close();
        const want = rec.calls.length;
        await until(() => rec.total() === want);
      }
      expect(rec.allOnce()).toBe(true);
      expect(graph).toHaveBeenCalledTimes(launches);
      g.close();
      d.close();
    },
  );
});
