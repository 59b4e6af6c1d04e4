// Elementwise reductions for smcuda's collectives, compiled to PTX by
// build-ptx.mjs and shipped as reduce.ptx.ts (the driver JIT-compiles it: no
// toolkit at build or install time). src/kernels/sim/reduce.ts is the
// TypeScript twin the simulated driver runs; both must stay identical in
// semantics (README.md says what).
//
// smcuda_reduce_<dtype>(out, table, n, offset, count, op, factor):
//   out[i] = op(table[0][offset+i], table[1][offset+i], ..., table[n-1][offset+i])
// folded left to right, in rank order, for i in [0, count). `table` is a
// device array of n input pointers (own or mapped from peers).
// smcuda_div_<dtype>(data, count, n): data[i] = data[i] / n (the avg epilogue
// for results reduced in pieces).
//
// smcuda_oneshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op,
// landOffset, slotBytes, factor): a whole one-shot allreduce piece in one launch, one
// signal a call. Block b owns one contiguous range of the elements, the same
// on every rank (it depends on count and the grid only). With e this rank's
// launch count plus one (the epoch, kept in its own flag area and read when
// the launch runs, so graph replays count as eager launches do), block b
// stores its range of `in` into landing slot (e % 2, rank) of every rank
// (D at landOffset, slots of slotBytes), writes e into its flag slot in
// every peer (st.release.sys after the block's stores), waits until every
// peer's block b wrote e or more there, and reduces its range over this
// rank's n slots of parity e % 2 into `out`: local reads only. The last
// block to finish advances the count. Why one signal is enough, with no step
// at the end: rank r stores into a peer's slots of parity e % 2 only after
// its launch e - 1 passed, and that launch's waits passed only once every
// peer had started launch e - 1, so each peer's launch e - 2 (the last to
// read those slots) had ended: a launch starts after the one before it on
// its stream. No other algorithm stores into D. Against the version before
// (a copy into own scratch, a step, loads from every peer's, a step) it is
// faster at 256 KiB, 1 MiB and 8 B in a graph on 2 x H200
// (bench/results-history.md, session 7).
//
// smcuda_lloneshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op,
// landOffset, slotBytes, factor): the one-shot by NCCL's LL protocol, for
// small pieces: data and flag in the same stores, so no signal of its own
// (below, before the two-shot).
//
// smcuda_twoshot_<dtype>(out, in, bufs, flagOffset, rank, n, count, op,
// bOffset, partMax, factor): a whole two-shot allreduce in one launch, every byte
// between GPUs a store into a peer's memory (a push: on 2 x H200, SM copies
// both ways at once ran faster pushing than pulling; bench/results-history.md,
// session 6).
// The data goes in pieces of n parts of at most partMax elements (what n - 1
// slots of a scratch region hold); rank j reduces part j of each piece
// (twoshot_chunk elements, the last part short). Block b owns the same
// sub-range of every part: it stores that sub-range of every other part of
// `in` into the owner's landing slot in A, steps (parity 0), reduces its
// sub-range of its own part from `in` and the landing slots into `out` and
// stores the result into every peer's B (at bOffset from A), steps (parity
// 1), and copies what peers stored into its B into `out`; then the next
// piece. The steps are the one-shot's (block_step), on its slots, so a slot
// is only ever written again after its block's next step: one launch a call
// (a launch a piece, with the boundary's idle time, was slower on 2 x H100), and every block of the grid must be resident at once
// (ReduceKernels sizes the grid).
//
// `factor` (every kernel with `op` takes it last) is premul's: each input is
// multiplied by it before the sum; the other ops ignore it.
//
// smcuda_reduce_part_<dtype>(out, own, table, rank, n, count, op, factor): the
// copy-engine pipeline's reduction of this rank's part of a chunk (below).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned long long u64;
typedef long long i64;

// fp8 elements as stored: one byte, OCP E4M3 ("fn": no infinity, NaN 0x7f/0xff, largest finite 448)
// and E5M2 (IEEE-like: infinities, NaN, largest finite 57344). Distinct types so that Acc can tell them.
struct f8e4m3 { unsigned char x; };
struct f8e5m2 { unsigned char x; };

// fp8 to f32, exact, through f16 (one conversion instruction): E5M2 is the top byte of an f16 (its
// infinities and NaNs too); E4M3's bits moved into an f16's place are the value times 2^-8 (subnormals
// included), and 0x7f/0xff, which f16 reads as 480, are NaN.
__device__ __forceinline__ float e5m2_load(unsigned v) { return __half2float(__ushort_as_half((unsigned short)(v << 8))); }
__device__ __forceinline__ float e4m3_load(unsigned v) {
  const float x = __half2float(__ushort_as_half((unsigned short)(((v & 0x80u) << 8) | ((v & 0x7fu) << 7)))) * 256.0f;
  return (v & 0x7fu) == 0x7fu ? __int_as_float(0x7fffffff) : x;
}

// f32 to fp8, rounded to nearest even and saturated to the largest finite value (NaN stays NaN,
// 0x7f; infinities become the largest finite value): CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
// ...), what NCCL's fp8 reductions store. Not inlined: one copy serves every call site (inlined in
// the unrolled vector loops it made reduce.ptx much larger). MAXC: the largest finite code.
template <int M, int B, unsigned MAXC> __device__ __noinline__ unsigned f8_store(float f) {
  const unsigned x = __float_as_uint(f), sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;
  const unsigned e = a >> 23;
  unsigned q;
  if (e >= (unsigned)(128 - B)) {
    // Normal: round the f32 significand to M bits (a carry moves into the exponent), then rebias.
    const unsigned s = 23 - M;
    q = ((a + ((1u << (s - 1)) - 1) + ((a >> s) & 1)) >> s) - ((unsigned)(127 - B) << M);
    if (q > MAXC) q = MAXC;
  } else {
    // Subnormal in fp8 (steps of 2^(1-B-M)): the significand shifted right, rounded to nearest even.
    const unsigned m = e == 0 ? (a & 0x7fffffu) : ((a & 0x7fffffu) | 0x800000u);
    const unsigned s = (unsigned)(151 - B - M) - (e == 0 ? 1u : e);
    if (s >= 25) q = 0;
    else {
      q = m >> s;
      const unsigned rem = m & ((1u << s) - 1), half = 1u << (s - 1);
      if (rem > half || (rem == half && (q & 1))) q++;
    }
  }
  return sign | q;
}

// Accumulation types: f16/bf16/fp8 in f32, i32 in i64 and u32 in u64 (exact sum, avg of the exact
// sum), u8 in u32 and i8 in i32, others in their own type. Integer sum/prod wrap.
template <typename T> struct Acc;
template <> struct Acc<float> { typedef float A; static __device__ A load(float v) { return v; } static __device__ float store(A a) { return a; } };
template <> struct Acc<double> { typedef double A; static __device__ A load(double v) { return v; } static __device__ double store(A a) { return a; } };
template <> struct Acc<__half> { typedef float A; static __device__ A load(__half v) { return __half2float(v); } static __device__ __half store(A a) { return __float2half_rn(a); } };
template <> struct Acc<__nv_bfloat16> { typedef float A; static __device__ A load(__nv_bfloat16 v) { return __bfloat162float(v); } static __device__ __nv_bfloat16 store(A a) { return __float2bfloat16_rn(a); } };
template <> struct Acc<int> { typedef i64 A; static __device__ A load(int v) { return v; } static __device__ int store(A a) { return (int)(unsigned)(u64)a; } };
template <> struct Acc<i64> { typedef i64 A; static __device__ A load(i64 v) { return v; } static __device__ i64 store(A a) { return a; } };
template <> struct Acc<unsigned char> { typedef unsigned A; static __device__ A load(unsigned char v) { return v; } static __device__ unsigned char store(A a) { return (unsigned char)a; } };
template <> struct Acc<signed char> { typedef int A; static __device__ A load(signed char v) { return v; } static __device__ signed char store(A a) { return (signed char)(unsigned char)(unsigned)a; } };
template <> struct Acc<unsigned> { typedef u64 A; static __device__ A load(unsigned v) { return v; } static __device__ unsigned store(A a) { return (unsigned)a; } };
template <> struct Acc<u64> { typedef u64 A; static __device__ A load(u64 v) { return v; } static __device__ u64 store(A a) { return a; } };
template <> struct Acc<f8e4m3> { typedef float A; static __device__ A load(f8e4m3 v) { return e4m3_load(v.x); } static __device__ f8e4m3 store(A a) { f8e4m3 r; r.x = (unsigned char)f8_store<3, 7, 0x7eu>(a); return r; } };
template <> struct Acc<f8e5m2> { typedef float A; static __device__ A load(f8e5m2 v) { return e5m2_load(v.x); } static __device__ f8e5m2 store(A a) { f8e5m2 r; r.x = (unsigned char)f8_store<2, 15, 0x7bu>(a); return r; } };

// In REDUCE_OPS order (src/kernels/dtypes.ts).
enum Op { SUM, AVG, MIN, MAX, PROD, PREMUL, BAND, BOR, BXOR };

template <typename A> __device__ A add(A a, A b) { return a + b; }
template <> __device__ i64 add<i64>(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
template <typename A> __device__ A mul(A a, A b) { return a * b; }
template <> __device__ i64 mul<i64>(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }

// Bitwise operations: integers only (the collectives refuse them for floats: dtypes.ts checkDtypeOp).
template <typename A> struct Bits {
  static __device__ A band(A a, A b) { return a & b; }
  static __device__ A bor(A a, A b) { return a | b; }
  static __device__ A bxor(A a, A b) { return a ^ b; }
};
template <> struct Bits<float> { static __device__ float band(float a, float) { return a; } static __device__ float bor(float a, float) { return a; } static __device__ float bxor(float a, float) { return a; } };
template <> struct Bits<double> { static __device__ double band(double a, double) { return a; } static __device__ double bor(double a, double) { return a; } static __device__ double bxor(double a, double) { return a; } };

// premul's factor in the accumulator type, and the product of an input with it, rounded once (never fused
// with the sum that follows). Floats only (the collectives refuse premul for integers); an integer
// accumulator leaves the input as it is.
template <typename A> struct Scale {
  static __device__ A factor(double) { return 0; }
  static __device__ A apply(A x, A) { return x; }
};
template <> struct Scale<float> { static __device__ float factor(double f) { return (float)f; } static __device__ float apply(float x, float f) { return __fmul_rn(x, f); } };
template <> struct Scale<double> { static __device__ double factor(double f) { return f; } static __device__ double apply(double x, double f) { return __dmul_rn(x, f); } };

// The operation as a value: every kernel takes it as a parameter, one kernel per dtype (five per dtype made
// reduce.ptx several times larger, and the package has a size bound); `op` is the same for every thread, so
// the switch costs no divergence and its branch is predicted.
template <typename A> __device__ __forceinline__ A combine_rt(unsigned op, A acc, A x) {
  switch (op) {
    case PROD: return mul<A>(acc, x);
    case MIN: return x < acc ? x : acc;
    case MAX: return x > acc ? x : acc;
    case BAND: return Bits<A>::band(acc, x);
    case BOR: return Bits<A>::bor(acc, x);
    case BXOR: return Bits<A>::bxor(acc, x);
    default: return add<A>(acc, x); // SUM, AVG, PREMUL (its inputs scaled on the load: ld below)
  }
}

// An input element in the accumulator type: scaled by premul's factor f where op is PREMUL.
template <typename T> __device__ __forceinline__ typename Acc<T>::A ld(unsigned op, T v, typename Acc<T>::A f) {
  typedef typename Acc<T>::A A;
  const A x = Acc<T>::load(v);
  return op == PREMUL ? Scale<A>::apply(x, f) : x;
}

// Integer division truncates toward zero; floats divide in the accumulator (IEEE, -prec-div=true).
template <typename A> __device__ A divide(A a, unsigned n) { return a / (A)n; }

template <typename T>
__device__ void reduce(T *out, const T *const *table, unsigned n, u64 offset, u64 count, unsigned op, double factor) {
  typedef typename Acc<T>::A A;
  const A f = Scale<A>::factor(factor);
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    A acc = ld<T>(op, table[0][offset + i], f);
    for (unsigned k = 1; k < n; k++) acc = combine_rt<A>(op, acc, ld<T>(op, table[k][offset + i], f));
    if (op == AVG) acc = divide<A>(acc, n);
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

// ---- the steps of the kernels ----------------------------------------------

#define ONESHOT_MAX_BLOCKS 512

__device__ __forceinline__ void st_release_sys(u64 *addr, u64 v) { asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(v) : "memory"); }
__device__ __forceinline__ u64 ld_acquire_sys(const u64 *addr) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  return v;
}

// One step of parity p for block b: every other rank's block b reached it.
__device__ void block_step(char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, unsigned p, unsigned b) {
  __syncthreads();
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

#include "copy-bytes.cuh"

// A 16-byte vector of T as accumulators (ld of each element), and back (each element's store, after
// avg's division): the vector paths of the one- and two-shot kernels. `u` is taken by value: that copy
// is the one 16-byte load. Bound by reference to the caller's `*(const uint4 *)p`, it let nvcc load
// element by element, down each side of premul's branch (4 to 16 loads a vector; allreduce 1 MiB
// about 10 % slower on one H100, bench/results-history.md); test/unit/kernels/ptx-vector-loads.test.ts
// keeps it one load.
template <typename T> struct VecIO {
  typedef typename Acc<T>::A A;
  static __device__ __forceinline__ void load(unsigned op, const uint4 u, A f, A *x) {
    const T *e = (const T *)&u;
#pragma unroll
    for (int j = 0; j < Vec<T>::N; j++) x[j] = ld<T>(op, e[j], f);
  }
  static __device__ __forceinline__ uint4 store(unsigned op, unsigned n, const A *acc) {
    uint4 r;
    T *o = (T *)&r;
#pragma unroll
    for (int j = 0; j < Vec<T>::N; j++) o[j] = Acc<T>::store(op == AVG ? divide<A>(acc[j], n) : acc[j]);
    return r;
  }
};

// fp8: four elements a call, not inlined (sixteen conversions inlined at each of the vector paths' sites
// made reduce.ptx several times larger); the same operations as the element-wise path.
template <typename T> __device__ __noinline__ float4 f8x4_load(unsigned w, unsigned op, float f) {
  float4 v;
  v.x = ld<T>(op, T{(unsigned char)w}, f);
  v.y = ld<T>(op, T{(unsigned char)(w >> 8)}, f);
  v.z = ld<T>(op, T{(unsigned char)(w >> 16)}, f);
  v.w = ld<T>(op, T{(unsigned char)(w >> 24)}, f);
  return v;
}
template <typename T> __device__ __noinline__ unsigned f8x4_store(float4 v, unsigned op, unsigned n) {
  const float a[4] = {v.x, v.y, v.z, v.w};
  unsigned w = 0;
#pragma unroll
  for (int j = 0; j < 4; j++) w |= (unsigned)Acc<T>::store(op == AVG ? divide<float>(a[j], n) : a[j]).x << (8 * j);
  return w;
}
template <typename T> struct F8VecIO {
  static __device__ __forceinline__ void load(unsigned op, const uint4 u, float f, float *x) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const float4 v = f8x4_load<T>(w[q], op, f);
      x[4 * q] = v.x, x[4 * q + 1] = v.y, x[4 * q + 2] = v.z, x[4 * q + 3] = v.w;
    }
  }
  static __device__ __forceinline__ uint4 store(unsigned op, unsigned n, const float *acc) {
    uint4 r;
    r.x = f8x4_store<T>(make_float4(acc[0], acc[1], acc[2], acc[3]), op, n);
    r.y = f8x4_store<T>(make_float4(acc[4], acc[5], acc[6], acc[7]), op, n);
    r.z = f8x4_store<T>(make_float4(acc[8], acc[9], acc[10], acc[11]), op, n);
    r.w = f8x4_store<T>(make_float4(acc[12], acc[13], acc[14], acc[15]), op, n);
    return r;
  }
};
template <> struct VecIO<f8e4m3> : F8VecIO<f8e4m3> {};
template <> struct VecIO<f8e5m2> : F8VecIO<f8e5m2> {};

// ---- the fused one-shot ---------------------------------------------------

// The one-shot's flag area, at flagOffset in every rank's scratch: word 0 counts this rank's launches
// of the kernel (its epoch), word 1 the blocks of the running launch that are done, then one slot per
// (source rank, block): "rank src's block b stored its range of launch e here" holds e.
__device__ __forceinline__ u64 *oneshot_flag(char *buf, u64 flagOffset, unsigned src, unsigned b) {
  return (u64 *)(buf + flagOffset) + 2 + (u64)src * ONESHOT_MAX_BLOCKS + b;
}

// This rank's range [lo, lo + bytes) of `in` into landing slot (p, rank) of every rank, own included.
__device__ __noinline__ void push_range(const char *in, char *const *bufs, u64 landOffset, u64 slotBytes, unsigned p, unsigned rank, unsigned n, u64 lo, u64 bytes, unsigned tid, unsigned nthr) {
  for (unsigned k = 0; k < n; k++) copy_bytes(bufs[k] + landOffset + ((u64)p * n + rank) * slotBytes + lo, in + lo, bytes, tid, nthr);
}

template <typename T>
__device__ void oneshot(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op, u64 landOffset, u64 slotBytes, double factor) {
  typedef typename Acc<T>::A A;
  const A f = Scale<A>::factor(factor);
  const u64 V = Vec<T>::N;
  const unsigned b = blockIdx.x;
  u64 *area = (u64 *)(bufs[rank] + flagOffset);
  __shared__ u64 epoch_s;
  if (threadIdx.x == 0) epoch_s = *(volatile u64 *)area + 1;
  // This block's range [lo, hi): chunks of whole vectors, the same on every rank.
  const u64 chunk = ((count + gridDim.x - 1) / gridDim.x + V - 1) / V * V;
  const u64 lo = min(count, (u64)b * chunk);
  const u64 hi = min(count, lo + chunk);
  const u64 vhi = lo + (hi - lo) / V * V; // vectors in [lo, vhi), elements after
  __syncthreads();
  const u64 e = epoch_s;
  const unsigned p = (unsigned)(e & 1);
  push_range((const char *)in, bufs, landOffset, slotBytes, p, rank, n, lo * sizeof(T), (hi - lo) * sizeof(T), threadIdx.x, blockDim.x);
  // Every thread's stores, then the flags (a release after the barrier orders the block's stores before it).
  __syncthreads();
  for (unsigned k = threadIdx.x; k < n; k += blockDim.x)
    if (k != rank) st_release_sys(oneshot_flag(bufs[k], flagOffset, rank, b), e);
  for (unsigned k = threadIdx.x; k < n; k += blockDim.x)
    if (k != rank)
      while (ld_acquire_sys(oneshot_flag(bufs[rank], flagOffset, k, b)) < e) {
      }
  __syncthreads();
  const T *land = (const T *)(bufs[rank] + landOffset + (u64)p * n * slotBytes);
  const u64 slot = slotBytes / sizeof(T);
  const bool outAligned = ((u64)out & 15) == 0;
  for (u64 i = lo + threadIdx.x * V; i < vhi; i += (u64)blockDim.x * V) {
    A acc[V];
    VecIO<T>::load(op, *(const uint4 *)(land + i), f, acc);
    for (unsigned k = 1; k < n; k++) {
      A x[V];
      VecIO<T>::load(op, *(const uint4 *)(land + k * slot + i), f, x);
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] = combine_rt<A>(op, acc[j], x[j]);
    }
    const uint4 r = VecIO<T>::store(op, n, acc);
    const T *o = (const T *)&r;
    if (outAligned) *(uint4 *)(out + i) = r;
    else
      for (int j = 0; j < V; j++) out[i + j] = o[j];
  }
  for (u64 i = vhi + threadIdx.x; i < hi; i += blockDim.x) {
    A acc = ld<T>(op, land[i], f);
    for (unsigned k = 1; k < n; k++) acc = combine_rt<A>(op, acc, ld<T>(op, land[k * slot + i], f));
    out[i] = Acc<T>::store(op == AVG ? divide<A>(acc, n) : acc);
  }
  // The last block of the launch to finish advances the epoch (no block of this launch reads it again,
  // and the next launch on the stream starts after this one ended).
  if (threadIdx.x == 0 && atomicAdd((unsigned long long *)(area + 1), 1ull) == gridDim.x - 1) {
    area[1] = 0;
    area[0] = e;
  }
}

// ---- the LL one-shot -------------------------------------------------------

// NCCL's LL protocol in one launch: data and flag travel in one store, so a rank needs no signal of
// its own and a peer no separate wait for one. A line is 16 bytes, two 64-bit words, each 4 bytes of
// data (low half) and the 32-bit flag (high half): a 64-bit store is single-copy atomic, so a word
// seen with this launch's flag holds this launch's data (a 16-byte store is two such words: PTX
// promises no atomicity for it as a whole, hence a flag in each word, as NCCL's LL has).
#define LL_CLEAN_MASK 0x3fffffffull

__device__ __forceinline__ void st_relaxed_sys_v2(u64 *addr, u64 a, u64 b) {
  asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(addr), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ld_relaxed_sys_v2(const u64 *addr, u64 &a, u64 &b) {
  asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(addr) : "memory");
}

// Bytes [at, at + 8) of p (`bytes` long) as a u64, zeros past the end: one load where whole and aligned.
__device__ __noinline__ u64 ll_load8(const char *p, u64 at, u64 bytes) {
  if (at + 8 <= bytes && ((u64)(p + at) & 7) == 0) return *(const u64 *)(p + at);
  u64 v = 0;
  for (unsigned j = 0; j < 8 && at + j < bytes; j++) v |= (u64)(unsigned char)p[at + j] << (8 * j);
  return v;
}
// v into bytes [at, at + 8) of p, none past `bytes`.
__device__ __noinline__ void ll_store8(char *p, u64 at, u64 bytes, u64 v) {
  if (at + 8 <= bytes && ((u64)(p + at) & 7) == 0) {
    *(u64 *)(p + at) = v;
    return;
  }
  for (unsigned j = 0; j < 8 && at + j < bytes; j++) p[at + j] = (char)(v >> (8 * j));
}

// The 8 data bytes of a line once both its words carry `flag`, or whatever it holds once the
// communicator poisoned this rank's LL area (an abort: the call fails on the host, its result unused).
__device__ __noinline__ u64 ll_wait(const u64 *line, unsigned flag, const u64 *poison) {
  u64 a, b;
  ld_relaxed_sys_v2(line, a, b);
  while ((unsigned)(a >> 32) != flag || (unsigned)(b >> 32) != flag) {
    if (*(volatile const u64 *)poison != 0) break;
    ld_relaxed_sys_v2(line, a, b);
  }
  return (a & 0xffffffffull) | (b << 32);
}

// The elements of T in one line's 8 data bytes.
template <typename T> struct Line {
  enum { N = 8 / sizeof(T) };
  union U {
    u64 v;
    T e[N];
  };
};

// acc = x (first) or op(acc, x) for each element x of the line v: the one-shot's fold, element by element.
template <typename T> __device__ __forceinline__ void ll_fold(unsigned op, u64 v, bool first, typename Acc<T>::A f, typename Acc<T>::A *acc) {
  typename Line<T>::U u;
  u.v = v;
#pragma unroll
  for (int j = 0; j < Line<T>::N; j++) {
    const typename Acc<T>::A x = ld<T>(op, u.e[j], f);
    acc[j] = first ? x : combine_rt<typename Acc<T>::A>(op, acc[j], x);
  }
}

template <typename T> __device__ __forceinline__ u64 ll_pack(unsigned op, unsigned n, const typename Acc<T>::A *acc) {
  typename Line<T>::U u;
#pragma unroll
  for (int j = 0; j < Line<T>::N; j++) u.e[j] = Acc<T>::store(op == AVG ? divide<typename Acc<T>::A>(acc[j], n) : acc[j]);
  return u.v;
}

// The LL one-shot's area, at flagOffset in every rank's scratch: word 0 counts this rank's launches
// of the kernel (its epoch), word 1 the blocks of the running launch that are done, word 2 the
// poison (non-zero once the communicator aborted: every wait ends).
template <typename T>
__device__ void lloneshot(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op, u64 landOffset, u64 slotBytes, double factor) {
  typedef typename Acc<T>::A A;
  const A f = Scale<A>::factor(factor);
  u64 *area = (u64 *)(bufs[rank] + flagOffset);
  __shared__ u64 epoch_s;
  if (threadIdx.x == 0) epoch_s = *(volatile u64 *)area + 1;
  __syncthreads();
  const u64 e = epoch_s;
  const u64 p = e & 1;
  const unsigned flag = (unsigned)e;
  const u64 bytes = count * sizeof(T), lines = (bytes + 7) / 8;
  // Once in 2^30 launches of each parity, every line of the slots: no line then keeps a flag written
  // 2^32 launches ago, which a 32-bit flag would take for this launch's.
  const u64 stored = (e & LL_CLEAN_MASK) < 2 ? slotBytes / 16 : lines;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;
  const u64 hi = (u64)flag << 32;
  for (u64 i = tid; i < stored; i += stride) {
    const u64 v = i < lines ? ll_load8((const char *)in, 8 * i, bytes) : 0;
    for (unsigned k = 0; k < n; k++)
      if (k != rank) st_relaxed_sys_v2((u64 *)(bufs[k] + landOffset + (p * n + rank) * slotBytes) + 2 * i, hi | (v & 0xffffffffull), hi | (v >> 32));
  }
  // Line i of every peer's slot in rank order (this rank's own from `in`: its thread alone writes
  // line i of `out`, after this read, so in place is safe).
  const u64 *land = (const u64 *)(bufs[rank] + landOffset + p * n * slotBytes);
  for (u64 i = tid; i < lines; i += stride) {
    A acc[Line<T>::N];
    for (unsigned k = 0; k < n; k++) {
      const u64 v = k == rank ? ll_load8((const char *)in, 8 * i, bytes) : ll_wait(land + k * (slotBytes / 8) + 2 * i, flag, area + 2);
      ll_fold<T>(op, v, k == 0, f, acc);
    }
    ll_store8((char *)out, 8 * i, bytes, ll_pack<T>(op, n, acc));
  }
  // The last block of the launch to finish advances the epoch (as the one-shot's).
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd((unsigned long long *)(area + 1), 1ull) == gridDim.x - 1) {
    area[1] = 0;
    area[0] = e;
  }
}

// ---- the fused two-shot ---------------------------------------------------

// Elements per part of a two-shot piece of `count`: count / n rounded up to whole 16-byte vectors, so
// every part starts 16-byte aligned. ReduceKernels and the simulator's twin compute the same.
template <typename T> __device__ __forceinline__ u64 twoshot_chunk(u64 count, unsigned n) {
  const u64 V = Vec<T>::N;
  return ((count + n - 1) / n + V - 1) / V * V;
}

// Where rank `owner` keeps what rank j sent it, among its n - 1 slots (its own part has none).
__device__ __forceinline__ u64 slot_of(unsigned j, unsigned owner) { return j < owner ? j : j - 1; }

// Part j of a piece of `count` (parts of `chunk` elements, the last one short) starts at lo; block b's
// sub-range of it is [sub, sub + len): `per` elements from b * per, the same in every piece.
__device__ __forceinline__ void sub_range(u64 count, u64 chunk, unsigned j, unsigned b, u64 per, u64 &lo, u64 &sub, u64 &len) {
  lo = min(count, (u64)j * chunk);
  const u64 part = min(count, lo + chunk) - lo;
  sub = min(part, (u64)b * per);
  len = min(part - sub, per);
}

// The two-shot's copies, untyped (es: bytes an element) and not inlined, so one copy serves every
// dtype (inlined per dtype and call site, they made reduce.ptx 100 KB larger). A piece of `count`
// elements in parts of `chunk`; slots `first` elements apart; block b's sub-ranges from b * per.
// push_parts: this rank's sub-ranges of every other part of `in` into the owner's landing slot.
__device__ __noinline__ void push_parts(const char *in, char *const *bufs, unsigned rank, unsigned n, u64 count, u64 chunk, u64 first, unsigned b, u64 per, u64 es, unsigned tid, unsigned nthr) {
  u64 lo, sub, len;
  for (unsigned j = 0; j < n; j++) {
    if (j == rank) continue;
    sub_range(count, chunk, j, b, per, lo, sub, len);
    copy_bytes(bufs[j] + (slot_of(rank, j) * first + sub) * es, in + (lo + sub) * es, len * es, tid, nthr);
  }
}

// collect_parts: what every peer stored into this rank's B (`got`) for these sub-ranges, into `out`.
__device__ __noinline__ void collect_parts(char *out, const char *got, unsigned rank, unsigned n, u64 count, u64 chunk, u64 first, unsigned b, u64 per, u64 es, unsigned tid, unsigned nthr) {
  u64 lo, sub, len;
  for (unsigned j = 0; j < n; j++) {
    if (j == rank) continue;
    sub_range(count, chunk, j, b, per, lo, sub, len);
    copy_bytes(out + (lo + sub) * es, got + (slot_of(j, rank) * first + sub) * es, len * es, tid, nthr);
  }
}

template <typename T>
__device__ void twoshot(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op, u64 bOffset, u64 partMax, double factor) {
  typedef typename Acc<T>::A A;
  const A f = Scale<A>::factor(factor);
  const u64 V = Vec<T>::N, es = sizeof(T);
  const unsigned b = blockIdx.x, bd = blockDim.x;
  const T *land = (const T *)bufs[rank];
  const char *got = bufs[rank] + bOffset;
  // Slots are `first` elements apart and block b's sub-ranges start at b * per in every piece (the
  // last piece's parts are shorter, not laid out anew): a block's steps order its own scratch
  // addresses only, so a block must never touch in one piece what another touched in the piece before.
  const u64 first = twoshot_chunk<T>(min(count, partMax * n), n);
  const u64 per = ((first + gridDim.x - 1) / gridDim.x + V - 1) / V * V;
  const u64 most = partMax * n;
  u64 lo, sub, len;
  for (u64 base = 0; base < count; base += most) {
    const u64 piece = min(count - base, most);
    const u64 chunk = twoshot_chunk<T>(piece, n);
    const T *pin = in + base;
    T *pout = out + base;
    // 1. This block's sub-range of every other rank's part, into that rank's landing slot for this rank.
    push_parts((const char *)pin, bufs, rank, n, piece, chunk, first, b, per, es, threadIdx.x, bd);
    block_step(bufs, flagOffset, rank, n, 0, b);
    // 2. This block's sub-range of this rank's part, reduced in rank order, into `out` and every peer's B.
    sub_range(piece, chunk, rank, b, per, lo, sub, len);
    const u64 vlen = ((((u64)pin | (u64)pout) & 15) == 0) ? len / V * V : 0;
    for (u64 i = threadIdx.x * V; i < vlen; i += (u64)bd * V) {
      A acc[V];
      VecIO<T>::load(op, *(const uint4 *)((rank == 0 ? pin + lo : land + slot_of(0, rank) * first) + sub + i), f, acc);
#pragma unroll 1
      for (unsigned j = 1; j < n; j++) {
        A e[V];
        VecIO<T>::load(op, *(const uint4 *)((j == rank ? pin + lo : land + slot_of(j, rank) * first) + sub + i), f, e);
#pragma unroll
        for (int x = 0; x < V; x++) acc[x] = combine_rt<A>(op, acc[x], e[x]);
      }
      const uint4 r = VecIO<T>::store(op, n, acc);
      *(uint4 *)(pout + lo + sub + i) = r;
#pragma unroll 1
      for (unsigned k = 0; k < n; k++)
        if (k != rank) *(uint4 *)((T *)(bufs[k] + bOffset) + slot_of(rank, k) * first + sub + i) = r;
    }
    for (u64 i = vlen + threadIdx.x; i < len; i += bd) {
      A acc = ld<T>(op, (rank == 0 ? pin + lo : land + slot_of(0, rank) * first)[sub + i], f);
#pragma unroll 1
      for (unsigned j = 1; j < n; j++) acc = combine_rt<A>(op, acc, ld<T>(op, (j == rank ? pin + lo : land + slot_of(j, rank) * first)[sub + i], f));
      const T r = Acc<T>::store(op == AVG ? divide<A>(acc, n) : acc);
      pout[lo + sub + i] = r;
#pragma unroll 1
      for (unsigned k = 0; k < n; k++)
        if (k != rank) ((T *)(bufs[k] + bOffset))[slot_of(rank, k) * first + sub + i] = r;
    }
    block_step(bufs, flagOffset, rank, n, 1, b);
    // 3. What peers stored into this rank's B for this block's sub-ranges, into `out`: no peer stores
    // there again before this block's next step 0, which it signals after this copy. (This copy beside
    // the next piece's stores, on half the threads each, measured the same on 2 x H100; so one after
    // the other.)
    collect_parts((char *)pout, got, rank, n, piece, chunk, first, b, per, es, threadIdx.x, bd);
  }
}

// ---- the copy-engine pipeline's reduction --------------------------------

// out[i] = op over k in rank order of (k == rank ? own[i] : table[k][i]), for i < count. The
// pipeline (src/collectives/ce-pipeline.ts) has the copy engines bring every peer's part of a
// chunk into this rank's landing slots (table) and reads this rank's own part straight from the
// caller's input (own). Element by element, as reduce above: a 16-byte vector path as the
// one-shot's made reduce.ptx 140 KB larger, which the package could not afford, and the
// pipeline's chunks are bound by its copies and steps, not by this kernel.
template <typename T>
__device__ void reduce_part(T *out, const T *own, const T *const *table, unsigned rank, unsigned n, u64 count, unsigned op, double factor) {
  typedef typename Acc<T>::A A;
  const A f = Scale<A>::factor(factor);
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    A acc = ld<T>(op, (rank == 0 ? own : table[0])[i], f);
#pragma unroll 1
    for (unsigned k = 1; k < n; k++) acc = combine_rt<A>(op, acc, ld<T>(op, (k == rank ? own : table[k])[i], f));
    out[i] = Acc<T>::store(op == AVG ? divide<A>(acc, n) : acc);
  }
}

#define ALL_OPS(TNAME, T) \
  extern "C" __global__ void smcuda_reduce_##TNAME(T *out, const T *const *table, unsigned n, u64 offset, u64 count, unsigned op, double factor) { \
    reduce<T>(out, table, n, offset, count, op, factor); \
  } \
  extern "C" __global__ void smcuda_div_##TNAME(T *data, u64 count, unsigned n) { divide_all<T>(data, count, n); } \
  extern "C" __global__ void smcuda_oneshot_##TNAME(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op, \
                                                    u64 landOffset, u64 slotBytes, double factor) { \
    oneshot<T>(out, in, bufs, flagOffset, rank, n, count, op, landOffset, slotBytes, factor); \
  } \
  extern "C" __global__ void smcuda_lloneshot_##TNAME(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, unsigned op, \
                                                      u64 landOffset, u64 slotBytes, double factor) { \
    lloneshot<T>(out, in, bufs, flagOffset, rank, n, count, op, landOffset, slotBytes, factor); \
  } \
  extern "C" __global__ void __launch_bounds__(512, 2) smcuda_twoshot_##TNAME(T *out, const T *in, char *const *bufs, u64 flagOffset, unsigned rank, unsigned n, u64 count, \
                                                                                unsigned op, u64 bOffset, u64 partMax, double factor) { \
    twoshot<T>(out, in, bufs, flagOffset, rank, n, count, op, bOffset, partMax, factor); \
  } \
  extern "C" __global__ void smcuda_reduce_part_##TNAME(T *out, const T *own, const T *const *table, unsigned rank, unsigned n, u64 count, unsigned op, double factor) { \
    reduce_part<T>(out, own, table, rank, n, count, op, factor); \
  }

ALL_OPS(f32, float)
ALL_OPS(f64, double)
ALL_OPS(f16, __half)
ALL_OPS(bf16, __nv_bfloat16)
ALL_OPS(i32, int)
ALL_OPS(i64, i64)
ALL_OPS(u8, unsigned char)
ALL_OPS(i8, signed char)
ALL_OPS(u32, unsigned)
ALL_OPS(u64, u64)
ALL_OPS(f8e4m3, f8e4m3)
ALL_OPS(f8e5m2, f8e5m2)
