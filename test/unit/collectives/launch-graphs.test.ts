/**
 * LaunchGraphs (src/collectives/launch-graphs.ts) on the simulated driver:
 * a launch seen once goes directly, the second time it is captured and the
 * graph launched from then on (each replay does the work again), other
 * arguments are other launches, the oldest graph goes past the capacity, a
 * driver without graphs or one that refuses the capture gets direct
 * launches, and close() destroys what it made. Then a communicator: the
 * same allreduce over the same buffers, new bytes each time, is right
 * every time (the later calls are graph replays), and so is the same call
 * captured into the caller's graph after them.
 */
import { afterAll, describe, expect, it, vi } from 'vitest';
import type { CudaDriver, KernelArg, LaunchConfig } from '../../../src/cuda/driver.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { LaunchGraphs } from '../../../src/collectives/launch-graphs.js';
import { GpuRuntime } from '../../../src/gpu/gpu-runtime.js';
import { FILL_PTX } from '../../../src/kernels/fill.ptx.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

function fillSetup() {
  const d = new SimulatedCudaDriver();
  d.init();
  d.setDevice(0);
  const fn = d.moduleGetFunction(d.moduleLoadData(FILL_PTX).module, 'smcuda_fill_u32');
  const buf = d.memAlloc(64);
  const s = d.streamCreate();
  const args = (v: number): KernelArg[] => [
    { type: 'ptr', value: buf },
    { type: 'u32', value: v },
    { type: 'u64', value: 16n },
  ];
  const read = () => {
    d.streamSynchronize(s);
    const out = new Uint8Array(64);
    d.memcpyDtoH(out, buf);
    return new DataView(out.buffer).getUint32(0, true);
  };
  return { d, fn, buf, s, args, read };
}

describe('LaunchGraphs', () => {
  it('launches directly the first time, captures the second, replays the graph after; each replay does the work', () => {
    const { d, fn, buf, s, args, read } = fillSetup();
    const g = new LaunchGraphs(new GpuRuntime(d));
    const launch = vi.spyOn(d, 'launchKernel');
    const graphLaunch = vi.spyOn(d, 'graphLaunch');
    const cfg: LaunchConfig = { grid: [1], block: [32] };
    g.launch('seven', fn, cfg, () => args(7), s);
    expect(read()).toBe(7);
    expect([launch.mock.calls.length, graphLaunch.mock.calls.length, g.size]).toEqual([1, 0, 0]);
    for (let k = 0; k < 3; k++) {
      d.memsetD8(buf, 0, 64);
      g.launch('seven', fn, cfg, () => args(7), s);
      expect(read()).toBe(7);
    }
    // One more launchKernel: the one captured (on the private stream), then graph launches only.
    expect([launch.mock.calls.length, graphLaunch.mock.calls.length, g.size]).toEqual([2, 3, 1]);
    g.launch('nine', fn, cfg, () => args(9), s);
    expect(read()).toBe(9);
    expect(launch.mock.calls.length).toBe(3);
    const destroy = vi.spyOn(d, 'graphExecDestroy');
    g.close();
    expect(destroy).toHaveBeenCalledTimes(1);
    expect(g.size).toBe(0);
  });

  it('keeps at most 256 launches: the oldest graph is destroyed first', () => {
    const { d, fn, s, args } = fillSetup();
    const g = new LaunchGraphs(new GpuRuntime(d));
    const cfg: LaunchConfig = { grid: [1], block: [32] };
    for (const k of ['a', 'a']) g.launch(k, fn, cfg, () => args(1), s);
    expect(g.size).toBe(1);
    const destroy = vi.spyOn(d, 'graphExecDestroy');
    for (let k = 0; k < 256; k++) g.launch(`k${k}`, fn, cfg, () => args(k), s);
    expect(destroy).toHaveBeenCalledTimes(1);
    expect(g.size).toBe(0);
    g.close();
  });

  it('without graphs, or where the capture fails, launches directly every time', () => {
    const { d, fn, s, args, read } = fillSetup();
    const status = d.gpuDrivenStatus();
    const noGraphs = new LaunchGraphs(
      new GpuRuntime(new Proxy(d, { get: (t, p) => (p === 'gpuDrivenStatus' ? () => ({ ...status, graphs: false }) : Reflect.get(t, p, t)) }) as CudaDriver),
    );
    const launch = vi.spyOn(d, 'launchKernel');
    for (let k = 0; k < 3; k++) noGraphs.launch('x', fn, { grid: [1], block: [32] }, () => args(3), s);
    expect(launch).toHaveBeenCalledTimes(3);
    const refusing = new LaunchGraphs(new GpuRuntime(d));
    vi.spyOn(d, 'graphInstantiate').mockImplementation(() => {
      throw new Error('refused');
    });
    for (let k = 0; k < 3; k++) refusing.launch('y', fn, { grid: [1], block: [32] }, () => args(5), s);
    expect(read()).toBe(5);
    expect(refusing.size).toBe(0);
    expect(d.streamIsCapturing(s)).toBe(false);
  });
});

const worlds: World[] = [];
afterAll(async () => {
  for (const w of worlds) await w.close();
});

describe('one-shot allreduce replayed as a graph', () => {
  it('the same call over the same buffers, new bytes each time: right every time', async () => {
    const n = 2;
    const count = 300;
    // The one-shot's launches (2 ranks would take the LL one-shot at this size by default).
    const w = await makeWorld(n, { timeoutMs: 20_000, algorithm: 'one-shot' });
    worlds.push(w);
    const bufs = w.sides.map((s) => ({ send: s.driver.memAlloc(count * 4), recv: s.driver.memAlloc(count * 4) }));
    const graphLaunches = w.sides.map((s) => vi.spyOn(s.driver, 'graphLaunch'));
    /** New inputs on every rank (seed `seed`), then `run`, then every rank's recv holds their sum. */
    const roundTrip = async (seed: number, run: () => Promise<unknown>, label: string) => {
      const inputs = w.sides.map((s, r) => {
        const x = elements('f32', count, seed + r);
        s.driver.memcpyHtoD(bufs[r]!.send, x);
        return x;
      });
      await run();
      const want = new Uint8Array(count * 4);
      reduceInto('sum', 'f32', want, inputs, count);
      w.sides.forEach((s, r) => {
        const got = new Uint8Array(count * 4);
        s.driver.memcpyDtoH(got, bufs[r]!.recv);
        expect(Buffer.from(got).equals(Buffer.from(want)), `${label}, rank ${r}`).toBe(true);
      });
    };
    for (let k = 0; k < 5; k++) {
      await roundTrip(
        77 * k,
        async () => {
          const results = await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum' })));
          expect(results[0]!.algorithm).toBe('one-shot');
        },
        `call ${k}`,
      );
    }
    // Calls 2 to 5 were graph launches on every rank.
    for (const spy of graphLaunches) expect(spy.mock.calls.length).toBe(4);
    // The same call captured into the caller's graph after them: the launch itself is captured (CUDA refuses a
    // graph launched into a capturing stream), and each replay of the caller's graph is right.
    const streams = w.sides.map((s) => s.driver.streamCreate());
    const execs = w.comms.map((c, r) => {
      const d = w.sides[r]!.driver;
      d.streamBeginCapture(streams[r]!, 'thread-local');
      void c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream: streams[r]! });
      const graph = d.streamEndCapture(streams[r]!);
      const exec = d.graphInstantiate(graph);
      d.graphDestroy(graph);
      return exec;
    });
    for (let k = 0; k < 3; k++) {
      await roundTrip(
        999 * k,
        async () => {
          w.sides.forEach((s, r) => s.driver.graphLaunch(execs[r]!, streams[r]!));
          await Promise.all(
            w.sides.map(async (s, r) => {
              const e = s.driver.eventCreate({ disableTiming: true });
              s.driver.eventRecord(e, streams[r]!);
              await s.driver.whenComplete(e); // the ranks' streams wait on each other: not a blocking synchronize
              s.driver.eventDestroy(e);
            }),
          );
        },
        `replay ${k}`,
      );
    }
  });
});
