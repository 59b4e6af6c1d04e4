// Loading libcuda.so.1 and naming its errors.
//
// Load order (once per process, on first use):
//   1. dlopen("libcuda.so.1")           missing: no NVIDIA driver here
//   2. dlsym cuDriverGetVersion         refuse drivers older than CUDA 12.0
//   3. dlsym cuGetProcAddress_v2, else the CUDA 11.3 cuGetProcAddress
//   4. every entry point of SMCUDA_DRIVER_FUNCTIONS through it, by base name,
//      with cudaVersion = kCudaAbiVersion and CU_GET_PROC_ADDRESS_DEFAULT
//   5. the VMM/pool entry points (SMCUDA_VMM_FUNCTIONS) the same way; a
//      missing one turns off descriptor-exported memory only (`vmm`)
//   6. the GPU-driven groups (stream memory operations at cudaVersion 11070,
//      capture and graphs, modules and launch); a missing one turns off its
//      group only (gpuDrivenStatus)
//   7. the optional ones (cuMemcpyBatchAsync), with the driver's own ABI;
//      missing is not a failure
// Any failure leaves `available = false` and a reason that says what was
// missing and how to fix it; the addon itself keeps working.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "cuda_api.h"

namespace smcuda {
namespace {

typedef CUresult (*GetProcAddressV2)(const char*, void**, int, cuuint64_t, int*);
typedef CUresult (*GetProcAddressV1)(const char*, void**, int, cuuint64_t);
typedef CUresult (*DriverGetVersion)(int*);

const char* const kSimHint = "use the simulated driver (--driver sim)";

std::string CudaVersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

DriverState Load() {
  DriverState s;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    std::string why = err ? err : "unknown dlopen error";
    if (why.find("No such file") != std::string::npos) {
      s.reason = "libcuda.so.1 not found: no NVIDIA driver on this machine; install the NVIDIA driver or " +
                 std::string(kSimHint);
    } else {
      s.reason = "libcuda.so.1 failed to load (" + why + "): reinstall the NVIDIA driver or " + kSimHint;
    }
    return s;
  }
  // The library stays loaded for the life of the process: it is the driver.

  auto getVersion = reinterpret_cast<DriverGetVersion>(dlsym(lib, "cuDriverGetVersion"));
  if (!getVersion || getVersion(&s.driverVersion) != CUDA_SUCCESS) {
    s.reason = "libcuda.so.1 has no working cuDriverGetVersion: it is not an NVIDIA driver library; reinstall the "
               "NVIDIA driver or " + std::string(kSimHint);
    s.driverVersion = 0;
    return s;
  }
  if (s.driverVersion < kCudaAbiVersion) {
    s.reason = "the NVIDIA driver supports CUDA " + CudaVersionText(s.driverVersion) + " (cuDriverGetVersion " +
               std::to_string(s.driverVersion) + ") but smcuda needs CUDA " + CudaVersionText(kCudaAbiVersion) +
               " or newer: update the NVIDIA driver (525 or newer) or " + kSimHint;
    return s;
  }

  auto v2 = reinterpret_cast<GetProcAddressV2>(dlsym(lib, "cuGetProcAddress_v2"));
  auto v1 = v2 ? nullptr : reinterpret_cast<GetProcAddressV1>(dlsym(lib, "cuGetProcAddress"));
  if (!v2 && !v1) {
    s.reason = "libcuda.so.1 has neither cuGetProcAddress_v2 nor cuGetProcAddress: the driver library is damaged or "
               "not NVIDIA's; reinstall the NVIDIA driver or " + std::string(kSimHint);
    return s;
  }

  // Resolves one entry point; on failure records why and returns false.
  auto resolve = [&](const char* name, void** slot) -> bool {
    int status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = v2 ? v2(name, slot, kCudaAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status)
                    : v1(name, slot, kCudaAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT);
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *slot) return true;
    const char* what = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                       : status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND     ? "symbol not found"
                                                                              : "lookup failed";
    s.reason = "libcuda.so.1 (CUDA " + CudaVersionText(s.driverVersion) + ") does not provide " + name +
               " for the CUDA " + CudaVersionText(kCudaAbiVersion) + " ABI (" + what + ", CUresult " +
               std::to_string(r) + "): update the NVIDIA driver or " + kSimHint;
    *slot = nullptr;
    return false;
  };
#define SMCUDA_RESOLVE(field, name, ret, params) \
  if (!resolve(name, reinterpret_cast<void**>(&s.fn.field))) return s;
  SMCUDA_DRIVER_FUNCTIONS(SMCUDA_RESOLVE)
#undef SMCUDA_RESOLVE

  // Missing VMM/pool entry points disable descriptor-exported memory only.
  s.vmm = true;
  auto resolveVmm = [&](const char* name, void** slot) {
    if (!s.vmm) return;
    std::string saved = s.reason;
    if (!resolve(name, slot)) {
      s.vmm = false;
      s.vmmReason = s.reason;
    }
    s.reason = saved;
  };
#define SMCUDA_RESOLVE_VMM(field, name, ret, params) resolveVmm(name, reinterpret_cast<void**>(&s.fn.field));
  SMCUDA_VMM_FUNCTIONS(SMCUDA_RESOLVE_VMM)
#undef SMCUDA_RESOLVE_VMM

  // The GPU-driven groups: each all there or off with the first missing name.
  // The stream memory operations are asked for at 11070, which hands out
  // their _v2 ABI; the rest at the ABI of the other entry points.
  auto resolveGroup = [&](const char* name, void** slot, int version, bool* on, std::string* why) {
    if (!*on) return;
    int status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = v2 ? v2(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &status)
                    : v1(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT);
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *slot) return;
    *slot = nullptr;
    *on = false;
    const char* what = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                       : status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND     ? "symbol not found"
                                                                              : "lookup failed";
    *why = "libcuda.so.1 (CUDA " + CudaVersionText(s.driverVersion) + ") does not provide " + name + " for the CUDA " +
           CudaVersionText(version) + " ABI (" + what + ", CUresult " + std::to_string(r) +
           "): update the NVIDIA driver";
  };
  s.memOps = s.graphs = s.modules = true;
#define SMCUDA_RESOLVE_MEMOP(field, name, ret, params) \
  resolveGroup(name, reinterpret_cast<void**>(&s.fn.field), kStreamMemOpsAbiVersion, &s.memOps, &s.memOpsReason);
#define SMCUDA_RESOLVE_GRAPH(field, name, ret, params) \
  resolveGroup(name, reinterpret_cast<void**>(&s.fn.field), kCudaAbiVersion, &s.graphs, &s.graphsReason);
#define SMCUDA_RESOLVE_MODULE(field, name, ret, params) \
  resolveGroup(name, reinterpret_cast<void**>(&s.fn.field), kCudaAbiVersion, &s.modules, &s.modulesReason);
  SMCUDA_MEMOP_FUNCTIONS(SMCUDA_RESOLVE_MEMOP)
  SMCUDA_GRAPH_FUNCTIONS(SMCUDA_RESOLVE_GRAPH)
  SMCUDA_MODULE_FUNCTIONS(SMCUDA_RESOLVE_MODULE)
#undef SMCUDA_RESOLVE_MEMOP
#undef SMCUDA_RESOLVE_GRAPH
#undef SMCUDA_RESOLVE_MODULE

  // cuGetProcAddress hands out the newest version not above the one asked
  // for, so the version asked for must be one whose ABI we call.
  auto optional = [&](const char* name, int version) -> void* {
    void* fn = nullptr;
    int status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = v2 ? v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status)
                    : v1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    return r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS ? fn : nullptr;
  };
  if (s.driverVersion >= 13000) {
    s.memcpyBatchV2 = reinterpret_cast<MemcpyBatchAsyncV2>(optional("cuMemcpyBatchAsync", 13000));
  } else if (s.driverVersion >= 12080) {
    s.memcpyBatchV1 = reinterpret_cast<MemcpyBatchAsyncV1>(optional("cuMemcpyBatchAsync", 12080));
  }

  s.available = true;
  return s;
}

// Names of the CUresults smcuda is likely to meet, for when cuGetErrorName is
// unavailable or does not know the value (values from CUDA 12/13 cuda.h).
const char* BuiltinErrorName(CUresult r) {
  switch (r) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 102: return "CUDA_ERROR_DEVICE_NOT_LICENSED";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 202: return "CUDA_ERROR_CONTEXT_ALREADY_CURRENT";
    case 205: return "CUDA_ERROR_MAP_FAILED";
    case 206: return "CUDA_ERROR_UNMAP_FAILED";
    case 207: return "CUDA_ERROR_ARRAY_IS_MAPPED";
    case 208: return "CUDA_ERROR_ALREADY_MAPPED";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 210: return "CUDA_ERROR_ALREADY_ACQUIRED";
    case 211: return "CUDA_ERROR_NOT_MAPPED";
    case 214: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case 216: return "CUDA_ERROR_CONTEXT_ALREADY_IN_USE";
    case 217: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 220: return "CUDA_ERROR_NVLINK_UNCORRECTABLE";
    case 221: return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 223: return "CUDA_ERROR_JIT_COMPILATION_DISABLED";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 401: return "CUDA_ERROR_ILLEGAL_STATE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 704: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case 705: return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED";
    case 708: return "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE";
    case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case 711: return "CUDA_ERROR_TOO_MANY_PEERS";
    case 712: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case 713: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 902: return "CUDA_ERROR_STREAM_CAPTURE_MERGE";
    case 903: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case 904: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
    case 905: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION";
    case 906: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    case 907: return "CUDA_ERROR_CAPTURED_EVENT";
    case 908: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    case 909: return "CUDA_ERROR_TIMEOUT";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

// A fix to add to the cuInit failure reason, where the error suggests one.
const char* InitHint(CUresult r) {
  switch (r) {
    case 34: return "libcuda.so.1 is the CUDA toolkit's stub library: put the real driver's library first in the "
                    "library path (LD_LIBRARY_PATH)";
    case 100: return "no GPU is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case 803: return "the NVIDIA kernel module and libcuda.so.1 differ in version: reboot or reinstall the driver";
    case 999: return "check nvidia-smi and dmesg; the driver may need a reboot";
    default: return "check nvidia-smi";
  }
}

}  // namespace

const DriverState& Driver() {
  static const DriverState state = Load();  // C++11: initialised once, thread-safe
  return state;
}

std::string CuErrorName(CUresult r) {
  const DriverState& d = Driver();
  const char* name = nullptr;
  if (d.fn.cuGetErrorName && d.fn.cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  if ((name = BuiltinErrorName(r))) return name;
  return "CUDA_ERROR_" + std::to_string(r);
}

std::string CuErrorString(CUresult r) {
  const DriverState& d = Driver();
  const char* text = nullptr;
  if (d.fn.cuGetErrorString && d.fn.cuGetErrorString(r, &text) == CUDA_SUCCESS && text) return text;
  return "";
}

Napi::Error CuError(Napi::Env env, const std::string& call, CUresult r, const std::string& code,
                    const std::string& detail) {
  std::string msg = call + " failed: " + code + " (" + std::to_string(r) + ")";
  if (!detail.empty()) msg += ": " + detail;
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::String::New(env, code));
  e.Set("call", Napi::String::New(env, call));
  e.Set("result", Napi::Number::New(env, r));
  e.Set("detail", Napi::String::New(env, detail));
  return e;
}

Napi::Error CuError(Napi::Env env, const char* call, CUresult r) {
  return CuError(env, call, r, CuErrorName(r), CuErrorString(r));
}

Napi::Error NoDriverError(Napi::Env env, const char* call) {
  Napi::Error e = Napi::Error::New(env, std::string(call) + ": CUDA is unavailable: " + Driver().reason);
  e.Set("code", Napi::String::New(env, "SMCUDA_DRIVER_UNAVAILABLE"));
  e.Set("call", Napi::String::New(env, call));
  return e;
}

Napi::Error NoVmmError(Napi::Env env, const char* call) {
  Napi::Error e = Napi::Error::New(env, std::string(call) + ": the driver lacks the virtual memory management / memory pool "
                                                            "entry points: " + Driver().vmmReason);
  e.Set("code", Napi::String::New(env, "SMCUDA_DRIVER_UNAVAILABLE"));
  e.Set("call", Napi::String::New(env, call));
  return e;
}

// Used by cudaStatus: cuInit's failure as a reason with a fix.
std::string InitFailureReason(CUresult r) {
  return "cuInit failed: " + CuErrorName(r) + " (" + std::to_string(r) + ")" +
         (CuErrorString(r).empty() ? "" : ": " + CuErrorString(r)) + "; " + InitHint(r);
}

}  // namespace smcuda
