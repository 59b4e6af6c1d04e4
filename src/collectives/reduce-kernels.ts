/**
 * The reduction kernels of one communicator: the shipped PTX loaded once
 * per dtype, on the first call of that dtype — the entries of one dtype
 * cut from reduce.ptx.ts (src/kernels/ptx-entries.ts says why: the driver
 * JIT-compiles a whole module at its first load) — entries looked up once
 * each, launched with the arguments reduce.cu declares.
 */
import type { CudaDriver, DevicePtr, FunctionHandle, ModuleHandle, StreamHandle } from '../cuda/driver.js';
import {
  ONESHOT_MAX_BLOCKS,
  lloneshotEntry,
  oneshotEntry,
  opCode,
  opFactor,
  reduceEntry,
  reducePartEntry,
  twoshotChunk,
  twoshotEntry,
  DTYPE_BYTES,
  type DType,
  type ReduceArg,
} from '../kernels/dtypes.js';
import { ptxWithEntries } from '../kernels/ptx-entries.js';
import { LaunchGraphs } from './launch-graphs.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';
import { reducePtx } from '../kernels/reduce.ptx.js';

const BLOCK = 256;
const MAX_GRID = 1024;
/**
 * The one-shot kernel: 512 threads a block, a block per 8 KiB up to ONESHOT_MAX_BLOCKS / ranksPerGpu
 * (the grid depends on the bytes and the communicator only, so every rank launches the same).
 * 8 KiB rather than 32: more loads of peers' memory in flight at once: faster at 256 KiB and
 * 1 MiB, the same from 4 MiB (bench/results-history.md, session 6).
 */
const ONESHOT_BLOCK = 512;
const ONESHOT_BYTES_PER_BLOCK = 8 * 1024;
/** The LL one-shot kernel: 512 threads a block, a line (8 data bytes) a thread: a block per 4 KiB, at most ONESHOT_MAX_BLOCKS / ranksPerGpu. */
const LL_BYTES_PER_BLOCK = ONESHOT_BLOCK * 8;
/**
 * The two-shot kernel: 512 threads a block, a block per TWOSHOT_BYTES_PER_BLOCK of a part, at most
 * two blocks per multiprocessor (of the GPU with the fewest, shared among the ranks on one GPU), and
 * of those the largest power of two. Every block of the launch must be resident at once, or a second
 * wave's blocks start their steps only after the first wave's have ended, on every rank: the kernel
 * takes up to 64 registers a thread (__launch_bounds__(512, 2)), so two blocks fit an SM. Every block
 * does the same work, so the launch ends with its slowest: a grid that puts two blocks on some SMs and
 * one on others runs at the pace of the shared ones. On 2 × H200 (132 SMs) 192 blocks were slowest, and
 * 128, 256, 132 and 264 within a few percent of each other (bench/results-history.md, session 8,
 * 'The two-shot's grid'). A power of
 * two splits the parts of power-of-two sizes into whole rounds of the kernel's copy loop on every
 * block, each range aligned; with the copy loop's last round predicated (reduce.cu's copy_bytes), 256 blocks
 * measured at least as fast as 264, with or without ranges rounded to 128 bytes (same session).
 */
const TWOSHOT_BYTES_PER_BLOCK = 16 * 1024;
const TWOSHOT_BLOCKS_PER_SM = 2;

/** The largest power of two not above `x` (x ≥ 1). */
function powerOfTwoAtMost(x: number): number {
  return 2 ** Math.floor(Math.log2(x));
}

/** Output buffers whose last launch key is kept (keyOf); past this many the memo starts again. */
const KEYS_KEPT = 1024;

/** The pipeline's reduction: 512 threads a block, an element a thread, at most this many blocks (then grid-stride). */
const PART_BLOCK = 512;
const PART_MAX_GRID = 1024;

/** The leading arguments of the kernels that step with peers' blocks, in reduce.cu's order. */
interface SteppingArgs {
  op: ReduceArg;
  out: DevicePtr;
  input: DevicePtr;
  bufs: DevicePtr;
  flagOffset: number;
  rank: number;
  n: number;
  count: number;
}

/** The one-launch allreduce kernels: the one-shot and the LL one-shot. */
export type OneshotKind = 'one-shot' | 'one-shot-ll';

/** Per kind: its entry, the bytes a block takes, and the launch key's tag. */
const ONESHOT_KINDS: Record<OneshotKind, { entry: (d: DType) => string; bytesPerBlock: number; keyTag: string }> = {
  'one-shot': { entry: oneshotEntry, bytesPerBlock: ONESHOT_BYTES_PER_BLOCK, keyTag: '1' },
  'one-shot-ll': { entry: lloneshotEntry, bytesPerBlock: LL_BYTES_PER_BLOCK, keyTag: '3' },
};

export class ReduceKernels {
  /** One module per dtype used (its entries only). */
  private readonly modules = new Map<DType, ModuleHandle>();
  /** Entries by dtype: looked up per call without building the entry's name (a string and its hash a call showed in a CPU profile of 8 B allreduces). */
  private readonly functions = new Map<DType, FunctionHandle>();
  private readonly oneshots: Record<OneshotKind, Map<DType, FunctionHandle>> = { 'one-shot': new Map(), 'one-shot-ll': new Map() };
  private readonly twoshots = new Map<DType, FunctionHandle>();
  private readonly parts = new Map<DType, FunctionHandle>();
  /** Milliseconds the module loads took, summed (the first load of a PTX text includes its JIT compilation). */
  loadMs = 0;
  /**
   * The most ranks of the communicator on one GPU (set at its start). The one- and two-shot kernels
   * spin until peers' blocks reach their steps, so every block of every rank on a GPU must be resident
   * at once (under MPS kernels of several processes run side by side: a block waiting for a peer's
   * block that has no room would wait for ever); their grids are divided by this.
   */
  ranksPerGpu = 1;
  /** The fewest multiprocessors of any rank's GPU (set at the communicator's start): the two-shot's grid follows from it. */
  multiprocessors = 132;
  /** The last launch key built per output buffer (keyOf). */
  private readonly keys = new Map<DevicePtr, { kind: string; parts: readonly (bigint | number | string)[]; key: string }>();
  /** One-shot launches that come back, replayed as graphs (launch-graphs.ts). */
  readonly graphs: LaunchGraphs;

  private readonly driver: CudaDriver;

  /** `gpu`: the transport's GPU runtime (the launch graphs' capture stream is its). */
  constructor(gpu: GpuRuntime) {
    this.driver = gpu.driver;
    this.graphs = new LaunchGraphs(gpu);
  }

  /** out[i] = op(table[0][offset+i], …, table[n-1][offset+i]) for i < count, on `stream`. */
  reduce(op: ReduceArg, dtype: DType, out: DevicePtr, table: DevicePtr, n: number, offset: number, count: number, stream: StreamHandle): void {
    if (count === 0) return;
    let fn = this.functions.get(dtype);
    if (fn === undefined) this.functions.set(dtype, (fn = this.driver.moduleGetFunction(this.load(dtype), reduceEntry(dtype))));
    const grid = Math.min(MAX_GRID, Math.ceil(count / BLOCK));
    this.driver.launchKernel(
      fn,
      { grid: [grid], block: [BLOCK] },
      [
        { type: 'ptr', value: out },
        { type: 'ptr', value: table },
        { type: 'u32', value: n },
        { type: 'u64', value: BigInt(offset) },
        { type: 'u64', value: BigInt(count) },
        { type: 'u32', value: opCode(op) },
        { type: 'f64', value: opFactor(op) },
      ],
      stream,
    );
  }

  /**
   * One piece of an allreduce in one launch, by `kind`:
   *  - 'one-shot' (reduce.cu's smcuda_oneshot_<dtype>): `in` into landing
   *    slot (parity, rank) of every rank's D (`bufs`, a device table of every
   *    rank's scratch; D at `landOffset`, slots of `slotBytes`), a signal with
   *    this launch's count, and the reduction of this rank's slots into `out`
   *    once every peer's signal came;
   *  - 'one-shot-ll' (smcuda_lloneshot_<dtype>): `in` stored line by line,
   *    each 4 data bytes beside this launch's flag, into slot (parity, rank) of
   *    every peer's F, and the reduction of every line once each peer's line
   *    carries the flag: no signal of its own.
   * Every rank must call it with the same `count` and dtype (the grid follows
   * from them, and ranksPerGpu: the key names the launch whole). A capture of
   * the caller's records the launch itself (cuGraphLaunch into a capturing
   * stream is refused).
   */
  oneshot(
    kind: OneshotKind,
    op: ReduceArg,
    dtype: DType,
    out: DevicePtr,
    input: DevicePtr,
    bufs: DevicePtr,
    flagOffset: number,
    rank: number,
    n: number,
    count: number,
    landOffset: number,
    slotBytes: number,
    stream: StreamHandle,
    capturing: boolean,
  ): void {
    if (count === 0) return;
    const k = ONESHOT_KINDS[kind];
    const fns = this.oneshots[kind];
    let fn = fns.get(dtype);
    if (fn === undefined) fns.set(dtype, (fn = this.driver.moduleGetFunction(this.load(dtype), k.entry(dtype))));
    const grid = Math.min(this.gridCap(ONESHOT_MAX_BLOCKS), Math.ceil((count * DTYPE_BYTES[dtype]) / k.bytesPerBlock));
    const key =
      capturing || !this.graphs.enabled
        ? undefined
        : this.keyOf(k.keyTag, out, [dtype, opCode(op), factorKey(op), input, bufs, flagOffset, rank, n, count, landOffset, slotBytes]);
    this.launchStepping(fn, grid, key, { op, out, input, bufs, flagOffset, rank, n, count }, landOffset, slotBytes, stream);
  }

  /**
   * A whole two-shot allreduce in one launch (reduce.cu's smcuda_twoshot_<dtype>): piece after
   * piece of n parts of at most `partMax` elements, this rank's stores of every other part of
   * `input` into its owner's landing slot in A, a step, the reduction of its own part into `out`
   * and every peer's B (at `bOffset` from A), a step, and the copy of what peers stored into this
   * rank's B into `out`. Every rank must call it with the same `count`, dtype and `partMax` (the
   * grid follows from them).
   */
  twoshot(
    op: ReduceArg,
    dtype: DType,
    out: DevicePtr,
    input: DevicePtr,
    bufs: DevicePtr,
    flagOffset: number,
    rank: number,
    n: number,
    count: number,
    bOffset: number,
    partMax: number,
    stream: StreamHandle,
    capturing: boolean,
  ): void {
    if (count === 0) return;
    let fn = this.twoshots.get(dtype);
    if (fn === undefined) this.twoshots.set(dtype, (fn = this.driver.moduleGetFunction(this.load(dtype), twoshotEntry(dtype))));
    const firstPart = twoshotChunk(dtype, Math.min(count, partMax * n), n);
    // At most ONESHOT_MAX_BLOCKS: the step slots per rank in the flag block (device-sync.ts).
    const cap = Math.min(ONESHOT_MAX_BLOCKS, TWOSHOT_BLOCKS_PER_SM * this.multiprocessors);
    const grid = Math.min(powerOfTwoAtMost(this.gridCap(cap)), Math.ceil((firstPart * DTYPE_BYTES[dtype]) / TWOSHOT_BYTES_PER_BLOCK));
    const key =
      capturing || !this.graphs.enabled
        ? undefined
        : this.keyOf('2', out, [dtype, opCode(op), factorKey(op), input, bufs, flagOffset, rank, n, count, bOffset, partMax]);
    this.launchStepping(fn, grid, key, { op, out, input, bufs, flagOffset, rank, n, count }, bOffset, partMax, stream);
  }

  /**
   * The LaunchGraphs key of a launch (`kind`, `out`, then `parts`): the key last built for the same
   * `out` when every part is the same, else a new one. Building the string from the pointers each
   * call (a template of five bigints and six numbers, and its hash for the Map lookup) was a third
   * of smcuda's JavaScript in an 8 B allreduce; a string kept is hashed once.
   */
  private keyOf(kind: string, out: DevicePtr, parts: readonly (bigint | number | string)[]): string {
    const last = this.keys.get(out);
    if (last !== undefined && last.kind === kind && last.parts.length === parts.length && last.parts.every((x, i) => x === parts[i])) return last.key;
    if (this.keys.size >= KEYS_KEPT) this.keys.clear();
    const key = `${kind} ${out} ${parts.join(' ')}`;
    this.keys.set(out, { kind, parts, key });
    return key;
  }

  /** The most blocks of a kernel that steps with peers' blocks, `max` shared among the ranks of the busiest GPU (ranksPerGpu). */
  private gridCap(max: number): number {
    return Math.max(1, Math.floor(max / this.ranksPerGpu));
  }

  /**
   * Launches a kernel that steps with peers' blocks (one-shot, LL one-shot, two-shot): reduce.cu's leading arguments,
   * then the kernel's two u64 arguments of its own (one-shots: landOffset, slotBytes; two-shot: bOffset,
   * partMax), then premul's factor. The argument list is only built when the launch is not replayed.
   */
  private launchStepping(
    fn: FunctionHandle,
    grid: number,
    key: string | undefined,
    a: SteppingArgs,
    extra0: number,
    extra1: number,
    stream: StreamHandle,
  ): void {
    this.graphs.launch(
      key,
      fn,
      { grid: [grid], block: [ONESHOT_BLOCK] },
      () => [
        { type: 'ptr', value: a.out },
        { type: 'ptr', value: a.input },
        { type: 'ptr', value: a.bufs },
        { type: 'u64', value: BigInt(a.flagOffset) },
        { type: 'u32', value: a.rank },
        { type: 'u32', value: a.n },
        { type: 'u64', value: BigInt(a.count) },
        { type: 'u32', value: opCode(a.op) },
        { type: 'u64', value: BigInt(extra0) },
        { type: 'u64', value: BigInt(extra1) },
        { type: 'f64', value: opFactor(a.op) },
      ],
      stream,
    );
  }

  /** The copy-engine pipeline's reduction (reduce.cu's reduce_part): out[i] = op over k of (k == rank ? own[i] : table[k][i]), for i < count. */
  reducePart(
    op: ReduceArg,
    dtype: DType,
    out: DevicePtr,
    own: DevicePtr,
    table: DevicePtr,
    rank: number,
    n: number,
    count: number,
    stream: StreamHandle,
  ): void {
    if (count === 0) return;
    let fn = this.parts.get(dtype);
    if (fn === undefined) this.parts.set(dtype, (fn = this.driver.moduleGetFunction(this.load(dtype), reducePartEntry(dtype))));
    // A thread per element, grid-stride beyond PART_MAX_GRID blocks.
    const grid = Math.min(PART_MAX_GRID, Math.ceil(count / PART_BLOCK));
    this.driver.launchKernel(
      fn,
      { grid: [grid], block: [PART_BLOCK] },
      [
        { type: 'ptr', value: out },
        { type: 'ptr', value: own },
        { type: 'ptr', value: table },
        { type: 'u32', value: rank },
        { type: 'u32', value: n },
        { type: 'u64', value: BigInt(count) },
        { type: 'u32', value: opCode(op) },
        { type: 'f64', value: opFactor(op) },
      ],
      stream,
    );
  }

  private load(dtype: DType): ModuleHandle {
    let m = this.modules.get(dtype);
    if (m === undefined) {
      const loaded = this.driver.moduleLoadData(dtypePtx(dtype));
      this.modules.set(dtype, (m = loaded.module));
      this.loadMs += loaded.loadMs;
    }
    return m;
  }

  unload(): void {
    this.graphs.close(); // before the modules their kernels are in
    const modules = [...this.modules.values()];
    this.modules.clear();
    this.functions.clear();
    for (const fns of Object.values(this.oneshots)) fns.clear();
    this.twoshots.clear();
    this.parts.clear();
    for (const m of modules) this.driver.moduleUnload(m);
  }
}

/** premul's factor in a launch key: -0 apart from 0 (a graph launched with one must not replay for the other). */
function factorKey(op: ReduceArg): number | string {
  const f = opFactor(op);
  return Object.is(f, -0) ? '-0' : f;
}

/** reduce.ptx.ts's entries of one dtype (names end in `_<dtype>`), cut once per process. */
const byDtype = new Map<DType, string>();
export function dtypePtx(dtype: DType): string {
  let ptx = byDtype.get(dtype);
  if (ptx === undefined) byDtype.set(dtype, (ptx = ptxWithEntries(reducePtx(), (entry) => entry.endsWith(`_${dtype}`))));
  return ptx;
}
