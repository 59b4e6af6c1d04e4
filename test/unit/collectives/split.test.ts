/**
 * Groups of a communicator (comm.split, comm.newGroup) on the simulated
 * driver, 4 ranks in one process: a 2×2 tensor × data parallel layout whose
 * tensor and data groups allreduce in the same step on different streams,
 * keys that reorder ranks, ranks with no color, newGroup, groups running
 * beside their parent (staged too: the pieces travel on each group's own
 * data tag), and graph capture inside a group. Every element is verified.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Communicator } from '../../../src/collectives/communicator.js';
import { CONTROL_TAG, DATA_TAG } from '../../../src/collectives/control.js';
import { GROUP_TAG_FLOOR, tagsOf } from '../../../src/collectives/group-tags.js';
import type { DevicePtr } from '../../../src/cuda/driver.js';
import type { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import { elements, makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

/** Every rank's group from `make` (the same call on every rank, at once). */
async function groups(world: World, make: (c: Communicator, r: number) => Promise<Communicator | undefined>): Promise<Array<Communicator | undefined>> {
  return Promise.all(world.comms.map((c, r) => make(c, r)));
}

/** A device buffer holding `bytes`. */
function upload(d: SimulatedCudaDriver, bytes: Uint8Array): DevicePtr {
  const p = d.memAlloc(bytes.length);
  d.memcpyHtoD(p, bytes);
  return p;
}

function download(d: SimulatedCudaDriver, p: DevicePtr, n: number): Uint8Array {
  const out = new Uint8Array(n);
  d.memcpyDtoH(out, p);
  return out;
}

/** The f32 sum, in group rank order, of `inputs` (by parent rank) over `members` (parent ranks in group order). */
function sumOf(inputs: Uint8Array[], members: readonly number[], count: number): Uint8Array {
  const want = new Uint8Array(count * 4);
  reduceInto(
    'sum',
    'f32',
    want,
    members.map((r) => inputs[r]!),
    count,
  );
  return want;
}

const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));

describe('comm.split and comm.newGroup', () => {
  it('2×2 tensor × data parallel: each tensor group and each data group allreduce in the same step, on different streams; every element verified', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000 });
    const world = w;
    // Tensor groups {0,1} {2,3}; data groups {0,2} {1,3}.
    const tp = await groups(world, (c, r) => c.split({ color: r >> 1, key: r }));
    const dp = await groups(world, (c, r) => c.split({ color: r & 1, key: r }));
    for (let r = 0; r < 4; r++) {
      expect(tp[r]).toMatchObject({ rank: r & 1, size: 2, parentRanks: [r & ~1, r | 1] });
      expect(dp[r]).toMatchObject({ rank: r >> 1, size: 2, parentRanks: [r & 1, (r & 1) + 2] });
      // No new connection: the group's endpoint is the parent's.
      expect(tp[r]!.endpoint(1 - (r & 1))).toBe(world.comms[r]!.endpoint(r ^ 1));
      expect(dp[r]!.endpoint(1 - (r >> 1))).toBe(world.comms[r]!.endpoint(r ^ 2));
    }
    // Each group has its own tags: distinct from the world's and from each other's (on a shared endpoint).
    const ids = new Set([...tp, ...dp].map((g) => g!.stats().group));
    expect(world.comms[0]!.stats().group).toBe(0);
    for (const id of ids) {
      expect(id).toBeGreaterThan(0);
      expect(tagsOf(id).control).toBeGreaterThanOrEqual(GROUP_TAG_FLOOR);
      expect([CONTROL_TAG, DATA_TAG]).not.toContain(tagsOf(id).control);
    }
    expect(tp[0]!.stats().group).not.toBe(dp[0]!.stats().group);

    const count = 1001;
    const drivers = world.sides.map((s) => s.driver);
    const streams = drivers.map((d) => [d.streamCreate(), d.streamCreate()] as const);
    for (let step = 0; step < 3; step++) {
      const tIn = drivers.map((_, r) => elements('f32', count, 100 * step + r));
      const dIn = drivers.map((_, r) => elements('f32', count, 100 * step + 50 + r));
      const tBuf = drivers.map((d, r) => upload(d, tIn[r]!));
      const dBuf = drivers.map((d, r) => upload(d, dIn[r]!));
      // Both groups' calls in flight at once on every rank.
      await Promise.all(
        drivers.flatMap((_, r) => [
          tp[r]!.allreduce({ send: tBuf[r]!, count, dtype: 'f32', op: 'sum', stream: streams[r]![0] }),
          dp[r]!.allreduce({ send: dBuf[r]!, count, dtype: 'f32', op: 'sum', stream: streams[r]![1] }),
        ]),
      );
      drivers.forEach((d, r) => {
        expect(same(download(d, tBuf[r]!, count * 4), sumOf(tIn, tp[r]!.parentRanks!, count)), `tensor, rank ${r}, step ${step}`).toBe(true);
        expect(same(download(d, dBuf[r]!, count * 4), sumOf(dIn, dp[r]!.parentRanks!, count)), `data, rank ${r}, step ${step}`).toBe(true);
        d.memFree(tBuf[r]!);
        d.memFree(dBuf[r]!);
      });
    }
    for (const g of [...tp, ...dp]) expect(g!.stats()).toMatchObject({ calls: 3, callCheck: 'messages' });
    // The split is a call of the parent, counted and checked like the collectives.
    expect(world.comms[0]!.stats().byOp).toEqual({ split: 2 });
  });

  it('keys reorder the ranks of a group (then parent rank breaks ties): an allgather lands in key order', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000 });
    const world = w;
    // Keys 3, 1, 1, 0: group order is parent ranks 3, 1, 2, 0 (1 before 2: equal keys, parent order).
    const keys = [3, 1, 1, 0];
    const g = await groups(world, (c, r) => c.split({ color: 7, key: keys[r]! }));
    const order = [3, 1, 2, 0];
    for (let r = 0; r < 4; r++) expect(g[r]).toMatchObject({ rank: order.indexOf(r), size: 4, parentRanks: order });
    const count = 33;
    const inputs = world.sides.map((_, r) => elements('i32', count, r + 1));
    const bufs = world.sides.map((s, r) => ({ send: upload(s.driver, inputs[r]!), recv: s.driver.memAlloc(4 * count * 4) }));
    await Promise.all(g.map((c, r) => c!.allgather({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'i32' })));
    const want = Buffer.concat(order.map((r) => inputs[r]!));
    world.sides.forEach((s, r) => expect(Buffer.from(download(s.driver, bufs[r]!.recv, 4 * count * 4)).equals(want), `rank ${r}`).toBe(true));
  });

  it('a rank with no color (undefined or negative) gets undefined; the others form their group; the parent goes on', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000 });
    const world = w;
    const colors = [5, 5, -1, undefined];
    const g = await groups(world, (c, r) => c.split({ color: colors[r] }));
    expect(g[2]).toBeUndefined();
    expect(g[3]).toBeUndefined();
    expect(g[0]).toMatchObject({ rank: 0, size: 2, parentRanks: [0, 1] });
    const count = 64;
    const inputs = [0, 1].map((r) => elements('f32', count, r));
    const bufs = [0, 1].map((r) => upload(world.sides[r]!.driver, inputs[r]!));
    await Promise.all([0, 1].map((r) => g[r]!.allreduce({ send: bufs[r]!, count, dtype: 'f32', op: 'sum' })));
    for (const r of [0, 1]) expect(same(download(world.sides[r]!.driver, bufs[r]!, count * 4), sumOf(inputs, [0, 1], count))).toBe(true);
    const results = await Promise.all(world.comms.map((c) => c.barrier()));
    expect(results.map((x) => x.op)).toEqual(['barrier', 'barrier', 'barrier', 'barrier']);
  });

  it('newGroup(ranks): members in ascending order, non-members get undefined; a broadcast from the group root verified', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000 });
    const world = w;
    const g = await groups(world, (c) => c.newGroup([3, 1]));
    expect(g[0]).toBeUndefined();
    expect(g[2]).toBeUndefined();
    expect(g[1]).toMatchObject({ rank: 0, size: 2, parentRanks: [1, 3] });
    expect(g[3]).toMatchObject({ rank: 1, size: 2, parentRanks: [1, 3] });
    const count = 257;
    const data = elements('u8', count, 9);
    const recv1 = world.sides[1]!.driver.memAlloc(count);
    const src3 = upload(world.sides[3]!.driver, data);
    const recv3 = world.sides[3]!.driver.memAlloc(count);
    await Promise.all([
      g[1]!.broadcast({ recv: recv1, count, dtype: 'u8', root: 1 }),
      g[3]!.broadcast({ send: src3, recv: recv3, count, dtype: 'u8', root: 1 }),
    ]);
    expect(same(download(world.sides[1]!.driver, recv1, count), data)).toBe(true);
    expect(same(download(world.sides[3]!.driver, recv3, count), data)).toBe(true);
    // A group of one.
    const solo = await groups(world, (c) => c.newGroup([2]));
    expect(solo[2]).toMatchObject({ rank: 0, size: 1, parentRanks: [2] });
    const one = upload(world.sides[2]!.driver, elements('f32', 8, 1));
    await expect(solo[2]!.allreduce({ send: one, count: 8, dtype: 'f32', op: 'sum' })).resolves.toMatchObject({ algorithm: 'local' });
  });

  it('groups and their parent run at once, staged ones too (each on its own data tag), with the options each was given', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000 });
    const world = w;
    const tp = await groups(world, (c, r) => c.split({ color: r >> 1 }, { algorithm: 'staged' }));
    const dp = await groups(world, (c, r) => c.split({ color: r & 1 }));
    const count = 3000;
    const drivers = world.sides.map((s) => s.driver);
    const streams = drivers.map((d) => [d.streamCreate(), d.streamCreate(), d.streamCreate()] as const);
    for (let step = 0; step < 3; step++) {
      const inputs = [0, 1, 2].map((k) => drivers.map((_, r) => elements('f32', count, 1000 * step + 10 * k + r)));
      const bufs = inputs.map((byRank) => drivers.map((d, r) => upload(d, byRank[r]!)));
      const results = await Promise.all(
        drivers.flatMap((_, r) => [
          world.comms[r]!.allreduce({ send: bufs[0]![r]!, count, dtype: 'f32', op: 'sum', stream: streams[r]![0], algorithm: 'staged' }),
          tp[r]!.allreduce({ send: bufs[1]![r]!, count, dtype: 'f32', op: 'sum', stream: streams[r]![1] }),
          dp[r]!.allreduce({ send: bufs[2]![r]!, count, dtype: 'f32', op: 'sum', stream: streams[r]![2] }),
        ]),
      );
      expect(results.map((x) => x.algorithm).slice(0, 3)).toEqual(['staged', 'staged', expect.not.stringMatching(/^staged$/)]);
      drivers.forEach((d, r) => {
        expect(same(download(d, bufs[0]![r]!, count * 4), sumOf(inputs[0]!, [0, 1, 2, 3], count)), `world, rank ${r}`).toBe(true);
        expect(same(download(d, bufs[1]![r]!, count * 4), sumOf(inputs[1]!, tp[r]!.parentRanks!, count)), `tensor, rank ${r}`).toBe(true);
        expect(same(download(d, bufs[2]![r]!, count * 4), sumOf(inputs[2]!, dp[r]!.parentRanks!, count)), `data, rank ${r}`).toBe(true);
      });
    }
    // A group of a group: its tags differ from both.
    const sub = await groups(world, (c, r) => tp[r]!.split({ color: 0, key: -c.rank }));
    expect(sub[0]).toMatchObject({ rank: 1, size: 2, parentRanks: [1, 0] });
    expect(new Set([sub[0]!.stats().group, tp[0]!.stats().group, dp[0]!.stats().group]).size).toBe(3);
    const x = drivers.map((d, r) => upload(d, elements('i32', 10, r)));
    await Promise.all(sub.map((g, r) => g!.allreduce({ send: x[r]!, count: 10, dtype: 'i32', op: 'max' })));
  });

  it('splits made without awaiting: two of one parent, then one of each group, with a parent call between: each rank agrees on every group', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000 });
    const world = w;
    const count = 40;
    const bufs = world.sides.map((s, r) => upload(s.driver, elements('i32', count, r)));
    // In call order on every rank: split, allreduce, split; none awaited before the next is made.
    const made = await Promise.all(
      world.comms.map((c, r) =>
        Promise.all([c.split({ color: r >> 1 }), c.allreduce({ send: bufs[r]!, count, dtype: 'i32', op: 'max' }), c.split({ color: r & 1 })]),
      ),
    );
    const tp = made.map((m) => m[0]!);
    const dp = made.map((m) => m[2]!);
    for (let r = 0; r < 4; r++) {
      expect(tp[r]!.parentRanks).toEqual([r & ~1, r | 1]);
      expect(dp[r]!.parentRanks).toEqual([r & 1, (r & 1) + 2]);
    }
    // Splits of two different communicators at once, made in the same order on every rank.
    const nested = await Promise.all(world.comms.map((_, r) => Promise.all([tp[r]!.split({ color: 0, key: -r }), dp[r]!.split({ color: 0 })])));
    for (let r = 0; r < 4; r++) {
      const [a, b] = nested[r]!;
      expect(a!.parentRanks).toEqual([1, 0]);
      expect(b!.parentRanks).toEqual([0, 1]);
    }
    // Each rank's four groups have four ids (a group shares its id only with groups it shares no endpoint with).
    for (let r = 0; r < 4; r++) expect(new Set([tp[r]!, dp[r]!, ...nested[r]!].map((g) => g!.stats().group)).size).toBe(4);
    const x = world.sides.map((s, r) => upload(s.driver, elements('f32', count, r)));
    await Promise.all(nested.flatMap(([a, b], r) => [a!.allreduce({ send: x[r]!, count, dtype: 'f32', op: 'sum' }), b!.barrier()]));
  });

  it.each([{ ipc: true }, { ipc: false }])(
    "point to point in the world, a tensor group and a data group at once (IPC $ipc; without it, staged on each communicator's own tag), every element verified",
    async (ipc) => {
      w = await makeWorld(4, { timeoutMs: 20_000, ipcOpenFails: !ipc });
      const world = w;
      const tp = await groups(world, (c, r) => c.split({ color: r >> 1 }));
      const dp = await groups(world, (c, r) => c.split({ color: r & 1 }));
      const count = 999;
      const drivers = world.sides.map((s) => s.driver);
      // Each communicator: its rank 0 sends to its rank 1 (the world: 0 to 1 and 2 to 3, over the same endpoints as the tensor groups).
      const comms = { world: world.comms, tensor: tp, data: dp } as const;
      const sent = new Map<string, Uint8Array>();
      const recvs: Array<{ key: string; r: number; buf: DevicePtr }> = [];
      const calls: Array<Promise<unknown>> = [];
      for (const [name, cs] of Object.entries(comms)) {
        cs.forEach((c, r) => {
          const peer = name === 'world' ? r ^ 1 : 1 - c!.rank;
          const sender = name === 'world' ? (r & 1) === 0 : c!.rank === 0;
          const stream = drivers[r]!.streamCreate();
          if (sender) {
            const data = elements('u8', count, 7 * r + name.length);
            sent.set(`${name}:${r}`, data);
            calls.push(c!.send({ buf: upload(drivers[r]!, data), count, dtype: 'u8', peer, stream }));
          } else {
            const buf = drivers[r]!.memAlloc(count);
            const from = name === 'world' ? r ^ 1 : c!.parentRanks![peer]!;
            recvs.push({ key: `${name}:${from}`, r, buf });
            calls.push(c!.recv({ buf, count, dtype: 'u8', peer, stream }));
          }
        });
      }
      await Promise.all(calls);
      for (const { key, r, buf } of recvs) expect(same(download(drivers[r]!, buf, count), sent.get(key)!), key).toBe(true);
      for (const c of [world.comms[0]!, tp[0]!, dp[0]!]) expect(c.stats().p2p.byPath[ipc ? 'device' : 'staged']).toBe(1);
    },
  );

  it('graph capture inside a group: captured once, replayed with fresh inputs, every replay verified; the parent calls eagerly between replays', async () => {
    w = await makeWorld(4, { timeoutMs: 20_000, scratchBytes: 1024 });
    const world = w;
    const dp = await groups(world, (c, r) => c.split({ color: r & 1 }));
    expect(dp[0]!.stats().steps).toBe('device');
    const count = 700; // in pieces of the 1 KiB scratch
    const drivers = world.sides.map((s) => s.driver);
    const streams = drivers.map((d) => d.streamCreate());
    const bufs = drivers.map((d) => ({ send: d.memAlloc(count * 4), recv: d.memAlloc(count * 4) }));
    const graphs = dp.map((g, r) => {
      const d = drivers[r]!;
      d.streamBeginCapture(streams[r]!, 'thread-local');
      const p = g!.allreduce({ send: bufs[r]!.send, recv: bufs[r]!.recv, count, dtype: 'f32', op: 'sum', stream: streams[r]! });
      const graph = d.streamEndCapture(streams[r]!);
      return { p, graph, exec: d.graphInstantiate(graph) };
    });
    for (const g of graphs) await g.p;
    for (let k = 0; k < 3; k++) {
      const inputs = drivers.map((d, r) => {
        const x = elements('f32', count, 77 * k + r);
        d.memcpyHtoD(bufs[r]!.send, x);
        d.memsetD8(bufs[r]!.recv, 0, count * 4);
        return x;
      });
      drivers.forEach((d, r) => d.graphLaunch(graphs[r]!.exec, streams[r]!));
      await Promise.all(
        drivers.map(async (d, r) => {
          const e = d.eventCreate({ disableTiming: true });
          d.eventRecord(e, streams[r]!);
          await d.whenComplete(e);
          d.eventDestroy(e);
        }),
      );
      drivers.forEach((d, r) => {
        expect(same(download(d, bufs[r]!.recv, count * 4), sumOf(inputs, dp[r]!.parentRanks!, count)), `replay ${k}, rank ${r}`).toBe(true);
      });
      // The parent's eager call between replays, on its own scratch and flags.
      const y = drivers.map((d, r) => upload(d, elements('f32', 16, r)));
      await Promise.all(world.comms.map((c, r) => c.allreduce({ send: y[r]!, count: 16, dtype: 'f32', op: 'sum' })));
    }
    drivers.forEach((d, r) => {
      d.graphExecDestroy(graphs[r]!.exec);
      d.graphDestroy(graphs[r]!.graph);
    });
  });
});
