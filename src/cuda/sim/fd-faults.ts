/**
 * Injected faults of the fd-shared memory kinds (VMM and pools): the next
 * imports fail with the given CUDA errors, one each, in order. Descriptors of
 * the wrong size or device and EMFILE need no injection: the simulator uses
 * real descriptors, so tests make those for real (a memfd of another size or
 * named for another device, a process out of descriptor slots).
 *
 * Set per driver instance (`injectFdFaults`) or, for child processes, from
 * SMCUDA_SIM_FD_FAULTS (JSON of SimFdFaults).
 */
import { ConfigError } from '../../errors.js';
import { isCudaErrorName, type CudaErrorName } from './result-codes.js';

export interface SimFdFaults {
  /** The next vmmImport / memPoolImport / memPoolImportPointer calls fail with these codes, one each, in order. */
  importFailures?: string[];
}

export class FdFaultState {
  private importFailures: CudaErrorName[] = [];

  constructor(initial: SimFdFaults = {}) {
    this.inject(initial);
  }

  /** Replaces the queue of import failures when named. */
  inject(f: SimFdFaults): void {
    if (typeof f !== 'object' || f === null) throw new ConfigError('fd faults must be an object like { importFailures: ["CUDA_ERROR_OUT_OF_MEMORY"] }');
    if (f.importFailures !== undefined) {
      if (!Array.isArray(f.importFailures) || !f.importFailures.every(isCudaErrorName)) {
        throw new ConfigError(`importFailures must list CUDA error names (e.g. "CUDA_ERROR_OUT_OF_MEMORY"), got ${JSON.stringify(f.importFailures)}`);
      }
      this.importFailures = [...f.importFailures];
    }
  }

  /** The error the next import must fail with, if any (consumed). */
  importFailure(): CudaErrorName | undefined {
    return this.importFailures.shift();
  }

  /** The faults named by SMCUDA_SIM_FD_FAULTS, or none. */
  static fromEnv(env: Record<string, string | undefined>): SimFdFaults {
    const raw = env.SMCUDA_SIM_FD_FAULTS;
    if (!raw) return {};
    try {
      return JSON.parse(raw) as SimFdFaults;
    } catch (err) {
      throw new ConfigError(`SMCUDA_SIM_FD_FAULTS is not JSON: ${(err as Error).message}`);
    }
  }
}
