/**
 * What a closed communicator leaves on its endpoints: nothing. A peer that
 * closes later sends its BYE and UNMAPPED after this rank stopped handling
 * them; this rank's control plane still reads them (and drops them), so a
 * group's messages do not pile up on endpoints that stay open, and a new
 * world made with fromEndpoints over the same endpoints never takes the old
 * world's BYE for its own (which failed its calls with SMCUDA_PEER_CLOSED).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Communicator } from '../../../src/collectives/communicator.js';
import { tagsOf } from '../../../src/collectives/group-tags.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A world of 2 that made one call; `again(r)` makes rank r's new world over the same endpoints; `runs` checks one. */
async function oldWorld() {
  w = await makeWorld(2, { timeoutMs: 10_000 });
  const world = w;
  const eps = world.comms.map((c, r) => [0, 1].map((k) => (k === r ? undefined : c.endpoint(k)))) as (Endpoint | undefined)[][];
  const bufs = world.sides.map((s) => s.driver.memAlloc(4096));
  const call = (comms: Communicator[]) => Promise.all(comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 8, dtype: 'f32', op: 'sum' })));
  await call(world.comms);
  return {
    world,
    again: (r: number) => Communicator.fromEndpoints({ transport: world.sides[r]!.transport, rank: r, size: 2, endpoints: eps[r]!, timeoutMs: 10_000 }),
    async runs(comms: Communicator[]) {
      world.comms = comms; // closed by afterEach
      for (let i = 0; i < 3; i++) await call(comms);
      expect(comms.map((c) => c.stats().calls)).toEqual([3, 3]);
    },
  };
}

describe("a closed communicator's control messages", () => {
  it('a new world over the same endpoints, after the old one closed on each rank in turn: its calls run (the old BYE is not taken for its own)', async () => {
    const { world, again, runs } = await oldWorld();
    // Rank 0 closes first; rank 1's BYE and UNMAPPED come after rank 0 stopped handling them.
    await world.comms[0]!.close();
    await sleep(50);
    await world.comms[1]!.close();
    await sleep(50);
    await runs(await Promise.all([again(0), again(1)]));
  });

  it('a new world made on one rank before the peer closed the old one waits for it, then runs', async () => {
    const { world, again, runs } = await oldWorld();
    await world.comms[0]!.close();
    const first = again(0); // rank 1's old world is still open: rank 0 waits for its last messages
    await sleep(100);
    await world.comms[1]!.close();
    await runs(await Promise.all([first, again(1)]));
  });

  it('a group closed on each rank in turn leaves nothing on its tags of the endpoints, which stay open', async () => {
    w = await makeWorld(2, { timeoutMs: 10_000 });
    const world = w;
    for (let round = 0; round < 3; round++) {
      const groups = await Promise.all(world.comms.map((c) => c.newGroup([0, 1])));
      const tag = tagsOf(groups[0]!.stats().group).control;
      await Promise.all(groups.map((g) => g!.barrier()));
      await groups[0]!.close();
      await sleep(30);
      await groups[1]!.close();
      await sleep(50);
      for (const [r, c] of world.comms.entries()) expect(c.endpoint(1 - r)!.tryProbe({ tag })).toBeUndefined();
    }
    await Promise.all(world.comms.map((c) => c.barrier())); // the world goes on
  });
});
