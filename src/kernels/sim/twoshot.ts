/**
 * The simulator's side of reduce.cu's smcuda_twoshot_<dtype>, queued as the
 * stream operations it amounts to (a twin cannot wait for another process).
 * On a GPU each block steps with the same block of every peer, on its own,
 * so one block may be pieces ahead of another. The twin runs each block's
 * stages, per piece: this rank's stores of its sub-range of every other part
 * into the owner's landing slot, its step of parity 0, the reduction of its
 * sub-range of its own part into `out` and every peer's B, its step of
 * parity 1, the copy of what peers stored into its sub-ranges of B; with
 * every block a piece ahead of the block below it. That is an order a GPU
 * may run them in, and one in which a block that strayed into another
 * block's scratch in a later piece would clobber what that block wrote but
 * its peer has not read yet: the bug the kernel's fixed per-block addresses
 * prevent.
 */
import type { KernelArg, LaunchConfig, StreamMemOp } from '../../cuda/driver.js';
import { ArgumentRangeError } from '../../errors.js';
import { DTYPE_BYTES, DTYPES, ONESHOT_MAX_BLOCKS as MAX_BLOCKS, opOf, twoshotChunk, twoshotEntry, twoshotPart, type DType } from '../dtypes.js';
import { blockStep, type RunOp } from './block-step.js';
import { reduceArgOf, reduceInto } from './reduce.js';
import { tableOf, type TwinMemory } from './twin.js';

/** Where rank `owner` keeps what rank j sent it, among its n - 1 slots: reduce.cu's slot_of. */
const slotOf = (j: number, owner: number) => (j < owner ? j : j - 1);

function twoshotOps(dtype: DType) {
  const es = DTYPE_BYTES[dtype];
  const entry = twoshotEntry(dtype);
  return (args: readonly KernelArg[], config: LaunchConfig, memory: TwinMemory): Array<StreamMemOp | RunOp> => {
    const v = (k: number) => args[k]!.value;
    const out = v(0) as bigint;
    const input = v(1) as bigint;
    const flagOffset = v(3) as bigint;
    const rank = v(4) as number;
    const n = v(5) as number;
    const count = Number(v(6) as bigint);
    const op = reduceArgOf(opOf(v(7) as number, entry), v(10) as number);
    const bOffset = v(8) as bigint;
    const partMax = Number(v(9) as bigint);
    const blocks = config.grid[0] ?? 1;
    if (blocks > MAX_BLOCKS) throw new ArgumentRangeError(`${entry}: a grid of ${blocks} blocks, at most ${MAX_BLOCKS}`);
    if (partMax < 1 && count > 0) throw new ArgumentRangeError(`${entry}: partMax must be at least 1`);
    const bufs = tableOf(memory, v(2) as bigint, n);
    const mine = bufs[rank]!;
    const others = [...bufs.keys()].filter((k) => k !== rank);
    const at = (p: bigint, elements: number) => p + BigInt(elements * es);
    const first = twoshotChunk(dtype, Math.min(count, partMax * n), n);
    // Each block's share of a part: reduce.cu's per, the same rounding as a part's.
    const per = twoshotChunk(dtype, first, blocks);
    // Each block's stages, in its own order: per piece its stores, step, reduction, step, copy.
    const stages: Array<Array<StreamMemOp | RunOp>>[] = [];
    for (let b = 0; b < blocks; b++) {
      const seq: Array<Array<StreamMemOp | RunOp>> = (stages[b] = []);
      for (let base = 0; base < count; base += partMax * n) {
        const piece = Math.min(count - base, partMax * n);
        const chunk = twoshotChunk(dtype, piece, n);
        const pin = at(input, base);
        const pout = at(out, base);
        /** Block b's sub-range of part j of this piece: reduce.cu's sub_range. */
        const range = (j: number) => {
          const { lo, len: part } = twoshotPart(piece, chunk, j);
          const sub = Math.min(part, b * per);
          return { lo, sub, len: Math.min(part - sub, per) };
        };
        seq.push([
          {
            op: 'run',
            touches: [input, ...bufs],
            run: (m) => {
              for (const j of others) {
                const { lo, sub, len } = range(j);
                if (len > 0) m.view(at(bufs[j]!, slotOf(rank, j) * first + sub), len * es).set(m.view(at(pin, lo + sub), len * es));
              }
            },
          },
        ]);
        seq.push(blockStep(bufs, flagOffset, rank, b, 0));
        seq.push([
          {
            op: 'run',
            touches: [out, input, ...bufs],
            run: (m) => {
              const { lo, sub, len } = range(rank);
              if (len === 0) return;
              const inputs = bufs.map((_, j) => (j === rank ? m.view(at(pin, lo + sub), len * es) : m.view(at(mine, slotOf(j, rank) * first + sub), len * es)));
              // In place (out = input) too: reduceInto reads every input's element i before it writes out's.
              const result = m.view(at(pout, lo + sub), len * es);
              reduceInto(op, dtype, result, inputs, len);
              for (const k of others) m.view(at(bufs[k]! + bOffset, slotOf(rank, k) * first + sub), len * es).set(result);
            },
          },
        ]);
        seq.push(blockStep(bufs, flagOffset, rank, b, 1));
        seq.push([
          {
            op: 'run',
            touches: [out, mine],
            run: (m) => {
              for (const j of others) {
                const { lo, sub, len } = range(j);
                if (len > 0) m.view(at(pout, lo + sub), len * es).set(m.view(at(mine + bOffset, slotOf(j, rank) * first + sub), len * es));
              }
            },
          },
        ]);
      }
    }
    // Round t: block b runs its stage t - LAG * (blocks - 1 - b), the last block first: each block a
    // piece ahead of the one below it. Every rank uses the same schedule, and a step writes before it
    // waits, so every wait is met within its round.
    const LAG = 5;
    const ops: Array<StreamMemOp | RunOp> = [];
    const length = stages[0]!.length;
    for (let t = 0; t < length + LAG * (blocks - 1); t++) {
      for (let b = blocks - 1; b >= 0; b--) {
        const k = t - LAG * (blocks - 1 - b);
        if (k >= 0 && k < length) ops.push(...stages[b]![k]!);
      }
    }
    return ops;
  };
}

/** Every two-shot entry of reduce.cu, by name. */
export const TWOSHOT_TWINS = Object.fromEntries(DTYPES.map((d) => [twoshotEntry(d), twoshotOps(d)] as const));
