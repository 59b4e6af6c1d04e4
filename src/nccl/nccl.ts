/**
 * NCCL through the addon: `loadNccl()` finds and loads libnccl.so.2 at run
 * time (nccl-library.ts says where it looks) and returns an `Nccl`, its
 * version and capabilities; `nccl.initRank()` makes a communicator
 * (non-blocking: NCCL connects on its own thread while this one polls), and
 * an `NcclComm` runs the collectives, send/recv and registration on device
 * pointers and streams. Every argument is checked here before native code
 * sees it; NCCL's failures are NcclErrors, a missing NCCL one
 * NcclUnavailableError. Nothing imports this module unless it needs NCCL,
 * so `import 'smcuda'` never loads it.
 */
import { loadAddon } from '../cuda/addon.js';
import { assertHandle, assertIndex, assertPtr, assertSize } from '../cuda/validate.js';
import type { Env } from '../env.js';
import { ArgumentRangeError, ArgumentTypeError, ClosedError, NcclError, NcclUnavailableError } from '../errors.js';
import { DTYPE_BYTES, DTYPES, type DType, type ReduceOp } from '../kernels/dtypes.js';
import { type NcclSearch, ncclSearch } from './nccl-library.js';
import { fromNativeNcclError, NCCL_IN_PROGRESS, NCCL_SUCCESS, ncclError } from './nccl-result.js';
import type { NativeNccl, NcclSymbols } from './native-nccl.js';

/** ncclDataType_t of each smcuda dtype (nccl.h; the fp8 ones need NCCL 2.24 and a GPU that has them). */
export const NCCL_DATATYPES: Readonly<Record<DType, number>> = {
  i8: 0,
  u8: 1,
  i32: 2,
  u32: 3,
  i64: 4,
  u64: 5,
  f16: 6,
  f32: 7,
  f64: 8,
  bf16: 9,
  f8e4m3: 10,
  f8e5m2: 11,
};

/** ncclRedOp_t of the reductions NCCL has built in; smcuda's others (premul, bitwise) it has not. */
export const NCCL_OPS: Readonly<Partial<Record<ReduceOp, number>>> = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 };

/** ncclCommWindowRegister's flag for a window NCCL's symmetric kernels may use (nccl.h 2.27, NCCL_WIN_COLL_SYMMETRIC). */
export const NCCL_WIN_COLL_SYMMETRIC = 0x01;

/** ncclCommSplit's color for a rank that joins no new communicator. */
export const NCCL_SPLIT_NOCOLOR = -1;

const UNDEF = -0x80000000; // NCCL_CONFIG_UNDEF_INT: NCCL's default

export interface NcclVersion {
  /** ncclGetVersion's code: major × 10000 + minor × 100 + patch. */
  code: number;
  major: number;
  minor: number;
  patch: number;
  text: string;
}

/** What the loaded NCCL can do beyond the core (each an optional entry point). */
export interface NcclCapabilities {
  split: boolean;
  lastError: boolean;
  register: boolean;
  windowRegister: boolean;
  /** ncclMemAlloc and ncclMemFree (2.19), and an addon that binds them: the memory window registration wants. */
  memAlloc: boolean;
}

/** ncclConfig_t's settable fields; unset ones take NCCL's default. */
export interface NcclConfig {
  /** Default false: init, split and group end return at once and NCCL works on its own thread. */
  blocking?: boolean;
  cgaClusterSize?: number;
  minCTAs?: number;
  maxCTAs?: number;
  /** A split child shares its parent's resources. */
  splitShare?: boolean;
}

export interface LoadNcclOptions {
  /** The environment the search reads (default process.env). */
  env?: Env;
  /** Tests: the addon to use instead of the package's. */
  addon?: Partial<NativeNccl>;
}

/** How long initRank and split wait for a non-blocking communicator by default. */
export const NCCL_INIT_TIMEOUT_MS = 120_000;

let loaded: Nccl | undefined;

/**
 * NCCL, loaded once per process; throws NcclUnavailableError (code
 * SMCUDA_NCCL_UNAVAILABLE) listing where it looked, why each candidate
 * failed and what to install. A failed load is not remembered: set
 * SMCUDA_NCCL_LIBRARY and call again.
 */
export function loadNccl(options: LoadNcclOptions = {}): Nccl {
  if (loaded && !options.addon) return loaded;
  const addon = options.addon ?? (loadAddon() as unknown as Partial<NativeNccl>);
  const search = ncclSearch(options.env);
  if (typeof addon.ncclLoad !== 'function') {
    throw new NcclUnavailableError(
      'NCCL cannot be used: this build of the smcuda addon has no NCCL binding (an addon older than it). Rebuild it with `npm run build:native`.',
      'SMCUDA_NCCL_UNAVAILABLE',
      search.looked,
    );
  }
  const status = addon.ncclLoad(search.candidates);
  if (!status.loaded) throw unavailable(search, status.tried);
  const nccl = new Nccl(addon as NativeNccl, status.path!, status.version!, status.symbols!);
  if (!options.addon) loaded = nccl;
  return nccl;
}

function unavailable(search: NcclSearch, tried: Array<{ path: string; error: string }>): NcclUnavailableError {
  const lines = [
    'NCCL (libnccl.so.2) could not be loaded, so communicators across machines are unavailable; everything else in smcuda works without it.',
    'Looked for:',
    ...search.looked.map((l) => `  - ${l}`),
    ...(tried.length > 0 ? ['Tried:', ...tried.map((t) => `  - ${t.path}: ${t.error}`)] : []),
    'Fix, one of:',
    '  - pip install nvidia-nccl-cu12 (CUDA 12; nvidia-nccl-cu13 for CUDA 13), or install PyTorch with CUDA, which brings it;',
    "  - install NCCL from NVIDIA's CUDA repository (apt-get install libnccl2);",
    '  - set SMCUDA_NCCL_LIBRARY=/path/to/libnccl.so.2.',
  ];
  return new NcclUnavailableError(lines.join('\n'), 'SMCUDA_NCCL_UNAVAILABLE', search.looked);
}

/** Calls into the addon, with what it throws typed. */
function call<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw fromNativeNcclError(err);
  }
}

function assertDtype(dtype: unknown): asserts dtype is DType {
  if (typeof dtype !== 'string' || !(DTYPES as readonly string[]).includes(dtype))
    throw new ArgumentTypeError(`dtype must be one of ${DTYPES.join(', ')}, got ${JSON.stringify(dtype)}`);
}

function ncclOp(op: unknown): number {
  const n = typeof op === 'string' ? NCCL_OPS[op as ReduceOp] : undefined;
  if (n === undefined)
    throw new ArgumentTypeError(
      `op must be one of NCCL's reductions (${Object.keys(NCCL_OPS).join(', ')}), got ${JSON.stringify(op)}: premul and the bitwise ops run on smcuda's own collectives only`,
    );
  return n;
}

function configArray(c: NcclConfig | undefined): Int32Array {
  const positive = (name: keyof NcclConfig, v: unknown): number => {
    if (v === undefined) return UNDEF;
    assertIndex(`config.${name}`, v);
    if (v < 1) throw new ArgumentRangeError(`config.${name} must be at least 1, got ${v}`);
    return v;
  };
  const cga = c?.cgaClusterSize;
  if (cga !== undefined) assertIndex('config.cgaClusterSize', cga);
  for (const k of ['blocking', 'splitShare'] as const) {
    if (c?.[k] !== undefined && typeof c[k] !== 'boolean') throw new ArgumentTypeError(`config.${k} must be a boolean, got ${typeof c[k]}`);
  }
  const min = positive('minCTAs', c?.minCTAs);
  const max = positive('maxCTAs', c?.maxCTAs);
  if (min !== UNDEF && max !== UNDEF && min > max) throw new ArgumentRangeError(`config.minCTAs (${min}) must not exceed config.maxCTAs (${max})`);
  const split = c?.splitShare === undefined ? UNDEF : Number(c.splitShare);
  return Int32Array.of(c?.blocking ? 1 : 0, cga ?? UNDEF, min, max, split);
}

function versionOf(code: number): NcclVersion {
  // NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  const major = code >= 10000 ? Math.floor(code / 10000) : Math.floor(code / 1000);
  const minor = code >= 10000 ? Math.floor((code % 10000) / 100) : Math.floor((code % 1000) / 100);
  const patch = code % 100;
  return { code, major, minor, patch, text: `${major}.${minor}.${patch}` };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A loaded NCCL. */
export class Nccl {
  readonly version: NcclVersion;
  readonly capabilities: NcclCapabilities;

  constructor(
    readonly native: NativeNccl,
    /** The file it was loaded from (as handed to dlopen). */
    readonly path: string,
    versionCode: number,
    /** Each optional entry point: present or not. */
    readonly symbols: NcclSymbols,
  ) {
    this.version = versionOf(versionCode);
    this.capabilities = {
      split: symbols.ncclCommSplit,
      lastError: symbols.ncclGetLastError,
      register: symbols.ncclCommRegister && symbols.ncclCommDeregister,
      windowRegister: symbols.ncclCommWindowRegister && symbols.ncclCommWindowDeregister,
      memAlloc: symbols.ncclMemAlloc === true && symbols.ncclMemFree === true,
    };
  }

  /**
   * ncclMemAlloc: `bytes` of device memory on the calling thread's current
   * device, allocated as ncclCommWindowRegister needs it (CUDA VMM, mapped
   * for the peers). Free it with memFree.
   */
  memAlloc(bytes: number): bigint {
    this.#needMemAlloc('ncclMemAlloc');
    assertSize('bytes', bytes);
    if (bytes === 0) throw new ArgumentRangeError('bytes must be at least 1');
    return call(() => this.native.ncclMemAlloc(bytes));
  }

  memFree(ptr: bigint): void {
    this.#needMemAlloc('ncclMemFree');
    assertPtr('ptr', ptr);
    call(() => this.native.ncclMemFree(ptr));
  }

  #needMemAlloc(symbol: string): void {
    if (!this.capabilities.memAlloc)
      throw new NcclUnavailableError(
        `${symbol}: not available with the loaded NCCL ${this.version.text} (${this.path}): it needs NCCL 2.19 or newer, and an smcuda addon that binds it (\`npm run build:native\`)`,
        'SMCUDA_NCCL_UNSUPPORTED',
      );
  }

  /** A fresh ncclUniqueId (128 bytes): made by one rank, handed to all through the rendezvous. */
  uniqueId(): Uint8Array {
    return new Uint8Array(call(() => this.native.ncclGetUniqueId()));
  }

  /**
   * This rank's communicator of `size` ranks. Resolves once NCCL has
   * connected every rank (it polls ncclCommGetAsyncError); fails with the
   * NcclError that broke it, or SMCUDA_NCCL_TIMEOUT after `timeoutMs` (the
   * communicator is then aborted). The calling thread's current CUDA
   * context picks the device.
   */
  async initRank(o: { size: number; rank: number; id: Uint8Array; config?: NcclConfig; timeoutMs?: number }): Promise<NcclComm> {
    assertIndex('size', o.size);
    if (o.size < 1) throw new ArgumentRangeError(`size must be at least 1, got ${o.size}`);
    assertIndex('rank', o.rank);
    if (o.rank >= o.size) throw new ArgumentRangeError(`rank must be below size (${o.size}), got ${o.rank}`);
    if (!(o.id instanceof Uint8Array) || o.id.byteLength !== 128)
      throw new ArgumentTypeError('id must be the 128-byte Uint8Array of nccl.uniqueId(), as rank 0 made it');
    const config = configArray(o.config);
    const timeoutMs = o.timeoutMs ?? NCCL_INIT_TIMEOUT_MS;
    assertSize('timeoutMs', timeoutMs);
    const id = o.id.slice().buffer;
    const made = call(() => this.native.ncclCommInitRankConfig(o.size, id, o.rank, config));
    const comm = new NcclComm(this, made.comm, o.rank, o.size);
    await comm.whenReady('ncclCommInitRankConfig', made.result, timeoutMs);
    return comm;
  }

  /** ncclGroupStart: the calls up to groupEnd go as one (NCCL's way to post sends and receives together). */
  groupStart(): void {
    call(() => this.native.ncclGroupStart());
  }

  /** ncclGroupEnd; with non-blocking communicators the group may still be in progress (see NcclComm.whenReady). */
  groupEnd(): number {
    return call(() => this.native.ncclGroupEnd());
  }

  /** Runs `f` between groupStart and groupEnd; the group is ended even if `f` throws. */
  group(f: () => void): number {
    this.groupStart();
    try {
      f();
    } catch (err) {
      try {
        this.native.ncclGroupEnd();
      } catch {
        // f's error is the one to report
      }
      throw err;
    }
    return this.groupEnd();
  }
}

/** One rank's NCCL communicator. Device pointers and streams are bigint; counts in elements of `dtype`. */
export class NcclComm {
  #handle: bigint;
  #gone: 'aborted' | 'destroyed' | undefined;

  constructor(
    readonly nccl: Nccl,
    handle: bigint,
    readonly rank: number,
    readonly size: number,
  ) {
    this.#handle = handle;
  }

  /** The ncclComm_t, for tests and diagnostics. */
  get handle(): bigint {
    return this.#handle;
  }

  #live(what: string): bigint {
    if (this.#gone) throw new ClosedError(`${what}: the NCCL communicator was ${this.#gone}: make a new one`);
    return this.#handle;
  }

  /**
   * The communicator's asynchronous state: undefined while healthy (or
   * still in progress), else the NcclError that broke it (a lost remote
   * rank is SMCUDA_NCCL_REMOTE_ERROR, or SMCUDA_NCCL_SYSTEM_ERROR).
   */
  asyncError(): NcclError | undefined {
    const h = this.#live('ncclCommGetAsyncError');
    const r = call(() => this.nccl.native.ncclCommGetAsyncError(h));
    if (r === NCCL_SUCCESS || r === NCCL_IN_PROGRESS) return undefined;
    return ncclError(
      'ncclCommGetAsyncError',
      r,
      call(() => this.nccl.native.ncclGetErrorString(r)),
      this.#lastError(),
    );
  }

  #lastError(): string {
    if (!this.nccl.capabilities.lastError || this.#gone) return '';
    return call(() => this.nccl.native.ncclGetLastError(this.#handle));
  }

  /**
   * Resolves when the communicator's pending work (a non-blocking init,
   * split or group) is no longer in progress; rejects with its NcclError,
   * or aborts it and rejects with SMCUDA_NCCL_TIMEOUT after `timeoutMs`.
   */
  async whenReady(what: string, first: number = NCCL_IN_PROGRESS, timeoutMs: number = NCCL_INIT_TIMEOUT_MS): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let r = first;
    let wait = 1;
    while (r === NCCL_IN_PROGRESS) {
      if (Date.now() >= deadline) {
        this.abort();
        throw new NcclError(
          'SMCUDA_NCCL_TIMEOUT',
          `${what}: the NCCL communicator (rank ${this.rank} of ${this.size}) was not ready within ${timeoutMs} ms, and is aborted. Check that every rank called it with the same id and size, and that the ranks can reach each other (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME).`,
          what,
          NCCL_IN_PROGRESS,
        );
      }
      await sleep(wait);
      wait = Math.min(wait * 2, 10);
      r = call(() => this.nccl.native.ncclCommGetAsyncError(this.#live(what)));
    }
    if (r !== NCCL_SUCCESS) {
      const err = ncclError(
        what,
        r,
        call(() => this.nccl.native.ncclGetErrorString(r)),
        this.#lastError(),
      );
      this.abort();
      throw err;
    }
  }

  /**
   * Calls `onError` once with the NcclError that broke the communicator,
   * polled every `intervalMs` (default 100): how a lost remote node reaches
   * the caller's abort path. Returns the function that stops watching; an
   * abort or destroy stops it too. The timer does not keep the process alive.
   */
  watch(onError: (err: NcclError) => void, intervalMs = 100): () => void {
    assertSize('intervalMs', intervalMs);
    const timer = setInterval(() => {
      if (this.#gone) return clearInterval(timer);
      const err = this.asyncError();
      if (err) {
        clearInterval(timer);
        onError(err);
      }
    }, intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  // ---- collectives -------------------------------------------------------------------

  /** recv[i] = op over ranks of send[i], for `count` elements. */
  allReduce(a: { send: bigint; recv: bigint; count: number; dtype: DType; op: ReduceOp; stream?: bigint }): number {
    const { stream, dt } = this.#common('allReduce', a.send, a.recv, a.count, a.dtype, a.stream);
    const op = ncclOp(a.op);
    const h = this.#live('ncclAllReduce');
    return call(() => this.nccl.native.ncclAllReduce(a.send, a.recv, a.count, dt, op, h, stream));
  }

  /** recv = root's send, on every rank (`send` is read on the root only). */
  broadcast(a: { send: bigint; recv: bigint; count: number; dtype: DType; root: number; stream?: bigint }): number {
    const { stream, dt } = this.#common('broadcast', a.send, a.recv, a.count, a.dtype, a.stream);
    this.#assertRank('root', a.root);
    const h = this.#live('ncclBroadcast');
    return call(() => this.nccl.native.ncclBroadcast(a.send, a.recv, a.count, dt, a.root, h, stream));
  }

  /** The root's recv = op over ranks of send (`recv` is written on the root only). */
  reduce(a: { send: bigint; recv: bigint; count: number; dtype: DType; op: ReduceOp; root: number; stream?: bigint }): number {
    const { stream, dt } = this.#common('reduce', a.send, a.recv, a.count, a.dtype, a.stream);
    const op = ncclOp(a.op);
    this.#assertRank('root', a.root);
    const h = this.#live('ncclReduce');
    return call(() => this.nccl.native.ncclReduce(a.send, a.recv, a.count, dt, op, a.root, h, stream));
  }

  /** recv (size × count elements) = every rank's send (count elements), in rank order. */
  allGather(a: { send: bigint; recv: bigint; count: number; dtype: DType; stream?: bigint }): number {
    const { stream, dt } = this.#common('allGather', a.send, a.recv, a.count, a.dtype, a.stream);
    const h = this.#live('ncclAllGather');
    return call(() => this.nccl.native.ncclAllGather(a.send, a.recv, a.count, dt, h, stream));
  }

  /** recv (count elements) = op over ranks of this rank's block of send (size × count elements). */
  reduceScatter(a: { send: bigint; recv: bigint; count: number; dtype: DType; op: ReduceOp; stream?: bigint }): number {
    const { stream, dt } = this.#common('reduceScatter', a.send, a.recv, a.count, a.dtype, a.stream);
    const op = ncclOp(a.op);
    const h = this.#live('ncclReduceScatter');
    return call(() => this.nccl.native.ncclReduceScatter(a.send, a.recv, a.count, dt, op, h, stream));
  }

  /**
   * Block k of send (count elements) to rank k, block j of recv from rank
   * j: NCCL has no alltoall, so it is one group of a send and a receive per peer.
   */
  allToAll(a: { send: bigint; recv: bigint; count: number; dtype: DType; stream?: bigint }): number {
    const { stream, dt } = this.#common('allToAll', a.send, a.recv, a.count, a.dtype, a.stream);
    const block = BigInt(a.count * DTYPE_BYTES[a.dtype]);
    const h = this.#live('allToAll');
    const native = this.nccl.native;
    return this.nccl.group(() => {
      for (let peer = 0; peer < this.size; peer++) {
        const at = BigInt(peer) * block;
        call(() => native.ncclSend(a.send + at, a.count, dt, peer, h, stream));
        call(() => native.ncclRecv(a.recv + at, a.count, dt, peer, h, stream));
      }
    });
  }

  /** ncclSend of `count` elements to `peer` (its matching recv names this rank). */
  send(a: { buffer: bigint; count: number; dtype: DType; peer: number; stream?: bigint }): number {
    const { stream, dt } = this.#common('send', a.buffer, a.buffer, a.count, a.dtype, a.stream);
    this.#assertRank('peer', a.peer);
    const h = this.#live('ncclSend');
    return call(() => this.nccl.native.ncclSend(a.buffer, a.count, dt, a.peer, h, stream));
  }

  /** ncclRecv of `count` elements from `peer`. */
  recv(a: { buffer: bigint; count: number; dtype: DType; peer: number; stream?: bigint }): number {
    const { stream, dt } = this.#common('recv', a.buffer, a.buffer, a.count, a.dtype, a.stream);
    this.#assertRank('peer', a.peer);
    const h = this.#live('ncclRecv');
    return call(() => this.nccl.native.ncclRecv(a.buffer, a.count, dt, a.peer, h, stream));
  }

  /**
   * ncclCommSplit: the ranks that pass the same `color` form a new
   * communicator, ordered by `key` (then by rank); NCCL_SPLIT_NOCOLOR joins
   * none (resolves undefined). Collective over this communicator.
   */
  async split(a: { color: number; key: number; config?: NcclConfig; timeoutMs?: number }): Promise<NcclComm | undefined> {
    this.#need('split', 'ncclCommSplit', '2.18');
    for (const k of ['color', 'key'] as const) {
      if (!Number.isInteger(a[k]) || a[k] < -1 || a[k] > 0x7fffffff)
        throw new ArgumentRangeError(`${k} must be an integer from -1 (NCCL_SPLIT_NOCOLOR, color only) to 2^31-1, got ${a[k]}`);
    }
    if (a.key < 0) throw new ArgumentRangeError(`key must be non-negative, got ${a.key}`);
    const config = configArray(a.config);
    const h = this.#live('ncclCommSplit');
    const made = call(() => this.nccl.native.ncclCommSplit(h, a.color, a.key, config));
    const timeoutMs = a.timeoutMs ?? NCCL_INIT_TIMEOUT_MS;
    // A rank without a color gets no communicator: the parent carries the call's progress.
    if (made.comm === 0n) {
      await this.whenReady('ncclCommSplit', made.result, timeoutMs);
      return undefined;
    }
    // The child's state says when it is ready (a timeout aborts the child, not the parent).
    const pending = new NcclComm(this.nccl, made.comm, 0, 1);
    await pending.whenReady('ncclCommSplit', made.result, timeoutMs);
    const [rank, size] = call(() => this.nccl.native.ncclCommRankSize(made.comm));
    return new NcclComm(this.nccl, made.comm, rank, size);
  }

  /** ncclCommRegister: registers `bytes` at `ptr` for zero-copy use; returns the handle for deregister. */
  register(ptr: bigint, bytes: number): bigint {
    this.#need('register', 'ncclCommRegister', '2.19');
    assertPtr('ptr', ptr);
    assertSize('bytes', bytes);
    const h = this.#live('ncclCommRegister');
    return call(() => this.nccl.native.ncclCommRegister(h, ptr, bytes));
  }

  deregister(handle: bigint): void {
    this.#need('register', 'ncclCommDeregister', '2.19');
    assertHandle('handle', handle);
    const h = this.#live('ncclCommDeregister');
    call(() => this.nccl.native.ncclCommDeregister(h, handle));
  }

  /** ncclCommWindowRegister (collective): a window for symmetric-memory kernels; flags as NCCL_WIN_*. */
  windowRegister(ptr: bigint, bytes: number, flags = 0): bigint {
    this.#need('windowRegister', 'ncclCommWindowRegister', '2.27');
    assertPtr('ptr', ptr);
    assertSize('bytes', bytes);
    assertIndex('flags', flags);
    const h = this.#live('ncclCommWindowRegister');
    return call(() => this.nccl.native.ncclCommWindowRegister(h, ptr, bytes, flags));
  }

  windowDeregister(win: bigint): void {
    this.#need('windowRegister', 'ncclCommWindowDeregister', '2.27');
    assertHandle('win', win);
    const h = this.#live('ncclCommWindowDeregister');
    call(() => this.nccl.native.ncclCommWindowDeregister(h, win));
  }

  /**
   * ncclCommAbort: stops the communicator's work at once, local and remote
   * (the other ranks' calls fail), and frees it. Idempotent; the abort
   * path of a broken or timed-out communicator.
   */
  abort(): void {
    if (this.#gone) return;
    const h = this.#handle;
    this.#gone = 'aborted';
    call(() => this.nccl.native.ncclCommAbort(h));
  }

  /** ncclCommDestroy once its work is done. Idempotent, and a no-op after abort. */
  destroy(): void {
    if (this.#gone) return;
    const h = this.#handle;
    this.#gone = 'destroyed';
    call(() => this.nccl.native.ncclCommDestroy(h));
  }

  #need(cap: keyof NcclCapabilities, symbol: string, since: string): void {
    if (!this.nccl.capabilities[cap])
      throw new NcclUnavailableError(
        `${symbol}: the loaded NCCL ${this.nccl.version.text} (${this.nccl.path}) does not have it (NCCL ${since} or newer does): install a newer NCCL (pip install -U nvidia-nccl-cu12) or point SMCUDA_NCCL_LIBRARY at one`,
        'SMCUDA_NCCL_UNSUPPORTED',
      );
  }

  #assertRank(name: string, v: unknown): void {
    assertIndex(name, v);
    if ((v as number) >= this.size) throw new ArgumentRangeError(`${name} must be a rank below ${this.size}, got ${v}`);
  }

  #common(what: string, send: unknown, recv: unknown, count: unknown, dtype: unknown, stream: unknown): { stream: bigint; dt: number } {
    assertPtr(`${what}: send`, send);
    assertPtr(`${what}: recv`, recv);
    assertSize(`${what}: count`, count);
    assertDtype(dtype);
    const s = stream ?? 0n;
    assertHandle(`${what}: stream`, s);
    return { stream: s, dt: NCCL_DATATYPES[dtype] };
  }
}
