// smcuda_fill_u32(ptr, value, n): ptr[i] = value for i < n (a grid-stride
// loop, so any grid covers any n). The smallest useful kernel: the driver's
// PTX load and launch path is checked with it (test/gpu/gpu-driven.gpu.test.ts).
// Compiled to fill.ptx.ts by build-ptx.mjs; see README.md.
extern "C" __global__ void smcuda_fill_u32(unsigned int* ptr, unsigned int value, unsigned long long n) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    ptr[i] = value;
  }
}
