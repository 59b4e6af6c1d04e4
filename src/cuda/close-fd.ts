import type { CudaDriver } from './driver.js';

/** close(2) through the driver, where the descriptor may be closed already (a peer's, a failed import's): never throws. */
export function closeFdQuietly(d: CudaDriver, fd: number): void {
  try {
    d.closeFd(fd);
  } catch {
    // closed already
  }
}
