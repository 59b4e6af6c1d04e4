/**
 * The LL one-shot's twin (sim/lloneshot.ts) run directly, n ranks over one
 * fake device memory, their pieces interleaved as streams would run them:
 * every dtype × op pair against the reference (reduceInto, itself checked
 * against independent references in reduce-twins.test.ts); the bits of a
 * line (4 data bytes and the launch's 32-bit flag in each 64-bit word); the
 * rotation by parity; the cleaning launch that rewrites every line of its
 * slots once in 2^30 launches; a wait ended by the poison word; and the
 * kernel's parameters as the PTX declares them.
 */
import { describe, expect, it } from 'vitest';
import type { KernelArg } from '../../../src/cuda/driver.js';
import {
  DTYPE_BYTES,
  DTYPES,
  LL_EPOCH_WORD,
  LL_LINE_BYTES,
  LL_POISON_WORD,
  REDUCE_OPS,
  dtypeOpSupported,
  lloneshotEntry,
  opCode,
  type DType,
  type ReduceArg,
} from '../../../src/kernels/dtypes.js';
import { reducePtx } from '../../../src/kernels/reduce.ptx.js';
import type { RunOp, UntilOp } from '../../../src/kernels/sim/block-step.js';
import { LLONESHOT_TWINS } from '../../../src/kernels/sim/lloneshot.js';
import { reduceInto } from '../../../src/kernels/sim/reduce.js';
import type { TwinMemory } from '../../../src/kernels/sim/twin.js';
import { elements } from '../../helpers/comm-world.js';

/** One flat device memory from BASE: every rank's allocations in it, as mapped memory is. */
const BASE = 0x1000_0000n;
class Memory implements TwinMemory {
  readonly bytes = new Uint8Array(1 << 22);
  private next = 0;
  alloc(bytes: number): bigint {
    const at = this.next;
    this.next += Math.ceil(bytes / 256) * 256;
    return BASE + BigInt(at);
  }
  view(ptr: bigint, bytes: number): Uint8Array {
    return this.bytes.subarray(Number(ptr - BASE), Number(ptr - BASE) + bytes);
  }
  u64(ptr: bigint): bigint {
    return new DataView(this.bytes.buffer).getBigUint64(Number(ptr - BASE), true);
  }
  setU64(ptr: bigint, v: bigint): void {
    new DataView(this.bytes.buffer).setBigUint64(Number(ptr - BASE), v, true);
  }
}

const AREA = 0n; // flagOffset: the area at the start of each rank's scratch
const LAND = 256n; // landOffset
const SLOT = 1024n; // slotBytes: 512 data bytes a piece

interface Ranks {
  m: Memory;
  n: number;
  scratch: bigint[];
  table: bigint;
}

function ranks(n: number): Ranks {
  const m = new Memory();
  const scratch = [...Array(n)].map(() => m.alloc(Number(LAND + 2n * BigInt(n) * SLOT)));
  const table = m.alloc(8 * n);
  scratch.forEach((s, k) => m.setU64(table + BigInt(8 * k), s));
  return { m, n, scratch, table };
}

/** The arguments of smcuda_lloneshot_<dtype> in the PTX's order. */
function args(w: Ranks, rank: number, out: bigint, input: bigint, count: number, op: ReduceArg): KernelArg[] {
  return [
    { type: 'ptr', value: out },
    { type: 'ptr', value: input },
    { type: 'ptr', value: w.table },
    { type: 'u64', value: AREA },
    { type: 'u32', value: rank },
    { type: 'u32', value: w.n },
    { type: 'u64', value: BigInt(count) },
    { type: 'u32', value: opCode(op) },
    { type: 'u64', value: LAND },
    { type: 'u64', value: SLOT },
    { type: 'f64', value: typeof op === 'string' ? 1 : op.factor },
  ];
}

/**
 * Runs each rank's pieces in order, rank after rank, a rank moving on while its next piece runs
 * or its wait holds (as a stream does); `stopAfter`: a rank that stops at that many pieces (a
 * rank that never comes). Returns the pieces each rank ran.
 */
function runAll(w: Ranks, queues: Array<Array<RunOp | UntilOp>>, poisonAfterRounds?: number): number[] {
  const at = queues.map(() => 0);
  for (let round = 0; round < 10_000; round++) {
    if (poisonAfterRounds !== undefined && round === poisonAfterRounds) for (const s of w.scratch) w.m.setU64(s + AREA + BigInt(LL_POISON_WORD), 1n << 62n);
    let moved = false;
    queues.forEach((q, r) => {
      while (at[r]! < q.length) {
        const op = q[at[r]!]!;
        if (op.op === 'until' && !op.ready(w.m)) break;
        if (op.op === 'run') op.run(w.m);
        at[r]!++;
        moved = true;
      }
    });
    if (!moved) return at;
  }
  return at;
}

function launch(w: Ranks, rank: number, dtype: DType, out: bigint, input: bigint, count: number, op: ReduceArg): Array<RunOp | UntilOp> {
  return LLONESHOT_TWINS[lloneshotEntry(dtype)]!(args(w, rank, out, input, count, op), { grid: [1], block: [512] }, w.m);
}

describe("the LL one-shot's twin", () => {
  it('is declared in the PTX with the parameters it reads', () => {
    for (const dtype of DTYPES) {
      const m = new RegExp(`\\.entry ${lloneshotEntry(dtype)}\\(([^)]*)\\)`).exec(reducePtx());
      expect(m?.[1]?.match(/\.param \.\w+/g)).toEqual([
        '.param .u64',
        '.param .u64',
        '.param .u64',
        '.param .u64',
        '.param .u32',
        '.param .u32',
        '.param .u64',
        '.param .u32',
        '.param .u64',
        '.param .u64',
        '.param .f64',
      ]);
    }
  });

  it('every dtype × op pair, 3 ranks, several launches in a row: the reference bits; the launch count advances by one a launch', () => {
    const w = ranks(3);
    for (const dtype of DTYPES) {
      for (const name of REDUCE_OPS.filter((o) => dtypeOpSupported(dtype, o))) {
        const op: ReduceArg = name === 'premul' ? { op: 'premul', factor: 0.5 } : name;
        const count = Math.floor(500 / DTYPE_BYTES[dtype]) - 3;
        const bytes = count * DTYPE_BYTES[dtype];
        const inputs = [0, 1, 2].map((r) => elements(dtype, count, r * 13 + name.length));
        const ptrs = [0, 1, 2].map((r) => {
          const input = w.m.alloc(bytes);
          w.m.view(input, bytes).set(inputs[r]!);
          return { input, out: w.m.alloc(bytes) };
        });
        const done = runAll(
          w,
          [0, 1, 2].map((r) => launch(w, r, dtype, ptrs[r]!.out, ptrs[r]!.input, count, op)),
        );
        expect(done).toEqual([5, 5, 5]);
        const want = new Uint8Array(bytes);
        reduceInto(op, dtype, want, inputs, count);
        for (let r = 0; r < 3; r++) expect(Buffer.from(w.m.view(ptrs[r]!.out, bytes)).equals(Buffer.from(want)), `${dtype} ${name} rank ${r}`).toBe(true);
      }
    }
    // One launch count a launch, the same on every rank.
    const launches = w.m.u64(w.scratch[0]! + AREA + BigInt(LL_EPOCH_WORD));
    expect(launches).toBeGreaterThan(50n);
    for (const s of w.scratch) expect(w.m.u64(s + AREA + BigInt(LL_EPOCH_WORD))).toBe(launches);
  });

  it("a line is two words of 4 data bytes under the launch's 32-bit flag, in slot (launch count mod 2, source rank) of every peer, none in its own", () => {
    const w = ranks(2);
    const input = w.m.alloc(16);
    w.m.view(input, 12).set([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    const out = w.m.alloc(16);
    const peerIn = w.m.alloc(16);
    w.m.setU64(w.scratch[0]! + AREA, 6n); // this launch is the 7th: parity 1
    w.m.setU64(w.scratch[1]! + AREA, 6n);
    runAll(w, [launch(w, 0, 'u8', out, input, 12, 'sum'), launch(w, 1, 'u8', w.m.alloc(16), peerIn, 12, 'sum')]);
    const slot = (owner: number, p: number, src: number) => w.scratch[owner]! + LAND + BigInt(p * 2 + src) * SLOT;
    const line0 = slot(1, 1, 0);
    expect(w.m.u64(line0)).toBe((7n << 32n) | 0x04030201n);
    expect(w.m.u64(line0 + 8n)).toBe((7n << 32n) | 0x08070605n);
    expect(w.m.u64(line0 + 16n)).toBe((7n << 32n) | 0x0c0b0a09n);
    expect(w.m.u64(line0 + 24n)).toBe(7n << 32n); // the short line's missing bytes are zeros
    expect(w.m.u64(line0 + 32n)).toBe(0n); // no line past the data
    expect(w.m.u64(slot(1, 0, 0))).toBe(0n); // the other parity untouched
    expect(w.m.u64(slot(0, 1, 0))).toBe(0n); // nothing in its own slot
    expect([...w.m.view(out, 12)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]); // + the peer's zeros
  });

  it('a launch whose count has (e & 2^30 - 1) < 2 rewrites every line of its slots (so no 32-bit flag can come back 2^32 launches later); the next ones do not', () => {
    const w = ranks(2);
    const lines = Number(SLOT) / LL_LINE_BYTES;
    const slot = (p: number) => w.scratch[1]! + LAND + BigInt(p * 2) * SLOT; // rank 1's slot for rank 0
    for (const s of w.scratch) w.m.setU64(s + AREA, 2n ** 30n - 1n); // the next launch is 2^30: parity 0
    const flagsOf = (p: number) => [...Array(lines)].map((_, i) => w.m.u64(slot(p) + BigInt(16 * i)) >> 32n);
    for (const [e, parity, cleaned] of [
      [2n ** 30n, 0, true],
      [2n ** 30n + 1n, 1, true],
      [2n ** 30n + 2n, 0, false],
    ] as const) {
      const ins = [0, 1].map(() => w.m.alloc(8));
      runAll(
        w,
        [0, 1].map((r) => launch(w, r, 'f32', w.m.alloc(8), ins[r]!, 2, 'sum')),
      );
      const flags = flagsOf(parity);
      expect(flags[0]).toBe(e & 0xffffffffn);
      expect(flags.every((f) => f === (e & 0xffffffffn))).toBe(cleaned);
    }
  });

  it('a rank whose peer never launches waits until its LL area is poisoned, then finishes', () => {
    const w = ranks(2);
    const q = launch(w, 0, 'f32', w.m.alloc(64), w.m.alloc(64), 16, 'sum');
    expect(runAll(w, [q, []])).toEqual([2, 0]); // stored, then waiting
    expect(runAll(w, [q.slice(2), []], 0)).toEqual([3, 0]); // poisoned: the wait ends, the rest runs
  });

  it('refuses a piece larger than a slot holds', () => {
    const w = ranks(2);
    expect(() => launch(w, 0, 'u8', w.m.alloc(8), w.m.alloc(8), Number(SLOT) / 2 + 1, 'sum')).toThrow(RangeError);
  });
});
