// GPU-driven work: stream memory operations (wait/write on a memory word,
// batches), stream capture into graphs, PTX modules and kernel launch.
//
// The entry points are resolved in cuda_driver.cc in three groups (memory
// operations at cudaVersion 11070, i.e. their _v2 ABI; graphs; modules). A
// call whose group the driver lacks throws CUDA_ERROR_NOT_SUPPORTED with the
// reason; gpuDrivenStatus says which groups are there without throwing.
//
// As in cuda_calls.cc: handles travel as BigInt, 32-bit values and flags as
// Number; the typed checks with good messages are in TypeScript
// (src/cuda/validate-gpu-driven.ts), these only keep pointers honest.
#include <cstring>
#include <string>

#include "addon.h"
#include "args.h"
#include "cuda_api.h"

namespace smcuda {
namespace {

using namespace args;

constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

// Throws CUDA_ERROR_NOT_SUPPORTED naming the missing entry point and returns
// false when the group is off.
bool RequireGroup(Napi::Env env, const char* call, bool on, const std::string& why) {
  if (on) return true;
  CuError(env, call, CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", why).ThrowAsJavaScriptException();
  return false;
}

#define REQUIRE_GROUP(call, group)                                                               \
  SMCUDA_REQUIRE_DRIVER(env, call);                                                              \
  if (!RequireGroup(env, call, Driver().group, Driver().group##Reason)) return Napi::Value()

bool ArgU32(const Napi::CallbackInfo& info, size_t i, const char* name, uint32_t* out) {
  size_t v = 0;
  if (!ArgSize(info, i, name, &v)) return false;
  if (v > 0xffffffffu) {
    Napi::RangeError::New(info.Env(), std::string(name) + " must fit in 32 unsigned bits").ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<uint32_t>(v);
  return true;
}
#define ARG_U32(var, i) \
  uint32_t var = 0;     \
  if (!ArgU32(info, i, #var, &var)) return Napi::Value()

// ---- status -----------------------------------------------------------------

// (ordinal) -> { available, reason?, memOps, memOpsReason?, graphs,
// graphsReason?, modules, modulesReason?, waitValueNor, memOps64,
// attributesReason? }. Never throws for a driver problem: it is a status.
Napi::Value GpuDrivenStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ARG_INT(ordinal, 0);
  const DriverState& d = Driver();
  Napi::Object out = Napi::Object::New(env);
  std::string reason = d.reason;
  bool available = d.available;
  CUresult r = available ? d.fn.cuInit(0) : CUDA_SUCCESS;
  if (available && r != CUDA_SUCCESS) {
    available = false;
    reason = InitFailureReason(r);
  }
  out.Set("available", Napi::Boolean::New(env, available));
  if (!available) {
    out.Set("reason", Napi::String::New(env, reason));
    return out;
  }
  auto group = [&](const char* key, bool on, const std::string& why) {
    out.Set(key, Napi::Boolean::New(env, on));
    if (!on) out.Set(std::string(key) + "Reason", Napi::String::New(env, why));
  };
  group("memOps", d.memOps, d.memOpsReason);
  group("graphs", d.graphs, d.graphsReason);
  group("modules", d.modules, d.modulesReason);
  // Stream memory operations are always on from CUDA 12; 64-bit words and
  // the NOR condition still depend on the device.
  int nor = 0, ops64 = 0;
  CUdevice dev = 0;
  std::string attrWhy;
  r = d.fn.cuDeviceGet(&dev, ordinal);
  if (r == CUDA_SUCCESS) r = d.fn.cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
  if (r == CUDA_SUCCESS) r = d.fn.cuDeviceGetAttribute(&ops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
  if (r != CUDA_SUCCESS) {
    nor = ops64 = 0;
    attrWhy = "cuDeviceGetAttribute(CAN_USE_STREAM_WAIT_VALUE_NOR / CAN_USE_64_BIT_STREAM_MEM_OPS) of device " +
              std::to_string(ordinal) + " failed: " + CuErrorName(r) + " (" + std::to_string(r) + ")";
    out.Set("attributesReason", Napi::String::New(env, attrWhy));
  }
  out.Set("waitValueNor", Napi::Boolean::New(env, nor != 0));
  out.Set("memOps64", Napi::Boolean::New(env, ops64 != 0));
  return out;
}

// ---- stream memory operations ------------------------------------------------

// (stream, addr, value: Number, flags)
Napi::Value CuStreamWaitValue32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamWaitValue32_v2", memOps);
  ARG_U64(stream, 0);
  ARG_U64(addr, 1);
  ARG_U32(value, 2);
  ARG_U32(flags, 3);
  SMCUDA_CU(env, cuStreamWaitValue32, As<CUstream>(stream), addr, value, flags);
  return env.Undefined();
}

// (stream, addr, value: BigInt, flags)
Napi::Value CuStreamWaitValue64(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamWaitValue64_v2", memOps);
  ARG_U64(stream, 0);
  ARG_U64(addr, 1);
  ARG_U64(value, 2);
  ARG_U32(flags, 3);
  SMCUDA_CU(env, cuStreamWaitValue64, As<CUstream>(stream), addr, value, flags);
  return env.Undefined();
}

Napi::Value CuStreamWriteValue32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamWriteValue32_v2", memOps);
  ARG_U64(stream, 0);
  ARG_U64(addr, 1);
  ARG_U32(value, 2);
  ARG_U32(flags, 3);
  SMCUDA_CU(env, cuStreamWriteValue32, As<CUstream>(stream), addr, value, flags);
  return env.Undefined();
}

Napi::Value CuStreamWriteValue64(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamWriteValue64_v2", memOps);
  ARG_U64(stream, 0);
  ARG_U64(addr, 1);
  ARG_U64(value, 2);
  ARG_U32(flags, 3);
  SMCUDA_CU(env, cuStreamWriteValue64, As<CUstream>(stream), addr, value, flags);
  return env.Undefined();
}

constexpr size_t kMaxBatchMemOps = 256;

// (stream, count, operations: Uint32Array, flags: Uint32Array,
// addrs: BigUint64Array, values: BigUint64Array): the first `count`
// operations (CU_STREAM_MEM_OP_* codes) as one cuStreamBatchMemOp_v2.
Napi::Value CuStreamBatchMemOp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamBatchMemOp_v2", memOps);
  ARG_U64(stream, 0);
  ARG_SIZE(count, 1);
  if (count < 1 || count > kMaxBatchMemOps) {
    Napi::RangeError::New(env, "count must be 1.." + std::to_string(kMaxBatchMemOps)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  uint32_t* ops = nullptr;
  uint32_t* flags = nullptr;
  uint64_t* addrs = nullptr;
  uint64_t* values = nullptr;
  if (!ArgTyped(info, 2, napi_uint32_array, count, "operations", &ops)) return Napi::Value();
  if (!ArgTyped(info, 3, napi_uint32_array, count, "flags", &flags)) return Napi::Value();
  if (!ArgTyped(info, 4, napi_biguint64_array, count, "addrs", &addrs)) return Napi::Value();
  if (!ArgTyped(info, 5, napi_biguint64_array, count, "values", &values)) return Napi::Value();
  CUstreamBatchMemOpParams params[kMaxBatchMemOps];
  std::memset(params, 0, sizeof(CUstreamBatchMemOpParams) * count);
  for (size_t k = 0; k < count; k++) {
    CUstreamBatchMemOpParams& p = params[k];
    switch (ops[k]) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
        // waitValue and writeValue share one layout.
        bool wide = ops[k] == CU_STREAM_MEM_OP_WAIT_VALUE_64 || ops[k] == CU_STREAM_MEM_OP_WRITE_VALUE_64;
        p.waitValue.operation = static_cast<int>(ops[k]);
        p.waitValue.address = addrs[k];
        if (wide) {
          p.waitValue.value64 = values[k];
        } else {
          p.waitValue.value = static_cast<cuuint32_t>(values[k]);
        }
        p.waitValue.flags = flags[k];
        break;
      }
      case CU_STREAM_MEM_OP_BARRIER:
        p.memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
        p.memoryBarrier.flags = flags[k];
        break;
      default:
        Napi::RangeError::New(env, "operations[" + std::to_string(k) + "] is not a stream memory operation code")
            .ThrowAsJavaScriptException();
        return Napi::Value();
    }
  }
  SMCUDA_CU(env, cuStreamBatchMemOp, As<CUstream>(stream), static_cast<unsigned>(count), params, 0u);
  return env.Undefined();
}

// ---- capture and graphs --------------------------------------------------------

// (stream, mode: CU_STREAM_CAPTURE_MODE_*)
Napi::Value CuStreamBeginCapture(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamBeginCapture_v2", graphs);
  ARG_U64(stream, 0);
  ARG_INT(mode, 1);
  SMCUDA_CU(env, cuStreamBeginCapture, As<CUstream>(stream), mode);
  return env.Undefined();
}

Napi::Value CuStreamEndCapture(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamEndCapture", graphs);
  ARG_U64(stream, 0);
  CUgraph graph = nullptr;
  SMCUDA_CU(env, cuStreamEndCapture, As<CUstream>(stream), &graph);
  return Big(env, graph);
}

// -> CUstreamCaptureStatus: 0 none, 1 active, 2 invalidated
Napi::Value CuStreamIsCapturing(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuStreamIsCapturing", graphs);
  ARG_U64(stream, 0);
  int status = CU_STREAM_CAPTURE_STATUS_NONE;
  SMCUDA_CU(env, cuStreamIsCapturing, As<CUstream>(stream), &status);
  return Napi::Number::New(env, status);
}

Napi::Value CuGraphInstantiate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuGraphInstantiateWithFlags", graphs);
  ARG_U64(graph, 0);
  CUgraphExec exec = nullptr;
  SMCUDA_CU(env, cuGraphInstantiateWithFlags, &exec, As<CUgraph>(graph), 0ull);
  return Big(env, exec);
}

Napi::Value CuGraphLaunch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuGraphLaunch", graphs);
  ARG_U64(exec, 0);
  ARG_U64(stream, 1);
  SMCUDA_CU(env, cuGraphLaunch, As<CUgraphExec>(exec), As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuGraphExecDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuGraphExecDestroy", graphs);
  ARG_U64(exec, 0);
  SMCUDA_CU(env, cuGraphExecDestroy, As<CUgraphExec>(exec));
  return env.Undefined();
}

Napi::Value CuGraphDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuGraphDestroy", graphs);
  ARG_U64(graph, 0);
  SMCUDA_CU(env, cuGraphDestroy, As<CUgraph>(graph));
  return env.Undefined();
}

// ---- modules and kernels --------------------------------------------------------

// (ptx: string) -> CUmodule, JIT-compiled for the current context's device.
// A failed load carries the JIT's error log in its detail.
Napi::Value CuModuleLoadData(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuModuleLoadDataEx", modules);
  if (!info[0].IsString()) {
    Napi::TypeError::New(env, "ptx must be a string").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  std::string ptx = info[0].As<Napi::String>().Utf8Value();  // NUL-terminated, as the driver reads PTX
  char log[4096] = {0};
  int options[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[2] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log - 1))};
  CUmodule module = nullptr;
  CUresult r = Driver().fn.cuModuleLoadDataEx(&module, ptx.c_str(), 2, options, values);
  if (r != CUDA_SUCCESS) {
    std::string detail = CuErrorString(r);
    if (log[0] != '\0') detail += (detail.empty() ? "" : "; JIT log: ") + std::string(log);
    CuError(env, "cuModuleLoadDataEx", r, CuErrorName(r), detail).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Big(env, module);
}

Napi::Value CuModuleUnload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuModuleUnload", modules);
  ARG_U64(module, 0);
  SMCUDA_CU(env, cuModuleUnload, As<CUmodule>(module));
  return env.Undefined();
}

// (module, name) -> CUfunction, loaded: under lazy loading (the default from
// CUDA 12.2) a function is loaded on first use, and a first use inside a
// stream capture must not be the one that loads it.
Napi::Value CuModuleGetFunction(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuModuleGetFunction", modules);
  ARG_U64(module, 0);
  if (!info[1].IsString()) {
    Napi::TypeError::New(env, "name must be a string").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  std::string name = info[1].As<Napi::String>().Utf8Value();
  CUfunction fn = nullptr;
  SMCUDA_CU(env, cuModuleGetFunction, &fn, As<CUmodule>(module), name.c_str());
  int maxThreads = 0;
  SMCUDA_CU(env, cuFuncGetAttribute, &maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
  return Big(env, fn);
}

constexpr size_t kMaxKernelParamBytes = 4096;  // the classic cuLaunchKernel limit
constexpr size_t kMaxKernelParams = 256;

// (fn, dims: Uint32Array [gx, gy, gz, bx, by, bz, sharedMemBytes], stream,
// params: ArrayBuffer, layout: Uint32Array [offset0, size0, offset1, ...]):
// each parameter is `size` bytes at `offset` of `params`, aligned to its size
// (TypeScript packs them: src/cuda/kernel-args.ts). They are copied into
// aligned storage here and cuLaunchKernel gets a pointer to each.
Napi::Value CuLaunchKernel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  REQUIRE_GROUP("cuLaunchKernel", modules);
  ARG_U64(fn, 0);
  uint32_t* dims = nullptr;
  if (!ArgTyped(info, 1, napi_uint32_array, 7, "dims", &dims)) return Napi::Value();
  ARG_U64(stream, 2);
  if (!info[3].IsArrayBuffer() || !info[4].IsTypedArray() ||
      info[4].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
    Napi::TypeError::New(env, "params must be an ArrayBuffer and layout a Uint32Array").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::ArrayBuffer params = info[3].As<Napi::ArrayBuffer>();
  Napi::Uint32Array layout = info[4].As<Napi::Uint32Array>();
  size_t bytes = params.ByteLength();
  size_t count = layout.ElementLength() / 2;
  if (bytes > kMaxKernelParamBytes || count > kMaxKernelParams || layout.ElementLength() % 2 != 0) {
    Napi::RangeError::New(env, "at most " + std::to_string(kMaxKernelParams) + " parameters and " +
                                   std::to_string(kMaxKernelParamBytes) + " bytes of them")
        .ThrowAsJavaScriptException();
    return Napi::Value();
  }
  alignas(16) unsigned char storage[kMaxKernelParamBytes];
  if (bytes > 0) std::memcpy(storage, params.Data(), bytes);
  void* pointers[kMaxKernelParams];
  for (size_t k = 0; k < count; k++) {
    uint32_t offset = layout[2 * k], size = layout[2 * k + 1];
    bool sizeOk = size == 1 || size == 2 || size == 4 || size == 8;
    if (!sizeOk || offset % size != 0 || offset > bytes || size > bytes - offset) {
      Napi::RangeError::New(env, "layout of parameter " + std::to_string(k) + " (offset " + std::to_string(offset) +
                                     ", size " + std::to_string(size) + ") is not an aligned slot of the " +
                                     std::to_string(bytes) + " parameter bytes")
          .ThrowAsJavaScriptException();
      return Napi::Value();
    }
    pointers[k] = storage + offset;
  }
  SMCUDA_CU(env, cuLaunchKernel, As<CUfunction>(fn), dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6],
            As<CUstream>(stream), count > 0 ? pointers : nullptr, nullptr);
  return env.Undefined();
}

}  // namespace

void InitGpuDriven(Napi::Env env, Napi::Object exports) {
  struct Entry {
    const char* name;
    Napi::Value (*fn)(const Napi::CallbackInfo&);
  };
  static const Entry kEntries[] = {
      {"gpuDrivenStatus", GpuDrivenStatus},
      {"cuStreamWaitValue32", CuStreamWaitValue32},
      {"cuStreamWaitValue64", CuStreamWaitValue64},
      {"cuStreamWriteValue32", CuStreamWriteValue32},
      {"cuStreamWriteValue64", CuStreamWriteValue64},
      {"cuStreamBatchMemOp", CuStreamBatchMemOp},
      {"cuStreamBeginCapture", CuStreamBeginCapture},
      {"cuStreamEndCapture", CuStreamEndCapture},
      {"cuStreamIsCapturing", CuStreamIsCapturing},
      {"cuGraphInstantiate", CuGraphInstantiate},
      {"cuGraphLaunch", CuGraphLaunch},
      {"cuGraphExecDestroy", CuGraphExecDestroy},
      {"cuGraphDestroy", CuGraphDestroy},
      {"cuModuleLoadData", CuModuleLoadData},
      {"cuModuleUnload", CuModuleUnload},
      {"cuModuleGetFunction", CuModuleGetFunction},
      {"cuLaunchKernel", CuLaunchKernel},
  };
  for (const Entry& e : kEntries) exports.Set(e.name, Napi::Function::New(env, e.fn, e.name));
}

}  // namespace smcuda
