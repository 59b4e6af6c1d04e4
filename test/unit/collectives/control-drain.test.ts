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

describe("a closed communicator's control messages", () => {
  it('a new world over the same endpoints, after the old one closed on each rank in turn: its calls run (the old BYE is not taken for its own)', async () => {
    w = await makeWorld(2, { timeoutMs: 10_000 });
    const world = w;
    const eps = world.comms.map((c, r) => [0, 1].map((k) => (k === r ? undefined : c.endpoint(k)))) as (Endpoint | undefined)[][];
    const bufs = world.sides.map((s) => s.driver.memAlloc(4096));
    await Promise.all(world.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 8, dtype: 'f32', op: 'sum' })));
    // Rank 0 closes first; rank 1's BYE and UNMAPPED come after rank 0 stopped handling them.
    await world.comms[0]!.close();
    await sleep(50);
    await world.comms[1]!.close();
    await sleep(50);
    const again = await Promise.all(
      world.sides.map((s, r) => Communicator.fromEndpoints({ transport: s.transport, rank: r, size: 2, endpoints: eps[r]!, timeoutMs: 10_000 })),
    );
    world.comms = again;
    for (let i = 0; i < 3; i++) await Promise.all(again.map((c, r) => c.allreduce({ send: bufs[r]!, count: 8, dtype: 'f32', op: 'sum' })));
    expect(again.map((c) => c.stats().calls)).toEqual([3, 3]);
  });

  it('a new world made on one rank before the peer closed the old one waits for it, then runs', async () => {
    w = await makeWorld(2, { timeoutMs: 10_000 });
    const world = w;
    const eps = world.comms.map((c, r) => [0, 1].map((k) => (k === r ? undefined : c.endpoint(k)))) as (Endpoint | undefined)[][];
    const bufs = world.sides.map((s) => s.driver.memAlloc(4096));
    await Promise.all(world.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 8, dtype: 'f32', op: 'sum' })));
    await world.comms[0]!.close();
    const make = (r: number) => Communicator.fromEndpoints({ transport: world.sides[r]!.transport, rank: r, size: 2, endpoints: eps[r]!, timeoutMs: 10_000 });
    const first = make(0); // rank 1's old world is still open: rank 0 waits for its last messages
    await sleep(100);
    await world.comms[1]!.close();
    const again = await Promise.all([first, make(1)]);
    world.comms = again;
    for (let i = 0; i < 3; i++) await Promise.all(again.map((c, r) => c.allreduce({ send: bufs[r]!, count: 8, dtype: 'f32', op: 'sum' })));
    expect(again.map((c) => c.stats().calls)).toEqual([3, 3]);
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
