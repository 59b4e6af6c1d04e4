// One file over 500 lines, as one concept: the table of driver-call bindings,
// each a few lines of argument checks around one cu* call through SMCUDA_CU;
// the set is fixed by src/cuda/native-addon.ts.
//
// One JS function per driver call, exactly as src/cuda/native-addon.ts
// declares them. Thin on purpose: NativeCudaDriver validates in TypeScript;
// here arguments are only checked enough that a wrong type can never turn
// into a wild pointer.
//
// Handles (pointers, contexts, streams, events) travel as BigInt, sizes as
// Number, host memory as (ArrayBuffer, byteOffset, byteLength).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "addon.h"
#include "args.h"
#include "cuda_api.h"

namespace smcuda {
namespace {

using namespace args;

const DriverTable& Fn() { return Driver().fn; }

// ---- driver and devices -------------------------------------------------------

Napi::Value CudaStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const DriverState& d = Driver();
  Napi::Object out = Napi::Object::New(env);
  bool available = d.available;
  std::string reason = d.reason;
  if (available) {
    // Usable means cuInit succeeds; after the first success it is a no-op.
    CUresult r = Fn().cuInit(0);
    if (r != CUDA_SUCCESS) {
      available = false;
      reason = InitFailureReason(r);
    }
  }
  out.Set("available", Napi::Boolean::New(env, available));
  if (!available) out.Set("reason", Napi::String::New(env, reason));
  out.Set("driverVersion", Napi::Number::New(env, d.driverVersion));
  if (available) {
    out.Set("fdMemory", Napi::Boolean::New(env, d.vmm));
    if (!d.vmm) out.Set("fdMemoryReason", Napi::String::New(env, d.vmmReason));
  }
  if (available)
    out.Set("memcpyBatch", Napi::String::New(env, d.memcpyBatchV2   ? "cuMemcpyBatchAsync_v2"
                                                : d.memcpyBatchV1 ? "cuMemcpyBatchAsync"
                                                                  : "none"));
  return out;
}

Napi::Value CuInit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuInit");
  SMCUDA_CU(env, cuInit, 0);
  return env.Undefined();
}

Napi::Value CuDeviceGetCount(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuDeviceGetCount");
  int n = 0;
  SMCUDA_CU(env, cuDeviceGetCount, &n);
  return Napi::Number::New(env, n);
}

std::string FormatUuid(const CUuuid& u) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[48];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

Napi::Value CuDeviceGetInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuDeviceGetInfo");
  ARG_INT(ordinal, 0);
  CUdevice dev = 0;
  SMCUDA_CU(env, cuDeviceGet, &dev, ordinal);
  char name[256] = {0};
  SMCUDA_CU(env, cuDeviceGetName, name, static_cast<int>(sizeof name - 1), dev);
  CUuuid uuid;
  SMCUDA_CU(env, cuDeviceGetUuid, &uuid, dev);
  char bus[64] = {0};
  SMCUDA_CU(env, cuDeviceGetPCIBusId, bus, static_cast<int>(sizeof bus - 1), dev);
  int major = 0, minor = 0;
  SMCUDA_CU(env, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  SMCUDA_CU(env, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  int sms = 0;
  SMCUDA_CU(env, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  size_t total = 0;
  SMCUDA_CU(env, cuDeviceTotalMem, &total, dev);
  Napi::Object out = Napi::Object::New(env);
  out.Set("name", Napi::String::New(env, name));
  out.Set("uuid", Napi::String::New(env, FormatUuid(uuid)));
  out.Set("pciBusId", Napi::String::New(env, bus));
  out.Set("major", Napi::Number::New(env, major));
  out.Set("minor", Napi::Number::New(env, minor));
  out.Set("multiprocessors", Napi::Number::New(env, sms));
  out.Set("totalMemory", Napi::Number::New(env, static_cast<double>(total)));
  return out;
}

Napi::Value CuDeviceCanAccessPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuDeviceCanAccessPeer");
  ARG_INT(dev, 0);
  ARG_INT(peer, 1);
  CUdevice d = 0, p = 0;
  SMCUDA_CU(env, cuDeviceGet, &d, dev);
  SMCUDA_CU(env, cuDeviceGet, &p, peer);
  int can = 0;
  SMCUDA_CU(env, cuDeviceCanAccessPeer, &can, d, p);
  return Napi::Boolean::New(env, can != 0);
}

// ---- contexts -------------------------------------------------------------------

Napi::Value CuDevicePrimaryCtxRetain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuDevicePrimaryCtxRetain");
  ARG_INT(ordinal, 0);
  CUdevice dev = 0;
  SMCUDA_CU(env, cuDeviceGet, &dev, ordinal);
  CUcontext ctx = nullptr;
  SMCUDA_CU(env, cuDevicePrimaryCtxRetain, &ctx, dev);
  CUresult r = Fn().cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    Fn().cuDevicePrimaryCtxRelease(dev);  // undo the retain: clean-up in reverse order
    CuError(env, "cuCtxSetCurrent", r).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Big(env, ctx);
}

Napi::Value CuDevicePrimaryCtxRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuDevicePrimaryCtxRelease");
  ARG_INT(ordinal, 0);
  CUdevice dev = 0;
  SMCUDA_CU(env, cuDeviceGet, &dev, ordinal);
  SMCUDA_CU(env, cuDevicePrimaryCtxRelease, dev);
  return env.Undefined();
}

Napi::Value CuCtxSetCurrent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuCtxSetCurrent");
  ARG_U64(ctx, 0);
  SMCUDA_CU(env, cuCtxSetCurrent, As<CUcontext>(ctx));
  return env.Undefined();
}

// ---- device memory ---------------------------------------------------------------

Napi::Value CuMemAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemAlloc");
  ARG_SIZE(bytes, 0);
  CUdeviceptr p = 0;
  SMCUDA_CU(env, cuMemAlloc, &p, bytes);
  return Big(env, p);
}

Napi::Value CuMemFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemFree");
  ARG_U64(ptr, 0);
  SMCUDA_CU(env, cuMemFree, ptr);
  return env.Undefined();
}

Napi::Value CuMemsetD8(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemsetD8");
  ARG_U64(ptr, 0);
  ARG_INT(value, 1);
  ARG_SIZE(bytes, 2);
  SMCUDA_CU(env, cuMemsetD8, ptr, static_cast<unsigned char>(value), bytes);
  return env.Undefined();
}

Napi::Value CuMemsetD8Async(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemsetD8Async");
  ARG_U64(ptr, 0);
  ARG_INT(value, 1);
  ARG_SIZE(bytes, 2);
  ARG_U64(stream, 3);
  SMCUDA_CU(env, cuMemsetD8Async, ptr, static_cast<unsigned char>(value), bytes, As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuMemcpyHtoD(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyHtoD");
  ARG_U64(dst, 0);
  ARG_SIZE(offset, 2);
  ARG_SIZE(bytes, 3);
  void* src = nullptr;
  if (!ArgHostRange(info, 1, offset, bytes, "src", &src)) return Napi::Value();
  SMCUDA_CU(env, cuMemcpyHtoD, dst, src, bytes);
  return env.Undefined();
}

Napi::Value CuMemcpyDtoH(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyDtoH");
  ARG_SIZE(offset, 1);
  ARG_SIZE(bytes, 2);
  ARG_U64(src, 3);
  void* dst = nullptr;
  if (!ArgHostRange(info, 0, offset, bytes, "dst", &dst)) return Napi::Value();
  SMCUDA_CU(env, cuMemcpyDtoH, dst, src, bytes);
  return env.Undefined();
}

Napi::Value CuMemcpyDtoD(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyDtoD");
  ARG_U64(dst, 0);
  ARG_U64(src, 1);
  ARG_SIZE(bytes, 2);
  SMCUDA_CU(env, cuMemcpyDtoD, dst, src, bytes);
  return env.Undefined();
}

Napi::Value CuMemcpyHtoDAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyHtoDAsync");
  ARG_U64(dst, 0);
  ARG_SIZE(offset, 2);
  ARG_SIZE(bytes, 3);
  ARG_U64(stream, 4);
  void* src = nullptr;
  if (!ArgHostRange(info, 1, offset, bytes, "src", &src)) return Napi::Value();
  SMCUDA_CU(env, cuMemcpyHtoDAsync, dst, src, bytes, As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuMemcpyDtoHAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyDtoHAsync");
  ARG_SIZE(offset, 1);
  ARG_SIZE(bytes, 2);
  ARG_U64(src, 3);
  ARG_U64(stream, 4);
  void* dst = nullptr;
  if (!ArgHostRange(info, 0, offset, bytes, "dst", &dst)) return Napi::Value();
  SMCUDA_CU(env, cuMemcpyDtoHAsync, dst, src, bytes, As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuMemcpyAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyAsync");
  ARG_U64(dst, 0);
  ARG_U64(src, 1);
  ARG_SIZE(bytes, 2);
  ARG_U64(stream, 3);
  SMCUDA_CU(env, cuMemcpyAsync, dst, src, bytes, As<CUstream>(stream));
  return env.Undefined();
}

constexpr size_t kMaxBatchCopies = 256;

// (dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, count,
// stream, device): the first `count` copies in one cuMemcpyBatchAsync, or one
// by one where the driver has none (or the stream is a legacy/per-thread
// handle, which the batch call refuses). The batch call queues all or none;
// one by one, a failing copy's error carries `queued`, the copies before it.
Napi::Value CuMemcpyBatchAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemcpyBatchAsync");
  ARG_SIZE(count, 3);
  ARG_U64(stream, 4);
  ARG_INT(device, 5);
  if (count < 1 || count > kMaxBatchCopies) {
    Napi::RangeError::New(env, "count must be 1.." + std::to_string(kMaxBatchCopies)).ThrowAsJavaScriptException();
    return Napi::Value();
  }
  uint64_t* dsts = nullptr;
  uint64_t* srcs = nullptr;
  double* sizeNumbers = nullptr;
  if (!ArgTyped(info, 0, napi_biguint64_array, count, "dsts", &dsts)) return Napi::Value();
  if (!ArgTyped(info, 1, napi_biguint64_array, count, "srcs", &srcs)) return Napi::Value();
  if (!ArgTyped(info, 2, napi_float64_array, count, "sizes", &sizeNumbers)) return Napi::Value();
  size_t sizes[kMaxBatchCopies];
  for (size_t k = 0; k < count; k++) {
    double v = sizeNumbers[k];
    if (!(v >= 0 && v <= 9007199254740991.0) || v != static_cast<double>(static_cast<uint64_t>(v))) {
      Napi::RangeError::New(env, "sizes[" + std::to_string(k) + "] must be a non-negative safe integer")
          .ThrowAsJavaScriptException();
      return Napi::Value();
    }
    sizes[k] = static_cast<size_t>(v);
  }
  const DriverState& d = Driver();
  CUstream s = As<CUstream>(stream);
  if (stream > 2 && (d.memcpyBatchV2 || d.memcpyBatchV1)) {
    CUmemcpyAttributes attr = {CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
                               {CU_MEM_LOCATION_TYPE_DEVICE, device},
                               {CU_MEM_LOCATION_TYPE_DEVICE, device},
                               0};
    size_t attrIndex = 0;
    size_t failIdx = 0;
    // CUdeviceptr is unsigned long long, uint64_t unsigned long: the same 64 bits.
    static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t), "CUdeviceptr is 64-bit");
    CUdeviceptr* dst = reinterpret_cast<CUdeviceptr*>(dsts);
    CUdeviceptr* src = reinterpret_cast<CUdeviceptr*>(srcs);
    CUresult r = d.memcpyBatchV2 ? d.memcpyBatchV2(dst, src, sizes, count, &attr, &attrIndex, 1, s)
                                 : d.memcpyBatchV1(dst, src, sizes, count, &attr, &attrIndex, 1, &failIdx, s);
    if (r != CUDA_SUCCESS) {
      CuError(env, "cuMemcpyBatchAsync", r).ThrowAsJavaScriptException();
      return Napi::Value();
    }
    return env.Undefined();
  }
  // One by one: a failure at copy k leaves copies 0..k-1 queued. The error
  // says how many (`queued`), so the caller neither queues them again nor
  // frees what they still read or write.
  for (size_t k = 0; k < count; k++) {
    CUresult r = d.fn.cuMemcpyAsync(dsts[k], srcs[k], sizes[k], s);
    if (r != CUDA_SUCCESS) {
      Napi::Error e = CuError(env, "cuMemcpyAsync", r);
      e.Set("queued", Napi::Number::New(env, static_cast<double>(k)));
      e.ThrowAsJavaScriptException();
      return Napi::Value();
    }
  }
  return env.Undefined();
}

Napi::Value CuMemGetAddressRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemGetAddressRange");
  ARG_U64(ptr, 0);
  CUdeviceptr base = 0;
  size_t size = 0;
  SMCUDA_CU(env, cuMemGetAddressRange, &base, &size, ptr);
  Napi::Object out = Napi::Object::New(env);
  out.Set("base", Big(env, base));
  out.Set("size", Napi::Number::New(env, static_cast<double>(size)));
  return out;
}

// Unlike cuPointerGetAttribute, this succeeds on pointers CUDA does not know
// and reports memoryType 0; NativeCudaDriver turns that into an error.
Napi::Value CuPointerGetAttributes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuPointerGetAttributes");
  ARG_U64(ptr, 0);
  unsigned memoryType = 0;
  unsigned long long bufferId = 0;
  int device = -1;
  int attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* data[3] = {&memoryType, &bufferId, &device};
  SMCUDA_CU(env, cuPointerGetAttributes, 3u, attrs, data, ptr);
  Napi::Object out = Napi::Object::New(env);
  out.Set("bufferId", Big(env, bufferId));
  out.Set("device", Napi::Number::New(env, device));
  out.Set("memoryType", Napi::Number::New(env, memoryType));
  return out;
}

// The buffer id alone (one attribute, a BigInt, no object): the per-send
// check that an exported pointer still names the same allocation.
Napi::Value CuPointerGetBufferId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuPointerGetAttribute");
  ARG_U64(ptr, 0);
  unsigned long long bufferId = 0;
  SMCUDA_CU(env, cuPointerGetAttribute, &bufferId, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr);
  return Big(env, bufferId);
}

// ---- pinned host memory ---------------------------------------------------------
// Ownership as in shm.cc: the external ArrayBuffer carries a PinnedAlloc via
// napi_wrap. cuMemFreeHost removes the wrap, detaches the buffer (so JS never
// sees freed memory) and frees; a buffer JS drops unfreed is freed by the
// wrap's finalizer at garbage collection.

struct PinnedAlloc {
  void* ptr;
};

void FinalizePinned(napi_env /*env*/, void* data, void* /*hint*/) {
  auto* a = static_cast<PinnedAlloc*>(data);
  if (Driver().available) Fn().cuMemFreeHost(a->ptr);  // nothing to report to at GC
  delete a;
}

Napi::Value CuMemHostAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemHostAlloc");
  ARG_SIZE(bytes, 0);
  void* p = nullptr;
  SMCUDA_CU(env, cuMemHostAlloc, &p, bytes, CU_MEMHOSTALLOC_PORTABLE);
  napi_value ab = nullptr;
  if (napi_create_external_arraybuffer(env, p, bytes, nullptr, nullptr, &ab) != napi_ok) {
    Fn().cuMemFreeHost(p);
    Napi::Error::New(env, "cuMemHostAlloc: cannot wrap pinned memory in an ArrayBuffer").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  auto* a = new PinnedAlloc{p};
  if (napi_wrap(env, ab, a, FinalizePinned, nullptr, nullptr) != napi_ok) {
    delete a;
    Fn().cuMemFreeHost(p);
    Napi::Error::New(env, "cuMemHostAlloc: cannot attach ownership to the ArrayBuffer").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Napi::Value(env, ab);
}

// The PinnedAlloc of info[0], an ArrayBuffer from cuMemHostAlloc, taken off it (`take`: the
// buffer is being freed) or only looked at; nullptr with a JS exception pending when it is none.
PinnedAlloc* PinnedOf(const Napi::CallbackInfo& info, const char* call, bool take) {
  Napi::Env env = info.Env();
  if (!info[0].IsArrayBuffer()) {
    Napi::TypeError::New(env, "buffer must be an ArrayBuffer from cuMemHostAlloc").ThrowAsJavaScriptException();
    return nullptr;
  }
  void* data = nullptr;
  napi_status st = take ? napi_remove_wrap(env, info[0], &data) : napi_unwrap(env, info[0], &data);
  if (st != napi_ok || !data) {
    Napi::Error e = Napi::Error::New(env, std::string(call) + ": this ArrayBuffer is not from cuMemHostAlloc, or was already freed");
    e.Set("code", Napi::String::New(env, "CUDA_ERROR_INVALID_VALUE"));
    e.Set("call", Napi::String::New(env, call));
    e.Set("result", Napi::Number::New(env, CUDA_ERROR_INVALID_VALUE));
    e.ThrowAsJavaScriptException();
    return nullptr;
  }
  return static_cast<PinnedAlloc*>(data);
}

Napi::Value CuMemFreeHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemFreeHost");
  PinnedAlloc* a = PinnedOf(info, "cuMemFreeHost", true);
  if (!a) return Napi::Value();
  void* p = a->ptr;
  delete a;
  info[0].As<Napi::ArrayBuffer>().Detach();
  SMCUDA_CU(env, cuMemFreeHost, p);
  return env.Undefined();
}

// The GPU's address of a buffer from cuMemHostAlloc (under unified addressing
// the host address itself). The wrap stays: the buffer is only looked at.
Napi::Value CuMemHostGetDevicePointer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemHostGetDevicePointer");
  PinnedAlloc* a = PinnedOf(info, "cuMemHostGetDevicePointer", false);
  if (!a) return Napi::Value();
  CUdeviceptr dptr = 0;
  SMCUDA_CU(env, cuMemHostGetDevicePointer, &dptr, a->ptr, 0);
  return Big(env, dptr);
}

Napi::Value CuMemHostRegister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemHostRegister");
  ARG_SIZE(offset, 1);
  ARG_SIZE(bytes, 2);
  void* p = nullptr;
  if (!ArgHostRange(info, 0, offset, bytes, "buffer", &p)) return Napi::Value();
  SMCUDA_CU(env, cuMemHostRegister, p, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  return env.Undefined();
}

Napi::Value CuMemHostUnregister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuMemHostUnregister");
  ARG_SIZE(offset, 1);
  void* p = nullptr;
  if (!ArgHostRange(info, 0, offset, 0, "buffer", &p)) return Napi::Value();
  SMCUDA_CU(env, cuMemHostUnregister, p);
  return env.Undefined();
}

// ---- IPC ----------------------------------------------------------------------------

Napi::ArrayBuffer CopyHandle(Napi::Env env, const void* h) {
  Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, CU_IPC_HANDLE_SIZE);
  std::memcpy(ab.Data(), h, CU_IPC_HANDLE_SIZE);
  return ab;
}

Napi::Value CuIpcGetMemHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuIpcGetMemHandle");
  ARG_U64(ptr, 0);
  CUipcMemHandle h;
  SMCUDA_CU(env, cuIpcGetMemHandle, &h, ptr);
  return CopyHandle(env, &h);
}

Napi::Value CuIpcOpenMemHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuIpcOpenMemHandle");
  ARG_SIZE(offset, 1);
  void* src = nullptr;
  if (!ArgHostRange(info, 0, offset, CU_IPC_HANDLE_SIZE, "handle", &src)) return Napi::Value();
  CUipcMemHandle h;
  std::memcpy(&h, src, sizeof h);
  CUdeviceptr p = 0;
  SMCUDA_CU(env, cuIpcOpenMemHandle, &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  return Big(env, p);
}

Napi::Value CuIpcCloseMemHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuIpcCloseMemHandle");
  ARG_U64(ptr, 0);
  SMCUDA_CU(env, cuIpcCloseMemHandle, ptr);
  return env.Undefined();
}

Napi::Value CuIpcGetEventHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuIpcGetEventHandle");
  ARG_U64(event, 0);
  CUipcEventHandle h;
  SMCUDA_CU(env, cuIpcGetEventHandle, &h, As<CUevent>(event));
  return CopyHandle(env, &h);
}

Napi::Value CuIpcOpenEventHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuIpcOpenEventHandle");
  ARG_SIZE(offset, 1);
  void* src = nullptr;
  if (!ArgHostRange(info, 0, offset, CU_IPC_HANDLE_SIZE, "handle", &src)) return Napi::Value();
  CUipcEventHandle h;
  std::memcpy(&h, src, sizeof h);
  CUevent ev = nullptr;
  SMCUDA_CU(env, cuIpcOpenEventHandle, &ev, h);
  return Big(env, ev);
}

// ---- streams and events -------------------------------------------------------------

Napi::Value CuStreamCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuStreamCreate");
  CUstream s = nullptr;
  SMCUDA_CU(env, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  return Big(env, s);
}

Napi::Value CuStreamDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuStreamDestroy");
  ARG_U64(stream, 0);
  SMCUDA_CU(env, cuStreamDestroy, As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuStreamSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuStreamSynchronize");
  ARG_U64(stream, 0);
  SMCUDA_CU(env, cuStreamSynchronize, As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuStreamWaitEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuStreamWaitEvent");
  ARG_U64(stream, 0);
  ARG_U64(event, 1);
  SMCUDA_CU(env, cuStreamWaitEvent, As<CUstream>(stream), As<CUevent>(event), CU_EVENT_WAIT_DEFAULT);
  return env.Undefined();
}

Napi::Value CuEventCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuEventCreate");
  ARG_INT(flags, 0);
  CUevent ev = nullptr;
  SMCUDA_CU(env, cuEventCreate, &ev, static_cast<unsigned>(flags));
  return Big(env, ev);
}

Napi::Value CuEventDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuEventDestroy");
  ARG_U64(event, 0);
  SMCUDA_CU(env, cuEventDestroy, As<CUevent>(event));
  return env.Undefined();
}

Napi::Value CuEventRecord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuEventRecord");
  ARG_U64(event, 0);
  ARG_U64(stream, 1);
  SMCUDA_CU(env, cuEventRecord, As<CUevent>(event), As<CUstream>(stream));
  return env.Undefined();
}

Napi::Value CuEventQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuEventQuery");
  ARG_U64(event, 0);
  CUresult r = Fn().cuEventQuery(As<CUevent>(event));
  if (r == CUDA_SUCCESS) return Napi::Boolean::New(env, true);
  if (r == CUDA_ERROR_NOT_READY) return Napi::Boolean::New(env, false);
  CuError(env, "cuEventQuery", r).ThrowAsJavaScriptException();
  return Napi::Value();
}

Napi::Value CuEventSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuEventSynchronize");
  ARG_U64(event, 0);
  SMCUDA_CU(env, cuEventSynchronize, As<CUevent>(event));
  return env.Undefined();
}

Napi::Value CuEventElapsedTime(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuEventElapsedTime");
  ARG_U64(start, 0);
  ARG_U64(end, 1);
  float ms = 0;
  SMCUDA_CU(env, cuEventElapsedTime, &ms, As<CUevent>(start), As<CUevent>(end));
  return Napi::Number::New(env, ms);
}

// ---- virtual memory management and stream-ordered pools ---------------------------
// Every allocation made here asks for POSIX file descriptor handles, so it can
// be exported; everything is on the device given (an ordinal of this process).

bool DeviceOf(Napi::Env env, int ordinal, CUdevice* out) {
  CUresult r = Fn().cuDeviceGet(out, ordinal);
  if (r != CUDA_SUCCESS) {
    CuError(env, "cuDeviceGet", r).ThrowAsJavaScriptException();
    return false;
  }
  return true;
}

CUmemAllocationProp FdAllocationProp(CUdevice dev) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

CUmemAccessDesc ReadWrite(CUdevice dev) {
  CUmemAccessDesc d;
  std::memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// A POSIX fd travels through the driver's `void*` shareable handle slot.
void* FdSlot(int fd) { return reinterpret_cast<void*>(static_cast<uintptr_t>(fd)); }

Napi::Value CuMemGetAllocationGranularity(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemGetAllocationGranularity");
  ARG_INT(device, 0);
  CUdevice dev = 0;
  if (!DeviceOf(env, device, &dev)) return Napi::Value();
  CUmemAllocationProp prop = FdAllocationProp(dev);
  size_t g = 0;
  SMCUDA_CU(env, cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  return Napi::Number::New(env, static_cast<double>(g));
}

Napi::Value CuMemCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemCreate");
  ARG_SIZE(bytes, 0);
  ARG_INT(device, 1);
  CUdevice dev = 0;
  if (!DeviceOf(env, device, &dev)) return Napi::Value();
  CUmemAllocationProp prop = FdAllocationProp(dev);
  CUmemGenericAllocationHandle h = 0;
  SMCUDA_CU(env, cuMemCreate, &h, bytes, &prop, 0ull);
  return Big(env, h);
}

Napi::Value CuMemRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemRelease");
  ARG_U64(handle, 0);
  SMCUDA_CU(env, cuMemRelease, handle);
  return env.Undefined();
}

Napi::Value CuMemAddressReserve(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemAddressReserve");
  ARG_SIZE(bytes, 0);
  ARG_SIZE(alignment, 1);
  CUdeviceptr p = 0;
  SMCUDA_CU(env, cuMemAddressReserve, &p, bytes, alignment, 0ull, 0ull);
  return Big(env, p);
}

Napi::Value CuMemAddressFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemAddressFree");
  ARG_U64(ptr, 0);
  ARG_SIZE(bytes, 1);
  SMCUDA_CU(env, cuMemAddressFree, ptr, bytes);
  return env.Undefined();
}

Napi::Value CuMemMap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemMap");
  ARG_U64(ptr, 0);
  ARG_SIZE(bytes, 1);
  ARG_U64(handle, 2);
  SMCUDA_CU(env, cuMemMap, ptr, bytes, 0, handle, 0ull);
  return env.Undefined();
}

Napi::Value CuMemUnmap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemUnmap");
  ARG_U64(ptr, 0);
  ARG_SIZE(bytes, 1);
  SMCUDA_CU(env, cuMemUnmap, ptr, bytes);
  return env.Undefined();
}

Napi::Value CuMemSetAccess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemSetAccess");
  ARG_U64(ptr, 0);
  ARG_SIZE(bytes, 1);
  ARG_INT(device, 2);
  CUdevice dev = 0;
  if (!DeviceOf(env, device, &dev)) return Napi::Value();
  CUmemAccessDesc d = ReadWrite(dev);
  SMCUDA_CU(env, cuMemSetAccess, ptr, bytes, &d, 1);
  return env.Undefined();
}

Napi::Value CuMemRetainAllocationHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemRetainAllocationHandle");
  ARG_U64(ptr, 0);
  CUmemGenericAllocationHandle h = 0;
  SMCUDA_CU(env, cuMemRetainAllocationHandle, &h, As<void*>(ptr));
  return Big(env, h);
}

// -> a new file descriptor, owned by the caller
Napi::Value CuMemExportToShareableHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemExportToShareableHandle");
  ARG_U64(handle, 0);
  int fd = -1;
  SMCUDA_CU(env, cuMemExportToShareableHandle, &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0ull);
  return Napi::Number::New(env, fd);
}

// The fd stays the caller's: the driver takes its own reference.
Napi::Value CuMemImportFromShareableHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemImportFromShareableHandle");
  ARG_INT(fd, 0);
  CUmemGenericAllocationHandle h = 0;
  SMCUDA_CU(env, cuMemImportFromShareableHandle, &h, FdSlot(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  return Big(env, h);
}

Napi::Value CuMemGetAllocationPropertiesFromHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemGetAllocationPropertiesFromHandle");
  ARG_U64(handle, 0);
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  SMCUDA_CU(env, cuMemGetAllocationPropertiesFromHandle, &prop, handle);
  Napi::Object out = Napi::Object::New(env);
  out.Set("type", Napi::Number::New(env, prop.type));
  out.Set("handleTypes", Napi::Number::New(env, prop.requestedHandleTypes));
  out.Set("locationType", Napi::Number::New(env, prop.location.type));
  out.Set("device", Napi::Number::New(env, prop.location.id));
  return out;
}

Napi::Value CuMemPoolCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolCreate");
  ARG_INT(device, 0);
  ARG_SIZE(maxSize, 1);
  CUdevice dev = 0;
  if (!DeviceOf(env, device, &dev)) return Napi::Value();
  CUmemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  props.maxSize = maxSize;
  CUmemoryPool pool = nullptr;
  SMCUDA_CU(env, cuMemPoolCreate, &pool, &props);
  return Big(env, pool);
}

Napi::Value CuMemPoolDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolDestroy");
  ARG_U64(pool, 0);
  SMCUDA_CU(env, cuMemPoolDestroy, As<CUmemoryPool>(pool));
  return env.Undefined();
}

Napi::Value CuMemAllocFromPoolAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemAllocFromPoolAsync");
  ARG_SIZE(bytes, 0);
  ARG_U64(pool, 1);
  ARG_U64(stream, 2);
  CUdeviceptr p = 0;
  SMCUDA_CU(env, cuMemAllocFromPoolAsync, &p, bytes, As<CUmemoryPool>(pool), As<CUstream>(stream));
  return Big(env, p);
}

Napi::Value CuMemFreeAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemFreeAsync");
  ARG_U64(ptr, 0);
  ARG_U64(stream, 1);
  SMCUDA_CU(env, cuMemFreeAsync, ptr, As<CUstream>(stream));
  return env.Undefined();
}

// -> a new file descriptor, owned by the caller
Napi::Value CuMemPoolExportToShareableHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolExportToShareableHandle");
  ARG_U64(pool, 0);
  int fd = -1;
  SMCUDA_CU(env, cuMemPoolExportToShareableHandle, &fd, As<CUmemoryPool>(pool), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0ull);
  return Napi::Number::New(env, fd);
}

Napi::Value CuMemPoolImportFromShareableHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolImportFromShareableHandle");
  ARG_INT(fd, 0);
  CUmemoryPool pool = nullptr;
  SMCUDA_CU(env, cuMemPoolImportFromShareableHandle, &pool, FdSlot(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0ull);
  return Big(env, pool);
}

Napi::Value CuMemPoolExportPointer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolExportPointer");
  ARG_U64(ptr, 0);
  CUmemPoolPtrExportData data;
  std::memset(&data, 0, sizeof data);
  SMCUDA_CU(env, cuMemPoolExportPointer, &data, ptr);
  Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, sizeof data);
  std::memcpy(ab.Data(), &data, sizeof data);
  return ab;
}

Napi::Value CuMemPoolImportPointer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolImportPointer");
  ARG_U64(pool, 0);
  ARG_SIZE(offset, 2);
  void* src = nullptr;
  if (!ArgHostRange(info, 1, offset, CU_MEM_POOL_PTR_EXPORT_DATA_SIZE, "data", &src)) return Napi::Value();
  CUmemPoolPtrExportData data;
  std::memcpy(&data, src, sizeof data);
  CUdeviceptr p = 0;
  SMCUDA_CU(env, cuMemPoolImportPointer, &p, As<CUmemoryPool>(pool), &data);
  return Big(env, p);
}

Napi::Value CuMemPoolSetAccess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_VMM(env, "cuMemPoolSetAccess");
  ARG_U64(pool, 0);
  ARG_INT(device, 1);
  CUdevice dev = 0;
  if (!DeviceOf(env, device, &dev)) return Napi::Value();
  CUmemAccessDesc d = ReadWrite(dev);
  SMCUDA_CU(env, cuMemPoolSetAccess, As<CUmemoryPool>(pool), &d, 1);
  return env.Undefined();
}

// What kind of memory `ptr` is: the attributes that decide how it can be
// exported. { memoryType, bufferId, device, legacyIpc, rangeStart, rangeSize,
// allowedHandleTypes, mempool, mappingBase, mappingSize } — mappingBase and
// mappingSize are 0 where the driver does not know those attributes (before
// CUDA 12.x); rangeStart/rangeSize then name the mapping.
Napi::Value CuPointerGetMemoryInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SMCUDA_REQUIRE_DRIVER(env, "cuPointerGetAttributes");
  ARG_U64(ptr, 0);
  unsigned memoryType = 0;
  unsigned long long bufferId = 0;
  int device = -1;
  unsigned long long legacy = 0;  // cuda.h documents a bool: 8 zeroed bytes hold any width the driver writes
  CUdeviceptr rangeStart = 0;
  size_t rangeSize = 0;
  int attrs[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[6] = {&memoryType, &bufferId, &device, &legacy, &rangeStart, &rangeSize};
  SMCUDA_CU(env, cuPointerGetAttributes, 6u, attrs, data, ptr);
  unsigned long long allowed = 0;
  CUmemoryPool pool = nullptr;
  int attrs2[2] = {CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
  void* data2[2] = {&allowed, &pool};
  // Only device memory can be VMM or pool memory; other kinds need not answer these.
  if (memoryType == CU_MEMORYTYPE_DEVICE) SMCUDA_CU(env, cuPointerGetAttributes, 2u, attrs2, data2, ptr);
  size_t mappingSize = 0;
  void* mappingBase = nullptr;
  int attrs3[2] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  void* data3[2] = {&mappingBase, &mappingSize};
  // Optional: drivers before these attributes refuse them; 0 then means unknown.
  if (memoryType == CU_MEMORYTYPE_DEVICE && Fn().cuPointerGetAttributes(2u, attrs3, data3, ptr) != CUDA_SUCCESS) {
    mappingSize = 0;
    mappingBase = nullptr;
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("memoryType", Napi::Number::New(env, memoryType));
  out.Set("bufferId", Big(env, bufferId));
  out.Set("device", Napi::Number::New(env, device));
  out.Set("legacyIpc", Napi::Boolean::New(env, legacy != 0));
  out.Set("rangeStart", Big(env, rangeStart));
  out.Set("rangeSize", Napi::Number::New(env, static_cast<double>(rangeSize)));
  out.Set("allowedHandleTypes", Napi::Number::New(env, static_cast<double>(allowed)));
  out.Set("mempool", Big(env, pool));
  out.Set("mappingBase", Big(env, mappingBase));
  out.Set("mappingSize", Napi::Number::New(env, static_cast<double>(mappingSize)));
  return out;
}

}  // namespace

void InitCuda(Napi::Env env, Napi::Object exports) {
  struct Entry {
    const char* name;
    Napi::Value (*fn)(const Napi::CallbackInfo&);
  };
  static const Entry kEntries[] = {
      {"cudaStatus", CudaStatus},
      {"cuInit", CuInit},
      {"cuDeviceGetCount", CuDeviceGetCount},
      {"cuDeviceGetInfo", CuDeviceGetInfo},
      {"cuDeviceCanAccessPeer", CuDeviceCanAccessPeer},
      {"cuDevicePrimaryCtxRetain", CuDevicePrimaryCtxRetain},
      {"cuDevicePrimaryCtxRelease", CuDevicePrimaryCtxRelease},
      {"cuCtxSetCurrent", CuCtxSetCurrent},
      {"cuMemAlloc", CuMemAlloc},
      {"cuMemFree", CuMemFree},
      {"cuMemsetD8", CuMemsetD8},
      {"cuMemsetD8Async", CuMemsetD8Async},
      {"cuMemcpyHtoD", CuMemcpyHtoD},
      {"cuMemcpyDtoH", CuMemcpyDtoH},
      {"cuMemcpyDtoD", CuMemcpyDtoD},
      {"cuMemcpyHtoDAsync", CuMemcpyHtoDAsync},
      {"cuMemcpyDtoHAsync", CuMemcpyDtoHAsync},
      {"cuMemcpyAsync", CuMemcpyAsync},
      {"cuMemcpyBatchAsync", CuMemcpyBatchAsync},
      {"cuMemGetAddressRange", CuMemGetAddressRange},
      {"cuPointerGetAttributes", CuPointerGetAttributes},
      {"cuPointerGetBufferId", CuPointerGetBufferId},
      {"cuMemHostAlloc", CuMemHostAlloc},
      {"cuMemFreeHost", CuMemFreeHost},
      {"cuMemHostGetDevicePointer", CuMemHostGetDevicePointer},
      {"cuMemHostRegister", CuMemHostRegister},
      {"cuMemHostUnregister", CuMemHostUnregister},
      {"cuIpcGetMemHandle", CuIpcGetMemHandle},
      {"cuIpcOpenMemHandle", CuIpcOpenMemHandle},
      {"cuIpcCloseMemHandle", CuIpcCloseMemHandle},
      {"cuIpcGetEventHandle", CuIpcGetEventHandle},
      {"cuIpcOpenEventHandle", CuIpcOpenEventHandle},
      {"cuStreamCreate", CuStreamCreate},
      {"cuStreamDestroy", CuStreamDestroy},
      {"cuStreamSynchronize", CuStreamSynchronize},
      {"cuStreamWaitEvent", CuStreamWaitEvent},
      {"cuEventCreate", CuEventCreate},
      {"cuEventDestroy", CuEventDestroy},
      {"cuEventRecord", CuEventRecord},
      {"cuEventQuery", CuEventQuery},
      {"cuEventSynchronize", CuEventSynchronize},
      {"cuEventElapsedTime", CuEventElapsedTime},
      {"cuMemGetAllocationGranularity", CuMemGetAllocationGranularity},
      {"cuMemCreate", CuMemCreate},
      {"cuMemRelease", CuMemRelease},
      {"cuMemAddressReserve", CuMemAddressReserve},
      {"cuMemAddressFree", CuMemAddressFree},
      {"cuMemMap", CuMemMap},
      {"cuMemUnmap", CuMemUnmap},
      {"cuMemSetAccess", CuMemSetAccess},
      {"cuMemRetainAllocationHandle", CuMemRetainAllocationHandle},
      {"cuMemExportToShareableHandle", CuMemExportToShareableHandle},
      {"cuMemImportFromShareableHandle", CuMemImportFromShareableHandle},
      {"cuMemGetAllocationPropertiesFromHandle", CuMemGetAllocationPropertiesFromHandle},
      {"cuMemPoolCreate", CuMemPoolCreate},
      {"cuMemPoolDestroy", CuMemPoolDestroy},
      {"cuMemAllocFromPoolAsync", CuMemAllocFromPoolAsync},
      {"cuMemFreeAsync", CuMemFreeAsync},
      {"cuMemPoolExportToShareableHandle", CuMemPoolExportToShareableHandle},
      {"cuMemPoolImportFromShareableHandle", CuMemPoolImportFromShareableHandle},
      {"cuMemPoolExportPointer", CuMemPoolExportPointer},
      {"cuMemPoolImportPointer", CuMemPoolImportPointer},
      {"cuMemPoolSetAccess", CuMemPoolSetAccess},
      {"cuPointerGetMemoryInfo", CuPointerGetMemoryInfo},
  };
  for (const Entry& e : kEntries) exports.Set(e.name, Napi::Function::New(env, e.fn, e.name));
}

}  // namespace smcuda
