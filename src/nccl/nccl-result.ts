/**
 * ncclResult_t (nccl.h) as smcuda's error codes, and a native NCCL failure
 * as an NcclError.
 */
import { NcclError, NcclUnavailableError } from '../errors.js';

export const NCCL_SUCCESS = 0;
export const NCCL_IN_PROGRESS = 7;

/** The SMCUDA_NCCL_* code of each failing ncclResult_t (ncclTimeout is NCCL 2.30's). */
export const NCCL_RESULT_CODES: Readonly<Record<number, string>> = {
  1: 'SMCUDA_NCCL_UNHANDLED_CUDA_ERROR',
  2: 'SMCUDA_NCCL_SYSTEM_ERROR',
  3: 'SMCUDA_NCCL_INTERNAL_ERROR',
  4: 'SMCUDA_NCCL_INVALID_ARGUMENT',
  5: 'SMCUDA_NCCL_INVALID_USAGE',
  6: 'SMCUDA_NCCL_REMOTE_ERROR',
  8: 'SMCUDA_NCCL_TIMEOUT',
};

/** What to do about each, for the message. */
const FIX: Readonly<Record<number, string>> = {
  1: 'a CUDA call inside NCCL failed: check the device, the stream and the buffers (NCCL_DEBUG=WARN says which call)',
  2: 'a system call or the network failed: check the interfaces (NCCL_SOCKET_IFNAME) and run with NCCL_DEBUG=WARN',
  3: 'NCCL hit an internal error: run with NCCL_DEBUG=INFO and report it with that log',
  4: 'an argument NCCL refused: check the buffers, the count, the root and that every rank passes the same',
  5: 'calls made out of order or differing between ranks: every rank must make the same calls in the same order',
  6: 'a remote rank failed or its connection broke: the communicator is unusable; abort it and look at the other ranks',
  8: 'NCCL timed out: a rank did not join or stopped; check every rank is running',
};

/** The SMCUDA_NCCL_* code of a failing result. */
export function ncclResultCode(result: number): string {
  return NCCL_RESULT_CODES[result] ?? 'SMCUDA_NCCL_ERROR';
}

/** An NcclError for `result` of `call`. */
export function ncclError(call: string, result: number, detail = '', lastError = ''): NcclError {
  const code = ncclResultCode(result);
  const words = [detail, lastError].filter((s) => s !== '').join(': ');
  const fix = FIX[result] ?? 'an ncclResult_t this smcuda does not know: run with NCCL_DEBUG=WARN and report it';
  return new NcclError(code, `${call} failed: ${code} (ncclResult_t ${result})${words ? `: ${words}` : ''}. ${fix}.`, call, result, detail, lastError);
}

/** What the addon threw, as a typed error: NCCL's failures as NcclError, a missing entry point as NcclUnavailableError. */
export function fromNativeNcclError(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  const e = err as Error & { call?: string; result?: number; detail?: string; lastError?: string; code?: string };
  if (e.code === 'SMCUDA_NCCL_UNSUPPORTED' || e.code === 'SMCUDA_NCCL_UNAVAILABLE') return new NcclUnavailableError(e.message, e.code);
  if (typeof e.call === 'string' && typeof e.result === 'number') return ncclError(e.call, e.result, e.detail ?? '', e.lastError ?? '');
  return err;
}
