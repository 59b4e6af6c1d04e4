/**
 * The raw mem-op ping-pong's executor (MemOpPingPong) over a recording
 * driver: both sides' stream items are recorded (host-enqueued, or captured
 * and replayed as graphs), then run by a two-stream interpreter with the
 * driver's semantics (a write sets a word, a wait holds its stream until the
 * word matches). The ping-pong must complete with every wait released by the
 * peer's matching write, the 1 MiB copies landing in the peer's region before
 * its flag is set; and the figures are computed from the events as stated.
 * The real thing runs on a GPU in `smcuda bench --suite graph`.
 */
import { describe, expect, it } from 'vitest';
import type { CudaDriver, StreamMemOp } from '../../../src/cuda/driver.js';
import { DATA_OFFSET, MemOpPingPong } from '../../../src/bench/memop-pingpong.js';

type Item = { kind: 'copy'; dst: bigint; size: number } | { kind: 'write'; addr: bigint; value: number } | { kind: 'wait'; addr: bigint; value: number };

/** Two drivers (one per side) over one recorded world: regions, streams and graphs. */
function world() {
  let next = 0x1000_0000n;
  const streams = new Map<bigint, Item[]>();
  const capturing = new Map<bigint, Item[]>();
  const graphs = new Map<bigint, Item[]>();
  let id = 100n;
  const elapsedMs = 2;
  const push = (s: bigint, items: Item[]) => {
    const target = capturing.get(s) ?? streams.get(s)!;
    target.push(...items);
  };
  const driver = (): CudaDriver =>
    ({
      memAlloc: (bytes: number) => {
        const p = next;
        next += BigInt(Math.ceil(bytes / 4096) * 4096);
        return p;
      },
      memFree: () => {},
      memsetD8: () => {},
      streamCreate: () => {
        const s = ++id;
        streams.set(s, []);
        return s;
      },
      streamDestroy: () => {},
      ipcGetMemHandle: (p: bigint) => new Uint8Array(new BigUint64Array([p]).buffer),
      ipcOpenMemHandle: (h: Uint8Array) => new BigUint64Array(h.buffer, h.byteOffset, 1)[0]!,
      ipcCloseMemHandle: () => {},
      eventCreate: () => ++id,
      eventDestroy: () => {},
      eventRecord: () => {},
      whenComplete: () => Promise.resolve(),
      eventElapsedTime: () => elapsedMs,
      memcpyAsync: (dst: bigint, _src: bigint, size: number, s: bigint) => push(s, [{ kind: 'copy', dst, size }]),
      streamWriteValue32: (s: bigint, addr: bigint, value: number) => push(s, [{ kind: 'write', addr, value }]),
      streamBatchMemOp: (s: bigint, ops: readonly StreamMemOp[]) =>
        push(
          s,
          ops.map((o): Item => {
            if (o.op === 'wait32' && o.condition === 'eq') return { kind: 'wait', addr: o.addr, value: o.value };
            if (o.op === 'write32') return { kind: 'write', addr: o.addr, value: o.value };
            throw new Error(`unexpected batch op ${o.op}`);
          }),
        ),
      streamBeginCapture: (s: bigint) => void capturing.set(s, []),
      streamEndCapture: (s: bigint) => {
        const g = ++id;
        graphs.set(g, capturing.get(s)!);
        capturing.delete(s);
        return g;
      },
      graphInstantiate: (g: bigint) => g,
      graphLaunch: (g: bigint, s: bigint) => push(s, graphs.get(g)!),
      graphExecDestroy: () => {},
      graphDestroy: () => {},
    }) as unknown as CudaDriver;
  return { driver, streams, elapsedMs };
}

/** Runs the two recorded streams, alternating where both can move; returns what happened. */
function interpret(a: Item[], b: Item[]) {
  const mem = new Map<bigint, number>();
  const landed: Array<{ dst: bigint; at: number }> = [];
  const lists = [a, b];
  const pc = [0, 0];
  const errors: string[] = [];
  let step = 0;
  let turn = 0;
  for (;;) {
    const can = [0, 1].filter((i) => {
      const it = lists[i]![pc[i]!];
      return it !== undefined && (it.kind !== 'wait' || (mem.get(it.addr) ?? 0) === it.value);
    });
    if (can.length === 0) break;
    const i = can.includes(turn) ? turn : can[0]!;
    turn = 1 - turn;
    const it = lists[i]![pc[i]!++]!;
    step++;
    if (it.kind === 'copy') landed.push({ dst: it.dst, at: step });
    else if (it.kind === 'write') mem.set(it.addr, it.value);
  }
  const done = pc[0] === a.length && pc[1] === b.length;
  if (!done) errors.push(`stuck at items ${pc[0]}/${a.length} and ${pc[1]}/${b.length}`);
  return { done, errors, mem, landed };
}

async function pair(maxSize: number) {
  const w = world();
  const init = new MemOpPingPong(w.driver(), maxSize, 1000);
  const resp = new MemOpPingPong(w.driver(), maxSize, 1000);
  init.connect(resp.handle());
  resp.connect(init.handle());
  // Stream ids: the two pingpong streams, in creation order (initiator first).
  const [sInit, sResp] = [...w.streams.keys()];
  const region = (h: Uint8Array) => new BigUint64Array(h.buffer, h.byteOffset, 1)[0]!;
  return {
    w,
    init,
    resp,
    regions: [region(init.handle()), region(resp.handle())] as const,
    items: () => [w.streams.get(sInit!)!, w.streams.get(sResp!)!] as const,
  };
}

describe('MemOpPingPong over a recording driver', () => {
  for (const size of [8, 1 << 20]) {
    it(`host-enqueued, ${size} B: completes, each side released by the other, copies land in the peer's region; half round trip from the events`, async () => {
      const { init, resp, items, w, regions } = await pair(1 << 20);
      const repeat = { iters: 10, warmup: 2 };
      const [ri, rr] = await Promise.all([init.host('initiator', size, repeat), resp.host('responder', size, repeat)]);
      expect(rr).toEqual({});
      expect(ri.halfRoundTripUs).toBeCloseTo((w.elapsedMs * 1000) / repeat.iters / 2, 9);
      expect(ri.hostEnqueueUs).toBeGreaterThan(0);
      const [a, b] = items();
      const run = interpret(a, b);
      expect(run.errors).toEqual([]);
      // Every flag is back to 0: the next run starts clean.
      expect([...run.mem.values()].every((v) => v === 0)).toBe(true);
      const copies = a.filter((x) => x.kind === 'copy').length + b.filter((x) => x.kind === 'copy').length;
      expect(copies).toBe(size > 8 ? 2 * (repeat.iters + repeat.warmup) : 0);
      expect(run.landed).toHaveLength(copies);
      // Each side copies into the other's landing area, and sets the other's flag only after its copy (stream order).
      for (const [k, list] of [a, b].entries()) {
        const peer = regions[1 - k]!;
        for (const [j, x] of list.entries()) {
          if (x.kind === 'copy') expect(x.dst).toBe(peer + BigInt(DATA_OFFSET));
          if (x.kind === 'write' && x.value === 1) {
            expect(x.addr).toBe(peer);
            if (size > 8) expect(list[j - 1]).toMatchObject({ kind: 'copy' });
          }
          if (x.kind === 'wait') expect(x.addr).toBe(regions[k]);
        }
      }
      init.close();
      resp.close();
    });

    it(`graph of 16, ${size} B: the captured items replayed any number of times complete the same way; host µs per replay per launch`, async () => {
      const { init, resp, items } = await pair(1 << 20);
      const [ri, rr] = await Promise.all([init.graph('initiator', size, 16, 5, 2), resp.graph('responder', size, 16, 5, 2)]);
      expect(rr).toEqual({});
      // graph-replays.ts: the 5 timed replays back to back, then 5 more in bursts (their launch calls are the host figure).
      expect(ri.hostUsPerReplay).toHaveLength(5);
      expect(ri.backToBackHostUs).toHaveLength(5);
      expect(ri.halfRoundTripUs).toBeCloseTo((2 * 1000) / (5 * 16) / 2, 9);
      const [a, b] = items();
      expect(a.length).toBe((2 + 5 + 5) * 16 * (size > 8 ? 4 : 3));
      const run = interpret(a, b);
      expect(run.errors).toEqual([]);
      init.close();
      resp.close();
    });
  }

  it('different iteration counts on the two sides leave a stream waiting (bounded by BenchStuckError on a GPU), never a wrong pass', async () => {
    const { init, resp, items } = await pair(64);
    await Promise.all([init.host('initiator', 8, { iters: 5, warmup: 0 }), resp.host('responder', 8, { iters: 4, warmup: 0 })]);
    const [a, b] = items();
    const run = interpret(a, b);
    expect(run.done).toBe(false);
    init.close();
    resp.close();
  });

  it('refuses sizes past what it was prepared for, and use before connect', async () => {
    const w = world();
    const p = new MemOpPingPong(w.driver(), 64);
    await expect(p.host('initiator', 65, { iters: 1, warmup: 0 })).rejects.toThrow(RangeError);
    await expect(p.host('initiator', 8, { iters: 1, warmup: 0 })).rejects.toThrow(/connect to the peer region first/);
    expect(() => new MemOpPingPong(w.driver(), 4)).toThrow(RangeError);
    p.close();
  });
});
