// NCCL, dlopen'ed at run time as libcuda is, and one JS function per NCCL
// call. Where to look is TypeScript's choice (src/nccl/nccl-library.ts): it
// hands ncclLoad the candidate files in order, and the first that loads and
// has every required entry point stays loaded for the life of the process.
// Arguments are checked only enough that a wrong type can never become a
// wild pointer; src/nccl/nccl.ts validates them with good messages, and maps
// the results to typed errors.
//
// Results: a call returns its ncclResult_t when it is ncclSuccess or
// ncclInProgress (a non-blocking communicator still working), and throws an
// Error carrying `call`, `result`, `detail` (ncclGetErrorString) and
// `lastError` (ncclGetLastError, where NCCL has it) otherwise.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "addon.h"
#include "args.h"
#include "nccl_api.h"

namespace smcuda {
namespace {

using namespace args;

struct NcclState {
  void* lib = nullptr;
  std::string path;
  int version = 0;
  NcclTable fn;
};

std::mutex gLoadMutex;
NcclState gNccl;  // set once, under gLoadMutex, then only read

Napi::Error NcclError(Napi::Env env, const char* call, ncclResult_t r, ncclComm_t comm) {
  std::string detail = gNccl.fn.getErrorString ? gNccl.fn.getErrorString(r) : "";
  std::string last;
  if (gNccl.fn.getLastError) {
    const char* s = gNccl.fn.getLastError(comm);
    if (s) last = s;
  }
  std::string msg = std::string(call) + " failed: ncclResult_t " + std::to_string(r);
  if (!detail.empty()) msg += ": " + detail;
  if (!last.empty()) msg += " (" + last + ")";
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("call", Napi::String::New(env, call));
  e.Set("result", Napi::Number::New(env, r));
  e.Set("detail", Napi::String::New(env, detail));
  e.Set("lastError", Napi::String::New(env, last));
  return e;
}

// The one checking macro: returns the result to JS, or throws on a failure.
#define SMCUDA_NCCL(env, call, comm, field, ...)                                             \
  do {                                                                                       \
    ncclResult_t r_ = gNccl.fn.field(__VA_ARGS__);                                           \
    if (r_ != kNcclSuccess && r_ != kNcclInProgress) {                                       \
      NcclError(env, call, r_, comm).ThrowAsJavaScriptException();                           \
      return Napi::Value();                                                                  \
    }                                                                                        \
    return Napi::Number::New(env, r_);                                                       \
  } while (0)

// Refuses a call before NCCL is loaded, or one whose optional entry point it lacks.
bool Have(const Napi::CallbackInfo& info, const void* fn, const char* name) {
  if (gNccl.lib && fn) return true;
  Napi::Error e = Napi::Error::New(info.Env(), std::string(name) + ": " +
                                                   (gNccl.lib ? "the loaded NCCL does not have it"
                                                              : "NCCL is not loaded (ncclLoad first)"));
  e.Set("code", Napi::String::New(info.Env(), gNccl.lib ? "SMCUDA_NCCL_UNSUPPORTED" : "SMCUDA_NCCL_UNAVAILABLE"));
  e.ThrowAsJavaScriptException();
  return false;
}
#define HAVE(field, name) \
  if (!Have(info, reinterpret_cast<const void*>(gNccl.fn.field), name)) return Napi::Value()

// A signed int (colors and keys may be negative).
bool ArgI32(const Napi::CallbackInfo& info, size_t i, const char* name, int* out) {
  if (!info[i].IsNumber()) {
    Napi::TypeError::New(info.Env(), std::string(name) + " must be a Number").ThrowAsJavaScriptException();
    return false;
  }
  double v = info[i].As<Napi::Number>().DoubleValue();
  if (!(v >= INT_MIN && v <= INT_MAX) || v != static_cast<double>(static_cast<int>(v))) {
    Napi::RangeError::New(info.Env(), std::string(name) + " must be an int32").ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}
#define ARG_I32(var, i) \
  int var = 0;          \
  if (!ArgI32(info, i, #var, &var)) return Napi::Value()

// The config's settable fields, as an Int32Array: blocking, cgaClusterSize,
// minCTAs, maxCTAs, splitShare (INT_MIN: NCCL's default).
bool ArgConfig(const Napi::CallbackInfo& info, size_t i, ncclConfig_t* out) {
  int32_t* v = nullptr;
  if (!ArgTyped<int32_t>(info, i, napi_int32_array, 5, "config", &v)) return false;
  *out = NcclConfigInitializer();
  out->blocking = v[0];
  out->cgaClusterSize = v[1];
  out->minCTAs = v[2];
  out->maxCTAs = v[3];
  out->splitShare = v[4];
  return true;
}

// Tries one file; on success fills `s`, else returns why not.
std::string TryLoad(const std::string& path, NcclState* s) {
  dlerror();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    return err ? err : "dlopen failed";
  }
  NcclTable fn;
  std::string missing;
#define SMCUDA_NCCL_REQUIRED(field, name, ret, params)                        \
  fn.field = reinterpret_cast<ret(*) params>(dlsym(lib, name));               \
  if (!fn.field && missing.empty()) missing = name;
  SMCUDA_NCCL_FUNCTIONS(SMCUDA_NCCL_REQUIRED)
#undef SMCUDA_NCCL_REQUIRED
  if (!missing.empty()) {
    dlclose(lib);
    return "loaded, but it has no " + missing + ": not an NCCL of 2.14 or newer";
  }
#define SMCUDA_NCCL_OPTIONAL(field, name, ret, params) fn.field = reinterpret_cast<ret(*) params>(dlsym(lib, name));
  SMCUDA_NCCL_OPTIONAL_FUNCTIONS(SMCUDA_NCCL_OPTIONAL)
#undef SMCUDA_NCCL_OPTIONAL
  int version = 0;
  ncclResult_t r = fn.getVersion(&version);
  if (r != kNcclSuccess) {
    dlclose(lib);
    return "ncclGetVersion failed with ncclResult_t " + std::to_string(r);
  }
  s->lib = lib;
  s->path = path;
  s->version = version;
  s->fn = fn;
  return "";
}

Napi::Object Status(Napi::Env env) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("loaded", Napi::Boolean::New(env, gNccl.lib != nullptr));
  if (!gNccl.lib) return out;
  out.Set("path", Napi::String::New(env, gNccl.path));
  out.Set("version", Napi::Number::New(env, gNccl.version));
  Napi::Object symbols = Napi::Object::New(env);
#define SMCUDA_NCCL_SYMBOL(field, name, ret, params) symbols.Set(name, Napi::Boolean::New(env, gNccl.fn.field != nullptr));
  SMCUDA_NCCL_OPTIONAL_FUNCTIONS(SMCUDA_NCCL_SYMBOL)
#undef SMCUDA_NCCL_SYMBOL
  out.Set("symbols", symbols);
  return out;
}

// ncclLoad(candidates: string[]): the state, with `tried` (each file's
// failure) when this call had to load. Once loaded, the candidates are ignored.
Napi::Value Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) {
    Napi::TypeError::New(env, "candidates must be an Array of strings").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::Array list = info[0].As<Napi::Array>();
  std::vector<std::string> paths;
  for (uint32_t i = 0; i < list.Length(); i++) {
    Napi::Value v = list.Get(i);
    if (!v.IsString()) {
      Napi::TypeError::New(env, "candidates must be an Array of strings").ThrowAsJavaScriptException();
      return Napi::Value();
    }
    paths.push_back(v.As<Napi::String>().Utf8Value());
  }
  std::lock_guard<std::mutex> lock(gLoadMutex);
  Napi::Array tried = Napi::Array::New(env);
  if (!gNccl.lib) {
    for (const std::string& p : paths) {
      NcclState s;
      std::string why = TryLoad(p, &s);
      if (why.empty()) {
        gNccl = s;
        break;
      }
      Napi::Object t = Napi::Object::New(env);
      t.Set("path", Napi::String::New(env, p));
      t.Set("error", Napi::String::New(env, why));
      tried.Set(tried.Length(), t);
    }
  }
  Napi::Object out = Status(env);
  out.Set("tried", tried);
  return out;
}

Napi::Value GetUniqueId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(getUniqueId, "ncclGetUniqueId");
  ncclUniqueId id;
  ncclResult_t r = gNccl.fn.getUniqueId(&id);
  if (r != kNcclSuccess) {
    NcclError(env, "ncclGetUniqueId", r, nullptr).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::ArrayBuffer out = Napi::ArrayBuffer::New(env, sizeof id.internal);
  memcpy(out.Data(), id.internal, sizeof id.internal);
  return out;
}

// { comm, result }: a non-blocking init hands out the communicator at once
// with ncclInProgress; ncclCommGetAsyncError says when it is ready.
Napi::Value CommResult(Napi::Env env, ncclComm_t comm, ncclResult_t r) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("comm", Big(env, comm));
  out.Set("result", Napi::Number::New(env, r));
  return out;
}

Napi::Value CommInitRankConfig(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commInitRankConfig, "ncclCommInitRankConfig");
  ARG_INT(nranks, 0);
  void* idBytes = nullptr;
  if (!ArgHostRange(info, 1, 0, sizeof(ncclUniqueId), "id", &idBytes)) return Napi::Value();
  ARG_INT(rank, 2);
  ncclConfig_t config;
  if (!ArgConfig(info, 3, &config)) return Napi::Value();
  ncclUniqueId id;
  memcpy(id.internal, idBytes, sizeof id.internal);
  ncclComm_t comm = nullptr;
  ncclResult_t r = gNccl.fn.commInitRankConfig(&comm, nranks, id, rank, &config);
  if (r != kNcclSuccess && r != kNcclInProgress) {
    NcclError(env, "ncclCommInitRankConfig", r, comm).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return CommResult(env, comm, r);
}

Napi::Value CommSplit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commSplit, "ncclCommSplit");
  ARG_U64(comm, 0);
  ARG_I32(color, 1);
  ARG_I32(key, 2);
  ncclConfig_t config;
  if (!ArgConfig(info, 3, &config)) return Napi::Value();
  ncclComm_t child = nullptr;
  ncclResult_t r = gNccl.fn.commSplit(As<ncclComm_t>(comm), color, key, &child, &config);
  if (r != kNcclSuccess && r != kNcclInProgress) {
    NcclError(env, "ncclCommSplit", r, As<ncclComm_t>(comm)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return CommResult(env, child, r);
}

// The communicator's state: ncclSuccess, ncclInProgress, or the error that broke it.
Napi::Value CommGetAsyncError(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commGetAsyncError, "ncclCommGetAsyncError");
  ARG_U64(comm, 0);
  ncclResult_t state = kNcclSuccess;
  ncclResult_t r = gNccl.fn.commGetAsyncError(As<ncclComm_t>(comm), &state);
  if (r != kNcclSuccess) {
    NcclError(env, "ncclCommGetAsyncError", r, As<ncclComm_t>(comm)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Napi::Number::New(env, state);
}

Napi::Value CommAbort(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commAbort, "ncclCommAbort");
  ARG_U64(comm, 0);
  SMCUDA_NCCL(env, "ncclCommAbort", nullptr, commAbort, As<ncclComm_t>(comm));
}

Napi::Value CommDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commDestroy, "ncclCommDestroy");
  ARG_U64(comm, 0);
  SMCUDA_NCCL(env, "ncclCommDestroy", nullptr, commDestroy, As<ncclComm_t>(comm));
}

// [rank, size] of a ready communicator.
Napi::Value CommRankSize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commUserRank, "ncclCommUserRank");
  ARG_U64(comm, 0);
  int rank = -1, count = -1;
  ncclResult_t r = gNccl.fn.commUserRank(As<ncclComm_t>(comm), &rank);
  if (r == kNcclSuccess) r = gNccl.fn.commCount(As<ncclComm_t>(comm), &count);
  if (r != kNcclSuccess) {
    NcclError(env, "ncclCommUserRank", r, As<ncclComm_t>(comm)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, rank));
  out.Set(1u, Napi::Number::New(env, count));
  return out;
}

// ---- collectives: (send, recv, count, datatype, [op], [root], comm, stream) --------

Napi::Value AllReduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(allReduce, "ncclAllReduce");
  ARG_U64(send, 0);
  ARG_U64(recv, 1);
  ARG_SIZE(count, 2);
  ARG_INT(datatype, 3);
  ARG_INT(op, 4);
  ARG_U64(comm, 5);
  ARG_U64(stream, 6);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclAllReduce", c, allReduce, As<const void*>(send), As<void*>(recv), count, datatype, op, c, As<cudaStream_t>(stream));
}

Napi::Value Broadcast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(broadcast, "ncclBroadcast");
  ARG_U64(send, 0);
  ARG_U64(recv, 1);
  ARG_SIZE(count, 2);
  ARG_INT(datatype, 3);
  ARG_INT(root, 4);
  ARG_U64(comm, 5);
  ARG_U64(stream, 6);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclBroadcast", c, broadcast, As<const void*>(send), As<void*>(recv), count, datatype, root, c, As<cudaStream_t>(stream));
}

Napi::Value Reduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(reduce, "ncclReduce");
  ARG_U64(send, 0);
  ARG_U64(recv, 1);
  ARG_SIZE(count, 2);
  ARG_INT(datatype, 3);
  ARG_INT(op, 4);
  ARG_INT(root, 5);
  ARG_U64(comm, 6);
  ARG_U64(stream, 7);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclReduce", c, reduce, As<const void*>(send), As<void*>(recv), count, datatype, op, root, c,
              As<cudaStream_t>(stream));
}

Napi::Value AllGather(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(allGather, "ncclAllGather");
  ARG_U64(send, 0);
  ARG_U64(recv, 1);
  ARG_SIZE(count, 2);
  ARG_INT(datatype, 3);
  ARG_U64(comm, 4);
  ARG_U64(stream, 5);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclAllGather", c, allGather, As<const void*>(send), As<void*>(recv), count, datatype, c, As<cudaStream_t>(stream));
}

Napi::Value ReduceScatter(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(reduceScatter, "ncclReduceScatter");
  ARG_U64(send, 0);
  ARG_U64(recv, 1);
  ARG_SIZE(count, 2);
  ARG_INT(datatype, 3);
  ARG_INT(op, 4);
  ARG_U64(comm, 5);
  ARG_U64(stream, 6);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclReduceScatter", c, reduceScatter, As<const void*>(send), As<void*>(recv), count, datatype, op, c,
              As<cudaStream_t>(stream));
}

// (buffer, count, datatype, peer, comm, stream)
Napi::Value Send(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(send, "ncclSend");
  ARG_U64(buffer, 0);
  ARG_SIZE(count, 1);
  ARG_INT(datatype, 2);
  ARG_INT(peer, 3);
  ARG_U64(comm, 4);
  ARG_U64(stream, 5);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclSend", c, send, As<const void*>(buffer), count, datatype, peer, c, As<cudaStream_t>(stream));
}

Napi::Value Recv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(recv, "ncclRecv");
  ARG_U64(buffer, 0);
  ARG_SIZE(count, 1);
  ARG_INT(datatype, 2);
  ARG_INT(peer, 3);
  ARG_U64(comm, 4);
  ARG_U64(stream, 5);
  ncclComm_t c = As<ncclComm_t>(comm);
  SMCUDA_NCCL(env, "ncclRecv", c, recv, As<void*>(buffer), count, datatype, peer, c, As<cudaStream_t>(stream));
}

Napi::Value GroupStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(groupStart, "ncclGroupStart");
  SMCUDA_NCCL(env, "ncclGroupStart", nullptr, groupStart);
}

Napi::Value GroupEnd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(groupEnd, "ncclGroupEnd");
  SMCUDA_NCCL(env, "ncclGroupEnd", nullptr, groupEnd);
}

// ---- registration (optional entry points) ------------------------------------------

Napi::Value CommRegister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commRegister, "ncclCommRegister");
  ARG_U64(comm, 0);
  ARG_U64(buffer, 1);
  ARG_SIZE(size, 2);
  void* handle = nullptr;
  ncclResult_t r = gNccl.fn.commRegister(As<ncclComm_t>(comm), As<void*>(buffer), size, &handle);
  if (r != kNcclSuccess) {
    NcclError(env, "ncclCommRegister", r, As<ncclComm_t>(comm)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Big(env, handle);
}

Napi::Value CommDeregister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commDeregister, "ncclCommDeregister");
  ARG_U64(comm, 0);
  ARG_U64(handle, 1);
  SMCUDA_NCCL(env, "ncclCommDeregister", As<ncclComm_t>(comm), commDeregister, As<ncclComm_t>(comm), As<void*>(handle));
}

Napi::Value CommWindowRegister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commWindowRegister, "ncclCommWindowRegister");
  ARG_U64(comm, 0);
  ARG_U64(buffer, 1);
  ARG_SIZE(size, 2);
  ARG_INT(flags, 3);
  ncclWindow_t win = nullptr;
  ncclResult_t r = gNccl.fn.commWindowRegister(As<ncclComm_t>(comm), As<void*>(buffer), size, &win, flags);
  if (r != kNcclSuccess) {
    NcclError(env, "ncclCommWindowRegister", r, As<ncclComm_t>(comm)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Big(env, win);
}

Napi::Value CommWindowDeregister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(commWindowDeregister, "ncclCommWindowDeregister");
  ARG_U64(comm, 0);
  ARG_U64(win, 1);
  SMCUDA_NCCL(env, "ncclCommWindowDeregister", As<ncclComm_t>(comm), commWindowDeregister, As<ncclComm_t>(comm), As<ncclWindow_t>(win));
}

// ---- memory NCCL allocates (optional entry points) ---------------------------------

// ncclMemAlloc(size): a device pointer on the current device, allocated as
// window registration wants it (cuMem*, mapped for the peers NCCL reaches).
Napi::Value MemAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(memAlloc, "ncclMemAlloc");
  ARG_SIZE(size, 0);
  void* ptr = nullptr;
  ncclResult_t r = gNccl.fn.memAlloc(&ptr, size);
  if (r != kNcclSuccess) {
    NcclError(env, "ncclMemAlloc", r, nullptr).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Big(env, ptr);
}

Napi::Value MemFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HAVE(memFree, "ncclMemFree");
  ARG_U64(ptr, 0);
  SMCUDA_NCCL(env, "ncclMemFree", nullptr, memFree, As<void*>(ptr));
}

// ---- words for errors ----------------------------------------------------------------

Napi::Value GetErrorString(const Napi::CallbackInfo& info) {
  HAVE(getErrorString, "ncclGetErrorString");
  ARG_INT(result, 0);
  const char* s = gNccl.fn.getErrorString(result);
  return Napi::String::New(info.Env(), s ? s : "");
}

Napi::Value GetLastError(const Napi::CallbackInfo& info) {
  HAVE(getLastError, "ncclGetLastError");
  ARG_U64(comm, 0);
  const char* s = gNccl.fn.getLastError(As<ncclComm_t>(comm));
  return Napi::String::New(info.Env(), s ? s : "");
}

}  // namespace

void InitNccl(Napi::Env env, Napi::Object exports) {
  exports.Set("ncclLoad", Napi::Function::New(env, Load));
  exports.Set("ncclGetUniqueId", Napi::Function::New(env, GetUniqueId));
  exports.Set("ncclCommInitRankConfig", Napi::Function::New(env, CommInitRankConfig));
  exports.Set("ncclCommSplit", Napi::Function::New(env, CommSplit));
  exports.Set("ncclCommGetAsyncError", Napi::Function::New(env, CommGetAsyncError));
  exports.Set("ncclCommRankSize", Napi::Function::New(env, CommRankSize));
  exports.Set("ncclCommAbort", Napi::Function::New(env, CommAbort));
  exports.Set("ncclCommDestroy", Napi::Function::New(env, CommDestroy));
  exports.Set("ncclAllReduce", Napi::Function::New(env, AllReduce));
  exports.Set("ncclBroadcast", Napi::Function::New(env, Broadcast));
  exports.Set("ncclReduce", Napi::Function::New(env, Reduce));
  exports.Set("ncclAllGather", Napi::Function::New(env, AllGather));
  exports.Set("ncclReduceScatter", Napi::Function::New(env, ReduceScatter));
  exports.Set("ncclSend", Napi::Function::New(env, Send));
  exports.Set("ncclRecv", Napi::Function::New(env, Recv));
  exports.Set("ncclGroupStart", Napi::Function::New(env, GroupStart));
  exports.Set("ncclGroupEnd", Napi::Function::New(env, GroupEnd));
  exports.Set("ncclCommRegister", Napi::Function::New(env, CommRegister));
  exports.Set("ncclCommDeregister", Napi::Function::New(env, CommDeregister));
  exports.Set("ncclCommWindowRegister", Napi::Function::New(env, CommWindowRegister));
  exports.Set("ncclCommWindowDeregister", Napi::Function::New(env, CommWindowDeregister));
  exports.Set("ncclMemAlloc", Napi::Function::New(env, MemAlloc));
  exports.Set("ncclMemFree", Napi::Function::New(env, MemFree));
  exports.Set("ncclGetErrorString", Napi::Function::New(env, GetErrorString));
  exports.Set("ncclGetLastError", Napi::Function::New(env, GetLastError));
}

}  // namespace smcuda
