// The physical floor of a point-to-point message, measured with no JavaScript
// in the loop (the bench's `floor` figures, src/bench/native-floor.ts).
//
// Two processes share a small host segment holding one 64-bit flag per rank
// (each on its own cache line). A C++ thread in each process runs the same
// RGET ping-pong smcuda does, with nothing else around it:
//
//   rank 1 (initiator)                      rank 0 (responder)
//   flag1 = k            ─────────────────▶ spins until flag1 >= k
//                                           copy `size` bytes from rank 1's
//                                           buffer (open IPC mapping), record
//                                           an event, spin on cuEventQuery
//   spins until flag0 >= k ◀─────────────── flag0 = k
//   copy from rank 0's buffer, event, spin
//   sample = (now - t0) / 2                 (one half round trip)
//
// Without a device (`device` < 0: the simulated driver) the copy is a host
// memcpy between two areas of the same segment, so the floor is the control
// hand-off between two processes spinning on shared flags plus a memcpy.
//
// Either side that fails or waits longer than `timeoutMs` for its peer
// writes kAbort into its flag, so the other gives up at once instead of
// spinning until its own timeout.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "addon.h"
#include "cuda_api.h"

namespace smcuda {
namespace {

constexpr uint64_t kAbort = ~0ull;
constexpr size_t kFlagStride = 64;        // one cache line per flag
constexpr size_t kHeaderBytes = 2 * kFlagStride;

struct FloorJob {
  int role = 0;          // 1 initiates and times
  int device = -1;       // < 0: no CUDA (host memcpy inside the segment)
  uint64_t local = 0;    // CUdeviceptr of this rank's buffer
  uint64_t peer = 0;     // CUdeviceptr of the peer's buffer, opened here
  size_t size = 0;
  size_t iters = 0;
  size_t warmup = 0;
  double timeoutMs = 10000;
  char* segment = nullptr;  // kHeaderBytes, then (without CUDA) two areas of `size`
};

using Clock = std::chrono::steady_clock;

uint64_t* Flag(char* segment, int rank) { return reinterpret_cast<uint64_t*>(segment + rank * kFlagStride); }

class FloorWorker : public Napi::AsyncWorker {
 public:
  FloorWorker(Napi::Env env, FloorJob job, Napi::ArrayBuffer keep)
      : Napi::AsyncWorker(env), job_(job), deferred_(Napi::Promise::Deferred::New(env)) {
    keep_ = Napi::Persistent(keep.As<Napi::Object>());
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    const bool cuda = job_.device >= 0;
    const DriverTable& fn = Driver().fn;
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    CUstream stream = nullptr;
    CUevent event = nullptr;
    // Set-up in order; clean-up in reverse, whatever failed.
    bool ready = !cuda || (Check(fn.cuDeviceGet(&dev, job_.device), "cuDeviceGet") &&
                           Check(fn.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") &&
                           Check(fn.cuCtxSetCurrent(ctx), "cuCtxSetCurrent") &&
                           Check(fn.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") &&
                           Check(fn.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
    if (ready) Loop(cuda, stream, event);
    if (!error_.empty()) Abort();
    if (event) fn.cuEventDestroy(event);
    if (stream) fn.cuStreamDestroy(stream);
    if (ctx) fn.cuDevicePrimaryCtxRelease(dev);
    if (!error_.empty()) SetError(error_);
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Float64Array out = Napi::Float64Array::New(env, samples_.size());
    for (size_t i = 0; i < samples_.size(); i++) out[i] = samples_[i];
    deferred_.Resolve(out);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  bool Check(CUresult r, const char* call) {
    if (r == CUDA_SUCCESS) return true;
    if (error_.empty()) error_ = std::string(call) + " failed: " + CuErrorName(r);
    return false;
  }

  void Abort() { __atomic_store_n(Flag(job_.segment, job_.role), kAbort, __ATOMIC_RELEASE); }

  // Spins until the peer's flag reaches k; false on abort or timeout.
  bool WaitPeer(uint64_t k) {
    uint64_t* f = Flag(job_.segment, 1 - job_.role);
    const auto deadline = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(job_.timeoutMs * 1000));
    for (uint32_t spins = 0;; spins++) {
      uint64_t v = __atomic_load_n(f, __ATOMIC_ACQUIRE);
      if (v == kAbort) {
        error_ = "the peer of the native floor gave up";
        return false;
      }
      if (v >= k) return true;
      if ((spins & 4095) == 0 && Clock::now() > deadline) {
        error_ = "the peer of the native floor did not answer within " + std::to_string(static_cast<long long>(job_.timeoutMs)) + " ms";
        return false;
      }
    }
  }

  // One RGET: read the peer's buffer into ours and wait until it is done.
  bool Copy(bool cuda, CUstream stream, CUevent event) {
    if (!cuda) {
      char* data = job_.segment + kHeaderBytes;
      std::memcpy(data + job_.role * job_.size, data + (1 - job_.role) * job_.size, job_.size);
      return true;
    }
    const DriverTable& fn = Driver().fn;
    if (!Check(fn.cuMemcpyAsync(job_.local, job_.peer, job_.size, stream), "cuMemcpyAsync")) return false;
    if (!Check(fn.cuEventRecord(event, stream), "cuEventRecord")) return false;
    for (;;) {
      CUresult r = fn.cuEventQuery(event);
      if (r == CUDA_SUCCESS) return true;
      if (r != CUDA_ERROR_NOT_READY) return Check(r, "cuEventQuery");
    }
  }

  void Loop(bool cuda, CUstream stream, CUevent event) {
    uint64_t* mine = Flag(job_.segment, job_.role);
    const size_t total = job_.warmup + job_.iters;
    samples_.reserve(job_.role == 1 ? job_.iters : 0);
    for (size_t i = 0; i < total; i++) {
      const uint64_t k = i + 1;
      if (job_.role == 1) {
        auto t0 = Clock::now();
        __atomic_store_n(mine, k, __ATOMIC_RELEASE);
        if (!WaitPeer(k) || !Copy(cuda, stream, event)) return;
        auto t1 = Clock::now();
        if (i >= job_.warmup) samples_.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
      } else {
        if (!WaitPeer(k) || !Copy(cuda, stream, event)) return;
        __atomic_store_n(mine, k, __ATOMIC_RELEASE);
      }
    }
  }

  FloorJob job_;
  Napi::Promise::Deferred deferred_;
  Napi::ObjectReference keep_;  // the segment's ArrayBuffer stays mapped while the thread uses it
  std::vector<double> samples_;
  std::string error_;
};

bool GetNumber(Napi::Object o, const char* key, double* out) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) {
    Napi::TypeError::New(o.Env(), std::string("floorPingPong: options.") + key + " must be a Number")
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = v.As<Napi::Number>().DoubleValue();
  return true;
}

bool GetPtr(Napi::Object o, const char* key, uint64_t* out) {
  Napi::Value v = o.Get(key);
  if (!v.IsBigInt()) {
    Napi::TypeError::New(o.Env(), std::string("floorPingPong: options.") + key + " must be a BigInt")
        .ThrowAsJavaScriptException();
    return false;
  }
  bool lossless = false;
  *out = v.As<Napi::BigInt>().Uint64Value(&lossless);
  return true;
}

// floorPingPong(segment: ArrayBuffer, offset, { role, device, local, peer, size, iters, warmup, timeoutMs })
//   -> Promise<Float64Array>: rank 1's half round trips in µs (rank 0: empty).
Napi::Value FloorPingPong(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsArrayBuffer() || !info[1].IsNumber() || !info[2].IsObject()) {
    Napi::TypeError::New(env, "floorPingPong(segment: ArrayBuffer, offset: number, options: object)")
        .ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  Napi::Object o = info[2].As<Napi::Object>();
  double offset = info[1].As<Napi::Number>().DoubleValue();
  double role = 0, device = 0, size = 0, iters = 0, warmup = 0, timeoutMs = 0;
  FloorJob job;
  if (!GetNumber(o, "role", &role) || !GetNumber(o, "device", &device) || !GetNumber(o, "size", &size) ||
      !GetNumber(o, "iters", &iters) || !GetNumber(o, "warmup", &warmup) || !GetNumber(o, "timeoutMs", &timeoutMs))
    return Napi::Value();
  if ((role != 0 && role != 1) || size < 0 || iters < 0 || warmup < 0 || offset < 0 || timeoutMs <= 0) {
    Napi::RangeError::New(env, "floorPingPong: role must be 0 or 1; size, iters, warmup, offset >= 0; timeoutMs > 0")
        .ThrowAsJavaScriptException();
    return Napi::Value();
  }
  job.role = static_cast<int>(role);
  job.device = device < 0 ? -1 : static_cast<int>(device);
  job.size = static_cast<size_t>(size);
  job.iters = static_cast<size_t>(iters);
  job.warmup = static_cast<size_t>(warmup);
  job.timeoutMs = timeoutMs;
  const size_t need = kHeaderBytes + (job.device < 0 ? 2 * job.size : 0);
  const size_t off = static_cast<size_t>(offset);
  if (off % 64 != 0 || off > ab.ByteLength() || need > ab.ByteLength() - off) {
    Napi::RangeError::New(env, "floorPingPong: the segment needs " + std::to_string(need) +
                                   " bytes at a 64-byte aligned offset")
        .ThrowAsJavaScriptException();
    return Napi::Value();
  }
  job.segment = static_cast<char*>(ab.Data()) + off;
  if (job.device >= 0) {
    SMCUDA_REQUIRE_DRIVER(env, "floorPingPong");
    if (!GetPtr(o, "local", &job.local) || !GetPtr(o, "peer", &job.peer)) return Napi::Value();
  }
  auto* w = new FloorWorker(env, job, ab);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace

void InitFloor(Napi::Env env, Napi::Object exports) {
  exports.Set("floorPingPong", Napi::Function::New(env, FloorPingPong, "floorPingPong"));
}

}  // namespace smcuda
