// The slice of the CUDA driver API smcuda uses, declared here because no CUDA
// toolkit is needed to build: libcuda.so.1 is dlopen'ed at run time and every
// entry point is resolved through cuGetProcAddress.
//
// Types, enum values and ABIs are copied from CUDA 12/13 cuda.h. Where cuda.h
// maps a name to a versioned symbol (cuMemAlloc -> cuMemAlloc_v2), the
// signature below is that versioned ABI; cuGetProcAddress hands it out when
// asked for the base name with cudaVersion = kCudaAbiVersion.
//
// The driver table (`Driver()`) is the only process-wide state of the addon:
// it IS the driver handle.
#pragma once
#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace smcuda {

// ---- types -----------------------------------------------------------------
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // 64-bit on every platform smcuda runs on
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef unsigned long long cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUmemPoolHandle_st* CUmemoryPool;

constexpr size_t CU_IPC_HANDLE_SIZE = 64;
struct CUipcMemHandle { char reserved[CU_IPC_HANDLE_SIZE]; };
struct CUipcEventHandle { char reserved[CU_IPC_HANDLE_SIZE]; };
struct CUuuid { char bytes[16]; };

// ---- CUresult values used by name in code (names of others: cuda_driver.cc)
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;

// ---- enums and flags ---------------------------------------------------------
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

constexpr int CU_POINTER_ATTRIBUTE_CONTEXT = 1;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;  // CUmemorytype, unsigned int
constexpr int CU_POINTER_ATTRIBUTE_BUFFER_ID = 7;    // unsigned long long
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;  // int
constexpr int CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10;  // int (bool)
constexpr int CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;  // CUdeviceptr
constexpr int CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;        // size_t
constexpr int CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14;  // unsigned long long (CUmemAllocationHandleType bits)
constexpr int CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17;    // CUmemoryPool
constexpr int CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18;      // size_t (CUDA 12.x)
constexpr int CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19; // void* (CUDA 12.x)

// CUmemorytype: 1 host, 2 device, 3 array, 4 unified; 0 = not a CUDA pointer.
constexpr unsigned CU_MEMORYTYPE_HOST = 1;
constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
constexpr unsigned CU_MEMORYTYPE_ARRAY = 3;
constexpr unsigned CU_MEMORYTYPE_UNIFIED = 4;

constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;
constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x01;
constexpr unsigned CU_MEMHOSTREGISTER_PORTABLE = 0x01;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DEFAULT = 0x0;
constexpr unsigned CU_EVENT_BLOCKING_SYNC = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned CU_EVENT_INTERPROCESS = 0x4;
constexpr unsigned CU_EVENT_WAIT_DEFAULT = 0x0;

// cuGetProcAddress
constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
constexpr int CU_GET_PROC_ADDRESS_SUCCESS = 0;
constexpr int CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
constexpr int CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;

// Every entry point is requested with this cudaVersion: the CUDA 12.0 ABI,
// which CUDA 12.x and 13.x drivers both serve. Older drivers are refused.
constexpr int kCudaAbiVersion = 12000;

// ---- the function table ----------------------------------------------------
// X(field, base name asked of cuGetProcAddress, return, parameters).
// The comment names the symbol cuda.h binds to for CUDA 12.0.
#define SMCUDA_DRIVER_FUNCTIONS(X)                                                            \
  X(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult, const char**))                     \
  X(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult, const char**))                 \
  X(cuInit, "cuInit", CUresult, (unsigned))                                                   \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int*))                                   \
  X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice*, int))                                   \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult, (char*, int, CUdevice))                     \
  /* -> cuDeviceGetUuid_v2 */                                                                 \
  X(cuDeviceGetUuid, "cuDeviceGetUuid", CUresult, (CUuuid*, CUdevice))                        \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", CUresult, (char*, int, CUdevice))             \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult, (int*, int, CUdevice))            \
  /* -> cuDeviceTotalMem_v2 */                                                                \
  X(cuDeviceTotalMem, "cuDeviceTotalMem", CUresult, (size_t*, CUdevice))                      \
  X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", CUresult, (int*, CUdevice, CUdevice))     \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext*, CUdevice))   \
  /* -> cuDevicePrimaryCtxRelease_v2 */                                                       \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", CUresult, (CUdevice))             \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                                \
  /* -> cuMemAlloc_v2, cuMemFree_v2 */                                                        \
  X(cuMemAlloc, "cuMemAlloc", CUresult, (CUdeviceptr*, size_t))                               \
  X(cuMemFree, "cuMemFree", CUresult, (CUdeviceptr))                                          \
  /* -> cuMemsetD8_v2 */                                                                      \
  X(cuMemsetD8, "cuMemsetD8", CUresult, (CUdeviceptr, unsigned char, size_t))                 \
  X(cuMemsetD8Async, "cuMemsetD8Async", CUresult, (CUdeviceptr, unsigned char, size_t, CUstream)) \
  /* -> cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemcpyDtoD_v2 and the _v2 Async pair */           \
  X(cuMemcpyHtoD, "cuMemcpyHtoD", CUresult, (CUdeviceptr, const void*, size_t))               \
  X(cuMemcpyDtoH, "cuMemcpyDtoH", CUresult, (void*, CUdeviceptr, size_t))                     \
  X(cuMemcpyDtoD, "cuMemcpyDtoD", CUresult, (CUdeviceptr, CUdeviceptr, size_t))               \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync", CUresult, (CUdeviceptr, const void*, size_t, CUstream)) \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync", CUresult, (void*, CUdeviceptr, size_t, CUstream)) \
  X(cuMemcpyAsync, "cuMemcpyAsync", CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))  \
  /* -> cuMemGetAddressRange_v2 */                                                            \
  X(cuMemGetAddressRange, "cuMemGetAddressRange", CUresult, (CUdeviceptr*, size_t*, CUdeviceptr)) \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", CUresult, (unsigned, int*, void**, CUdeviceptr)) \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", CUresult, (void*, int, CUdeviceptr))      \
  X(cuMemHostAlloc, "cuMemHostAlloc", CUresult, (void**, size_t, unsigned))                   \
  X(cuMemFreeHost, "cuMemFreeHost", CUresult, (void*))                                        \
  /* -> cuMemHostGetDevicePointer_v2 */                                                       \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer", CUresult, (CUdeviceptr*, void*, unsigned)) \
  /* -> cuMemHostRegister_v2 */                                                               \
  X(cuMemHostRegister, "cuMemHostRegister", CUresult, (void*, size_t, unsigned))              \
  X(cuMemHostUnregister, "cuMemHostUnregister", CUresult, (void*))                            \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", CUresult, (CUipcMemHandle*, CUdeviceptr))         \
  /* -> cuIpcOpenMemHandle_v2 */                                                              \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", CUresult, (CUdeviceptr*, CUipcMemHandle, unsigned)) \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", CUresult, (CUdeviceptr))                      \
  X(cuIpcGetEventHandle, "cuIpcGetEventHandle", CUresult, (CUipcEventHandle*, CUevent))       \
  X(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", CUresult, (CUevent*, CUipcEventHandle))     \
  X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream*, unsigned))                        \
  /* -> cuStreamDestroy_v2 */                                                                 \
  X(cuStreamDestroy, "cuStreamDestroy", CUresult, (CUstream))                                 \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))                         \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult, (CUstream, CUevent, unsigned))          \
  X(cuEventCreate, "cuEventCreate", CUresult, (CUevent*, unsigned))                           \
  /* -> cuEventDestroy_v2 */                                                                  \
  X(cuEventDestroy, "cuEventDestroy", CUresult, (CUevent))                                    \
  X(cuEventRecord, "cuEventRecord", CUresult, (CUevent, CUstream))                            \
  X(cuEventQuery, "cuEventQuery", CUresult, (CUevent))                                        \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent))                            \
  /* CUDA 12.0 ABI: the original cuEventElapsedTime (12.8 added a _v2) */                     \
  X(cuEventElapsedTime, "cuEventElapsedTime", CUresult, (float*, CUevent, CUevent))

// The virtual memory management (CUDA 10.2) and stream-ordered pool (11.2)
// entry points: resolved like the others, but their absence only turns off
// descriptor-exported memory (`fdMemory` in cudaStatus), not the driver.
#define SMCUDA_VMM_FUNCTIONS(X)                                                                  \
  X(cuMemCreate, "cuMemCreate", CUresult,                                                        \
    (CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long))     \
  X(cuMemRelease, "cuMemRelease", CUresult, (CUmemGenericAllocationHandle))                      \
  X(cuMemAddressReserve, "cuMemAddressReserve", CUresult,                                        \
    (CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long))                             \
  X(cuMemAddressFree, "cuMemAddressFree", CUresult, (CUdeviceptr, size_t))                       \
  X(cuMemMap, "cuMemMap", CUresult,                                                              \
    (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))             \
  X(cuMemUnmap, "cuMemUnmap", CUresult, (CUdeviceptr, size_t))                                   \
  X(cuMemSetAccess, "cuMemSetAccess", CUresult, (CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)) \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", CUresult,                    \
    (size_t*, const CUmemAllocationProp*, int))                                                  \
  X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", CUresult,                        \
    (CUmemGenericAllocationHandle*, void*))                                                      \
  X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", CUresult,                      \
    (void*, CUmemGenericAllocationHandle, int, unsigned long long))                              \
  X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", CUresult,                  \
    (CUmemGenericAllocationHandle*, void*, int))                                                 \
  X(cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", CUresult,  \
    (CUmemAllocationProp*, CUmemGenericAllocationHandle))                                        \
  X(cuMemPoolCreate, "cuMemPoolCreate", CUresult, (CUmemoryPool*, const CUmemPoolProps*))        \
  X(cuMemPoolDestroy, "cuMemPoolDestroy", CUresult, (CUmemoryPool))                              \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", CUresult,                                \
    (CUdeviceptr*, size_t, CUmemoryPool, CUstream))                                              \
  X(cuMemFreeAsync, "cuMemFreeAsync", CUresult, (CUdeviceptr, CUstream))                         \
  X(cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle", CUresult,              \
    (void*, CUmemoryPool, int, unsigned long long))                                              \
  X(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle", CUresult,          \
    (CUmemoryPool*, void*, int, unsigned long long))                                             \
  X(cuMemPoolExportPointer, "cuMemPoolExportPointer", CUresult, (CUmemPoolPtrExportData*, CUdeviceptr)) \
  X(cuMemPoolImportPointer, "cuMemPoolImportPointer", CUresult,                                  \
    (CUdeviceptr*, CUmemoryPool, CUmemPoolPtrExportData*))                                       \
  X(cuMemPoolSetAccess, "cuMemPoolSetAccess", CUresult, (CUmemoryPool, const CUmemAccessDesc*, size_t))

// ---- GPU-driven work (gpu_driven.cc) ----------------------------------------
// Three groups, each resolved like the VMM group: a missing entry point turns
// off its group only (gpuDrivenStatus says which and why), never the driver.
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef unsigned cuuint32_t;

// Stream memory operations: the v2 ABI, asked for with cudaVersion 11070 as
// NCCL does (src/misc/cudawrap.cc). Asked for by base name, cuGetProcAddress
// hands out cuStreamWaitValue32_v2 etc.; the v1 entry points (what an older
// cudaVersion or a plain dlsym gives) need CU_DEVICE_ATTRIBUTE_CAN_USE_
// STREAM_MEM_OPS_V1, which some drivers refuse.
constexpr int kStreamMemOpsAbiVersion = 11070;

union CUstreamBatchMemOpParams {
  int operation;  // CUstreamBatchMemOpType
  struct {
    int operation;
    CUdeviceptr address;
    union {
      cuuint32_t value;
      cuuint64_t value64;
    };
    unsigned flags;
    CUdeviceptr alias;  // driver-internal
  } waitValue, writeValue;
  struct {
    int operation;
    unsigned flags;
  } memoryBarrier;
  cuuint64_t pad[6];
};
static_assert(sizeof(CUstreamBatchMemOpParams) == 48, "CUstreamBatchMemOpParams is 48 bytes in cuda.h");

constexpr unsigned CU_STREAM_WAIT_VALUE_GEQ = 0x0;
constexpr unsigned CU_STREAM_WAIT_VALUE_EQ = 0x1;
constexpr unsigned CU_STREAM_WAIT_VALUE_AND = 0x2;
constexpr unsigned CU_STREAM_WAIT_VALUE_NOR = 0x3;
constexpr unsigned CU_STREAM_WAIT_VALUE_FLUSH = 1u << 30;
constexpr unsigned CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER = 0x1;
constexpr int CU_STREAM_MEM_OP_WAIT_VALUE_32 = 1;
constexpr int CU_STREAM_MEM_OP_WRITE_VALUE_32 = 2;
constexpr int CU_STREAM_MEM_OP_WAIT_VALUE_64 = 4;
constexpr int CU_STREAM_MEM_OP_WRITE_VALUE_64 = 5;
constexpr int CU_STREAM_MEM_OP_BARRIER = 6;
constexpr int CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122;
constexpr int CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR = 123;
constexpr int CU_STREAM_CAPTURE_STATUS_NONE = 0;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;

#define SMCUDA_MEMOP_FUNCTIONS(X)                                                                \
  /* -> cuStreamWaitValue32_v2 etc. (cudaVersion 11070) */                                      \
  X(cuStreamWaitValue32, "cuStreamWaitValue32", CUresult, (CUstream, CUdeviceptr, cuuint32_t, unsigned)) \
  X(cuStreamWaitValue64, "cuStreamWaitValue64", CUresult, (CUstream, CUdeviceptr, cuuint64_t, unsigned)) \
  X(cuStreamWriteValue32, "cuStreamWriteValue32", CUresult, (CUstream, CUdeviceptr, cuuint32_t, unsigned)) \
  X(cuStreamWriteValue64, "cuStreamWriteValue64", CUresult, (CUstream, CUdeviceptr, cuuint64_t, unsigned)) \
  X(cuStreamBatchMemOp, "cuStreamBatchMemOp", CUresult, (CUstream, unsigned, CUstreamBatchMemOpParams*, unsigned))

#define SMCUDA_GRAPH_FUNCTIONS(X)                                                                \
  /* -> cuStreamBeginCapture_v2 (with a capture mode) */                                         \
  X(cuStreamBeginCapture, "cuStreamBeginCapture", CUresult, (CUstream, int))                      \
  X(cuStreamEndCapture, "cuStreamEndCapture", CUresult, (CUstream, CUgraph*))                     \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", CUresult, (CUstream, int*))                       \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", CUresult, (CUgraphExec*, CUgraph, unsigned long long)) \
  X(cuGraphLaunch, "cuGraphLaunch", CUresult, (CUgraphExec, CUstream))                            \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", CUresult, (CUgraphExec))                            \
  X(cuGraphDestroy, "cuGraphDestroy", CUresult, (CUgraph))

// cuModuleLoadDataEx rather than cuLibraryLoadData: smcuda works in the
// current device's primary context, so a context-bound module is all it needs,
// the call exists on every driver, and the Ex form hands back the JIT's error
// log, which is the only useful part of a failed PTX load.
#define SMCUDA_MODULE_FUNCTIONS(X)                                                               \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", CUresult, (CUmodule*, const void*, unsigned, int*, void**)) \
  X(cuModuleUnload, "cuModuleUnload", CUresult, (CUmodule))                                       \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult, (CUfunction*, CUmodule, const char*))   \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", CUresult, (int*, int, CUfunction))                  \
  X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                                   \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**))

// ---- optional entry points ---------------------------------------------------
// Used when the driver has them, never required. cuMemcpyBatchAsync (CUDA
// 12.8) queues many copies in one call, and the GPU may run them at once: on
// 2xH200 four 1 MiB peer copies cost half as much a copy to queue as one by
// one, and run faster (bench/diary.md, 'Driver-level figures'). CUDA 13 dropped its failIdx parameter
// (cuMemcpyBatchAsync_v2), so the ABI asked for follows the driver's version.
struct CUmemLocation {
  int type;  // CUmemLocationType: 1 = device
  int id;
};
struct CUmemcpyAttributes {
  int srcAccessOrder;  // CUmemcpySrcAccessOrder: 1 = stream order
  CUmemLocation srcLocHint;
  CUmemLocation dstLocHint;
  unsigned flags;
};
constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 1;
constexpr int CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1;

// ---- virtual memory management and stream-ordered pools (cuda.h, CUDA 12) ---
constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 1;
constexpr int CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1;
constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3;
constexpr int CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0;

struct CUmemAllocationProp {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes in cuda.h");

struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CUmemAccess_flags
};
static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes in cuda.h");

struct CUmemPoolProps {
  int allocType;    // CUmemAllocationType
  int handleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;  // CUDA 12.2+; 0 (no limit) is what older drivers read as reserved
  unsigned short usage;
  unsigned char reserved[54];
};
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes in cuda.h");

constexpr size_t CU_MEM_POOL_PTR_EXPORT_DATA_SIZE = 64;
struct CUmemPoolPtrExportData { unsigned char reserved[CU_MEM_POOL_PTR_EXPORT_DATA_SIZE]; };
typedef CUresult (*MemcpyBatchAsyncV2)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*,
                                       size_t, CUstream);
typedef CUresult (*MemcpyBatchAsyncV1)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*,
                                       size_t, size_t*, CUstream);

struct DriverTable {
#define SMCUDA_FIELD(field, name, ret, params) ret(*field) params = nullptr;
  SMCUDA_DRIVER_FUNCTIONS(SMCUDA_FIELD)
  SMCUDA_VMM_FUNCTIONS(SMCUDA_FIELD)
  SMCUDA_MEMOP_FUNCTIONS(SMCUDA_FIELD)
  SMCUDA_GRAPH_FUNCTIONS(SMCUDA_FIELD)
  SMCUDA_MODULE_FUNCTIONS(SMCUDA_FIELD)
#undef SMCUDA_FIELD
};

// What loading libcuda.so.1 gave; set once, read-only afterwards.
struct DriverState {
  bool available = false;
  std::string reason;     // why not available, and how to fix it
  int driverVersion = 0;  // cuDriverGetVersion, 0 if unknown
  DriverTable fn;
  // At most one is set: v2 on CUDA 13 drivers, v1 on 12.8 and 12.9.
  MemcpyBatchAsyncV2 memcpyBatchV2 = nullptr;
  MemcpyBatchAsyncV1 memcpyBatchV1 = nullptr;
  // Every SMCUDA_VMM_FUNCTIONS entry resolved; else vmmReason says which was missing.
  bool vmm = false;
  std::string vmmReason;
  // The GPU-driven groups (SMCUDA_MEMOP/GRAPH/MODULE_FUNCTIONS), each all
  // resolved or off with a reason naming the missing entry point.
  bool memOps = false;
  std::string memOpsReason;
  bool graphs = false;
  std::string graphsReason;
  bool modules = false;
  std::string modulesReason;
};

// Loads libcuda.so.1 and resolves the table on first call (thread-safe);
// never throws. The result is the same for the life of the process.
const DriverState& Driver();

// "CUDA_ERROR_ALREADY_MAPPED" for 208: cuGetErrorName, else a built-in table,
// else "CUDA_ERROR_<n>". Safe from any thread.
std::string CuErrorName(CUresult r);
// cuGetErrorString, else "".
std::string CuErrorString(CUresult r);

// Builds the JS Error for a failed driver call: code = error name,
// call = function name, result = number, detail = cuGetErrorString;
// message "<call> failed: <code> (<n>): <detail>".
Napi::Error CuError(Napi::Env env, const char* call, CUresult r);
// Same, from strings computed off the JS thread (completion poller).
Napi::Error CuError(Napi::Env env, const std::string& call, CUresult r, const std::string& code,
                    const std::string& detail);
// The Error thrown when libcuda cannot be used: code 'SMCUDA_DRIVER_UNAVAILABLE'.
Napi::Error NoDriverError(Napi::Env env, const char* call);
// The Error thrown when the VMM/pool entry points are missing (code 'SMCUDA_DRIVER_UNAVAILABLE').
Napi::Error NoVmmError(Napi::Env env, const char* call);
// cuInit's failure as a status reason, with a fix where one is known.
std::string InitFailureReason(CUresult r);

// Like SMCUDA_REQUIRE_DRIVER, and the VMM/pool entry points are there too;
// throws SMCUDA_DRIVER_UNAVAILABLE with the reason otherwise.
#define SMCUDA_REQUIRE_VMM(env, call)                                  \
  do {                                                                 \
    SMCUDA_REQUIRE_DRIVER(env, call);                                  \
    if (!::smcuda::Driver().vmm) {                                     \
      ::smcuda::NoVmmError((env), (call)).ThrowAsJavaScriptException(); \
      return Napi::Value();                                            \
    }                                                                  \
  } while (0)

// One check for every driver call (one prefix, one macro): inside a function
// returning Napi::Value, calls Driver().fn.<f>(args...) and on failure throws
// the CUDA error and returns. Use only after SMCUDA_REQUIRE_DRIVER.
#define SMCUDA_CU(env, f, ...)                                         \
  do {                                                                 \
    ::smcuda::CUresult smcuda_r_ = ::smcuda::Driver().fn.f(__VA_ARGS__); \
    if (smcuda_r_ != ::smcuda::CUDA_SUCCESS) {                         \
      ::smcuda::CuError((env), #f, smcuda_r_).ThrowAsJavaScriptException(); \
      return Napi::Value();                                            \
    }                                                                  \
  } while (0)

// Loads the driver if needed; throws SMCUDA_DRIVER_UNAVAILABLE and returns if it is
// unusable.
#define SMCUDA_REQUIRE_DRIVER(env, call)                               \
  do {                                                                 \
    if (!::smcuda::Driver().available) {                               \
      ::smcuda::NoDriverError((env), (call)).ThrowAsJavaScriptException(); \
      return Napi::Value();                                            \
    }                                                                  \
  } while (0)

}  // namespace smcuda
