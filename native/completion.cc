// Event completion -> Promise, without blocking the event loop and without
// parking a libuv pool thread per pending event.
//
// Design: one Poller per addon instance (per Node environment: the main
// thread and each worker get their own). It owns
//   - one poller thread, started on the first whenEventComplete (and again
//     after completionShutdown), which holds the pending list;
//   - one thread-safe function (TSFN) through which the thread settles
//     promises on the JS thread, in batches.
//
// The poller thread: sets each pending event's context current (only when it
// changes), cuEventQuery's every pending event; spins for a budget after the
// last progress (default 20 ms, SMCUDA_POLL_SPIN_US), then sleeps with a
// doubling backoff from kMinSleep to kMaxSleep, and blocks on a condition
// variable when nothing is pending.
//
// Why spin that long: a 256 MiB or 1 GiB copy over NVLink takes about a
// millisecond or more; a poller already asleep wakes up to a sleep (plus timer slack)
// late, and that lateness is added to every large message (measured on
// 2×H200: 50 µs spin + 200 µs sleeps cost 40% of the bandwidth at 256 MiB).
// A transport with work in flight spinning one core is the usual trade
// (UCX and NCCL progress threads do the same); idle, it costs nothing.
//
// Clients: each CUDA driver object of an environment opens its own client
// (completionOpen) and passes it with every wait. completionClose(client)
// rejects that client's waits only (SMCUDA_CLOSED), and on return the poller
// thread no longer touches their events, so the caller may destroy them and
// release their context; other clients' waits go on. The thread stops when
// the last client closes with nothing else pending, and starts again on the
// next wait. Client 0 is the anonymous one (raw addon calls without a client).
// completionShutdown stops everything, for every client.
//
// Process exit: the TSFN is ref'd only while promises are outstanding, so an
// idle poller never keeps Node alive. Environment teardown (a cleanup hook)
// stops and joins the thread. No napi instance data is used: that slot is one
// per addon and shared with other files; the Poller travels as function data.
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <algorithm>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "addon.h"
#include "cuda_api.h"

namespace smcuda {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDefaultSpin = std::chrono::microseconds(20000);
constexpr auto kMinSleep = std::chrono::microseconds(10);
constexpr auto kMaxSleep = std::chrono::microseconds(50);

// The spin budget: SMCUDA_POLL_SPIN_US overrides the default (0: sleep at once).
std::chrono::microseconds SpinBudget() {
  const char* v = std::getenv("SMCUDA_POLL_SPIN_US");
  if (!v || !*v) return kDefaultSpin;
  char* end = nullptr;
  long long us = std::strtoll(v, &end, 10);
  if (*end != '\0' || us < 0) return kDefaultSpin;
  return std::chrono::microseconds(us);
}

struct Pending {
  CUevent event;
  CUcontext ctx;
  Napi::Promise::Deferred* deferred;
  uint32_t client;  // who waits (completionOpen); 0: anonymous
};

// One settled event, computed on the poller thread, delivered on the JS thread.
struct Done {
  Napi::Promise::Deferred* deferred;
  CUresult result;
  const char* call;  // the driver call that failed (static string)
  std::string code;
  std::string detail;
};
using Batch = std::vector<Done>;

class Poller;
void Deliver(Napi::Env env, Napi::Function, Poller* poller, Batch* batch);
using Tsfn = Napi::TypedThreadSafeFunction<Poller, Batch, Deliver>;

class Poller {
 public:
  explicit Poller(Napi::Env env) {
    tsfn_ = Tsfn::New(env, "smcuda.whenEventComplete", 0 /* unbounded queue */, 1, this);
    tsfn_.Unref(env);
  }

  // JS thread: a new client id (never 0).
  uint32_t Open() {
    ++clients_;
    if (++lastClient_ == 0) ++lastClient_;
    return lastClient_;
  }

  // JS thread: rejects `client`'s waits with SMCUDA_CLOSED; once this returns,
  // the thread no longer queries their events. Stops the thread when no
  // client is left and nothing else is pending.
  void Close(Napi::Env env, uint32_t client) {
    std::vector<Pending> mine;
    {
      std::unique_lock<std::mutex> lock(mu_);
      TakeClient(&incoming_, client, &mine);
      TakeClient(&returned_, client, &mine);
      if (thread_.joinable()) {
        // The thread holds its watch list outside the lock: ask it to hand
        // this client's entries back, and wait (at most one pass).
        removing_.push_back(client);
        cv_.notify_all();
        removed_.wait(lock, [&] { return std::find(removing_.begin(), removing_.end(), client) == removing_.end(); });
        TakeClient(&returned_, client, &mine);
      }
    }
    Reject(env, mine, "whenEventComplete: the driver that waited for this event was closed before it completed");
    if (clients_ > 0) --clients_;
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = clients_ == 0 && incoming_.empty() && watchingCount_ == 0;
    }
    if (idle && thread_.joinable()) {
      std::vector<Pending> left = StopThread();  // nothing: checked above, but settle whatever raced in
      Reject(env, left, "whenEventComplete: the completion poller was shut down before the event completed");
    }
  }

  // JS thread.
  Napi::Value Watch(Napi::Env env, CUevent event, CUcontext ctx, uint32_t client) {
    if (!thread_.joinable()) {
      stop_ = false;
      try {
        thread_ = std::thread(&Poller::Run, this);
      } catch (const std::system_error& e) {  // out of threads: say so rather than terminate
        Napi::Error err = Napi::Error::New(env, std::string("whenEventComplete: cannot start the poller thread: ") + e.what());
        err.Set("code", Napi::String::New(env, "SMCUDA_THREAD"));
        err.ThrowAsJavaScriptException();
        return Napi::Value();
      }
    }
    auto* d = new Napi::Promise::Deferred(env);
    Napi::Promise promise = d->Promise();
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming_.push_back(Pending{event, ctx, d, client});
    }
    cv_.notify_one();
    if (outstanding_++ == 0) tsfn_.Ref(env);
    return promise;
  }

  // JS thread: stops the thread; rejects what is still pending with SMCUDA_CLOSED.
  // Settlements already handed to the TSFN are still delivered.
  void Shutdown(Napi::Env env) {
    std::vector<Pending> left = StopThread();
    Reject(env, left, "whenEventComplete: the completion poller was shut down (completionShutdown) before the event completed");
  }

  // Environment teardown: JS can no longer run, so nothing is settled.
  void Teardown() {
    for (Pending& p : StopThread()) delete p.deferred;
  }

  // JS thread: `n` promises were settled.
  void Settled(Napi::Env env, size_t n) {
    outstanding_ -= n;
    if (n > 0 && outstanding_ == 0) tsfn_.Unref(env);
  }

 private:
  static void TakeClient(std::vector<Pending>* from, uint32_t client, std::vector<Pending>* to) {
    auto keep = std::stable_partition(from->begin(), from->end(), [&](const Pending& p) { return p.client != client; });
    to->insert(to->end(), keep, from->end());
    from->erase(keep, from->end());
  }

  // JS thread: rejects `left` with SMCUDA_CLOSED and `message`.
  void Reject(Napi::Env env, std::vector<Pending>& left, const char* message) {
    for (Pending& p : left) {
      Napi::Error e = Napi::Error::New(env, message);
      e.Set("code", Napi::String::New(env, "SMCUDA_CLOSED"));
      p.deferred->Reject(e.Value());
      delete p.deferred;
    }
    Settled(env, left.size());
  }

  // Signals, joins, and returns every pending item (the thread hands its list back).
  std::vector<Pending> StopThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Pending> left = std::move(returned_);
    left.insert(left.end(), incoming_.begin(), incoming_.end());
    returned_.clear();
    incoming_.clear();
    removing_.clear();
    watchingCount_ = 0;
    removed_.notify_all();
    return left;
  }

  void Run() {
    const DriverTable& fn = Driver().fn;
    std::vector<Pending> watching;
    CUcontext current = nullptr;
    bool haveCurrent = false;
    Clock::time_point lastProgress = Clock::now();
    auto sleep = std::chrono::microseconds(0);
    const auto spin = SpinBudget();

    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (watching.empty()) cv_.wait(lock, [&] { return stop_ || !incoming_.empty() || !removing_.empty(); });
        if (stop_) {
          returned_.insert(returned_.end(), watching.begin(), watching.end());
          return;
        }
        if (!removing_.empty()) {  // closed clients: their events are no longer ours to query
          for (uint32_t c : removing_) TakeClient(&watching, c, &returned_);
          removing_.clear();
          removed_.notify_all();
        }
        if (!incoming_.empty()) {
          watching.insert(watching.end(), incoming_.begin(), incoming_.end());
          incoming_.clear();
          lastProgress = Clock::now();  // new work: spin for it first
          sleep = std::chrono::microseconds(0);
        }
        watchingCount_ = watching.size();
      }

      Batch* batch = nullptr;
      for (size_t i = 0; i < watching.size();) {
        Pending& p = watching[i];
        const char* call = "cuEventQuery";
        CUresult r = CUDA_SUCCESS;
        if (!haveCurrent || p.ctx != current) {
          r = fn.cuCtxSetCurrent(p.ctx);
          if (r == CUDA_SUCCESS) {
            current = p.ctx;
            haveCurrent = true;
          } else {
            call = "cuCtxSetCurrent";
          }
        }
        if (r == CUDA_SUCCESS) r = fn.cuEventQuery(p.event);
        if (r == CUDA_ERROR_NOT_READY) {
          ++i;
          continue;
        }
        if (!batch) batch = new Batch();
        batch->push_back(Done{p.deferred, r, call, r ? CuErrorName(r) : "", r ? CuErrorString(r) : ""});
        watching[i] = watching.back();  // order among pending events does not matter
        watching.pop_back();
      }

      if (batch) {
        if (tsfn_.NonBlockingCall(batch) != napi_ok) {
          // Only while the environment is closing: nobody is left to tell.
          for (Done& d : *batch) delete d.deferred;
          delete batch;
        }
        lastProgress = Clock::now();
        sleep = std::chrono::microseconds(0);
        continue;
      }
      if (watching.empty() || Clock::now() - lastProgress < spin) continue;
      sleep = sleep.count() == 0 ? kMinSleep : std::min(sleep * 2, kMaxSleep);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, sleep, [&] { return stop_ || !incoming_.empty() || !removing_.empty(); });
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> incoming_;  // guarded by mu_: watched next pass
  std::vector<Pending> returned_;  // guarded by mu_: handed back by a stopping thread or for a closed client
  std::vector<uint32_t> removing_;  // guarded by mu_: clients whose entries the thread must hand back
  std::condition_variable removed_;  // the thread handed them back
  size_t watchingCount_ = 0;       // guarded by mu_: the thread's list, as of its last pass
  bool stop_ = false;              // guarded by mu_
  size_t clients_ = 0;             // JS thread only: clients open
  uint32_t lastClient_ = 0;        // JS thread only
  std::thread thread_;
  Tsfn tsfn_;
  size_t outstanding_ = 0;  // JS thread only: promises not yet settled
};

void Deliver(Napi::Env env, Napi::Function, Poller* poller, Batch* batch) {
  if (env == nullptr) {  // the TSFN is being torn down with the environment
    for (Done& d : *batch) delete d.deferred;
    delete batch;
    return;
  }
  for (Done& d : *batch) {
    if (d.result == CUDA_SUCCESS) {
      d.deferred->Resolve(env.Undefined());
    } else {
      d.deferred->Reject(CuError(env, d.call, d.result, d.code, d.detail).Value());
    }
    delete d.deferred;
  }
  size_t n = batch->size();
  delete batch;
  poller->Settled(env, n);
}

Napi::Value WhenEventComplete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "whenEventComplete");
  if (!info[0].IsBigInt() || !info[1].IsBigInt()) {
    Napi::TypeError::New(env, "whenEventComplete(event, ctx): both must be BigInt handles").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  bool lossless = false;
  uint64_t event = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  uint64_t ctx = lossless ? info[1].As<Napi::BigInt>().Uint64Value(&lossless) : 0;
  if (!lossless) {
    Napi::RangeError::New(env, "whenEventComplete(event, ctx): handles must fit in 64 unsigned bits")
        .ThrowAsJavaScriptException();
    return Napi::Value();
  }
  uint32_t client = 0;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    double c = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : -1;
    if (!(c >= 0 && c <= 4294967295.0) || c != static_cast<double>(static_cast<uint32_t>(c))) {
      Napi::TypeError::New(env, "whenEventComplete(event, ctx, client): client must come from completionOpen")
          .ThrowAsJavaScriptException();
      return Napi::Value();
    }
    client = static_cast<uint32_t>(c);
  }
  auto* poller = static_cast<Poller*>(info.Data());
  return poller->Watch(env, reinterpret_cast<CUevent>(static_cast<uintptr_t>(event)),
                       reinterpret_cast<CUcontext>(static_cast<uintptr_t>(ctx)), client);
}

Napi::Value CompletionOpen(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<Poller*>(info.Data())->Open());
}

Napi::Value CompletionClose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  double c = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(c >= 1 && c <= 4294967295.0) || c != static_cast<double>(static_cast<uint32_t>(c))) {
    Napi::TypeError::New(env, "completionClose(client): client must come from completionOpen").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  static_cast<Poller*>(info.Data())->Close(env, static_cast<uint32_t>(c));
  return env.Undefined();
}

Napi::Value CompletionShutdown(const Napi::CallbackInfo& info) {
  static_cast<Poller*>(info.Data())->Shutdown(info.Env());
  return info.Env().Undefined();
}

}  // namespace

void InitCompletion(Napi::Env env, Napi::Object exports) {
  auto* poller = new Poller(env);
  // Registered after the TSFN exists, so it runs before the TSFN's own
  // teardown (cleanup hooks run in reverse order): the thread is joined
  // while the TSFN is still valid.
  env.AddCleanupHook([poller] {
    poller->Teardown();
    delete poller;
  });
  exports.Set("whenEventComplete", Napi::Function::New(env, WhenEventComplete, "whenEventComplete", poller));
  exports.Set("completionShutdown", Napi::Function::New(env, CompletionShutdown, "completionShutdown", poller));
  exports.Set("completionOpen", Napi::Function::New(env, CompletionOpen, "completionOpen", poller));
  exports.Set("completionClose", Napi::Function::New(env, CompletionClose, "completionClose", poller));
}

}  // namespace smcuda
