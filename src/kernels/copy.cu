// smcuda_copy_list(list): the copies a list in device memory describes, in one launch: list[0]
// holds the number of copies n (at most COPY_LIST_MAX), then copy k's destination, source and
// length in bytes at list[1 + 3k], list[2 + 3k], list[3 + 3k]. Block b copies the b-th range of every copy, ranges of whole 256-byte
// units (a copy's 16-byte alignment holds in every range, so copy_bytes keeps its vector loads). The
// copies must not overlap each other; the list is read when the launch runs (GpuWork's graphs copy
// it from pinned host memory just before: read from there by every block it cost far more than the copies).
//
// Why: one launch for a run of copies between two processes on one GPU (GpuWork's same-GPU copies,
// launched as a graph: src/copy-list.ts says what it saves).
// Compiled to copy.ptx.ts by build-ptx.mjs; its simulator twin is sim/copy-list.ts.
typedef unsigned long long u64;

#include "copy-bytes.cuh"

#define COPY_LIST_MAX 64

extern "C" __global__ void smcuda_copy_list(const u64 *list) {
  __shared__ u64 entries[3 * COPY_LIST_MAX];
  __shared__ unsigned n_s;
  // Volatile loads: the list was copied in just before the launch, and the loads must reach it.
  const volatile u64 *l = list;
  if (threadIdx.x == 0) {
    const u64 n = l[0];
    n_s = n > COPY_LIST_MAX ? COPY_LIST_MAX : (unsigned)n;
  }
  __syncthreads();
  const unsigned n = n_s;
  for (unsigned i = threadIdx.x; i < 3 * n; i += blockDim.x) entries[i] = l[1 + i];
  __syncthreads();
  for (unsigned k = 0; k < n; k++) {
    const u64 bytes = entries[3 * k + 2];
    const u64 chunk = ((bytes + 255) / 256 + gridDim.x - 1) / gridDim.x * 256;
    const u64 lo = min(bytes, (u64)blockIdx.x * chunk);
    const u64 hi = min(bytes, lo + chunk);
    if (lo < hi) copy_bytes((char *)entries[3 * k] + lo, (const char *)entries[3 * k + 1] + lo, hi - lo, threadIdx.x, blockDim.x);
  }
}
