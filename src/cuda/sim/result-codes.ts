/**
 * CUDA driver error names and their CUresult numbers (cuda.h), for the
 * errors the simulator raises or can be told to inject. A CudaError from the
 * simulator carries the same `code`/`result` pair the native driver would.
 */
import { CudaError } from '../../errors.js';

export const CUDA_RESULTS = {
  CUDA_ERROR_INVALID_VALUE: 1,
  CUDA_ERROR_OUT_OF_MEMORY: 2,
  CUDA_ERROR_NOT_INITIALIZED: 3,
  CUDA_ERROR_DEINITIALIZED: 4,
  CUDA_ERROR_NO_DEVICE: 100,
  CUDA_ERROR_INVALID_DEVICE: 101,
  CUDA_ERROR_INVALID_CONTEXT: 201,
  CUDA_ERROR_MAP_FAILED: 205,
  CUDA_ERROR_UNMAP_FAILED: 206,
  CUDA_ERROR_ALREADY_MAPPED: 208,
  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: 217,
  CUDA_ERROR_INVALID_PTX: 218,
  CUDA_ERROR_OPERATING_SYSTEM: 304,
  CUDA_ERROR_INVALID_HANDLE: 400,
  CUDA_ERROR_ILLEGAL_STATE: 401,
  CUDA_ERROR_NOT_FOUND: 500,
  CUDA_ERROR_NOT_READY: 600,
  CUDA_ERROR_ILLEGAL_ADDRESS: 700,
  CUDA_ERROR_LAUNCH_TIMEOUT: 702,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: 704,
  CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: 705,
  CUDA_ERROR_CONTEXT_IS_DESTROYED: 709,
  CUDA_ERROR_TOO_MANY_PEERS: 711,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: 712,
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: 713,
  CUDA_ERROR_NOT_PERMITTED: 800,
  CUDA_ERROR_NOT_SUPPORTED: 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: 901,
  CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: 903,
  CUDA_ERROR_STREAM_CAPTURE_UNJOINED: 904,
  CUDA_ERROR_STREAM_CAPTURE_ISOLATION: 905,
  CUDA_ERROR_CAPTURED_EVENT: 907,
  CUDA_ERROR_UNKNOWN: 999,
} as const;

export type CudaErrorName = keyof typeof CUDA_RESULTS;

export function isCudaErrorName(code: unknown): code is CudaErrorName {
  return typeof code === 'string' && Object.hasOwn(CUDA_RESULTS, code);
}

/** A CudaError as the native driver would raise it for `call`. */
export function cudaError(call: string, code: CudaErrorName, detail?: string): CudaError {
  return new CudaError(call, code, CUDA_RESULTS[code], detail);
}
