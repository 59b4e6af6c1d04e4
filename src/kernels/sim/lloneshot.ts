/**
 * The simulator's side of reduce.cu's smcuda_lloneshot_<dtype>, queued as
 * the pieces it amounts to (as sim/oneshot.ts): the read of this rank's
 * launch count (the epoch e, when the stream reaches the launch); the
 * stores of every line of `in` into slot (e % 2, rank) of every peer, each
 * 64-bit word 4 data bytes and the flag e mod 2^32, stored atomically as the
 * kernel's 64-bit stores are (every line of the slot in a cleaning launch);
 * a wait until every line of every peer's slot carries the flag, or the
 * area is poisoned; the reduction, in rank order, of this rank's `in` and
 * the peers' data words into `out`; the new count.
 */
import type { KernelArg, LaunchConfig } from '../../cuda/driver.js';
import { ArgumentRangeError } from '../../errors.js';
import {
  DTYPE_BYTES,
  DTYPES,
  LL_CLEAN_MASK,
  LL_EPOCH_WORD,
  LL_LINE_BYTES,
  LL_LINE_DATA,
  LL_POISON_WORD,
  ONESHOT_MAX_BLOCKS as MAX_BLOCKS,
  lloneshotEntry,
  type DType,
} from '../dtypes.js';
import { loadU64, storeU64, type RunOp, type UntilOp } from './block-step.js';
import { reduceInto } from './reduce.js';
import { tableOf, type TwinMemory } from './twin.js';
import { oneshotArgs } from './oneshot.js';

const LOW = 0xffffffffn;

/** The words of slot `at`'s first `lines` lines, read atomically as the kernel's 64-bit loads. */
function words(m: TwinMemory, at: bigint, lines: number): BigUint64Array {
  const w = m.view(at, lines * LL_LINE_BYTES);
  const src = new BigUint64Array(w.buffer, w.byteOffset, 2 * lines);
  const got = new BigUint64Array(2 * lines);
  for (let j = 0; j < got.length; j++) got[j] = Atomics.load(src, j);
  return got;
}

/** Stores `data` (`bytes` long, zeros past it) as `lines` lines of flag `flag` at `at`, a 64-bit word at a time. */
function storeLines(m: TwinMemory, at: bigint, data: Uint8Array, lines: number, flag: bigint): void {
  const w = m.view(at, lines * LL_LINE_BYTES);
  const dst = new BigUint64Array(w.buffer, w.byteOffset, 2 * lines);
  const padded = new Uint8Array(lines * LL_LINE_DATA);
  padded.set(data.subarray(0, Math.min(data.length, padded.length)));
  const dv = new DataView(padded.buffer);
  for (let j = 0; j < 2 * lines; j++) Atomics.store(dst, j, (flag << 32n) | BigInt(dv.getUint32(4 * j, true)));
}

/** The data bytes of `lines` lines (their low words), `bytes` of them. */
function dataOf(ws: BigUint64Array, bytes: number): Uint8Array {
  const out = new Uint8Array(ws.length * 4);
  const dv = new DataView(out.buffer);
  for (let j = 0; j < ws.length; j++) dv.setUint32(4 * j, Number(ws[j]! & LOW), true);
  return out.subarray(0, bytes);
}

function lloneshotOps(dtype: DType) {
  const es = DTYPE_BYTES[dtype];
  const entry = lloneshotEntry(dtype);
  return (args: readonly KernelArg[], config: LaunchConfig, memory: TwinMemory): Array<RunOp | UntilOp> => {
    const { out, input, table, flagOffset, rank, n, count, op, landOffset, slotBytes } = oneshotArgs(args, entry);
    const blocks = config.grid[0] ?? 1;
    if (blocks > MAX_BLOCKS) throw new ArgumentRangeError(`${entry}: a grid of ${blocks} blocks, at most ${MAX_BLOCKS}`);
    const bytes = count * es;
    const lines = Math.ceil(bytes / LL_LINE_DATA);
    if (BigInt(lines * LL_LINE_BYTES) > slotBytes)
      throw new ArgumentRangeError(`${entry}: ${bytes} bytes take more lines than a slot of ${slotBytes} bytes holds`);
    const bufs = tableOf(memory, table, n);
    const mine = bufs[rank]!;
    const epochAt = mine + flagOffset + BigInt(LL_EPOCH_WORD);
    const poisonAt = mine + flagOffset + BigInt(LL_POISON_WORD);
    const slot = (k: number, p: bigint, src: number) => bufs[k]! + landOffset + (p * BigInt(n) + BigInt(src)) * slotBytes;
    let e = 0n; // this launch's count, read when the stream reaches it
    const flag = () => e & LOW;
    const others = [...Array(n).keys()].filter((k) => k !== rank);
    return [
      { op: 'run', touches: [mine], run: (m) => void (e = loadU64(m, epochAt) + 1n) },
      {
        op: 'run',
        touches: [input, ...bufs],
        run: (m) => {
          const stored = (e & LL_CLEAN_MASK) < 2n ? Number(slotBytes) / LL_LINE_BYTES : lines;
          const data = m.view(input, bytes).slice();
          for (const k of others) storeLines(m, slot(k, e & 1n, rank), data, stored, flag());
        },
      },
      {
        op: 'until',
        ready: (m) => {
          if (loadU64(m, poisonAt) !== 0n) return true;
          for (const k of others) for (const w of words(m, slot(rank, e & 1n, k), lines)) if (w >> 32n !== flag()) return false;
          return true;
        },
      },
      {
        op: 'run',
        touches: [input, out, mine],
        run: (m) => {
          if (bytes === 0) return;
          const inputs = Array.from({ length: n }, (_, k) =>
            k === rank ? m.view(input, bytes).slice() : dataOf(words(m, slot(rank, e & 1n, k), lines), bytes),
          );
          reduceInto(op, dtype, m.view(out, bytes), inputs, count);
        },
      },
      { op: 'run', touches: [mine], run: (m) => storeU64(m, epochAt, e) },
    ];
  };
}

/** Every LL one-shot entry of reduce.cu, by name. */
export const LLONESHOT_TWINS = Object.fromEntries(DTYPES.map((d) => [lloneshotEntry(d), lloneshotOps(d)] as const));
