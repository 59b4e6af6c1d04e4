/**
 * A bench baseline that waits on its peer (a device-side flag, a shared host
 * word) fails with a typed error after a bounded time instead of hanging the
 * worker: the peer died, or the two sides disagree on how many iterations to run.
 */
import { SmcudaError } from '../errors.js';

export class BenchStuckError extends SmcudaError {
  constructor(what: string, ms: number) {
    super(
      'SMCUDA_BENCH_STUCK',
      `${what} did not complete within ${ms} ms: the peer worker stopped, or the sides were asked for different iteration counts; rerun the suite (and read the other worker's error)`,
    );
  }
}

/** `work`, or BenchStuckError once `ms` have passed. */
export async function withinMs<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      work,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new BenchStuckError(what, ms)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
