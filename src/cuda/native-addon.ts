/**
 * The raw surface of the native addon (build/Release/smcuda.node), exactly as
 * native/*.cc export it. Nothing here validates: callers go through
 * NativeCudaDriver (validated) or, for shared memory, through shm.ts.
 *
 * Conventions of the native side:
 *  - pointers, streams, events, contexts: BigInt;
 *  - sizes: Number (safe integers, validated in TS);
 *  - a failing CUresult throws an Error with `code` = CUDA error name,
 *    `call` = driver function name, `result` = number;
 *  - a failing system call throws an Error with `code` = errno name
 *    (e.g. 'ENOENT') and `call` = the system call.
 */

export interface NativeShm {
  /** shm_open(O_CREAT|O_EXCL, 0600) + ftruncate + mmap. The ArrayBuffer is external and unmapped when `shmClose` is called (or at GC if never). */
  shmCreate(name: string, bytes: number): ArrayBuffer;
  /** shm_open + fstat + mmap of an existing segment; with `bytes`, one of another size is refused (code 'ESIZE') before it is mapped. */
  shmOpen(name: string, bytes?: number): ArrayBuffer;
  /** munmap the mapping behind this ArrayBuffer (it is detached afterwards). */
  shmClose(buffer: ArrayBuffer): void;
  shmUnlink(name: string): void;
  /**
   * An anonymous segment (memfd_create), sized, pages reserved, sealed
   * against shrinking, growing and further seals (unless `seal` is false:
   * tests playing a hostile peer), and mapped. The caller owns `fd`.
   */
  sealedCreate(label: string, bytes: number, seal?: boolean): { fd: number; buffer: ArrayBuffer };
  /** Maps a peer's segment only if it carries those seals (else code 'ESEALS') and is exactly `bytes` long (else 'ESIZE'); `fd` stays the caller's. */
  sealedMap(fd: number, bytes: number): ArrayBuffer;
  /** Address of the first byte of an ArrayBuffer's backing store (for cuMemHostRegister). */
  bufferAddress(buffer: ArrayBuffer): bigint;
}

export interface NativeCuda {
  /** Loads libcuda.so.1 and resolves entry points; never throws. */
  cudaStatus(): { available: boolean; reason?: string; driverVersion: number; memcpyBatch?: string; fdMemory?: boolean; fdMemoryReason?: string };
  cuInit(): void;
  cuDeviceGetCount(): number;
  cuDeviceGetInfo(ordinal: number): {
    name: string;
    uuid: string;
    pciBusId: string;
    major: number;
    minor: number;
    multiprocessors: number;
    totalMemory: number;
  };
  cuDeviceCanAccessPeer(dev: number, peer: number): boolean;
  /** Retain the primary context of `ordinal` and make it current on this thread; returns the CUcontext. */
  cuDevicePrimaryCtxRetain(ordinal: number): bigint;
  cuDevicePrimaryCtxRelease(ordinal: number): void;
  cuCtxSetCurrent(ctx: bigint): void;
  cuMemAlloc(bytes: number): bigint;
  cuMemFree(ptr: bigint): void;
  cuMemsetD8(ptr: bigint, value: number, bytes: number): void;
  cuMemsetD8Async(ptr: bigint, value: number, bytes: number, stream: bigint): void;
  /** Host side given as (ArrayBuffer, byteOffset, byteLength). */
  cuMemcpyHtoD(dst: bigint, src: ArrayBuffer, offset: number, bytes: number): void;
  cuMemcpyDtoH(dst: ArrayBuffer, offset: number, bytes: number, src: bigint): void;
  cuMemcpyDtoD(dst: bigint, src: bigint, bytes: number): void;
  cuMemcpyHtoDAsync(dst: bigint, src: ArrayBuffer, offset: number, bytes: number, stream: bigint): void;
  cuMemcpyDtoHAsync(dst: ArrayBuffer, offset: number, bytes: number, src: bigint, stream: bigint): void;
  cuMemcpyAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  /** `device`: the location hint for both sides (the current device). */
  cuMemcpyBatchAsync(dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, count: number, stream: bigint, device: number): void;
  cuMemGetAddressRange(ptr: bigint): { base: bigint; size: number };
  cuPointerGetAttributes(ptr: bigint): { bufferId: bigint; device: number; memoryType: number };
  cuPointerGetBufferId(ptr: bigint): bigint;
  /** cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE); an external ArrayBuffer freed by cuMemFreeHost. */
  cuMemHostAlloc(bytes: number): ArrayBuffer;
  cuMemFreeHost(buffer: ArrayBuffer): void;
  /** cuMemHostGetDevicePointer(flags 0) of a buffer from cuMemHostAlloc (not freed): its address for the GPU. */
  cuMemHostGetDevicePointer(buffer: ArrayBuffer): bigint;
  cuMemHostRegister(buffer: ArrayBuffer, offset: number, bytes: number): void;
  cuMemHostUnregister(buffer: ArrayBuffer, offset: number): void;
  cuIpcGetMemHandle(ptr: bigint): ArrayBuffer;
  cuIpcOpenMemHandle(handle: ArrayBuffer, offset: number): bigint;
  cuIpcCloseMemHandle(ptr: bigint): void;
  cuIpcGetEventHandle(event: bigint): ArrayBuffer;
  cuIpcOpenEventHandle(handle: ArrayBuffer, offset: number): bigint;
  cuStreamCreate(): bigint;
  cuStreamDestroy(stream: bigint): void;
  cuStreamSynchronize(stream: bigint): void;
  cuStreamWaitEvent(stream: bigint, event: bigint): void;
  /** flags: CU_EVENT_* bit mask */
  cuEventCreate(flags: number): bigint;
  cuEventDestroy(event: bigint): void;
  cuEventRecord(event: bigint, stream: bigint): void;
  cuEventQuery(event: bigint): boolean;
  cuEventSynchronize(event: bigint): void;
  cuEventElapsedTime(start: bigint, end: bigint): number;

  // -- virtual memory management and pools (POSIX fd handle type throughout) --
  cuMemGetAllocationGranularity(device: number): number;
  cuMemCreate(bytes: number, device: number): bigint;
  cuMemRelease(handle: bigint): void;
  cuMemAddressReserve(bytes: number, alignment: number): bigint;
  cuMemAddressFree(ptr: bigint, bytes: number): void;
  /** Maps the whole allocation (offset 0) at ptr. */
  cuMemMap(ptr: bigint, bytes: number, handle: bigint): void;
  cuMemUnmap(ptr: bigint, bytes: number): void;
  /** Read-write access for `device`. */
  cuMemSetAccess(ptr: bigint, bytes: number, device: number): void;
  cuMemRetainAllocationHandle(ptr: bigint): bigint;
  /** A new fd, the caller's to close. */
  cuMemExportToShareableHandle(handle: bigint): number;
  /** The fd stays the caller's. */
  cuMemImportFromShareableHandle(fd: number): bigint;
  cuMemGetAllocationPropertiesFromHandle(handle: bigint): { type: number; handleTypes: number; locationType: number; device: number };
  cuMemPoolCreate(device: number, maxSize: number): bigint;
  cuMemPoolDestroy(pool: bigint): void;
  cuMemAllocFromPoolAsync(bytes: number, pool: bigint, stream: bigint): bigint;
  cuMemFreeAsync(ptr: bigint, stream: bigint): void;
  cuMemPoolExportToShareableHandle(pool: bigint): number;
  cuMemPoolImportFromShareableHandle(fd: number): bigint;
  /** CUmemPoolPtrExportData: 64 bytes. */
  cuMemPoolExportPointer(ptr: bigint): ArrayBuffer;
  cuMemPoolImportPointer(pool: bigint, data: ArrayBuffer, offset: number): bigint;
  cuMemPoolSetAccess(pool: bigint, device: number): void;
  /** The attributes that say how `ptr` can be shared; mappingBase/mappingSize 0 where the driver lacks them. */
  cuPointerGetMemoryInfo(ptr: bigint): NativeMemoryInfo;
}

/** gpuDrivenStatus of native/gpu_driven.cc: which groups of entry points resolved, and the device's memory-operation attributes. */
export interface NativeGpuDrivenStatus {
  available: boolean;
  /** Why CUDA is unavailable (then nothing else is set). */
  reason?: string;
  memOps?: boolean;
  memOpsReason?: string;
  graphs?: boolean;
  graphsReason?: string;
  modules?: boolean;
  modulesReason?: string;
  waitValueNor?: boolean;
  memOps64?: boolean;
  attributesReason?: string;
}

/**
 * GPU-driven work (native/gpu_driven.cc). A call whose group of entry points
 * the driver lacks throws CUDA_ERROR_NOT_SUPPORTED with the reason.
 */
export interface NativeGpuDriven {
  /** Never throws for a driver problem; `ordinal` picks the device whose attributes are read. */
  gpuDrivenStatus(ordinal: number): NativeGpuDrivenStatus;
  /** flags: CU_STREAM_WAIT_VALUE_* (condition, | FLUSH). cuStreamWaitValue32_v2. */
  cuStreamWaitValue32(stream: bigint, addr: bigint, value: number, flags: number): void;
  cuStreamWaitValue64(stream: bigint, addr: bigint, value: bigint, flags: number): void;
  /** flags: CU_STREAM_WRITE_VALUE_* (NO_MEMORY_BARRIER = 1). */
  cuStreamWriteValue32(stream: bigint, addr: bigint, value: number, flags: number): void;
  cuStreamWriteValue64(stream: bigint, addr: bigint, value: bigint, flags: number): void;
  /** The first `count` operations (CU_STREAM_MEM_OP_* codes, their flags, addresses, values) as one cuStreamBatchMemOp_v2. */
  cuStreamBatchMemOp(stream: bigint, count: number, operations: Uint32Array, flags: Uint32Array, addrs: BigUint64Array, values: BigUint64Array): void;
  /** mode: CU_STREAM_CAPTURE_MODE_* (0 global, 1 thread-local, 2 relaxed). */
  cuStreamBeginCapture(stream: bigint, mode: number): void;
  cuStreamEndCapture(stream: bigint): bigint;
  /** CUstreamCaptureStatus: 0 none, 1 active, 2 invalidated. */
  cuStreamIsCapturing(stream: bigint): number;
  /** cuGraphInstantiateWithFlags(0). */
  cuGraphInstantiate(graph: bigint): bigint;
  cuGraphLaunch(exec: bigint, stream: bigint): void;
  cuGraphExecDestroy(exec: bigint): void;
  cuGraphDestroy(graph: bigint): void;
  /** cuModuleLoadDataEx of PTX text; a failure's detail carries the JIT error log. */
  cuModuleLoadData(ptx: string): bigint;
  cuModuleUnload(module: bigint): void;
  /** cuModuleGetFunction, then loaded (cuFuncGetAttribute) so that a first launch inside a capture does not load it. */
  cuModuleGetFunction(module: bigint, name: string): bigint;
  /** dims: [gx, gy, gz, bx, by, bz, sharedMemBytes]; params/layout from packKernelArgs (kernel-args.ts). */
  cuLaunchKernel(fn: bigint, dims: Uint32Array, stream: bigint, params: ArrayBuffer, layout: Uint32Array): void;
}

export interface NativeMemoryInfo {
  memoryType: number;
  bufferId: bigint;
  device: number;
  legacyIpc: boolean;
  rangeStart: bigint;
  rangeSize: number;
  allowedHandleTypes: number;
  mempool: bigint;
  mappingBase: bigint;
  mappingSize: number;
}

/** One message from fdRecv. */
export interface NativeFdMessage {
  bytes: number;
  /** The descriptor that came with it, now this process's; -1 when none. */
  fd: number;
  /** The message was longer than the buffer (any descriptor was closed). */
  truncated: boolean;
  /** The kernel dropped a descriptor: no free slot here (EMFILE). */
  dropped: boolean;
  /** More than one descriptor came; all were closed. */
  extra: number;
}

export interface NativeFdPassing {
  /** Listening Unix SOCK_SEQPACKET socket at `path` (mode 0600), nonblocking. */
  fdListen(path: string): number;
  /** A connected socket, or null when none is waiting. */
  fdAccept(listenFd: number): number | null;
  fdConnect(path: string): number;
  fdSocketPair(): [number, number];
  /** false: would block (arm the watch for writability). */
  fdSend(sock: number, fd: number, bytes: ArrayBuffer, offset: number, length: number): boolean;
  /** null: would block. */
  fdRecv(sock: number, buffer: ArrayBuffer): NativeFdMessage | null;
  fdClose(fd: number): void;
  memfdCreate(name: string, bytes: number): number;
  fdResize(fd: number, bytes: number): void;
  fdSize(fd: number): number;
  /** A one-shot readiness watch on `fd`; `callback(revents)` runs on the JS thread. */
  fdWatchStart(fd: number, callback: (revents: number) => void): object;
  /** events: 1 readable, 4 writable; ref: keep the process alive while armed. */
  fdWatchArm(watch: object, events: number, ref: boolean): void;
  fdWatchStop(watch: object): void;
}

/** Host address ranges made of file mappings (the simulator's VMM). */
export interface NativeHostMapping {
  hostReserve(bytes: number): ArrayBuffer;
  hostMapFd(range: ArrayBuffer, offset: number, length: number, fd: number, fdOffset: number): void;
  hostUnmapRange(range: ArrayBuffer, offset: number, length: number): void;
  hostRelease(range: ArrayBuffer): void;
}

export interface NativeCompletion {
  /**
   * Resolves when `event` completes (rejects with a CUDA error if the query
   * fails). One poller thread per addon instance watches every pending event
   * with the given context current; no libuv pool thread is held. `client`
   * (completionOpen) says whose wait it is; without it, the anonymous client's.
   */
  whenEventComplete(event: bigint, ctx: bigint, client?: number): Promise<void>;
  /** A client of the poller: one per driver object, passed with each of its waits. */
  completionOpen(): number;
  /**
   * Rejects this client's pending waits (code 'SMCUDA_CLOSED'), and only
   * theirs; on return the poller thread no longer queries their events. The
   * thread stops when no client is left and nothing else is pending.
   */
  completionClose(client: number): void;
  /** Stops the poller thread (every pending promise, of every client, rejects with code 'SMCUDA_CLOSED'). */
  completionShutdown(): void;
}

export interface NativePeerCredentials {
  /** SO_PEERCRED of a connected Unix socket's fd: who is at the other end. */
  peerCredentials(fd: number): { pid: number; uid: number; gid: number };
}

/** floor.cc: the bench's native floor (src/bench/native-floor.ts validates the arguments). */
export interface NativeFloor {
  /**
   * An RGET ping-pong with no JavaScript in the loop, run on a thread of the addon: two processes spin on two
   * 64-bit flags at `offset` of a shared segment (64-byte aligned, 128 bytes; without a device, plus two areas of
   * `size` bytes that the "copy" memcpys between). Resolves with rank 1's half round trips in µs (rank 0: empty).
   */
  floorPingPong(
    segment: ArrayBuffer,
    offset: number,
    options: { role: 0 | 1; device: number; local?: bigint; peer?: bigint; size: number; iters: number; warmup: number; timeoutMs: number },
  ): Promise<Float64Array>;
}

export type NativeAddon = NativeShm &
  NativeCuda &
  NativeGpuDriven &
  NativeCompletion &
  NativePeerCredentials &
  NativeFdPassing &
  NativeHostMapping &
  NativeFloor;
