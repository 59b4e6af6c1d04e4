/**
 * smcuda's side of the graph suite (GRAPH_PINGPONG_UNDER_TEST, plugged with
 * persistent-pingpong.ts) between two transports on simulated drivers: the
 * ping-pong of persistent transfers is captured, replayed back to back and
 * in bursts, lands the peer's bytes, and gives the initiator its times; and
 * startGroup queues adjacent batches as one stream item.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LAUNCH_BURST } from '../../../src/bench/graph-replays.js';
import { GRAPH_PINGPONG_UNDER_TEST } from '../../../src/bench/under-test.js';
import { mergeBatches } from '../../../src/persistent/transfers.js';
import { MAX_BATCH_MEM_OPS } from '../../../src/cuda/validate-gpu-driven.js';
import { makePair, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe('graph suite: smcuda persistent ping-pong', () => {
  it('captures the ping-pong in a graph on each side, replays it, and times the initiator', async () => {
    pair = await makePair();
    const p = pair;
    const sides = await Promise.all([
      GRAPH_PINGPONG_UNDER_TEST.factory!({ driver: p.a.driver, endpoint: p.a.ep, rank: 0, device: 0 }),
      GRAPH_PINGPONG_UNDER_TEST.factory!({ driver: p.b.driver, endpoint: p.b.ep, rank: 1, device: 1 }),
    ]);
    const streams = [p.a.driver.streamCreate(), p.b.driver.streamCreate()];
    for (const size of [8, 4096]) {
      const common = { size, transfers: 4, replays: 2 * LAUNCH_BURST + 1, warmup: 1 };
      const [resp, init] = await Promise.all([
        sides[0]!.graphPingPong({ role: 'responder', stream: streams[0]!, ...common }),
        sides[1]!.graphPingPong({ role: 'initiator', stream: streams[1]!, ...common }),
      ]);
      expect(resp).toEqual({});
      expect(init.halfRoundTripUs).toBeGreaterThan(0);
      expect(init.hostUsPerReplay).toHaveLength(common.replays);
      expect(init.backToBackHostUs).toHaveLength(common.replays);
    }
    await Promise.all(sides.map((s) => s.close()));
  });
});

describe('startGroup merges adjacent batches', () => {
  it('keeps the order of every operation and never splits a copy', () => {
    const w = (addr: bigint) => ({ op: 'write64' as const, addr, value: 1n });
    const items = [
      { kind: 'batch' as const, ops: [w(1n)] },
      { kind: 'batch' as const, ops: [w(2n), w(3n)] },
      { kind: 'copy' as const, dst: 8n, src: 16n, length: 4 },
      { kind: 'batch' as const, ops: [w(4n)] },
      { kind: 'batch' as const, ops: [w(5n)] },
    ];
    const merged = mergeBatches(items);
    expect(merged.map((m) => m.kind)).toEqual(['batch', 'copy', 'batch']);
    expect(merged.flatMap((m) => (m.kind === 'batch' ? m.ops.map((o) => String((o as { addr: bigint }).addr)) : ['copy']))).toEqual([
      '1',
      '2',
      '3',
      'copy',
      '4',
      '5',
    ]);
    const many = Array.from({ length: 300 }, (_, i) => ({ kind: 'batch' as const, ops: [w(BigInt(i))] }));
    expect(mergeBatches(many).map((m) => (m.kind === 'batch' ? m.ops.length : 0))).toEqual([MAX_BATCH_MEM_OPS, 300 - MAX_BATCH_MEM_OPS]);
  });
});
