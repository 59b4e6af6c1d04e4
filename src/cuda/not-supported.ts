import { CudaError } from '../errors.js';

/** CUDA_ERROR_NOT_SUPPORTED (801) from `call`: what a driver answers for an operation it does not offer. */
export function notSupported(call: string, detail?: string): CudaError {
  return new CudaError(call, 'CUDA_ERROR_NOT_SUPPORTED', 801, detail);
}
