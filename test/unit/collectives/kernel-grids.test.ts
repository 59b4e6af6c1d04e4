/**
 * The one- and two-shot kernels spin until peers' blocks reach their steps,
 * so every block of every rank on one GPU must fit on it at once: the grids
 * are divided by the most ranks any GPU holds (reduce-kernels.ts), the
 * two-shot's bounded by the fewest multiprocessors of any rank's GPU, and
 * every rank launches the same grid. Checked on the simulated driver by recording
 * the grid of every launch, with ranks spread over 2 devices.
 */
import { describe, expect, it } from 'vitest';
import type { LaunchConfig } from '../../../src/cuda/driver.js';
import { DEFAULT_SIM_DEVICES } from '../../../src/cuda/sim/config.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld } from '../../helpers/comm-world.js';

async function grids(n: number, algorithm: 'one-shot' | 'one-shot-ll' | 'two-shot', count: number, multiprocessors?: [number, number]): Promise<number[][]> {
  const simDevices = multiprocessors ? DEFAULT_SIM_DEVICES.map((d, i) => ({ ...d, multiprocessors: multiprocessors[i]! })) : undefined;
  const w = await makeWorld(n, { devices: 2, scratchBytes: 24 << 20, ...(simDevices ? { simDevices } : {}) });
  try {
    const seen: number[][] = w.sides.map(() => []);
    w.sides.forEach((s, r) => {
      const launch = s.driver.launchKernel.bind(s.driver);
      s.driver.launchKernel = (fn, config: LaunchConfig, args, stream) => {
        seen[r]!.push(config.grid[0] ?? 1);
        launch(fn, config, args, stream);
      };
    });
    const bufs = w.sides.map((s, r) => {
      const p = s.driver.memAlloc(count * 4);
      s.driver.memcpyHtoD(p, elements('f32', count, r));
      return p;
    });
    const res = await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count, dtype: 'f32', op: 'sum', algorithm })));
    expect(res.map((x) => x.algorithm)).toEqual(w.comms.map(() => algorithm));
    w.sides.forEach((s, r) => s.driver.memFree(bufs[r]!));
    return seen;
  } finally {
    await w.close();
  }
}

describe('kernel grids fit every rank of a GPU at once', () => {
  it.each([
    // one-shot: a block per 8 KiB, at most 512 / (ranks on the busiest GPU); 4 MiB of f32 asks for 512 blocks, 3 MiB for 384,
    // 1 MiB for 128 (each in one launch: a landing slot of the 24 MiB scratch holds 3 MiB and more for up to 4 ranks)
    { n: 2, algorithm: 'one-shot' as const, count: 1 << 20, grid: 512 },
    { n: 3, algorithm: 'one-shot' as const, count: 3 << 18, grid: 256 },
    { n: 4, algorithm: 'one-shot' as const, count: 3 << 18, grid: 256 },
    { n: 2, algorithm: 'one-shot' as const, count: 1 << 18, grid: 128 },
    // LL one-shot: a block (512 threads, a line of 8 data bytes each) per 4 KiB: 64 KiB (one piece) asks for 16 blocks
    { n: 2, algorithm: 'one-shot-ll' as const, count: 1 << 14, grid: 16 },
    { n: 3, algorithm: 'one-shot-ll' as const, count: 3, grid: 1 },
    // two-shot: a block per 16 KiB of a part, at most two per multiprocessor of the GPU with the fewest (the
    // simulated ones have 132 unless told) / (ranks on the busiest GPU), and of those the largest power of two
    { n: 2, algorithm: 'two-shot' as const, count: 4 << 20, grid: 256 },
    { n: 3, algorithm: 'two-shot' as const, count: 3 << 20, grid: 128 },
    { n: 2, algorithm: 'two-shot' as const, count: 2 << 20, grid: 128, multiprocessors: [132, 100] as [number, number] },
    { n: 4, algorithm: 'two-shot' as const, count: 4 << 20, grid: 64, multiprocessors: [80, 114] as [number, number] },
    // a part asking for fewer blocks than the bound gets what it asks (2 MiB of f32: 1 MiB parts, 64 blocks of 16 KiB)
    { n: 2, algorithm: 'two-shot' as const, count: 1 << 19, grid: 64 },
    // and never more than the flag block's step slots per rank (512)
    { n: 2, algorithm: 'two-shot' as const, count: 4 << 20, grid: 512, multiprocessors: [400, 400] as [number, number] },
  ])('$n ranks on 2 devices, $algorithm of $count f32: every rank launches $grid blocks', async ({ n, algorithm, count, grid, multiprocessors }) => {
    const seen = await grids(n, algorithm, count, multiprocessors);
    for (const s of seen) expect(s).toEqual([grid]);
  });
});

describe('the two-shot kernel over several blocks and pieces, the last one shorter', () => {
  // The simulator runs the kernel's blocks one after the other, the last first (sim/twoshot.ts): a
  // block that stored into another block's part of the scratch in a later piece would clobber what
  // that block has not read yet. 128 KiB regions: pieces of N parts of 128 KiB / (N - 1), 16 KiB of a part a block.
  it.each([
    { n: 2, count: 2 * 32768 + 5003 },
    { n: 3, count: 3 * 16384 * 2 + 777 },
  ])('$n ranks, $count f32 in place and out of place: every element right', async ({ n, count }) => {
    const w = await makeWorld(n, { devices: 2, scratchBytes: 128 << 10 });
    try {
      const inputs = w.comms.map((_, r) => elements('f32', count, 100 + r));
      const want = new Uint8Array(count * 4);
      reduceInto('sum', 'f32', want, inputs, count);
      for (const inPlace of [false, true]) {
        const bufs = w.sides.map((s, r) => {
          const send = s.driver.memAlloc(count * 4);
          s.driver.memcpyHtoD(send, inputs[r]!);
          return { send, recv: inPlace ? send : s.driver.memAlloc(count * 4) };
        });
        const res = await Promise.all(
          w.comms.map((c, r) => c.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', algorithm: 'two-shot' })),
        );
        expect(res.map((x) => x.algorithm)).toEqual(w.comms.map(() => 'two-shot'));
        w.sides.forEach((s, r) => {
          const got = new Uint8Array(count * 4);
          s.driver.memcpyDtoH(got, bufs[r]!.recv);
          expect(Buffer.from(got).equals(Buffer.from(want)), `rank ${r}, ${inPlace ? 'in place' : 'out of place'}`).toBe(true);
          s.driver.memFree(bufs[r]!.send);
          if (!inPlace) s.driver.memFree(bufs[r]!.recv);
        });
      }
    } finally {
      await w.close();
    }
  });
});
