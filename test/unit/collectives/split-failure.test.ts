/**
 * Groups when things go wrong (simulated driver, 4 ranks in one process):
 * a lost rank aborts every group it is in and, through the parent, every
 * other group, on every live rank; the parent's abort aborts its groups; a
 * group's abort leaves the parent alone; closing the parent closes its
 * groups first; closing a group leaves the transport and endpoints open;
 * bad arguments, calls that differ and a peer's invalid value fail every
 * rank with a typed error, in bounded time; a second communicator over the
 * same endpoints is refused.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Communicator } from '../../../src/collectives/communicator.js';
import { CONTROL_TAG } from '../../../src/collectives/control.js';
import { agreeGroupId, isReservedTag, MAX_GROUP_ID, tagsOf } from '../../../src/collectives/group-tags.js';
import { SmcudaError } from '../../../src/errors.js';
import { abortOf, makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

/** Tensor groups {0,1} {2,3} and data groups {0,2} {1,3} of a world of 4. */
async function layout(world: World): Promise<{ tp: Communicator[]; dp: Communicator[] }> {
  const tp = await Promise.all(world.comms.map((c, r) => c.split({ color: r >> 1 })));
  const dp = await Promise.all(world.comms.map((c, r) => c.split({ color: r & 1 })));
  return { tp: tp as Communicator[], dp: dp as Communicator[] };
}

describe('groups: failure and close', () => {
  it('a lost rank aborts every group it is in and, through the parent, the others, on every live rank, within bounded time', async () => {
    w = await makeWorld(4, { timeoutMs: 60_000 });
    const world = w;
    const { tp, dp } = await layout(world);
    const bufs = world.sides.map((s) => s.driver.memAlloc(64));
    const live = [0, 1, 2];
    // Every live rank waits in its world, tensor and data group (rank 3 never calls).
    const pending = live.flatMap((r) => [
      { r, g: 'world', p: world.comms[r]!.barrier() },
      { r, g: 'tensor', p: tp[r]!.allreduce({ send: bufs[r]!, count: 16, dtype: 'f32', op: 'sum' }) },
      { r, g: 'data', p: dp[r]!.allreduce({ send: bufs[r]!, count: 16, dtype: 'f32', op: 'sum' }) },
    ]);
    const t0 = performance.now();
    await world.sides[3]!.transport.close();
    const errs = await Promise.all(pending.map((x) => abortOf(x.p)));
    for (const [i, { r, g }] of pending.entries()) {
      const e = errs[i]!;
      expect(e.causeCode, `rank ${r}, ${g}`).toBe('SMCUDA_PEER_LOST');
      // Group {0,1} does not hold rank 3: it aborts with its parent, naming a rank of its own.
      if (g === 'world') expect(e.failedRank).toBe(3);
      if (g === 'tensor' && r === 2) expect(e.failedRank).toBe(1); // rank 3 is rank 1 of group {2,3}
      if (g === 'data' && r === 1) expect(e.failedRank).toBe(1); // and of group {1,3}
    }
    expect(performance.now() - t0).toBeLessThan(5000);
    // Later calls of every group fail at once.
    await abortOf(tp[0]!.barrier());
    await abortOf(dp[0]!.barrier());
  });

  it("the parent's abort aborts its groups on every rank; a group's abort leaves the parent and the other groups running", async () => {
    w = await makeWorld(4, { timeoutMs: 60_000 });
    const world = w;
    const { tp, dp } = await layout(world);
    // A group aborts: its members' calls fail, nothing else does.
    const inTp = [tp[2]!.barrier(), tp[3]!.barrier()];
    tp[2]!.abort(new Error('tensor group 1 gave up'));
    for (const p of inTp) expect((await abortOf(p)).message).toMatch(/tensor group 1 gave up/);
    const ok = await Promise.all([...world.comms.map((c) => c.barrier()), ...dp.map((c) => c.barrier()), tp[0]!.barrier(), tp[1]!.barrier()]);
    expect(ok).toHaveLength(10);
    // The parent aborts: every group of every rank fails, with the parent's cause.
    const inGroups = [...tp.slice(0, 2), ...dp].map((g) => g.barrier());
    world.comms[1]!.abort(new Error('the data loader failed'));
    for (const p of inGroups) {
      const e = await abortOf(p);
      expect(e.message).toMatch(/the parent communicator aborted: .*the data loader failed/);
      expect(e.causeCode).toBe('SMCUDA_ERROR');
    }
    await expect(world.comms[0]!.split({ color: 0 })).rejects.toMatchObject({ code: 'SMCUDA_COMM_ABORTED' });
  });

  it("a group's flight records go in a directory of their own beside its world's (smcuda trace compares one communicator's ranks)", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-split-trace-'));
    try {
      w = await makeWorld(4, { timeoutMs: 60_000, trace: join(dir, 'run.jsonl') });
      const world = w;
      const { tp } = await layout(world);
      const pending = [tp[0]!.barrier(), tp[1]!.barrier()];
      tp[0]!.abort(new Error('stop'));
      const errs = await Promise.all(pending.map(abortOf));
      const id = tp[0]!.stats().group;
      for (const [k, e] of errs.entries()) expect(e.flightFile).toBe(join(dir, 'run.flight', `group${id}`, `flight.rank${k}.${process.pid}.jsonl`));
      // The world did not abort: nothing of its own in the flight directory, only the group's.
      expect(readdirSync(join(dir, 'run.flight'))).toEqual([`group${id}`]);
    } finally {
      await w?.close();
      w = undefined;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('closing the parent closes its groups first; closing a group leaves the transport, endpoints and parent open', async () => {
    w = await makeWorld(4, { timeoutMs: 60_000 });
    const world = w;
    const { tp, dp } = await layout(world);
    await Promise.all(tp.map((g) => g.close()));
    for (let r = 0; r < 4; r++) {
      for (const k of [0, 1, 2, 3]) if (k !== r) expect(world.comms[r]!.endpoint(k).closed).toBe(false);
      await expect(tp[r]!.barrier()).rejects.toMatchObject({ causeCode: 'SMCUDA_CLOSED' });
    }
    const bufs = world.sides.map((s) => s.driver.memAlloc(64));
    await Promise.all(world.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 16, dtype: 'i32', op: 'sum' })));
    await Promise.all(dp.map((g, r) => g.allreduce({ send: bufs[r]!, count: 16, dtype: 'i32', op: 'sum' })));
    // The tensor groups' tags are free again on their endpoints, the data groups' are not: a new split takes new ones.
    const again = await Promise.all(world.comms.map((c, r) => c.split({ color: r >> 1 })));
    expect(again[0]!.stats().group).toBeGreaterThan(dp[0]!.stats().group);
    await Promise.all(world.comms.map((c) => c.close()));
    for (const g of [...dp, ...again]) await expect(g!.barrier()).rejects.toMatchObject({ causeCode: 'SMCUDA_CLOSED' });
    // The world's transports are the test's and stay open (the private flag is read, as nothing public says it).
    for (const s of world.sides) expect((s.transport as unknown as { closed: boolean }).closed).toBe(false);
  });

  it("bad arguments: the caller gets the typed error, every other rank's split the abort naming it", async () => {
    const cases: Array<{ name: string; call: (c: Communicator) => Promise<unknown>; code: string }> = [
      { name: 'a color that is not an integer', call: (c) => c.split({ color: 1.5 }), code: 'SMCUDA_INVALID_ARG_TYPE' },
      { name: 'a key that is a string', call: (c) => c.split({ color: 0, key: 'first' as unknown as number }), code: 'SMCUDA_INVALID_ARG_TYPE' },
      { name: 'a color past 2^31-1', call: (c) => c.split({ color: 2 ** 31 }), code: 'SMCUDA_OUT_OF_RANGE' },
      { name: 'an unknown split key', call: (c) => c.split({ colour: 1 } as never), code: 'SMCUDA_INVALID_ARG_TYPE' },
      { name: "an unknown option of the group's", call: (c) => c.split({ color: 0 }, { timeOutMs: 5 } as never), code: 'SMCUDA_CONFIG' },
      { name: 'a scratch too small', call: (c) => c.split({ color: 0 }, { scratchBytes: 8 }), code: 'SMCUDA_CONFIG' },
      { name: 'newGroup of no array', call: (c) => c.newGroup(3 as never), code: 'SMCUDA_INVALID_ARG_TYPE' },
      { name: 'newGroup of no rank', call: (c) => c.newGroup([]), code: 'SMCUDA_OUT_OF_RANGE' },
      { name: 'newGroup of a rank out of range', call: (c) => c.newGroup([0, 4]), code: 'SMCUDA_OUT_OF_RANGE' },
      { name: 'newGroup of a rank twice', call: (c) => c.newGroup([1, 2, 1]), code: 'SMCUDA_OUT_OF_RANGE' },
      { name: 'newGroup of a rank that is not an integer', call: (c) => c.newGroup([0, 0.5]), code: 'SMCUDA_INVALID_ARG_TYPE' },
    ];
    for (const k of cases) {
      w = await makeWorld(3, { timeoutMs: 60_000 });
      const world = w;
      const others = [0, 2].map((r) => world.comms[r]!.split({ color: 0 }));
      const t0 = performance.now();
      expect(() => k.call(world.comms[1]!), k.name).toThrow(expect.objectContaining({ code: k.code }));
      for (const p of others) {
        const e = await abortOf(p);
        expect(e, k.name).toMatchObject({ failedRank: 1, causeCode: k.code });
      }
      expect(performance.now() - t0).toBeLessThan(5000);
      await w.close();
      w = undefined;
    }
  });

  it('ranks that pass newGroup different lists, or make split and newGroup at once: every rank fails, typed, at once', async () => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const lists = [
      [0, 1],
      [0, 1],
      [0, 2],
    ];
    const errs = await Promise.all(w.comms.map((c, r) => abortOf(c.newGroup(lists[r]!))));
    for (const e of errs) expect(e).toMatchObject({ code: 'SMCUDA_CALL_MISMATCH', fields: ['ranks'] });
    await w.close();
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const world = w;
    const t0 = performance.now();
    const mixed = await Promise.all(world.comms.map((c, r) => abortOf(r === 1 ? c.newGroup([0, 1, 2]) : c.split({ color: 0 }))));
    for (const e of mixed) expect(e).toMatchObject({ code: 'SMCUDA_CALL_MISMATCH', fields: ['collective'] });
    expect(performance.now() - t0).toBeLessThan(5000);
  });

  it.each([
    { name: 'a color that is text', value: '{"c":"red","k":0,"g":1}' },
    { name: 'a group id of 0', value: '{"c":1,"k":0,"g":0}' },
    { name: 'a group id past the reserved tags', value: `{"c":1,"k":0,"g":${MAX_GROUP_ID + 1}}` },
    { name: 'a rank list with a rank out of range', value: '{"r":[0,9],"g":1}' },
    { name: 'neither a color nor a rank list', value: '{"g":1}' },
  ])("a peer's invalid split value ($name) aborts every rank with SMCUDA_PROTOCOL naming it, at once", async ({ value }) => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const world = w;
    // Rank 1 sends its value for the split (call #1) itself, not as an honest rank would.
    await world.comms[1]!.endpoint(0).send(new TextEncoder().encode(`{"t":"put","key":"group:1","value":${value}}`), { tag: CONTROL_TAG });
    const t0 = performance.now();
    const pending = [0, 2].map((r) => abortOf(world.comms[r]!.split({ color: 0 })));
    for (const e of await Promise.all(pending)) expect(e).toMatchObject({ causeCode: 'SMCUDA_PROTOCOL', failedRank: 1 });
    expect(performance.now() - t0).toBeLessThan(5000);
    await abortOf(world.comms[1]!.barrier());
  });

  it("members that give their group different options: each member's split fails with SMCUDA_CONFIG naming the option; the parent goes on", async () => {
    w = await makeWorld(3, { timeoutMs: 60_000 });
    const world = w;
    const t0 = performance.now();
    const made = await Promise.all(
      world.comms.map((c, r) =>
        c.split({ color: 0 }, r === 2 ? { scratchBytes: 8192 } : {}).then(
          () => undefined,
          (e: unknown) => e,
        ),
      ),
    );
    for (const e of made) {
      expect(e).toMatchObject({ code: 'SMCUDA_CONFIG' });
      expect((e as Error).message).toMatch(/scratchBytes: ranks 0, 1 \d+; rank 2 8192/);
    }
    expect(performance.now() - t0).toBeLessThan(5000);
    await Promise.all(world.comms.map((c) => c.barrier()));
  });

  it('fromEndpoints over endpoints a live communicator uses is refused (SMCUDA_ENDPOINTS_IN_USE), and the first goes on', async () => {
    w = await makeWorld(2, { timeoutMs: 60_000 });
    const world = w;
    const refused = await Communicator.fromEndpoints({
      transport: world.sides[0]!.transport,
      rank: 0,
      size: 2,
      endpoints: [undefined, world.comms[0]!.endpoint(1)],
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(SmcudaError);
    expect(refused).toMatchObject({ code: 'SMCUDA_ENDPOINTS_IN_USE' });
    expect((refused as Error).message).toMatch(/comm\.split\(\) or comm\.newGroup\(\)/);
    await Promise.all(world.comms.map((c) => c.barrier()));
  });

  it('the reserved tags: groups from 0xf0000000 up, below the world pair; an id past them is refused', () => {
    expect(tagsOf(0)).toEqual({ group: 0, control: 0xfffffff0, data: 0xfffffff1 });
    expect(tagsOf(1)).toEqual({ group: 1, control: 0xffffffee, data: 0xffffffef });
    // The last group's control tag stays above every group's point-to-point tag (0xf0000000 + g, p2p.ts).
    expect(MAX_GROUP_ID).toBe(89_478_479);
    expect(tagsOf(MAX_GROUP_ID).control).toBeGreaterThan(0xf0000000 + MAX_GROUP_ID);
    expect(tagsOf(MAX_GROUP_ID + 1).control).toBeLessThanOrEqual(0xf0000000 + MAX_GROUP_ID + 1);
    expect(isReservedTag(0xf0000000)).toBe(true);
    expect(isReservedTag(0xefffffff)).toBe(false);
    expect(agreeGroupId([3, 9, 4])).toBe(9);
    expect(() => agreeGroupId([1, MAX_GROUP_ID + 1])).toThrow(expect.objectContaining({ code: 'SMCUDA_NO_GROUP_TAGS' }));
  });
});
