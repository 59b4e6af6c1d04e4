// Elementwise reductions for smcuda's collectives, compiled to PTX by
// build-ptx.mjs and shipped as reduce.ptx.ts (the driver JIT-compiles it: no
// toolkit at build or install time). src/kernels/sim/reduce.ts is the
// TypeScript twin the simulated driver runs; both must stay identical in
// semantics (README.md says what).
//
// smcuda_reduce_<op>_<dtype>(out, table, n, offset, count):
//   out[i] = op(table[0][offset+i], table[1][offset+i], ..., table[n-1][offset+i])
// folded left to right, in rank order, for i in [0, count). `table` is a
// device array of n input pointers (own or mapped from peers).
// smcuda_div_<dtype>(data, count, n): data[i] = data[i] / n (the avg epilogue
// for results reduced in pieces).
//
// smcuda_oneshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op): a
// whole one-shot allreduce piece in one launch (the host-driven version was a
// copy, two memory-operation batches and a reduction: four driver calls a
// piece, ~20 us of host time on an H100). Block b owns one contiguous range
// of the elements, the same on every rank (it depends on count and the grid
// only): it copies its range of `in` into this rank's A (bufs[rank]), signals
// block b of every peer and waits for theirs (a step of parity 0), reduces
// its range over every rank's A into `out`, and steps again (parity 1) so no
// rank overwrites its A while a peer still reads it. The step is
// device-sync.ts's (write 1 into the peer's slot, wait for own slot >= 1,
// reset it), per block, on slots after the flag block's step slots:
// slot(p, src, b) = bufs[k] + flagOffset + ((p * n + src) * ONESHOT_MAX_BLOCKS + b) * 8
// in rank k's scratch. The same thread signals peer k and resets the slot k
// wrote, so its reset is ordered before its next signal (st.release.sys).
// `op` is the Op enum below (sum 0, avg 1, min 2, max 3, prod 4). Where `in`
// and `out` are 16-byte aligned, data moves 16 bytes a load.
//
// smcuda_reduce_part_<dtype>(out, own, table, rank, n, count, op): the
// copy-engine pipeline's reduction of this rank's part of a chunk (below).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned long long u64;
typedef long long i64;

// Accumulation types: f16/bf16 in f32, i32 in i64 (exact sum, avg of the
// exact sum), u8 in u32, others in their own type. Integer sum/prod wrap.
template <typename T> struct Acc;
template <> struct Acc<float> { typedef float A; static __device__ A load(float v) { return v; } static __device__ float store(A a) { return a; } };
template <> struct Acc<double> { typedef double A; static __device__ A load(double v) { return v; } static __device__ double store(A a) { return a; } };
template <> struct Acc<__half> { typedef float A; static __device__ A load(__half v) { return __half2float(v); } static __device__ __half store(A a) { return __float2half_rn(a); } };
template <> struct Acc<__nv_bfloat16> { typedef float A; static __device__ A load(__nv_bfloat16 v) { return __bfloat162float(v); } static __device__ __nv_bfloat16 store(A a) { return __float2bfloat16_rn(a); } };
template <> struct Acc<int> { typedef i64 A; static __device__ A load(int v) { return v; } static __device__ int store(A a) { return (int)(unsigned)(u64)a; } };
template <> struct Acc<i64> { typedef i64 A; static __device__ A load(i64 v) { return v; } static __device__ i64 store(A a) { return a; } };
template <> struct Acc<unsigned char> { typedef unsigned A; static __device__ A load(unsigned char v) { return v; } static __device__ unsigned char store(A a) { return (unsigned char)a; } };

enum Op { SUM, AVG, MIN, MAX, PROD };

template <typename A> __device__ A add(A a, A b) { return a + b; }
template <> __device__ i64 add<i64>(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
template <typename A> __device__ A mul(A a, A b) { return a * b; }
template <> __device__ i64 mul<i64>(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }

// The operation as a value: the one-shot kernel takes it as a parameter (one kernel per dtype; five per
// dtype, each with three loops, made reduce.ptx 5x larger; `op` is the same for every thread, so the switch
// costs no divergence), the reduce kernels as a template constant (the switch folds away).
template <typename A> __device__ __forceinline__ A combine_rt(unsigned op, A acc, A x) {
  switch (op) {
    case PROD: return mul<A>(acc, x);
    case MIN: return x < acc ? x : acc;
    case MAX: return x > acc ? x : acc;
    default: return add<A>(acc, x);
  }
}

template <int OP, typename A> __device__ A combine(A acc, A x) { return combine_rt<A>(OP, acc, x); }

// Integer division truncates toward zero; floats divide in the accumulator (IEEE, -prec-div=true).
template <typename A> __device__ A divide(A a, unsigned n) { return a / (A)n; }

template <typename T, int OP>
__device__ void reduce(T *out, const T *const *table, unsigned n, u64 offset, u64 count) {
  typedef typename Acc<T>::A A;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    A acc = Acc<T>::load(table[0][offset + i]);
    for (unsigned k = 1; k < n; k++) acc = combine<OP, A>(acc, Acc<T>::load(table[k][offset + i]));
    if (OP == AVG) acc = divide<A>(acc, n);
    out[i] = Acc<T>::store(acc);
  }
}

template <typename T>
__device__ void divide_all(T *data, u64 count, unsigned n) {
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    data[i] = Acc<T>::store(divide<typename Acc<T>::A>(Acc<T>::load(data[i]), n));
  }
}

// ---- the fused one-shot ---------------------------------------------------

#define ONESHOT_MAX_BLOCKS 512

__device__ __forceinline__ void st_release_sys(u64 *addr, u64 v) { asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(v) : "memory"); }
__device__ __forceinline__ u64 ld_acquire_sys(const u64 *addr) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  return v;
}

// One step of parity p for this block: every other rank's block of the same index reached it.
__device__ void block_step(char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, unsigned p) {
  __syncthreads();
  const unsigned b = blockIdx.x;
  for (unsigned k = threadIdx.x; k < n; k += blockDim.x) {
    if (k == rank) continue;
    st_release_sys((u64 *)(bufs[k] + flagOffset) + (p * n + rank) * ONESHOT_MAX_BLOCKS + b, 1ull);
  }
  u64 *own = (u64 *)(bufs[rank] + flagOffset);
  for (unsigned k = threadIdx.x; k < n; k += blockDim.x) {
    if (k == rank) continue;
    u64 *slot = own + (p * n + k) * ONESHOT_MAX_BLOCKS + b;
    while (ld_acquire_sys(slot) < 1ull) {
    }
    *(volatile u64 *)slot = 0;
  }
  __syncthreads();
}

// 16 bytes of T.
template <typename T> struct Vec {
  enum { N = 16 / sizeof(T) };
};

template <typename T>
__device__ void oneshot(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op) {
  typedef typename Acc<T>::A A;
  const u64 V = Vec<T>::N;
  // This block's range [lo, hi): chunks of whole vectors, the same on every rank.
  const u64 chunk = ((count + gridDim.x - 1) / gridDim.x + V - 1) / V * V;
  const u64 lo = min(count, (u64)blockIdx.x * chunk);
  const u64 hi = min(count, lo + chunk);
  const u64 vhi = lo + (hi - lo) / V * V; // vectors in [lo, vhi), elements after
  T *mine = (T *)bufs[rank];
  if (in != mine) {
    if (((u64)in & 15) == 0) {
      for (u64 i = lo + threadIdx.x * V; i < vhi; i += (u64)blockDim.x * V) *(uint4 *)(mine + i) = *(const uint4 *)(in + i);
      for (u64 i = vhi + threadIdx.x; i < hi; i += blockDim.x) mine[i] = in[i];
    } else {
      for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = in[i];
    }
  }
  block_step(bufs, flagOffset, rank, n, 0);
  const bool outAligned = ((u64)out & 15) == 0;
  for (u64 i = lo + threadIdx.x * V; i < vhi; i += (u64)blockDim.x * V) {
    A acc[V];
    uint4 u = *(const uint4 *)((const T *)bufs[0] + i);
    const T *e = (const T *)&u;
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] = Acc<T>::load(e[j]);
    for (unsigned k = 1; k < n; k++) {
      u = *(const uint4 *)((const T *)bufs[k] + i);
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] = combine_rt<A>(op, acc[j], Acc<T>::load(e[j]));
    }
    uint4 r;
    T *o = (T *)&r;
#pragma unroll
    for (int j = 0; j < V; j++) o[j] = Acc<T>::store(op == AVG ? divide<A>(acc[j], n) : acc[j]);
    if (outAligned) *(uint4 *)(out + i) = r;
    else
      for (int j = 0; j < V; j++) out[i + j] = o[j];
  }
  for (u64 i = vhi + threadIdx.x; i < hi; i += blockDim.x) {
    A acc = Acc<T>::load(((const T *)bufs[0])[i]);
    for (unsigned k = 1; k < n; k++) acc = combine_rt<A>(op, acc, Acc<T>::load(((const T *)bufs[k])[i]));
    out[i] = Acc<T>::store(op == AVG ? divide<A>(acc, n) : acc);
  }
  block_step(bufs, flagOffset, rank, n, 1);
}

// ---- the copy-engine pipeline's reduction --------------------------------

// out[i] = op over k in rank order of (k == rank ? own[i] : table[k][i]), for i < count. The
// pipeline (src/collectives/ce-pipeline.ts) has the copy engines bring every peer's part of a
// chunk into this rank's landing slots (table) and reads this rank's own part straight from the
// caller's input (own). Element by element, as reduce above: a 16-byte vector path as the
// one-shot's made reduce.ptx 140 KB larger, which the package could not afford, and the
// pipeline's chunks are bound by its copies and steps, not by this kernel.
template <typename T>
__device__ void reduce_part(T *out, const T *own, const T *const *table, unsigned rank, unsigned n, u64 count, unsigned op) {
  typedef typename Acc<T>::A A;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    A acc = Acc<T>::load((rank == 0 ? own : table[0])[i]);
#pragma unroll 1
    for (unsigned k = 1; k < n; k++) acc = combine_rt<A>(op, acc, Acc<T>::load((k == rank ? own : table[k])[i]));
    out[i] = Acc<T>::store(op == AVG ? divide<A>(acc, n) : acc);
  }
}

#define REDUCE(OPNAME, OP, TNAME, T) \
  extern "C" __global__ void smcuda_reduce_##OPNAME##_##TNAME(T *out, const T *const *table, unsigned n, u64 offset, u64 count) { \
    reduce<T, OP>(out, table, n, offset, count); \
  }
#define ALL_OPS(TNAME, T) \
  REDUCE(sum, SUM, TNAME, T) REDUCE(avg, AVG, TNAME, T) REDUCE(min, MIN, TNAME, T) REDUCE(max, MAX, TNAME, T) REDUCE(prod, PROD, TNAME, T) \
  extern "C" __global__ void smcuda_div_##TNAME(T *data, u64 count, unsigned n) { divide_all<T>(data, count, n); } \
  extern "C" __global__ void smcuda_oneshot_##TNAME(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op) { \
    oneshot<T>(out, in, bufs, flagOffset, rank, n, count, op); \
  } \
  extern "C" __global__ void smcuda_reduce_part_##TNAME(T *out, const T *own, const T *const *table, unsigned rank, unsigned n, u64 count, unsigned op) { \
    reduce_part<T>(out, own, table, rank, n, count, op); \
  }

ALL_OPS(f32, float)
ALL_OPS(f64, double)
ALL_OPS(f16, __half)
ALL_OPS(bf16, __nv_bfloat16)
ALL_OPS(i32, int)
ALL_OPS(i64, i64)
ALL_OPS(u8, unsigned char)
