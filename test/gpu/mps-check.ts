/**
 * The GPU tests whose ranks share a GPU first check that MPS runs, where
 * the caller says it started it around the run (SMCUDA_EXPECT_MPS): without
 * it every round trip pays a GPU context switch, and timings mean little.
 * Skipped, with the reason in its name, on the simulator or when the caller
 * did not say so (or `notShared` says why the ranks do not share a GPU).
 */
import { expect, it } from 'vitest';
import { mpsStatus } from '../../src/cli/mps.js';

export function itChecksMps(driver: 'native' | 'sim', ranks: string, notShared?: string): void {
  const skip = driver !== 'native' ? 'the simulator' : !process.env.SMCUDA_EXPECT_MPS ? 'SMCUDA_EXPECT_MPS not set' : notShared;
  it.skipIf(skip !== undefined)(`MPS runs for ${ranks} sharing the GPU${skip ? ` (skipped: ${skip})` : ''}`, () => {
    expect(
      mpsStatus().active,
      `no MPS control socket in ${mpsStatus().pipeDirectory}: start MPS (nvidia-cuda-mps-control -d) with the same CUDA_MPS_PIPE_DIRECTORY`,
    ).toBe(true);
  });
}
