/**
 * The simulator's side of reduce.cu's smcuda_twoshot_<dtype>, queued as the
 * stream operations it amounts to (a twin cannot wait for another process),
 * piece after piece, in an order the kernel's blocks may run in (all blocks
 * at once): this rank's stores of every other part into its owner's landing
 * slot, the step of parity 0, the reduction of its own part into `out` and
 * every peer's B, the step of parity 1, the copy of peers' results out of B.
 * On a GPU each block steps on its own, and one block may be a piece ahead
 * of another: the twin, stepping the whole grid at once, cannot show a race
 * between blocks. The kernel avoids them by keeping every block's scratch
 * addresses the same in every piece (slots `first` elements apart).
 */
import type { KernelArg, LaunchConfig, StreamMemOp } from '../../cuda/driver.js';
import { ArgumentRangeError } from '../../errors.js';
import { DTYPE_BYTES, DTYPES, ONESHOT_MAX_BLOCKS as MAX_BLOCKS, opOf, twoshotChunk, twoshotEntry, type DType } from '../dtypes.js';
import { blockSteps, tableOf, type RunOp } from './oneshot.js';
import { reduceInto } from './reduce.js';
import type { TwinMemory } from './twin.js';

/** Where rank `owner` keeps what rank j sent it, among its n - 1 slots: reduce.cu's slot_of. */
const slotOf = (j: number, owner: number) => (j < owner ? j : j - 1);

/** Part j of a piece of `count` elements in parts of `chunk`: [lo, lo + len). */
function partOf(count: number, chunk: number, j: number): { lo: number; len: number } {
  const lo = Math.min(count, j * chunk);
  return { lo, len: Math.min(count, lo + chunk) - lo };
}

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
    const op = opOf(v(7) as number, entry);
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
    const ops: Array<StreamMemOp | RunOp> = [];
    for (let base = 0; base < count; base += partMax * n) {
      const piece = Math.min(count - base, partMax * n);
      const chunk = twoshotChunk(dtype, piece, n);
      const pin = at(input, base);
      const pout = at(out, base);
      ops.push({
        op: 'run',
        touches: [input, ...bufs],
        run: (m) => {
          for (const j of others) {
            const { lo, len } = partOf(piece, chunk, j);
            if (len > 0) m.view(at(bufs[j]!, slotOf(rank, j) * first), len * es).set(m.view(at(pin, lo), len * es));
          }
        },
      });
      ops.push(...blockSteps(bufs, flagOffset, rank, blocks, 0));
      ops.push({
        op: 'run',
        touches: [out, input, ...bufs],
        run: (m) => {
          const { lo, len } = partOf(piece, chunk, rank);
          if (len === 0) return;
          const inputs = bufs.map((_, j) => (j === rank ? m.view(at(pin, lo), len * es) : m.view(at(mine, slotOf(j, rank) * first), len * es)));
          // In place (out = input) too: reduceInto reads every input's element i before it writes out's.
          const result = m.view(at(pout, lo), len * es);
          reduceInto(op, dtype, result, inputs, len);
          for (const k of others) m.view(at(bufs[k]! + bOffset, slotOf(rank, k) * first), len * es).set(result);
        },
      });
      ops.push(...blockSteps(bufs, flagOffset, rank, blocks, 1));
      ops.push({
        op: 'run',
        touches: [out, mine],
        run: (m) => {
          for (const j of others) {
            const { lo, len } = partOf(piece, chunk, j);
            if (len > 0) m.view(at(pout, lo), len * es).set(m.view(at(mine + bOffset, slotOf(j, rank) * first), len * es));
          }
        },
      });
    }
    return ops;
  };
}

/** Every two-shot entry of reduce.cu, by name. */
export const TWOSHOT_TWINS = Object.fromEntries(DTYPES.map((d) => [twoshotEntry(d), twoshotOps(d)] as const));
