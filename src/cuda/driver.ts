/**
 * The CUDA driver interface: one contract, two implementations.
 *
 *  - `NativeCudaDriver` (native-driver.ts) wraps the addon in native/, which
 *    dlopens libcuda.so.1 at run time.
 *  - `SimulatedCudaDriver` (sim-driver.ts) keeps "device memory" in POSIX
 *    shared memory so that separate processes can really open each other's
 *    IPC handles; it injects faults on request.
 *
 * Everything above this file (machines, cache, transport, CLI) talks to a
 * `CudaDriver` only, so every protocol test runs on both.
 *
 * Conventions:
 *  - Device pointers, streams, events and contexts are `bigint` handles.
 *  - Calls act on the current device of the calling thread (`setDevice`),
 *    as the CUDA runtime does; pointers carry their own device.
 *  - A failing call throws `CudaError` (errors.ts) whose `code` is the CUDA
 *    error name, e.g. `CUDA_ERROR_ALREADY_MAPPED`, and whose `call` names the
 *    driver function, e.g. `cuIpcOpenMemHandle`.
 *  - Bad arguments from JS are refused with TypeError/RangeError before any
 *    driver sees them (validate.ts).
 */

import type { DeviceAllocation } from './device-allocation.js';

/** A device pointer (CUdeviceptr). */
export type DevicePtr = bigint;
/** An opaque stream handle (CUstream). `0n` is the legacy default stream. */
export type StreamHandle = bigint;
/**
 * The legacy default stream (the NULL stream). Work recorded on it waits for
 * the work queued before it on every blocking stream, including the
 * per-thread default streams: what a synchronous-looking call such as a
 * pageable cuMemcpyHtoD or cuMemsetD8 may leave in flight.
 */
export const LEGACY_STREAM: StreamHandle = 0n;
/** An opaque event handle (CUevent). */
export type EventHandle = bigint;

/** Size in bytes of CUipcMemHandle and CUipcEventHandle. */
export const IPC_HANDLE_SIZE = 64;

/** Size in bytes of CUmemPoolPtrExportData. */
export const POOL_EXPORT_DATA_SIZE = 64;

export type DriverKind = 'native' | 'sim';

export interface DeviceInfo {
  /** Ordinal as this process sees it (depends on CUDA_VISIBLE_DEVICES). */
  index: number;
  name: string;
  /** 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx': the identity used across processes. */
  uuid: string;
  /** e.g. '0000:18:00.0' */
  pciBusId: string;
  computeCapability: [major: number, minor: number];
  /** Streaming multiprocessors (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT): the collectives size their kernels' grids by it. */
  multiprocessors: number;
  totalMemory: number;
}

/** Why the driver is or is not usable; never throws. */
export interface DriverStatus {
  available: boolean;
  /** Present when not available: what is missing and how to fix it. */
  reason?: string;
  /** cuDriverGetVersion, e.g. 13000; 0 where unknown. */
  driverVersion: number;
  /** What memcpyBatchAsync calls: the driver's batch entry point, or 'none' (one copy at a time). */
  memcpyBatch?: string;
  /** Whether VMM and pool memory can be made, exported and imported by file descriptor (when available). */
  fdMemory?: boolean;
  /** Why not, where `fdMemory` is false. */
  fdMemoryReason?: string;
}

// -- memory shared by file descriptor ---------------------------------------------

/**
 * How an allocation can be shared with another process:
 *  - 'legacy-ipc': cuMemAlloc memory; cuIpcGetMemHandle works.
 *  - 'vmm': cuMemCreate chunks mapped into a reserved range, created with
 *    POSIX file descriptor handles; exported chunk by chunk (vmmExport).
 *  - 'pool': from a stream-ordered pool created with POSIX file descriptor
 *    handles; the pool is exported once (memPoolExport), each allocation by
 *    memPoolExportPointer.
 *  - 'other': none of these (host, managed, a pool or VMM allocation without
 *    fd handles, another process's memory): `reason` says which.
 */
export type MemoryKind = 'legacy-ipc' | 'vmm' | 'pool' | 'other';

/** An opaque memory pool handle (CUmemoryPool). */
export type PoolHandle = bigint;

export interface MemoryKindInfo {
  kind: MemoryKind;
  /** For 'other': why this memory cannot be shared, for stats and NODE_DEBUG=smcuda. */
  reason?: string;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID: the cache key's revalidation. */
  bufferId: bigint;
  /** The device the memory is on, as this process numbers it. */
  device: number;
  /** 'pool': the pool the allocation came from. */
  pool?: PoolHandle;
  /** 'vmm': the mapped chunk holding the pointer. */
  chunk?: AddressRange;
}

export interface VmmAllocOptions {
  /** Physical chunks (separate cuMemCreate allocations) mapped one after another; default 1. */
  chunks?: number;
}

export interface VmmAllocation {
  ptr: DevicePtr;
  /** Bytes mapped: the request rounded up to whole chunks. */
  size: number;
  chunkSize: number;
  chunks: number;
}

/** One chunk of a VMM range, by descriptor; `offset` is from the first exported chunk's base. */
export interface FdChunk {
  fd: number;
  offset: number;
  size: number;
}

export interface VmmExport {
  /** Base of the first chunk the exported bytes touch: the importer maps chunk k at its base + chunks[k].offset. */
  base: DevicePtr;
  /** From `base` to the end of the last chunk. */
  size: number;
  /** New descriptors, one per chunk, owned by the caller: send them, then close them (closeFd). */
  chunks: FdChunk[];
}

export interface VmmImportOptions {
  /** The device (an ordinal of this process) the exporter said the memory is on; refused if the descriptor names another. */
  device?: number;
}

export interface VmmImport {
  /** Where the first chunk is mapped here: the exporter's pointer p is at ptr + (p - export.base). */
  ptr: DevicePtr;
  size: number;
}

export interface MemPoolOptions {
  /** Most bytes the pool may hold; 0 or absent: no limit of its own. */
  maxSize?: number;
}

export interface PoolImportOptions {
  /** The device (an ordinal of this process) the pool is on; access is granted to the current device when it differs. */
  device?: number;
}

/** What this driver instance holds of the fd-shared kinds: every count goes back to its start when all is undone. */
export interface FdMemoryResources {
  /** Address ranges reserved (own VMM allocations and VMM imports). */
  reservations: number;
  /** Chunks mapped into them. */
  mappings: number;
  /** Pools created here and not destroyed. */
  pools: number;
  /** Pools imported from other processes and not released. */
  importedPools: number;
  /** Pointers imported from other processes' pools and not released. */
  importedPointers: number;
}

export type MemoryType = 'host' | 'device' | 'array' | 'unified';

export interface PointerAttributes {
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation, changes on free + realloc. */
  bufferId: bigint;
  /** CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
  device: number;
  memoryType: MemoryType;
}

export interface AddressRange {
  base: DevicePtr;
  size: number;
}

/** Page-locked host memory, visible to JS as bytes. */
export interface PinnedHostBuffer {
  readonly bytes: Uint8Array;
  /**
   * The buffer's address for the GPU (cuMemHostGetDevicePointer; under unified addressing
   * the host address itself): kernels, copies and stream memory operations on any device may read and write
   * the buffer through it, and what they write shows in `bytes`.
   */
  readonly devicePtr: DevicePtr;
  /** Releases the pinning/allocation; `bytes` must not be used afterwards. */
  free(): void;
}

/** A POSIX shared-memory segment mapped into this process. */
export interface SharedSegment {
  readonly name: string;
  readonly bytes: Uint8Array;
  /** Unmaps (does not unlink). Idempotent. */
  close(): void;
}

export interface EventOptions {
  /** CU_EVENT_INTERPROCESS (implies timing disabled). */
  interprocess?: boolean;
  /** CU_EVENT_DISABLE_TIMING */
  disableTiming?: boolean;
}

// -- GPU-driven work: stream memory operations, graphs, modules, kernels ------

/** An opaque CUDA graph handle (CUgraph), from `streamEndCapture`. */
export type GraphHandle = bigint;
/** An opaque executable graph handle (CUgraphExec), from `graphInstantiate`. */
export type GraphExecHandle = bigint;
/** An opaque loaded module (CUmodule or CUlibrary), from `moduleLoadData`. */
export type ModuleHandle = bigint;
/** An opaque kernel (CUfunction), from `moduleGetFunction`. */
export type FunctionHandle = bigint;

/**
 * When a stream wait on a memory word is satisfied
 * (CU_STREAM_WAIT_VALUE_GEQ / EQ / AND / NOR). 'geq' compares as unsigned
 * with wrap-around, as the driver does: (int32)(*addr - value) >= 0.
 */
export type WaitCondition = 'geq' | 'eq' | 'and' | 'nor';

/**
 * One operation of `streamBatchMemOp` (cuStreamBatchMemOp_v2). `addr` is
 * device memory (own or mapped from a peer) or registered host memory; 32-bit
 * values are given as numbers, 64-bit ones as bigints.
 */
export type StreamMemOp =
  | { op: 'wait32'; addr: DevicePtr; value: number; condition: WaitCondition; flush?: boolean }
  | { op: 'wait64'; addr: DevicePtr; value: bigint; condition: WaitCondition; flush?: boolean }
  | { op: 'write32'; addr: DevicePtr; value: number; noMemoryBarrier?: boolean }
  | { op: 'write64'; addr: DevicePtr; value: bigint; noMemoryBarrier?: boolean }
  /** CU_STREAM_MEM_OP_BARRIER: earlier writes of this stream are visible to everyone before later ones. */
  | { op: 'barrier' };

/** How a capture treats other threads' unsafe calls (CU_STREAM_CAPTURE_MODE_*). */
export type CaptureMode = 'global' | 'thread-local' | 'relaxed';

/**
 * One kernel argument, typed as the PTX entry declares it: 'ptr' and 'u64'
 * are .u64 (bigint), 'u32' / 'i32' are .u32 / .s32, 'f32' / 'f64' floats.
 * The simulated driver hands the same list, in order, to its TypeScript twin
 * of the kernel.
 */
export type KernelArg = { type: 'ptr' | 'u64' | 'i64'; value: bigint } | { type: 'u32' | 'i32' | 'f32' | 'f64'; value: number };

export interface LaunchConfig {
  grid: [x: number, y?: number, z?: number];
  block: [x: number, y?: number, z?: number];
  /** Dynamic shared memory per block, bytes; default 0. */
  sharedMemBytes?: number;
}

/** What a loaded module cost, for probe and bench: the first load of a PTX text JIT-compiles it (cached by the driver). */
export interface ModuleLoadInfo {
  module: ModuleHandle;
  /** Wall time of the load call in milliseconds. */
  loadMs: number;
}

export interface CudaDriver {
  readonly kind: DriverKind;

  // -- driver and devices ---------------------------------------------------
  /** Whether the driver can be used here, and why not. Never throws. */
  status(): DriverStatus;
  /** cuInit(0). Idempotent. Throws CudaError where the driver is unavailable. */
  init(): void;
  /** True once `init` succeeded and a device was made current in this process. */
  isReady(): boolean;
  deviceCount(): number;
  deviceInfo(index: number): DeviceInfo;
  /** cuDeviceCanAccessPeer(dev, peer). Same device: true. */
  canAccessPeer(dev: number, peer: number): boolean;

  // -- contexts: the primary context of a device, retained and made current --
  /** Retains the device's primary context and makes it current on this thread. */
  setDevice(index: number): void;
  /** The device made current by `setDevice`, or -1. */
  currentDevice(): number;
  /** Releases every primary context this driver retained. */
  releaseDevices(): void;

  // -- memory -----------------------------------------------------------------
  memAlloc(bytes: number): DevicePtr;
  /**
   * cuMemAlloc on the current device, as a buffer that knows its size,
   * device and liveness (`{ ptr, length, device }`, `free()`, `view()`):
   * a Communicator call given it checks its extent without a driver query.
   * It is the caller's to free (`buf.free()` or `memFree(buf.ptr)`); closing
   * the driver frees it too, and the object then reads as freed.
   */
  memAllocBuffer(bytes: number): DeviceAllocation;
  memFree(ptr: DevicePtr): void;
  memsetD8(ptr: DevicePtr, value: number, bytes: number): void;
  memsetD8Async(ptr: DevicePtr, value: number, bytes: number, stream: StreamHandle): void;
  memcpyHtoD(dst: DevicePtr, src: ArrayBufferView): void;
  memcpyDtoH(dst: ArrayBufferView, src: DevicePtr): void;
  memcpyDtoD(dst: DevicePtr, src: DevicePtr, bytes: number): void;
  /** `src`/`dst` should be pinned (PinnedHostBuffer.bytes) for a truly async copy. */
  memcpyHtoDAsync(dst: DevicePtr, src: ArrayBufferView, stream: StreamHandle): void;
  memcpyDtoHAsync(dst: ArrayBufferView, src: DevicePtr, stream: StreamHandle): void;
  /** cuMemcpyAsync: unified addressing, any direction, across devices. */
  memcpyAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: StreamHandle): void;
  /**
   * The first `count` copies `dsts[k] <- srcs[k]` (`sizes[k]` bytes) queued on
   * `stream` in one call: cuMemcpyBatchAsync where the driver has it (CUDA
   * 12.8+), else one cuMemcpyAsync each. The batch runs in stream order as a
   * whole, but its copies may run concurrently, so none may write what
   * another reads or writes. The arrays are read during the call only.
   * When it throws, copies 0..queued-1 are queued and run, the others are
   * not: `queued` is the error's property of that name (`queuedBeforeFailure`),
   * 0 when absent (the batch call queues all or none; one by one, the copy
   * that failed says where it stopped).
   */
  memcpyBatchAsync(dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, count: number, stream: StreamHandle): void;
  memGetAddressRange(ptr: DevicePtr): AddressRange;
  pointerAttributes(ptr: DevicePtr): PointerAttributes;
  /** cuPointerGetAttribute(BUFFER_ID) alone: cheaper than pointerAttributes, for re-checking a known pointer on every send. */
  bufferId(ptr: DevicePtr): bigint;
  /** cuMemHostAlloc (portable), with its device address (cuMemHostGetDevicePointer). */
  hostAlloc(bytes: number): PinnedHostBuffer;
  /** cuMemHostRegister over memory JS already has (e.g. a shared segment). Returns the unregister function. */
  hostRegister(bytes: Uint8Array): () => void;

  // -- IPC --------------------------------------------------------------------
  /** cuIpcGetMemHandle on an allocation's base: 64 opaque bytes. */
  ipcGetMemHandle(ptr: DevicePtr): Uint8Array;
  /** cuIpcOpenMemHandle with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS. Opening an already open handle returns the same pointer. */
  ipcOpenMemHandle(handle: Uint8Array): DevicePtr;
  ipcCloseMemHandle(ptr: DevicePtr): void;
  ipcGetEventHandle(event: EventHandle): Uint8Array;
  ipcOpenEventHandle(handle: Uint8Array): EventHandle;

  // -- memory shared by file descriptor: VMM and stream-ordered pools ----------
  // Every descriptor a call returns is new and the caller's; every descriptor
  // a call takes stays the caller's (close it with closeFd once imported).
  /** cuMemCreate `chunks` chunks (POSIX fd handle type) mapped contiguously into one reserved range, read-write for the current device. */
  vmmAlloc(bytes: number, options?: VmmAllocOptions): VmmAllocation;
  /** Undoes vmmAlloc: unmaps every chunk (the memory goes when no process maps it) and frees the range. */
  vmmFree(ptr: DevicePtr): void;
  /** cuMemPoolCreate on the current device with the POSIX fd handle type. */
  memPoolCreate(options?: MemPoolOptions): PoolHandle;
  memPoolDestroy(pool: PoolHandle): void;
  /** cuMemAllocFromPoolAsync: usable in `stream` order (and by others once `stream` is synchronized). */
  memAllocFromPoolAsync(bytes: number, pool: PoolHandle, stream: StreamHandle): DevicePtr;
  /** cuMemFreeAsync: back to its pool in `stream` order. */
  memFreeAsync(ptr: DevicePtr, stream: StreamHandle): void;
  /** Which way `ptr`'s allocation can be shared (never throws for device memory; unknown pointers: CUDA_ERROR_INVALID_VALUE). */
  memoryKind(ptr: DevicePtr): MemoryKindInfo;
  /** A descriptor for every chunk that [ptr, ptr+bytes) touches (cuMemRetainAllocationHandle + cuMemExportToShareableHandle). */
  vmmExport(ptr: DevicePtr, bytes: number): VmmExport;
  /** Imports the chunks, reserves one range, maps them at their offsets, grants the current device access. All or nothing. */
  vmmImport(chunks: readonly FdChunk[], options?: VmmImportOptions): VmmImport;
  /** Undoes vmmImport: unmaps, releases, frees the range. */
  vmmRelease(ptr: DevicePtr): void;
  /** cuMemPoolExportToShareableHandle: a descriptor for the whole pool (send once per peer). */
  memPoolExport(pool: PoolHandle): number;
  /** cuMemPoolExportPointer: 64 bytes naming one allocation of an exported pool. */
  memPoolExportPointer(ptr: DevicePtr): Uint8Array;
  /** cuMemPoolImportFromShareableHandle (+ access for the current device where the pool is on another). */
  memPoolImport(fd: number, options?: PoolImportOptions): PoolHandle;
  /** cuMemPoolImportPointer: the exporter's allocation, mapped here. */
  memPoolImportPointer(pool: PoolHandle, data: Uint8Array): DevicePtr;
  /** Undoes memPoolImportPointer (before the exporter frees the allocation). */
  memPoolReleasePointer(ptr: DevicePtr): void;
  /** Undoes memPoolImport (after its pointers are released). */
  memPoolRelease(pool: PoolHandle): void;
  /** close(2) a descriptor a call here returned or one received from a peer. */
  closeFd(fd: number): void;
  /** What this instance holds of the fd-shared kinds (for leak checks). */
  fdMemoryResources(): FdMemoryResources;

  // -- streams and events -----------------------------------------------------
  /**
   * A new non-blocking stream (CU_STREAM_NON_BLOCKING): its work is not
   * ordered after the legacy default stream (0n), nor the legacy stream's
   * after it; order them with an event (eventRecord + streamWaitEvent) or
   * pass the same stream to every call. Destroy it with streamDestroy.
   */
  streamCreate(): StreamHandle;
  streamDestroy(stream: StreamHandle): void;
  streamSynchronize(stream: StreamHandle): void;
  streamWaitEvent(stream: StreamHandle, event: EventHandle): void;
  eventCreate(options?: EventOptions): EventHandle;
  eventDestroy(event: EventHandle): void;
  eventRecord(event: EventHandle, stream: StreamHandle): void;
  /** true: complete; false: not yet (CUDA_ERROR_NOT_READY). */
  eventQuery(event: EventHandle): boolean;
  eventSynchronize(event: EventHandle): void;
  /** Milliseconds between two timing events. */
  eventElapsedTime(start: EventHandle, end: EventHandle): number;
  /**
   * Resolves once the event has completed, without blocking the event loop
   * and without holding a libuv pool thread per pending event.
   */
  whenComplete(event: EventHandle): Promise<void>;

  // -- GPU-driven work ----------------------------------------------------------
  // Stream memory operations come from cuGetProcAddress asking for the v2
  // entry points (CUDA >= 11.7), as NCCL does: the old ones fail on some drivers.
  /** Whether stream memory operations, capture and kernels work here (DriverStatus-like: never throws). */
  gpuDrivenStatus(): { streamMemOps: boolean; waitValueNor: boolean; memOps64: boolean; graphs: boolean; modules: boolean; reason?: string };
  /** cuStreamWaitValue32_v2: `stream` holds until the 32-bit word at `addr` meets `condition` against `value`. */
  streamWaitValue32(stream: StreamHandle, addr: DevicePtr, value: number, condition: WaitCondition): void;
  /** cuStreamWaitValue64_v2. */
  streamWaitValue64(stream: StreamHandle, addr: DevicePtr, value: bigint, condition: WaitCondition): void;
  /** cuStreamWriteValue32_v2: writes `value` at `addr` once the stream's earlier work is done. */
  streamWriteValue32(stream: StreamHandle, addr: DevicePtr, value: number): void;
  /** cuStreamWriteValue64_v2. */
  streamWriteValue64(stream: StreamHandle, addr: DevicePtr, value: bigint): void;
  /** cuStreamBatchMemOp_v2: the operations in order, as one stream item. */
  streamBatchMemOp(stream: StreamHandle, ops: readonly StreamMemOp[]): void;

  /**
   * cuStreamBeginCapture_v2: work queued on `stream` from now on is recorded, not run. Default mode
   * 'thread-local': under 'global' a capture makes other threads' unsafe calls fail, and the native
   * addon's completion poller thread queries events at any time.
   */
  streamBeginCapture(stream: StreamHandle, mode?: CaptureMode): void;
  /** cuStreamEndCapture: the recorded graph (the caller destroys it). */
  streamEndCapture(stream: StreamHandle): GraphHandle;
  /** cuStreamIsCapturing: true while `stream` records. */
  streamIsCapturing(stream: StreamHandle): boolean;
  /** cuGraphInstantiateWithFlags(0). */
  graphInstantiate(graph: GraphHandle): GraphExecHandle;
  /** cuGraphLaunch: replays the recorded operations on `stream`. */
  graphLaunch(exec: GraphExecHandle, stream: StreamHandle): void;
  graphExecDestroy(exec: GraphExecHandle): void;
  graphDestroy(graph: GraphHandle): void;

  /** cuModuleLoadData (or cuLibraryLoadData) of PTX text, JIT-compiled by the driver for the current device; no toolkit needed. */
  moduleLoadData(ptx: string): ModuleLoadInfo;
  moduleUnload(module: ModuleHandle): void;
  /** cuModuleGetFunction: the `.entry` named `name`. */
  moduleGetFunction(module: ModuleHandle, name: string): FunctionHandle;
  /** cuLaunchKernel with the arguments packed as the entry declares them. */
  launchKernel(fn: FunctionHandle, config: LaunchConfig, args: readonly KernelArg[], stream: StreamHandle): void;

  // -- shared host memory (for the simulator and for host staging) -------------
  shmCreate(name: string, bytes: number): SharedSegment;
  /**
   * Maps an existing segment. `bytes`: the size its creator announced (a
   * peer): a segment of any other size is refused before it is mapped.
   */
  shmOpen(name: string, bytes?: number): SharedSegment;
  shmUnlink(name: string): void;

  /** Releases everything this driver instance holds (poller thread, contexts). */
  close(): void;
}

/**
 * How many copies of a failed `memcpyBatchAsync` of `count` copies were
 * queued before it failed (they run: do not queue them again, nor free what
 * they touch before they complete). 0 unless the error says otherwise.
 */
export function queuedBeforeFailure(err: unknown, count: number): number {
  const q = (err as { queued?: unknown } | null)?.queued;
  return typeof q === 'number' && Number.isSafeInteger(q) && q >= 0 && q < count ? q : 0;
}
