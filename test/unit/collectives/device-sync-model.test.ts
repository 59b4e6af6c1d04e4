/**
 * The device-side step protocol (src/collectives/device-sync.ts) as a model:
 * the memory-operation batches that the real Steps and DeviceSync queue
 * (recorded from a fake driver) are run op by op, each op atomic, the ranks
 * interleaved in a random order, flag memory shared. Properties:
 *
 *  - safety: a rank passes its wait for rank k in its g-th step only after k
 *    wrote its signal for its g-th step (nobody reads a piece early);
 *  - liveness: every rank finishes (no signal is lost to a reset);
 *
 * over random rank counts, calls of random step counts (odd ones padded),
 * and calls recorded once and replayed (as a CUDA graph replays baked
 * values) between eager calls. And: a rank that stops mid-call never hangs
 * the others once they poison their own flags, as an aborted communicator
 * does. A single-parity variant is shown to lose a signal, so the model can
 * tell.
 */
import { fc, test as propTest } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { Steps, type CallContext } from '../../../src/collectives/algorithms.js';
import { DeviceSync } from '../../../src/collectives/device-sync.js';
import type { CudaDriver, StreamMemOp } from '../../../src/cuda/driver.js';
import { conditionMet } from '../../../src/cuda/sim/mem-ops.js';
import { GpuRuntime } from '../../../src/gpu/gpu-runtime.js';

const BLOCK = (k: number) => BigInt(0x1000_0000 * (k + 1));

/** A DeviceSync for `rank` whose batches are recorded, not run. */
function recorder(rank: number, size: number): { sync: DeviceSync; batches: StreamMemOp[][] } {
  const batches: StreamMemOp[][] = [];
  const driver = { streamBatchMemOp: (_s: bigint, ops: readonly StreamMemOp[]) => batches.push([...ops]), streamCreate: () => 7n } as unknown as CudaDriver;
  return { sync: new DeviceSync(new GpuRuntime(driver), rank, size, BLOCK), batches };
}

/** The batches one call of `steps` steps queues on `rank`, through the real Steps (with its padding). */
function callBatches(rank: number, size: number, steps: number): StreamMemOp[][] {
  const { sync, batches } = recorder(rank, size);
  const s = new Steps({ rank, size, stream: 1n, device: sync } as unknown as Omit<CallContext, 'steps'>);
  for (let j = 0; j < steps; j++) s.device();
  s.finish();
  return batches;
}

function poisonOps(rank: number, size: number): StreamMemOp[] {
  const { sync, batches } = recorder(rank, size);
  sync.poison();
  return batches.flat();
}

interface Op {
  op: StreamMemOp;
  /** For waits: the step (per rank, counting from 0) and the peer it waits for; for writes of 1 to a peer: the step it signals. */
  step: number;
  peer?: number;
}

/** Flattens a rank's batches, numbering its steps. */
function program(rank: number, size: number, batches: StreamMemOp[][]): Op[] {
  const ops: Op[] = [];
  batches.forEach((b, step) => {
    for (const op of b) {
      if (op.op === 'barrier') continue;
      const addr = op.addr;
      const owner = Number(addr / 0x1000_0000n) - 1;
      const slot = Number((addr - BLOCK(owner)) / 8n) % size;
      ops.push({ op, step, ...(op.op === 'wait64' ? { peer: slot } : owner !== rank ? { peer: owner } : {}) });
    }
  });
  return ops;
}

interface Outcome {
  finished: boolean[];
  early: string[];
}

/**
 * Runs the programs op by op: `pick` chooses among the ranks that can move.
 * `stopAt`: rank → ops after which it stops (dies); the others then poison
 * their own flags whenever every live rank is blocked (the abort's watchdog).
 */
function execute(size: number, programs: Op[][], pick: (n: number) => number, stopAt?: { rank: number; after: number }): Outcome {
  const mem = new Map<bigint, bigint>();
  const pc = programs.map(() => 0);
  const signals = programs.map(() => programs.map(() => 0)); // signals[k][r]: signals k wrote to r
  const early: string[] = [];
  const dead = (r: number) => stopAt !== undefined && stopAt.rank === r && pc[r]! >= stopAt.after;
  let poisonTicks = 0;
  for (;;) {
    const movable: number[] = [];
    for (let r = 0; r < size; r++) {
      if (dead(r) || pc[r]! >= programs[r]!.length) continue;
      const { op } = programs[r]![pc[r]!]!;
      if (op.op === 'wait64') {
        if (!conditionMet(op.condition, mem.get(op.addr) ?? 0n, op.value, 64)) continue;
      }
      movable.push(r);
    }
    if (movable.length === 0) {
      const victimGone = stopAt !== undefined && dead(stopAt.rank);
      const blocked = programs.some((p, r) => !dead(r) && pc[r]! < p.length);
      if (!victimGone || !blocked || poisonTicks > 10_000) break;
      poisonTicks++;
      for (let r = 0; r < size; r++) if (!dead(r)) for (const op of poisonOps(r, size)) if (op.op === 'write64') mem.set(op.addr, op.value);
      continue;
    }
    const r = movable[pick(movable.length) % movable.length]!;
    const { op, step, peer } = programs[r]![pc[r]!]!;
    if (op.op === 'write64') {
      mem.set(op.addr, op.value);
      if (peer !== undefined && op.value === 1n) signals[r]![peer]!++;
    } else if (op.op === 'wait64' && peer !== undefined && !(stopAt && dead(stopAt.rank))) {
      // Before any death: passing the wait for `peer` in step `step` needs peer's signal for its step `step`.
      if (signals[peer]![r]! < step + 1) early.push(`rank ${r} passed step ${step} with ${signals[peer]![r]} signal(s) from rank ${peer}`);
    }
    pc[r]!++;
  }
  return { finished: programs.map((p, r) => pc[r]! >= p.length), early };
}

/** A job: calls of random step counts, some recorded once and replayed (their batches repeated verbatim). */
const jobArb = fc.record({
  size: fc.integer({ min: 2, max: 5 }),
  calls: fc.array(fc.record({ steps: fc.integer({ min: 1, max: 5 }), replays: fc.integer({ min: 0, max: 3 }) }), { minLength: 1, maxLength: 6 }),
  picks: fc.array(fc.nat(), { minLength: 50, maxLength: 400 }),
});

function programsOf(size: number, calls: { steps: number; replays: number }[]): Op[][] {
  return [...Array(size).keys()].map((r) => {
    const batches: StreamMemOp[][] = [];
    for (const c of calls) {
      const one = callBatches(r, size, c.steps);
      // replays: 0 → an eager call; n → the call captured once, replayed n times.
      for (let k = 0; k < Math.max(1, c.replays); k++) batches.push(...one);
    }
    return program(r, size, batches);
  });
}

function picker(picks: number[]): (n: number) => number {
  let i = 0;
  return (n) => picks[i++ % picks.length]! % n;
}

describe('a step of many ranks', () => {
  it("goes in batches the driver takes (at most 255 operations each), in the step's order", () => {
    const { sync, batches } = recorder(3, 120); // 3 × 119 operations
    sync.step(1n, 0);
    expect(batches.length).toBe(2);
    for (const b of batches) expect(b.length).toBeLessThanOrEqual(255);
    expect(batches.flat()).toEqual(sync.stepOps(0));
  });
});

describe('device-side steps, as a model of the memory operations', () => {
  propTest.prop([jobArb], { numRuns: 300 })(
    'every rank finishes, none passes a step before every peer signalled it (eager calls and replays)',
    ({ size, calls, picks }) => {
      const out = execute(size, programsOf(size, calls), picker(picks));
      expect(out.early).toEqual([]);
      expect(out.finished.every(Boolean)).toBe(true);
    },
  );

  propTest.prop([jobArb, fc.nat(), fc.nat()], { numRuns: 200 })(
    'a rank that stops mid-call: the others finish once they poison their own flags',
    ({ size, calls, picks }, v, at) => {
      const programs = programsOf(size, calls);
      const rank = v % size;
      const out = execute(size, programs, picker(picks), { rank, after: at % (programs[rank]!.length + 1) });
      expect(out.finished.filter((_, r) => r !== rank).every(Boolean)).toBe(true);
    },
  );

  it('every call is padded to an even number of steps, starting at parity 0', () => {
    for (let steps = 1; steps <= 5; steps++) {
      const b = callBatches(0, 3, steps);
      expect(b.length % 2).toBe(0);
      expect(b.length).toBe(steps + (steps % 2));
    }
  });

  it('with one parity for every step, a signal is lost to a reset (what the two parities prevent)', () => {
    const size = 2;
    // Each rank: two steps, both of parity 0.
    const one = (r: number) => {
      const { sync } = recorder(r, size);
      return program(r, size, [sync.stepOps(0), sync.stepOps(0)]);
    };
    // Rank 0 signals and passes step 0 on rank 1's signal, then signals step 1 before rank 1 reset step 0's slot.
    // Order: r1 write, r0 write, r0 wait, r0 reset, r0 write(step1), r1 wait(passes on the merged 1), r1 reset (erases step 1's signal)…
    const order = [1, 0, 0, 0, 0, 1, 1];
    let i = 0;
    const out = execute(size, [one(0), one(1)], (n) => (n === 1 ? 0 : (order[i++] ?? 0)));
    expect(out.finished).not.toEqual([true, true]);
  });
});
