// A GPU check of reduce.cu's smcuda_lloneshot_f32 alone, without Node.js: n ranks as n streams of one
// process on one GPU (each rank's scratch its own allocation, every rank's table holding all of them).
// Batches of 64 launches of random sizes (1 element to 64 KiB) queued back to back with no host sync,
// every other batch captured in a graph per rank and replayed (the launch count is read at run time, so
// the two mix), every element checked; then 8 B in place back to back (a rough per-op time: both ranks
// launched from one thread) and a wait released by writing the poison word. Not for compute-sanitizer
// (it serializes kernels, and the ranks' kernels wait for each other): sanitize the two-process demo.
//   nvcc -arch=sm_90 -O2 -o /tmp/lloneshot-streams test/gpu/lloneshot-streams.cu && /tmp/lloneshot-streams 2 2048
#include "../../src/kernels/reduce.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <chrono>
#include <thread>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

static const u64 LLMAX = 64 * 1024, SLOT = 2 * LLMAX, LAND = 256;
struct Rank { char *scratch; char **bufs; cudaStream_t s; };

int main(int argc, char **argv) {
  const unsigned n = argc > 1 ? atoi(argv[1]) : 2;
  const int iters = argc > 2 ? atoi(argv[2]) : 2000;
  std::vector<Rank> R(n);
  std::vector<char *> ptrs(n);
  for (unsigned r = 0; r < n; r++) {
    CK(cudaMalloc(&R[r].scratch, LAND + 2 * n * SLOT));
    CK(cudaMemset(R[r].scratch, 0, LAND + 2 * n * SLOT));
    ptrs[r] = R[r].scratch;
    CK(cudaStreamCreateWithFlags(&R[r].s, cudaStreamNonBlocking));
  }
  for (unsigned r = 0; r < n; r++) {
    CK(cudaMalloc(&R[r].bufs, 8 * n));
    CK(cudaMemcpy(R[r].bufs, ptrs.data(), 8 * n, cudaMemcpyHostToDevice));
  }
  // Per iteration its own in/out per rank, so many iterations queue back to back with no host sync.
  const int Q = 64;
  const u64 maxCount = LLMAX / 4;
  std::vector<float *> in(n * Q), out(n * Q);
  for (auto &p : in) CK(cudaMalloc(&p, LLMAX));
  for (auto &p : out) CK(cudaMalloc(&p, LLMAX));
  std::vector<float> h(maxCount), got(maxCount);
  long bad = 0, checked = 0;
  srand(1);
  for (int base = 0; base < iters; base += Q) {
    std::vector<u64> counts(Q);
    for (int q = 0; q < Q; q++) {
      const int pick = rand() % 4;
      counts[q] = pick == 0 ? 1 + rand() % 8 : pick == 1 ? 1 + rand() % 300 : pick == 2 ? 1 + rand() % 4096 : maxCount - rand() % 3;
      for (unsigned r = 0; r < n; r++) {
        for (u64 i = 0; i < counts[q]; i++) h[i] = (float)((base + q) * 3 + r * 7 + (i % 13));
        CK(cudaMemcpy(in[r * Q + q], h.data(), counts[q] * 4, cudaMemcpyHostToDevice));
      }
    }
    // Half the queue eagerly, half captured in a graph per rank and replayed (the epoch is read at run time).
    const bool graph = (base / Q) % 2 == 1;
    std::vector<cudaGraphExec_t> ex(n);
    for (unsigned r = 0; r < n; r++) {
      if (graph) CK(cudaStreamBeginCapture(R[r].s, cudaStreamCaptureModeThreadLocal));
      for (int q = 0; q < Q; q++) {
        const u64 c = counts[q];
        const int grid = std::min<u64>(16, (c * 4 + 4095) / 4096);
        smcuda_lloneshot_f32<<<grid, 512, 0, R[r].s>>>(out[r * Q + q], in[r * Q + q], R[r].bufs, 0, r, n, c, 0, LAND, SLOT, 1.0);
      }
      if (graph) {
        cudaGraph_t g;
        CK(cudaStreamEndCapture(R[r].s, &g));
        CK(cudaGraphInstantiate(&ex[r], g, 0));
        CK(cudaGraphLaunch(ex[r], R[r].s));
      }
    }
    for (unsigned r = 0; r < n; r++) CK(cudaStreamSynchronize(R[r].s));
    CK(cudaGetLastError());
    for (int q = 0; q < Q; q++)
      for (unsigned r = 0; r < n; r++) {
        CK(cudaMemcpy(got.data(), out[r * Q + q], counts[q] * 4, cudaMemcpyDeviceToHost));
        for (u64 i = 0; i < counts[q]; i++) {
          float want = 0;
          for (unsigned k = 0; k < n; k++) want += (float)((base + q) * 3 + k * 7 + (i % 13));
          if (got[i] != want) { if (bad < 5) printf("bad it %d rank %u i %llu got %f want %f\n", base + q, r, i, got[i], want); bad++; }
          checked++;
        }
      }
  }
  printf("n=%u iters=%d checked=%ld bad=%ld\n", n, iters, checked, bad);
  // In place, and timing: back to back 8 B (2 floats) eager, per op.
  {
    const int N = 20000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; i++)
      for (unsigned r = 0; r < n; r++) smcuda_lloneshot_f32<<<1, 512, 0, R[r].s>>>(in[r * Q], in[r * Q], R[r].bufs, 0, r, n, 2, 0, LAND, SLOT, 1.0);
    for (unsigned r = 0; r < n; r++) CK(cudaStreamSynchronize(R[r].s));
    auto t1 = std::chrono::steady_clock::now();
    printf("eager back to back, 8 B: %.2f us per op (both ranks launched from one thread)\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / N);
  }
  // Per op inside one graph of G launches per rank (no host launch cost): the LL one-shot against the
  // one-shot (smcuda_oneshot_f32, its own scratch: flag area, then its landing slots), at 8 B and 64 KiB.
  {
    const u64 OS_LAND = 64 * 1024, OS_SLOT = 64 * 1024;
    std::vector<char *> os(n);
    std::vector<char **> osBufs(n);
    for (unsigned r = 0; r < n; r++) {
      CK(cudaMalloc(&os[r], OS_LAND + 2 * n * OS_SLOT));
      CK(cudaMemset(os[r], 0, OS_LAND + 2 * n * OS_SLOT));
    }
    for (unsigned r = 0; r < n; r++) {
      CK(cudaMalloc(&osBufs[r], 8 * n));
      CK(cudaMemcpy(osBufs[r], os.data(), 8 * n, cudaMemcpyHostToDevice));
    }
    const int G = 1000;
    for (const u64 count : {2ull, 16384ull}) {
      for (int ll = 1; ll >= 0; ll--) {
        std::vector<cudaGraphExec_t> ex(n);
        const int grid = ll ? (int)std::min<u64>(16, (count * 4 + 4095) / 4096) : (int)std::min<u64>(512, (count * 4 + 8191) / 8192);
        for (unsigned r = 0; r < n; r++) {
          CK(cudaStreamBeginCapture(R[r].s, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < G; i++)
            if (ll) smcuda_lloneshot_f32<<<grid, 512, 0, R[r].s>>>(out[r * Q], in[r * Q], R[r].bufs, 0, r, n, count, 0, LAND, SLOT, 1.0);
            else smcuda_oneshot_f32<<<grid, 512, 0, R[r].s>>>(out[r * Q], in[r * Q], osBufs[r], 0, r, n, count, 0, OS_LAND, OS_SLOT, 1.0);
          cudaGraph_t g;
          CK(cudaStreamEndCapture(R[r].s, &g));
          CK(cudaGraphInstantiate(&ex[r], g, 0));
        }
        for (int rep = 0; rep < 3; rep++) {
          auto t0 = std::chrono::steady_clock::now();
          for (unsigned r = 0; r < n; r++) CK(cudaGraphLaunch(ex[r], R[r].s));
          for (unsigned r = 0; r < n; r++) CK(cudaStreamSynchronize(R[r].s));
          auto t1 = std::chrono::steady_clock::now();
          if (rep > 0) printf("in a graph, %s %llu B: %.2f us per op\n", ll ? "LL one-shot" : "one-shot   ", count * 4, std::chrono::duration<double, std::micro>(t1 - t0).count() / G);
        }
      }
    }
  }
  // Poison: rank 0 alone waits; writing its poison word ends the wait.
  {
    smcuda_lloneshot_f32<<<1, 512, 0, R[0].s>>>(out[0], in[0], R[0].bufs, 0, 0, n, 100, 0, LAND, SLOT, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const bool waiting = cudaStreamQuery(R[0].s) == cudaErrorNotReady;
    cudaStream_t ps;
    CK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
    const u64 poison = 1ull << 62;
    CK(cudaMemcpyAsync(R[0].scratch + 16, &poison, 8, cudaMemcpyHostToDevice, ps));
    CK(cudaStreamSynchronize(ps));
    auto t0 = std::chrono::steady_clock::now();
    while (cudaStreamQuery(R[0].s) == cudaErrorNotReady && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {}
    printf("poison: waiting before=%d, released=%d\n", waiting, cudaStreamQuery(R[0].s) == cudaSuccess);
  }
  return bad != 0;
}
