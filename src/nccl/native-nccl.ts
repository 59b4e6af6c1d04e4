/**
 * The raw NCCL surface of the native addon (native/nccl.cc), exactly as it
 * exports it. Nothing here validates: src/nccl/nccl.ts does, and maps what
 * it throws to typed errors.
 *
 * Conventions: communicators, device pointers, streams, registration
 * handles are BigInt; counts are Number. A call returns its ncclResult_t
 * (0, or 7 while a non-blocking communicator is still working) and throws
 * an Error with `call`, `result`, `detail` and `lastError` on any other.
 */

/** The optional entry points, by name: whether the loaded NCCL has each. */
export interface NcclSymbols {
  ncclCommSplit: boolean;
  ncclGetLastError: boolean;
  ncclCommRegister: boolean;
  ncclCommDeregister: boolean;
  ncclCommWindowRegister: boolean;
  ncclCommWindowDeregister: boolean;
  /** Absent from addons built before they were bound: read as false. */
  ncclMemAlloc?: boolean;
  ncclMemFree?: boolean;
}

export interface NativeNcclStatus {
  loaded: boolean;
  path?: string;
  /** ncclGetVersion: major × 10000 + minor × 100 + patch (2.9 and later). */
  version?: number;
  symbols?: NcclSymbols;
  /** The candidates this call tried, and why each failed. */
  tried: Array<{ path: string; error: string }>;
}

export interface NativeNccl {
  /** Tries the candidates in order until one loads; once one has, returns its state and ignores them. */
  ncclLoad(candidates: string[]): NativeNcclStatus;
  /** 128 bytes. */
  ncclGetUniqueId(): ArrayBuffer;
  /** config: blocking, cgaClusterSize, minCTAs, maxCTAs, splitShare (INT32_MIN: NCCL's default). */
  ncclCommInitRankConfig(nranks: number, id: ArrayBuffer, rank: number, config: Int32Array): { comm: bigint; result: number };
  ncclCommSplit(comm: bigint, color: number, key: number, config: Int32Array): { comm: bigint; result: number };
  /** The communicator's state: 0, 7 (in progress) or the error that broke it. */
  ncclCommGetAsyncError(comm: bigint): number;
  /** [ncclCommUserRank, ncclCommCount] of a ready communicator. */
  ncclCommRankSize(comm: bigint): [number, number];
  ncclCommAbort(comm: bigint): number;
  ncclCommDestroy(comm: bigint): number;
  ncclAllReduce(send: bigint, recv: bigint, count: number, datatype: number, op: number, comm: bigint, stream: bigint): number;
  ncclBroadcast(send: bigint, recv: bigint, count: number, datatype: number, root: number, comm: bigint, stream: bigint): number;
  ncclReduce(send: bigint, recv: bigint, count: number, datatype: number, op: number, root: number, comm: bigint, stream: bigint): number;
  ncclAllGather(send: bigint, recv: bigint, count: number, datatype: number, comm: bigint, stream: bigint): number;
  ncclReduceScatter(send: bigint, recv: bigint, recvCount: number, datatype: number, op: number, comm: bigint, stream: bigint): number;
  ncclSend(buffer: bigint, count: number, datatype: number, peer: number, comm: bigint, stream: bigint): number;
  ncclRecv(buffer: bigint, count: number, datatype: number, peer: number, comm: bigint, stream: bigint): number;
  ncclGroupStart(): number;
  ncclGroupEnd(): number;
  ncclCommRegister(comm: bigint, buffer: bigint, size: number): bigint;
  ncclCommDeregister(comm: bigint, handle: bigint): number;
  ncclCommWindowRegister(comm: bigint, buffer: bigint, size: number, flags: number): bigint;
  ncclCommWindowDeregister(comm: bigint, win: bigint): number;
  /** On the calling thread's current device; the pointer as bigint. */
  ncclMemAlloc(size: number): bigint;
  ncclMemFree(ptr: bigint): number;
  ncclGetErrorString(result: number): string;
  ncclGetLastError(comm: bigint): string;
}
