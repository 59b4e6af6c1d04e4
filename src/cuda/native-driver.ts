/**
 * One file over 500 lines, as one concept: one method per CudaDriver call,
 * each a validation plus one addon call and its error mapping; the contract
 * (driver.ts) fixes the set, so the length follows the contract's.
 *
 * `CudaDriver` over the native addon (native/cuda_*.cc, native/completion.cc,
 * native/shm.cc), i.e. over the real libcuda.so.1.
 *
 * Every argument is checked here (validate.ts) before native code sees it;
 * every native error becomes a typed error (errors.ts): a failing CUresult a
 * `CudaError` with the same code/call/result, an unusable driver a
 * `DriverUnavailableError` (code 'SMCUDA_DRIVER_UNAVAILABLE') with the reason.
 *
 * The addon can be injected (better-sqlite3 style), which is how the tests
 * run this class with fakes on machines without a GPU.
 */
import { ArgumentRangeError, ArgumentTypeError, ClosedError, ConfigError, CudaError, DriverUnavailableError, SmcudaError } from '../errors.js';
import { loadAddon } from './addon.js';
import { DeviceAllocation } from './device-allocation.js';
import { packKernelArgs } from './kernel-args.js';
import { withoutSimHint } from './without-sim-hint.js';
import type {
  CaptureMode,
  FunctionHandle,
  GraphExecHandle,
  GraphHandle,
  KernelArg,
  LaunchConfig,
  ModuleHandle,
  ModuleLoadInfo,
  StreamMemOp,
  WaitCondition,
  AddressRange,
  CudaDriver,
  DeviceInfo,
  DevicePtr,
  DriverStatus,
  EventHandle,
  EventOptions,
  FdChunk,
  FdMemoryResources,
  MemoryKindInfo,
  MemoryType,
  MemPoolOptions,
  PoolHandle,
  PoolImportOptions,
  VmmAllocation,
  VmmAllocOptions,
  VmmExport,
  VmmImport,
  VmmImportOptions,
  PinnedHostBuffer,
  PointerAttributes,
  SharedSegment,
  StreamHandle,
} from './driver.js';
import type { NativeAddon } from './native-addon.js';
import { createSharedSegment, sharedSegment } from './shared-segment.js';
import {
  assertByte,
  assertBytes,
  assertHostView,
  assertChunkCount,
  assertCopyBatch,
  assertFd,
  assertFdChunks,
  assertOptions,
  assertPoolExportData,
  assertHandle,
  assertIndex,
  assertIpcHandle,
  assertName,
  assertPtr,
  assertSize,
} from './validate.js';
import {
  assertCaptureMode,
  assertEntryName,
  assertKernelArgs,
  assertLaunchConfig,
  assertMemOps,
  assertPtx,
  assertU32,
  assertU64,
  assertWaitCondition,
  assertWordAddress,
} from './validate-gpu-driven.js';

/** CU_EVENT_* flags (cuda.h). */
const CU_EVENT_DISABLE_TIMING = 0x2;
const CU_EVENT_INTERPROCESS = 0x4;

/** What gpuDrivenStatus answers (the contract's shape). */
type GpuDrivenStatus = ReturnType<CudaDriver['gpuDrivenStatus']>;

/** CUstreamWaitValue_flags, CUstreamWriteValue_flags, CUstreamBatchMemOpType, CUstreamCaptureMode (cuda.h). */
const WAIT_CONDITIONS: Record<WaitCondition, number> = { geq: 0x0, eq: 0x1, and: 0x2, nor: 0x3 };
const CU_STREAM_WAIT_VALUE_FLUSH = 1 << 30;
const CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER = 0x1;
const MEM_OP_CODES: Record<StreamMemOp['op'], number> = { wait32: 1, write32: 2, wait64: 4, write64: 5, barrier: 6 };
const CAPTURE_MODES: Record<CaptureMode, number> = { global: 0, 'thread-local': 1, relaxed: 2 };

/** CUmemorytype values (cuda.h); 0 means CUDA does not know the pointer. */
const MEMORY_TYPES: Record<number, MemoryType> = { 1: 'host', 2: 'device', 3: 'array', 4: 'unified' };

/** CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, as a bit of CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES. */
const POSIX_FD_HANDLE = 1;

/** A range this driver reserved and mapped chunks into (own VMM allocation or VMM import). */
interface MappedRange {
  size: number;
  /** Offsets and sizes of the chunks mapped, in order. */
  chunks: Array<{ offset: number; size: number }>;
}

/** The native error shape (see native-addon.ts). */
interface NativeError {
  code?: unknown;
  call?: unknown;
  result?: unknown;
  detail?: unknown;
  message?: unknown;
  queued?: unknown;
}

/** Turns an error thrown by the addon into the typed error smcuda promises. */
export function fromNativeError(err: unknown): unknown {
  if (err instanceof SmcudaError || err instanceof TypeError || err instanceof RangeError) return err;
  if (typeof err !== 'object' || err === null) return err;
  const e = err as NativeError;
  const code = typeof e.code === 'string' ? e.code : undefined;
  const message = typeof e.message === 'string' ? e.message : String(err);
  if (code === undefined) return err;
  if (code.startsWith('CUDA_ERROR_') && typeof e.result === 'number' && typeof e.call === 'string') {
    const detail = typeof e.detail === 'string' && e.detail !== '' ? e.detail : detailOf(message);
    const converted = new CudaError(e.call, code, e.result, detail);
    (converted as { cause?: unknown }).cause = err;
    // memcpyBatchAsync one by one: the copies queued before the failing one.
    if (typeof e.queued === 'number') (converted as { queued?: number }).queued = e.queued;
    return converted;
  }
  if (code === 'SMCUDA_CLOSED') return new ClosedError(message);
  if (code === 'SMCUDA_DRIVER_UNAVAILABLE') return new DriverUnavailableError(message, { cause: err });
  // errno codes of the shared-memory calls ('ENOENT', ...).
  return new SmcudaError(code, message, { cause: err });
}

/** The text after "<call> failed: <code> (<n>): " in a native message, if any. */
function detailOf(message: string): string | undefined {
  const m = /^\S+ failed: \S+ \(-?\d+\): (.*)$/s.exec(message);
  return m?.[1];
}

/** Host bytes as the addon takes them: (ArrayBuffer, byteOffset, byteLength). */
function hostRange(name: string, bytes: Uint8Array): [ArrayBuffer, number, number] {
  assertBytes(name, bytes);
  return viewRange(name, bytes);
}

/** A copy's host side: any ArrayBufferView, as (ArrayBuffer, byteOffset, byteLength). */
function viewRange(name: string, bytes: ArrayBufferView): [ArrayBuffer, number, number] {
  assertHostView(name, bytes);
  if (!(bytes.buffer instanceof ArrayBuffer)) {
    throw new ArgumentTypeError(`${name} must be backed by an ArrayBuffer (not a SharedArrayBuffer)`);
  }
  return [bytes.buffer, bytes.byteOffset, bytes.byteLength];
}

export class NativeCudaDriver implements CudaDriver {
  readonly kind = 'native' as const;

  #addon: NativeAddon | undefined;
  #initialised = false;
  #current = -1;
  /** Primary contexts this driver retained, by device ordinal. */
  readonly #contexts = new Map<number, bigint>();
  /** Rejecters of this driver's pending whenComplete promises, for close(). */
  readonly #pending = new Set<(err: Error) => void>();
  /** Streams this driver began a capture on and has not ended: memcpyBatchAsync refuses them (below). */
  readonly #capturing = new Set<StreamHandle>();
  /** This driver's client of the addon's completion poller (completionOpen), once it waited. */
  #completionClient: number | undefined;
  #completionOpen = false;
  /** Own VMM allocations and VMM imports, by base: what to unmap and free. */
  readonly #ownRanges = new Map<DevicePtr, MappedRange>();
  readonly #importedRanges = new Map<DevicePtr, MappedRange>();
  readonly #pools = new Set<PoolHandle>();
  readonly #importedPools = new Set<PoolHandle>();
  readonly #importedPointers = new Set<DevicePtr>();

  /**
   * Argument buffers reused from call to call: the addon reads them before it
   * returns, and a new ArrayBuffer is costly (an off-heap backing store; typed
   * arrays over 64 bytes too), which a collective paid per kernel launch and
   * per memory-operation batch of 8 ranks. Measured over a no-op addon: a
   * launch's JavaScript fell to about a third, an 8-rank step batch's
   * (21 operations) to about a tenth.
   */
  readonly #paramBuffers = new Map<number, ArrayBuffer>();
  readonly #paramBuffer = (bytes: number): ArrayBuffer => {
    let b = this.#paramBuffers.get(bytes);
    if (b === undefined) this.#paramBuffers.set(bytes, (b = new ArrayBuffer(bytes)));
    return b;
  };
  readonly #batches = new Map<number, { codes: Uint32Array; flags: Uint32Array; addrs: BigUint64Array; values: BigUint64Array }>();
  #batchArrays(n: number): { codes: Uint32Array; flags: Uint32Array; addrs: BigUint64Array; values: BigUint64Array } {
    let b = this.#batches.get(n);
    if (b === undefined)
      this.#batches.set(n, (b = { codes: new Uint32Array(n), flags: new Uint32Array(n), addrs: new BigUint64Array(n), values: new BigUint64Array(n) }));
    return b;
  }

  /** `addon`: inject a binding (tests); by default the built addon is loaded on first use. */
  constructor(addon?: NativeAddon) {
    this.#addon = addon;
  }

  /** The addon; throws AddonLoadError (with every cause and fix) where it cannot load. */
  #binding(): NativeAddon {
    this.#addon ??= loadAddon();
    return this.#addon;
  }

  /**
   * Calls into the addon, converting its errors. The per-message calls
   * (copies, events, buffer ids) do the same inline instead: V8 did not
   * elide this closure around a native call, ~100 bytes of garbage a call,
   * and the progress engine polling an event makes about a million calls a second.
   */
  #call<T>(fn: (addon: NativeAddon) => T): T {
    const addon = this.#binding();
    try {
      return fn(addon);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  // -- driver and devices ---------------------------------------------------

  status(): DriverStatus {
    try {
      const s = this.#binding().cudaStatus();
      return s.available
        ? {
            available: true,
            driverVersion: s.driverVersion,
            ...(s.memcpyBatch !== undefined ? { memcpyBatch: s.memcpyBatch } : {}),
            ...(s.fdMemory !== undefined ? { fdMemory: s.fdMemory } : {}),
            ...(s.fdMemoryReason !== undefined ? { fdMemoryReason: s.fdMemoryReason } : {}),
          }
        : { available: false, reason: withoutSimHint(s.reason ?? 'CUDA is unavailable (no reason given)'), driverVersion: s.driverVersion };
    } catch (err) {
      return { available: false, reason: err instanceof Error ? err.message : String(err), driverVersion: 0 };
    }
  }

  init(): void {
    if (this.#initialised) return;
    const s = this.status();
    if (!s.available) throw new DriverUnavailableError(`CUDA is unavailable: ${s.reason}`);
    this.#call((a) => a.cuInit());
    this.#initialised = true;
  }

  isReady(): boolean {
    return this.#initialised && this.#current >= 0;
  }

  deviceCount(): number {
    return this.#call((a) => a.cuDeviceGetCount());
  }

  deviceInfo(index: number): DeviceInfo {
    assertIndex('index', index);
    const i = this.#call((a) => a.cuDeviceGetInfo(index));
    return {
      index,
      name: i.name,
      uuid: i.uuid,
      pciBusId: i.pciBusId,
      computeCapability: [i.major, i.minor],
      multiprocessors: i.multiprocessors,
      totalMemory: i.totalMemory,
    };
  }

  canAccessPeer(dev: number, peer: number): boolean {
    assertIndex('dev', dev);
    assertIndex('peer', peer);
    if (dev === peer) return true; // cuDeviceCanAccessPeer(d, d) says 0; a device reaches itself
    return this.#call((a) => a.cuDeviceCanAccessPeer(dev, peer));
  }

  // -- contexts ---------------------------------------------------------------

  setDevice(index: number): void {
    assertIndex('index', index);
    const ctx = this.#contexts.get(index);
    if (ctx !== undefined) {
      this.#call((a) => a.cuCtxSetCurrent(ctx));
    } else {
      this.#contexts.set(
        index,
        this.#call((a) => a.cuDevicePrimaryCtxRetain(index)),
      );
    }
    this.#current = index;
  }

  currentDevice(): number {
    return this.#current;
  }

  releaseDevices(): void {
    if (this.#contexts.size === 0) return;
    let first: unknown;
    try {
      this.#call((a) => a.cuCtxSetCurrent(0n)); // nothing current may outlive its context
    } catch (err) {
      first = err;
    }
    for (const index of [...this.#contexts.keys()].reverse()) {
      try {
        this.#call((a) => a.cuDevicePrimaryCtxRelease(index));
      } catch (err) {
        first ??= err;
      }
      this.#contexts.delete(index);
    }
    this.#current = -1;
    if (first !== undefined) throw first;
  }

  // -- memory -----------------------------------------------------------------

  memAlloc(bytes: number): DevicePtr {
    assertSize('bytes', bytes);
    return this.#call((a) => a.cuMemAlloc(bytes));
  }

  memFree(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    this.#call((a) => a.cuMemFree(ptr));
    DeviceAllocation.noteFreed(this, ptr);
  }

  memAllocBuffer(bytes: number): DeviceAllocation {
    return DeviceAllocation.track(this, this.memAlloc(bytes), bytes, this.#current);
  }

  memsetD8(ptr: DevicePtr, value: number, bytes: number): void {
    assertPtr('ptr', ptr);
    assertByte('value', value);
    assertSize('bytes', bytes);
    this.#call((a) => a.cuMemsetD8(ptr, value, bytes));
  }

  memsetD8Async(ptr: DevicePtr, value: number, bytes: number, stream: StreamHandle): void {
    assertPtr('ptr', ptr);
    assertByte('value', value);
    assertSize('bytes', bytes);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemsetD8Async(ptr, value, bytes, stream));
  }

  memcpyHtoD(dst: DevicePtr, src: ArrayBufferView): void {
    assertPtr('dst', dst);
    const [buf, off, len] = viewRange('src', src);
    this.#call((a) => a.cuMemcpyHtoD(dst, buf, off, len));
  }

  memcpyDtoH(dst: ArrayBufferView, src: DevicePtr): void {
    const [buf, off, len] = viewRange('dst', dst);
    assertPtr('src', src);
    this.#call((a) => a.cuMemcpyDtoH(buf, off, len, src));
  }

  memcpyDtoD(dst: DevicePtr, src: DevicePtr, bytes: number): void {
    assertPtr('dst', dst);
    assertPtr('src', src);
    assertSize('bytes', bytes);
    this.#call((a) => a.cuMemcpyDtoD(dst, src, bytes));
  }

  memcpyHtoDAsync(dst: DevicePtr, src: ArrayBufferView, stream: StreamHandle): void {
    assertPtr('dst', dst);
    const [buf, off, len] = viewRange('src', src);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemcpyHtoDAsync(dst, buf, off, len, stream));
  }

  memcpyDtoHAsync(dst: ArrayBufferView, src: DevicePtr, stream: StreamHandle): void {
    const [buf, off, len] = viewRange('dst', dst);
    assertPtr('src', src);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemcpyDtoHAsync(buf, off, len, src, stream));
  }

  memcpyAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: StreamHandle): void {
    assertPtr('dst', dst);
    assertPtr('src', src);
    assertSize('bytes', bytes);
    assertHandle('stream', stream);
    const a = this.#addon ?? this.#binding();
    try {
      a.cuMemcpyAsync(dst, src, bytes, stream);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  memcpyBatchAsync(dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, count: number, stream: StreamHandle): void {
    assertCopyBatch(dsts, srcs, sizes, count);
    assertHandle('stream', stream);
    // cuMemcpyBatchAsync cannot be captured: in a capture CUDA drops the copy
    // without an error (rmm#2518), so it is refused here, as the simulator does.
    if (this.#capturing.has(stream)) {
      throw new CudaError(
        'cuMemcpyBatchAsync',
        'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED',
        900,
        'a batch copy cannot be captured in a CUDA graph (the driver would drop it silently): queue cuMemcpyAsync copies instead',
      );
    }
    const device = Math.max(0, this.#current);
    const a = this.#addon ?? this.#binding();
    try {
      a.cuMemcpyBatchAsync(dsts, srcs, sizes, count, stream, device);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  memGetAddressRange(ptr: DevicePtr): AddressRange {
    assertPtr('ptr', ptr);
    return this.#call((a) => a.cuMemGetAddressRange(ptr));
  }

  pointerAttributes(ptr: DevicePtr): PointerAttributes {
    assertPtr('ptr', ptr);
    const r = this.#call((a) => a.cuPointerGetAttributes(ptr));
    const memoryType = MEMORY_TYPES[r.memoryType];
    if (memoryType === undefined) {
      // cuPointerGetAttributes succeeds on unknown pointers with memory type 0;
      // report what cuPointerGetAttribute would (CUDA_ERROR_INVALID_VALUE).
      throw new CudaError('cuPointerGetAttributes', 'CUDA_ERROR_INVALID_VALUE', 1, `0x${ptr.toString(16)} is not memory CUDA knows`);
    }
    return { bufferId: r.bufferId, device: r.device, memoryType };
  }

  bufferId(ptr: DevicePtr): bigint {
    assertPtr('ptr', ptr);
    const a = this.#addon ?? this.#binding();
    try {
      return a.cuPointerGetBufferId(ptr);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  hostAlloc(bytes: number): PinnedHostBuffer {
    assertSize('bytes', bytes);
    const buffer = this.#call((a) => a.cuMemHostAlloc(bytes));
    let devicePtr: DevicePtr;
    try {
      devicePtr = this.#call((a) => a.cuMemHostGetDevicePointer(buffer));
    } catch (err) {
      try {
        this.#call((a) => a.cuMemFreeHost(buffer));
      } catch {
        // The first error says what went wrong; this one would only hide it.
      }
      throw err;
    }
    const view = new Uint8Array(buffer);
    let freed = false;
    return {
      bytes: view,
      devicePtr,
      free: () => {
        if (freed) return;
        freed = true;
        this.#call((a) => a.cuMemFreeHost(buffer));
      },
    };
  }

  hostRegister(bytes: Uint8Array): () => void {
    const [buf, off, len] = hostRange('bytes', bytes);
    this.#call((a) => a.cuMemHostRegister(buf, off, len));
    let registered = true;
    return () => {
      if (!registered) return;
      registered = false;
      this.#call((a) => a.cuMemHostUnregister(buf, off));
    };
  }

  // -- IPC --------------------------------------------------------------------

  ipcGetMemHandle(ptr: DevicePtr): Uint8Array {
    assertPtr('ptr', ptr);
    return new Uint8Array(this.#call((a) => a.cuIpcGetMemHandle(ptr)));
  }

  ipcOpenMemHandle(handle: Uint8Array): DevicePtr {
    assertIpcHandle('handle', handle);
    const [buf, off] = hostRange('handle', handle);
    return this.#call((a) => a.cuIpcOpenMemHandle(buf, off));
  }

  ipcCloseMemHandle(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    this.#call((a) => a.cuIpcCloseMemHandle(ptr));
  }

  ipcGetEventHandle(event: EventHandle): Uint8Array {
    assertHandle('event', event);
    return new Uint8Array(this.#call((a) => a.cuIpcGetEventHandle(event)));
  }

  ipcOpenEventHandle(handle: Uint8Array): EventHandle {
    assertIpcHandle('handle', handle);
    const [buf, off] = hostRange('handle', handle);
    return this.#call((a) => a.cuIpcOpenEventHandle(buf, off));
  }

  // -- memory shared by file descriptor ---------------------------------------------

  /** The current device, or CUDA_ERROR_INVALID_CONTEXT as the driver would say. */
  #device(call: string): number {
    if (this.#current < 0) throw new CudaError(call, 'CUDA_ERROR_INVALID_CONTEXT', 201, 'no current device: call setDevice(index) first');
    return this.#current;
  }

  /** Unmaps the chunks mapped so far and frees the range; the first error is kept for the caller's. */
  #unmapRange(base: DevicePtr, range: MappedRange): unknown {
    let first: unknown;
    for (const c of range.chunks) {
      try {
        this.#call((a) => a.cuMemUnmap(base + BigInt(c.offset), c.size));
      } catch (err) {
        first ??= err;
      }
    }
    try {
      this.#call((a) => a.cuMemAddressFree(base, range.size));
    } catch (err) {
      first ??= err;
    }
    return first;
  }

  /**
   * Reserves `size` bytes and maps one allocation handle per chunk, from
   * `handleOf(k)`; the handles are released once mapped (the mapping keeps
   * the memory). Any failure undoes everything done so far.
   */
  #mapChunks(call: string, size: number, chunks: ReadonlyArray<{ offset: number; size: number }>, handleOf: (k: number) => bigint): DevicePtr {
    const device = this.#device(call);
    const base = this.#call((a) => a.cuMemAddressReserve(size, 0));
    const range: MappedRange = { size, chunks: [] };
    try {
      chunks.forEach((c, k) => {
        const handle = handleOf(k);
        try {
          this.#call((a) => a.cuMemMap(base + BigInt(c.offset), c.size, handle));
        } finally {
          this.#call((a) => a.cuMemRelease(handle));
        }
        range.chunks.push({ offset: c.offset, size: c.size });
      });
      this.#call((a) => a.cuMemSetAccess(base, size, device));
    } catch (err) {
      this.#unmapRange(base, range);
      throw err;
    }
    return base;
  }

  vmmAlloc(bytes: number, options: VmmAllocOptions = {}): VmmAllocation {
    assertSize('bytes', bytes);
    assertOptions('options', options);
    const count = options.chunks ?? 1;
    assertChunkCount('options.chunks', count);
    if (bytes === 0) throw new ArgumentRangeError('bytes must be at least 1');
    const device = this.#device('cuMemCreate');
    const granularity = this.#call((a) => a.cuMemGetAllocationGranularity(device));
    const chunkSize = Math.ceil(Math.ceil(bytes / count) / granularity) * granularity;
    const size = chunkSize * count;
    const chunks = Array.from({ length: count }, (_, k) => ({ offset: k * chunkSize, size: chunkSize }));
    const ptr = this.#mapChunks('cuMemCreate', size, chunks, () => this.#call((a) => a.cuMemCreate(chunkSize, device)));
    this.#ownRanges.set(ptr, { size, chunks });
    return { ptr, size, chunkSize, chunks: count };
  }

  vmmFree(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const range = this.#ownRanges.get(ptr);
    if (!range)
      throw new CudaError(
        'cuMemUnmap',
        'CUDA_ERROR_INVALID_VALUE',
        1,
        `0x${ptr.toString(16)} is not the base of a vmmAlloc allocation of this driver (freed already?)`,
      );
    this.#ownRanges.delete(ptr);
    const err = this.#unmapRange(ptr, range);
    if (err !== undefined) throw err;
  }

  memPoolCreate(options: MemPoolOptions = {}): PoolHandle {
    assertOptions('options', options);
    const maxSize = options.maxSize ?? 0;
    assertSize('options.maxSize', maxSize);
    const device = this.#device('cuMemPoolCreate');
    const pool = this.#call((a) => a.cuMemPoolCreate(device, maxSize));
    this.#pools.add(pool);
    return pool;
  }

  memPoolDestroy(pool: PoolHandle): void {
    assertHandle('pool', pool);
    this.#call((a) => a.cuMemPoolDestroy(pool));
    this.#pools.delete(pool);
  }

  memAllocFromPoolAsync(bytes: number, pool: PoolHandle, stream: StreamHandle): DevicePtr {
    assertSize('bytes', bytes);
    assertHandle('pool', pool);
    assertHandle('stream', stream);
    return this.#call((a) => a.cuMemAllocFromPoolAsync(bytes, pool, stream));
  }

  memFreeAsync(ptr: DevicePtr, stream: StreamHandle): void {
    assertPtr('ptr', ptr);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemFreeAsync(ptr, stream));
  }

  memoryKind(ptr: DevicePtr): MemoryKindInfo {
    assertPtr('ptr', ptr);
    const i = this.#call((a) => a.cuPointerGetMemoryInfo(ptr));
    const memoryType = MEMORY_TYPES[i.memoryType];
    if (memoryType === undefined) {
      throw new CudaError('cuPointerGetAttributes', 'CUDA_ERROR_INVALID_VALUE', 1, `0x${ptr.toString(16)} is not memory CUDA knows`);
    }
    const base = { bufferId: i.bufferId, device: i.device };
    if (memoryType !== 'device') return { ...base, kind: 'other', reason: `${memoryType} memory: only device memory is shared` };
    if (i.legacyIpc) return { ...base, kind: 'legacy-ipc' };
    const fdAllowed = (i.allowedHandleTypes & POSIX_FD_HANDLE) !== 0;
    if (i.mempool !== 0n) {
      return fdAllowed
        ? { ...base, kind: 'pool', pool: i.mempool }
        : { ...base, kind: 'other', reason: 'from a memory pool created without POSIX file descriptor handles (e.g. the default pool of cudaMallocAsync)' };
    }
    if (fdAllowed) {
      const chunk = i.mappingSize > 0 ? { base: i.mappingBase, size: i.mappingSize } : { base: i.rangeStart, size: i.rangeSize };
      return { ...base, kind: 'vmm', chunk };
    }
    return { ...base, kind: 'other', reason: 'not IPC capable: a cuMemCreate allocation without POSIX file descriptor handles, or memory of another process' };
  }

  vmmExport(ptr: DevicePtr, bytes: number): VmmExport {
    assertPtr('ptr', ptr);
    assertSize('bytes', bytes);
    const end = ptr + BigInt(Math.max(1, bytes));
    const chunks: FdChunk[] = [];
    let base: DevicePtr | undefined;
    try {
      for (let p = ptr; p < end; ) {
        const kind = this.memoryKind(p);
        if (kind.kind !== 'vmm' || !kind.chunk || kind.chunk.size === 0) {
          throw new CudaError(
            'cuMemExportToShareableHandle',
            'CUDA_ERROR_INVALID_VALUE',
            1,
            `0x${p.toString(16)} is not VMM memory with POSIX fd handles (${kind.reason ?? kind.kind})`,
          );
        }
        const chunk = kind.chunk;
        base ??= chunk.base;
        const handle = this.#call((a) => a.cuMemRetainAllocationHandle(chunk.base));
        let fd: number;
        try {
          fd = this.#call((a) => a.cuMemExportToShareableHandle(handle));
        } finally {
          this.#call((a) => a.cuMemRelease(handle));
        }
        chunks.push({ fd, offset: Number(chunk.base - base), size: chunk.size });
        p = chunk.base + BigInt(chunk.size);
      }
    } catch (err) {
      for (const c of chunks) this.#closeQuietly(c.fd);
      throw err;
    }
    const last = chunks[chunks.length - 1]!;
    return { base: base!, size: last.offset + last.size, chunks };
  }

  vmmImport(chunks: readonly FdChunk[], options: VmmImportOptions = {}): VmmImport {
    assertFdChunks('chunks', chunks);
    assertOptions('options', options);
    if (options.device !== undefined) assertIndex('options.device', options.device);
    const last = chunks[chunks.length - 1]!;
    const size = last.offset + last.size;
    const ptr = this.#mapChunks('cuMemImportFromShareableHandle', size, chunks, (k) => {
      const handle = this.#call((a) => a.cuMemImportFromShareableHandle(chunks[k]!.fd));
      if (options.device !== undefined) {
        try {
          const prop = this.#call((a) => a.cuMemGetAllocationPropertiesFromHandle(handle));
          if (prop.device !== options.device) {
            throw new CudaError(
              'cuMemImportFromShareableHandle',
              'CUDA_ERROR_INVALID_DEVICE',
              101,
              `chunk ${k} is memory of device ${prop.device}, the exporter promised device ${options.device}`,
            );
          }
        } catch (err) {
          this.#call((a) => a.cuMemRelease(handle));
          throw err;
        }
      }
      return handle;
    });
    this.#importedRanges.set(ptr, { size, chunks: chunks.map((c) => ({ offset: c.offset, size: c.size })) });
    return { ptr, size };
  }

  vmmRelease(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const range = this.#importedRanges.get(ptr);
    if (!range) throw new CudaError('cuMemUnmap', 'CUDA_ERROR_INVALID_VALUE', 1, `0x${ptr.toString(16)} is not a vmmImport of this driver (released already?)`);
    this.#importedRanges.delete(ptr);
    const err = this.#unmapRange(ptr, range);
    if (err !== undefined) throw err;
  }

  memPoolExport(pool: PoolHandle): number {
    assertHandle('pool', pool);
    return this.#call((a) => a.cuMemPoolExportToShareableHandle(pool));
  }

  memPoolExportPointer(ptr: DevicePtr): Uint8Array {
    assertPtr('ptr', ptr);
    return new Uint8Array(this.#call((a) => a.cuMemPoolExportPointer(ptr)));
  }

  memPoolImport(fd: number, options: PoolImportOptions = {}): PoolHandle {
    assertFd('fd', fd);
    assertOptions('options', options);
    if (options.device !== undefined) assertIndex('options.device', options.device);
    const current = this.#device('cuMemPoolImportFromShareableHandle');
    const pool = this.#call((a) => a.cuMemPoolImportFromShareableHandle(fd));
    // The pool's own device always has access; another device must be granted it.
    if (options.device !== undefined && options.device !== current) {
      try {
        this.#call((a) => a.cuMemPoolSetAccess(pool, current));
      } catch (err) {
        this.#call((a) => a.cuMemPoolDestroy(pool));
        throw err;
      }
    }
    this.#importedPools.add(pool);
    return pool;
  }

  memPoolImportPointer(pool: PoolHandle, data: Uint8Array): DevicePtr {
    assertHandle('pool', pool);
    assertPoolExportData('data', data);
    const [buf, off] = hostRange('data', data);
    const ptr = this.#call((a) => a.cuMemPoolImportPointer(pool, buf, off));
    this.#importedPointers.add(ptr);
    return ptr;
  }

  memPoolReleasePointer(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    if (!this.#importedPointers.has(ptr))
      throw new CudaError(
        'cuMemFree',
        'CUDA_ERROR_INVALID_VALUE',
        1,
        `0x${ptr.toString(16)} is not a pointer imported by memPoolImportPointer (released already?)`,
      );
    this.#call((a) => a.cuMemFree(ptr));
    this.#importedPointers.delete(ptr);
  }

  memPoolRelease(pool: PoolHandle): void {
    assertHandle('pool', pool);
    if (!this.#importedPools.has(pool))
      throw new CudaError(
        'cuMemPoolDestroy',
        'CUDA_ERROR_INVALID_VALUE',
        1,
        `0x${pool.toString(16)} is not a pool imported by memPoolImport (released already?)`,
      );
    this.#call((a) => a.cuMemPoolDestroy(pool));
    this.#importedPools.delete(pool);
  }

  closeFd(fd: number): void {
    assertFd('fd', fd);
    this.#call((a) => a.fdClose(fd));
  }

  fdMemoryResources(): FdMemoryResources {
    let mappings = 0;
    for (const r of this.#ownRanges.values()) mappings += r.chunks.length;
    for (const r of this.#importedRanges.values()) mappings += r.chunks.length;
    return {
      reservations: this.#ownRanges.size + this.#importedRanges.size,
      mappings,
      pools: this.#pools.size,
      importedPools: this.#importedPools.size,
      importedPointers: this.#importedPointers.size,
    };
  }

  #closeQuietly(fd: number): void {
    try {
      this.#call((a) => a.fdClose(fd));
    } catch {
      // Already closed: nothing left to release.
    }
  }

  // -- streams and events -----------------------------------------------------

  streamCreate(): StreamHandle {
    return this.#call((a) => a.cuStreamCreate());
  }

  streamDestroy(stream: StreamHandle): void {
    assertHandle('stream', stream);
    this.#call((a) => a.cuStreamDestroy(stream));
  }

  streamSynchronize(stream: StreamHandle): void {
    assertHandle('stream', stream);
    this.#call((a) => a.cuStreamSynchronize(stream));
  }

  streamWaitEvent(stream: StreamHandle, event: EventHandle): void {
    assertHandle('stream', stream);
    assertHandle('event', event);
    this.#call((a) => a.cuStreamWaitEvent(stream, event));
  }

  eventCreate(options: EventOptions = {}): EventHandle {
    if (typeof options !== 'object' || options === null) throw new ArgumentTypeError('options must be an object');
    let flags = 0;
    if (options.disableTiming) flags |= CU_EVENT_DISABLE_TIMING;
    // CUDA requires interprocess events to have timing disabled.
    if (options.interprocess) flags |= CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    return this.#call((a) => a.cuEventCreate(flags));
  }

  eventDestroy(event: EventHandle): void {
    assertHandle('event', event);
    this.#call((a) => a.cuEventDestroy(event));
  }

  eventRecord(event: EventHandle, stream: StreamHandle): void {
    assertHandle('event', event);
    assertHandle('stream', stream);
    const a = this.#addon ?? this.#binding();
    try {
      a.cuEventRecord(event, stream);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  eventQuery(event: EventHandle): boolean {
    assertHandle('event', event);
    const a = this.#addon ?? this.#binding();
    try {
      return a.cuEventQuery(event);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  eventSynchronize(event: EventHandle): void {
    assertHandle('event', event);
    this.#call((a) => a.cuEventSynchronize(event));
  }

  eventElapsedTime(start: EventHandle, end: EventHandle): number {
    assertHandle('start', start);
    assertHandle('end', end);
    return this.#call((a) => a.cuEventElapsedTime(start, end));
  }

  whenComplete(event: EventHandle): Promise<void> {
    try {
      assertHandle('event', event);
    } catch (err) {
      return Promise.reject(err);
    }
    const ctx = this.#contexts.get(this.#current);
    if (ctx === undefined) {
      return Promise.reject(new ConfigError('whenComplete needs a current device: call setDevice(index) first'));
    }
    let native: Promise<void>;
    try {
      const a = this.#binding();
      if (!this.#completionOpen) {
        this.#completionClient = a.completionOpen();
        this.#completionOpen = true;
      }
      native = a.whenEventComplete(event, ctx, this.#completionClient);
    } catch (err) {
      return Promise.reject(fromNativeError(err));
    }
    return new Promise<void>((resolve, reject) => {
      this.#pending.add(reject);
      native.then(
        () => {
          this.#pending.delete(reject);
          resolve();
        },
        (err: unknown) => {
          this.#pending.delete(reject);
          reject(fromNativeError(err));
        },
      );
    });
  }

  // -- shared host memory -------------------------------------------------------

  shmCreate(name: string, bytes: number): SharedSegment {
    assertName('name', name);
    assertSize('bytes', bytes);
    const addon = this.#binding();
    return createSharedSegment(addon, name, bytes, (fn) => this.#call(fn));
  }

  shmOpen(name: string, bytes?: number): SharedSegment {
    assertName('name', name);
    if (bytes !== undefined) assertSize('bytes', bytes);
    const addon = this.#binding();
    return sharedSegment(
      name,
      this.#call((a) => a.shmOpen(name, bytes)),
      (b) => this.#call(() => addon.shmClose(b)),
    );
  }

  shmUnlink(name: string): void {
    assertName('name', name);
    this.#call((a) => a.shmUnlink(name));
  }

  // -- GPU-driven work ----------------------------------------------------------
  // native/gpu_driven.cc; the stream memory operations are the _v2 entry
  // points, asked of cuGetProcAddress with cudaVersion 11070.

  gpuDrivenStatus(): GpuDrivenStatus {
    const off = (reason: string): GpuDrivenStatus => ({ streamMemOps: false, waitValueNor: false, memOps64: false, graphs: false, modules: false, reason });
    try {
      const s = this.#binding().gpuDrivenStatus(this.#current >= 0 ? this.#current : 0);
      if (!s.available) return off(`CUDA is unavailable: ${s.reason ?? 'no reason given'}`);
      const streamMemOps = s.memOps === true;
      const status: GpuDrivenStatus = {
        streamMemOps,
        waitValueNor: streamMemOps && s.waitValueNor === true,
        memOps64: streamMemOps && s.memOps64 === true,
        graphs: s.graphs === true,
        modules: s.modules === true,
      };
      const why = [
        s.memOpsReason,
        s.graphsReason,
        s.modulesReason,
        s.attributesReason,
        streamMemOps && s.attributesReason === undefined && !s.waitValueNor
          ? 'the device does not support CU_STREAM_WAIT_VALUE_NOR (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR is 0)'
          : undefined,
        streamMemOps && s.attributesReason === undefined && !s.memOps64
          ? 'the device does not support 64-bit stream memory operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0)'
          : undefined,
      ].filter((r): r is string => r !== undefined);
      return why.length > 0 ? { ...status, reason: why.join('; ') } : status;
    } catch (err) {
      return off(err instanceof Error ? err.message : String(err));
    }
  }

  streamWaitValue32(stream: StreamHandle, addr: DevicePtr, value: number, condition: WaitCondition): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 4);
    assertU32('value', value);
    assertWaitCondition('condition', condition);
    this.#call((a) => a.cuStreamWaitValue32(stream, addr, value, WAIT_CONDITIONS[condition]));
  }

  streamWaitValue64(stream: StreamHandle, addr: DevicePtr, value: bigint, condition: WaitCondition): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 8);
    assertU64('value', value);
    assertWaitCondition('condition', condition);
    this.#call((a) => a.cuStreamWaitValue64(stream, addr, value, WAIT_CONDITIONS[condition]));
  }

  streamWriteValue32(stream: StreamHandle, addr: DevicePtr, value: number): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 4);
    assertU32('value', value);
    this.#call((a) => a.cuStreamWriteValue32(stream, addr, value, 0));
  }

  streamWriteValue64(stream: StreamHandle, addr: DevicePtr, value: bigint): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 8);
    assertU64('value', value);
    this.#call((a) => a.cuStreamWriteValue64(stream, addr, value, 0));
  }

  streamBatchMemOp(stream: StreamHandle, ops: readonly StreamMemOp[]): void {
    assertHandle('stream', stream);
    assertMemOps('ops', ops);
    const n = ops.length;
    const { codes, flags, addrs, values } = this.#batchArrays(n);
    for (let k = 0; k < n; k++) {
      const o = ops[k]!;
      codes[k] = MEM_OP_CODES[o.op];
      if (o.op === 'barrier') {
        // CU_STREAM_MEMORY_BARRIER_TYPE_SYS (0): visible to everyone. (The arrays are reused: clear the slot.)
        flags[k] = 0;
        addrs[k] = 0n;
        values[k] = 0n;
        continue;
      }
      addrs[k] = o.addr;
      values[k] = BigInt(o.value);
      if (o.op === 'wait32' || o.op === 'wait64') flags[k] = WAIT_CONDITIONS[o.condition] | (o.flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
      else flags[k] = o.noMemoryBarrier ? CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER : 0;
    }
    // Inline rather than #call (a collective queues two batches per call; see #call).
    const a = this.#addon ?? this.#binding();
    try {
      a.cuStreamBatchMemOp(stream, n, codes, flags, addrs, values);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  streamBeginCapture(stream: StreamHandle, mode: CaptureMode = 'thread-local'): void {
    assertHandle('stream', stream);
    assertCaptureMode('mode', mode);
    this.#call((a) => a.cuStreamBeginCapture(stream, CAPTURE_MODES[mode]));
    this.#capturing.add(stream);
  }

  streamEndCapture(stream: StreamHandle): GraphHandle {
    assertHandle('stream', stream);
    this.#capturing.delete(stream); // ended, or invalidated and ended: either way no longer capturing
    return this.#call((a) => a.cuStreamEndCapture(stream));
  }

  streamIsCapturing(stream: StreamHandle): boolean {
    assertHandle('stream', stream);
    // Invalidated (2) still counts: the capture must be ended all the same. Inline: a collective asks per call (see #call).
    const a = this.#addon ?? this.#binding();
    try {
      return a.cuStreamIsCapturing(stream) !== 0;
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  graphInstantiate(graph: GraphHandle): GraphExecHandle {
    assertHandle('graph', graph);
    return this.#call((a) => a.cuGraphInstantiate(graph));
  }

  graphLaunch(exec: GraphExecHandle, stream: StreamHandle): void {
    assertHandle('exec', exec);
    assertHandle('stream', stream);
    this.#call((a) => a.cuGraphLaunch(exec, stream));
  }

  graphExecDestroy(exec: GraphExecHandle): void {
    assertHandle('exec', exec);
    this.#call((a) => a.cuGraphExecDestroy(exec));
  }

  graphDestroy(graph: GraphHandle): void {
    assertHandle('graph', graph);
    this.#call((a) => a.cuGraphDestroy(graph));
  }

  moduleLoadData(ptx: string): ModuleLoadInfo {
    assertPtx('ptx', ptx);
    const start = performance.now();
    const module = this.#call((a) => a.cuModuleLoadData(ptx));
    return { module, loadMs: performance.now() - start };
  }

  moduleUnload(module: ModuleHandle): void {
    assertHandle('module', module);
    this.#call((a) => a.cuModuleUnload(module));
  }

  moduleGetFunction(module: ModuleHandle, name: string): FunctionHandle {
    assertHandle('module', module);
    assertEntryName('name', name);
    return this.#call((a) => a.cuModuleGetFunction(module, name));
  }

  launchKernel(fn: FunctionHandle, config: LaunchConfig, args: readonly KernelArg[], stream: StreamHandle): void {
    assertHandle('fn', fn);
    const [grid, block, shared] = assertLaunchConfig('config', config);
    assertKernelArgs('args', args);
    assertHandle('stream', stream);
    const { params, layout } = packKernelArgs(args, this.#paramBuffer);
    const dims = new Uint32Array(7);
    dims[0] = grid[0];
    dims[1] = grid[1];
    dims[2] = grid[2];
    dims[3] = block[0];
    dims[4] = block[1];
    dims[5] = block[2];
    dims[6] = shared;
    // Inline rather than #call: a collective launches per call, and the closure around the native call is garbage (see #call).
    const a = this.#addon ?? this.#binding();
    try {
      a.cuLaunchKernel(fn, dims, stream, params, layout);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  /**
   * Rejects this driver's pending whenComplete promises (ClosedError), and
   * only this driver's: it closes its own client of the addon's completion
   * poller (one thread per Node environment, shared by every driver object),
   * after which the thread no longer queries this driver's events; other
   * drivers' waits go on. Then releases the retained primary contexts.
   */
  close(): void {
    const closed = new ClosedError('the CUDA driver was closed while waiting for an event');
    for (const reject of this.#pending) reject(closed);
    this.#pending.clear();
    if (this.#addon === undefined) return; // never loaded: nothing to release
    try {
      if (this.#completionOpen) {
        this.#completionOpen = false;
        this.#addon.completionClose(this.#completionClient!);
      }
    } finally {
      this.releaseDevices();
      this.#initialised = false;
      DeviceAllocation.noteDriverClosed(this);
    }
  }
}
