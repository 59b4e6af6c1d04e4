/**
 * The simulator's side of reduce.cu's smcuda_oneshot_<dtype>: a kernel that
 * waits for other processes cannot run as one TypeScript function (a twin
 * runs the whole grid at once), so the simulated driver queues it as the
 * pieces it amounts to, in order: the read of this rank's launch count (the
 * epoch e, when the stream reaches the launch: graph replays count as on a
 * GPU); block after block, the store of its range of `in` into landing
 * slot (e % 2, rank) of every rank and the signal e into its flag slot in
 * every peer; block after block, the wait until every peer's signal for it
 * is e or more and the reduction of its range from this rank's slots; the
 * new count. All the stores come before the first wait: a rank may run
 * ahead of a peer still reading the call before, which is the order the
 * kernel's two landing parities exist for.
 */
import type { KernelArg, LaunchConfig } from '../../cuda/driver.js';
import {
  DTYPE_BYTES,
  DTYPES,
  ONESHOT_EPOCH_WORD,
  ONESHOT_MAX_BLOCKS as MAX_BLOCKS,
  oneshotEntry,
  oneshotFlagOffset,
  opOf,
  twoshotChunk,
  twoshotPart,
  type DType,
} from '../dtypes.js';
import { reduceArgOf, reduceInto } from './reduce.js';
import { tableOf, type TwinMemory } from './twin.js';
import { loadU64, storeU64, type RunOp, type UntilOp } from './block-step.js';
import { ArgumentRangeError } from '../../errors.js';

/**
 * The arguments of a one-shot kernel, the one-shot's and the LL one-shot's alike: (out, in, bufs,
 * flagOffset, rank, n, count, op, landOffset, slotBytes, factor); `entry` names the kernel in errors.
 */
export function oneshotArgs(args: readonly KernelArg[], entry: string) {
  return {
    out: args[0]!.value as bigint,
    input: args[1]!.value as bigint,
    table: args[2]!.value as bigint,
    flagOffset: args[3]!.value as bigint,
    rank: args[4]!.value as number,
    n: args[5]!.value as number,
    count: Number(args[6]!.value as bigint),
    op: reduceArgOf(opOf(args[7]!.value as number, entry), args[10]!.value as number),
    landOffset: args[8]!.value as bigint,
    slotBytes: args[9]!.value as bigint,
  };
}

function oneshotOps(dtype: DType) {
  const es = DTYPE_BYTES[dtype];
  return (args: readonly KernelArg[], config: LaunchConfig, memory: TwinMemory): Array<RunOp | UntilOp> => {
    const { out, input, table, flagOffset, rank, n, count, op, landOffset, slotBytes } = oneshotArgs(args, oneshotEntry(dtype));
    const blocks = config.grid[0] ?? 1;
    if (blocks > MAX_BLOCKS) throw new ArgumentRangeError(`${oneshotEntry(dtype)}: a grid of ${blocks} blocks, at most ${MAX_BLOCKS}`);
    if (BigInt(count * es) > slotBytes) throw new ArgumentRangeError(`${oneshotEntry(dtype)}: ${count * es} bytes do not fit a landing slot of ${slotBytes}`);
    const bufs = tableOf(memory, table, n);
    const mine = bufs[rank]!;
    const epochAt = mine + flagOffset + BigInt(ONESHOT_EPOCH_WORD);
    const flag = (k: number, src: number, b: number) => bufs[k]! + flagOffset + BigInt(oneshotFlagOffset(src, b));
    const slot = (k: number, p: bigint, src: number) => bufs[k]! + landOffset + (p * BigInt(n) + BigInt(src)) * slotBytes;
    // Block b's range: reduce.cu's chunks of whole vectors, the same rounding and split as a two-shot part's.
    const chunk = twoshotChunk(dtype, count, blocks);
    const range = (b: number) => twoshotPart(count, chunk, b);
    let e = 0n; // this launch's count, read when the stream reaches it
    const ops: Array<RunOp | UntilOp> = [{ op: 'run', touches: [mine], run: (m) => void (e = loadU64(m, epochAt) + 1n) }];
    for (let b = 0; b < blocks; b++) {
      const { lo, len } = range(b);
      ops.push({
        op: 'run',
        touches: [input, ...bufs],
        run: (m) => {
          if (len > 0) {
            const src = m.view(input + BigInt(lo * es), len * es);
            for (let k = 0; k < n; k++) m.view(slot(k, e & 1n, rank) + BigInt(lo * es), len * es).set(src);
          }
          for (let k = 0; k < n; k++) if (k !== rank) storeU64(m, flag(k, rank, b), e);
        },
      });
    }
    for (let b = 0; b < blocks; b++) {
      const { lo, len } = range(b);
      ops.push({
        op: 'until',
        ready: (m) => {
          for (let k = 0; k < n; k++) if (k !== rank && loadU64(m, flag(rank, k, b)) < e) return false;
          return true;
        },
      });
      if (len > 0) {
        ops.push({
          op: 'run',
          touches: [out, mine],
          run: (m) => {
            const at = BigInt(lo * es);
            reduceInto(
              op,
              dtype,
              m.view(out + at, len * es),
              Array.from({ length: n }, (_, k) => m.view(slot(rank, e & 1n, k) + at, len * es)),
              len,
            );
          },
        });
      }
    }
    ops.push({ op: 'run', touches: [mine], run: (m) => storeU64(m, epochAt, e) });
    return ops;
  };
}

/** Every one-shot entry of reduce.cu, by name. */
export const ONESHOT_TWINS = Object.fromEntries(DTYPES.map((d) => [oneshotEntry(d), oneshotOps(d)] as const));
