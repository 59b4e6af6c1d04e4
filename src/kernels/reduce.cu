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

template <int OP, typename A> __device__ A combine(A acc, A x) {
  if (OP == SUM || OP == AVG) return add<A>(acc, x);
  if (OP == PROD) return mul<A>(acc, x);
  if (OP == MIN) return x < acc ? x : acc;
  return x > acc ? x : acc;
}

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

#define REDUCE(OPNAME, OP, TNAME, T) \
  extern "C" __global__ void smcuda_reduce_##OPNAME##_##TNAME(T *out, const T *const *table, unsigned n, u64 offset, u64 count) { \
    reduce<T, OP>(out, table, n, offset, count); \
  }
#define ALL_OPS(TNAME, T) \
  REDUCE(sum, SUM, TNAME, T) REDUCE(avg, AVG, TNAME, T) REDUCE(min, MIN, TNAME, T) REDUCE(max, MAX, TNAME, T) REDUCE(prod, PROD, TNAME, T) \
  extern "C" __global__ void smcuda_div_##TNAME(T *data, u64 count, unsigned n) { divide_all<T>(data, count, n); }

ALL_OPS(f32, float)
ALL_OPS(f64, double)
ALL_OPS(f16, __half)
ALL_OPS(bf16, __nv_bfloat16)
ALL_OPS(i32, int)
ALL_OPS(i64, i64)
ALL_OPS(u8, unsigned char)
