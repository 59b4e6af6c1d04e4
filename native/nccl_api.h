// The few NCCL types and entry points smcuda calls, declared here so that
// NCCL is never a build dependency: libnccl.so.2 is dlopen'ed at run time
// (nccl.cc). Values and layouts from NCCL's src/nccl.h.in (2.27; ncclTimeout
// is 2.30's).
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>

namespace smcuda {

typedef int ncclResult_t;  // an enum in nccl.h: int-sized
const ncclResult_t kNcclSuccess = 0;
const ncclResult_t kNcclInProgress = 7;  // a non-blocking communicator is still working

typedef struct ncclComm* ncclComm_t;
typedef void* ncclWindow_t;
typedef void* cudaStream_t;  // a CUstream: the runtime takes the driver's streams

struct ncclUniqueId {
  char internal[128];
};

// ncclConfig_v22700. NCCL reads `size` bytes of it and the fields `version`
// knows, so a newer NCCL takes it as it is, and an older one (>= 2.14) reads
// the prefix it knows.
struct ncclConfig_t {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
};

const unsigned int kNcclConfigMagic = 0xcafebeef;
const unsigned int kNcclConfigVersion = 22700;  // NCCL_VERSION(2, 27, 0)
const int kNcclConfigUndef = INT_MIN;

// NCCL_CONFIG_INITIALIZER of nccl.h 2.27.
inline ncclConfig_t NcclConfigInitializer() {
  return ncclConfig_t{sizeof(ncclConfig_t),
                      kNcclConfigMagic,
                      kNcclConfigVersion,
                      kNcclConfigUndef,
                      kNcclConfigUndef,
                      kNcclConfigUndef,
                      kNcclConfigUndef,
                      nullptr,
                      kNcclConfigUndef,
                      kNcclConfigUndef,
                      nullptr,
                      kNcclConfigUndef,
                      kNcclConfigUndef,
                      kNcclConfigUndef,
                      kNcclConfigUndef};
}

// ncclDataType_t and ncclRedOp_t are int-sized enums; TypeScript names them.
typedef int ncclDataType_t;
typedef int ncclRedOp_t;

// X(field, "name", return type, parameter list): every entry point smcuda
// needs; a missing one means the library is not a usable NCCL.
#define SMCUDA_NCCL_FUNCTIONS(X)                                                                                   \
  X(getVersion, "ncclGetVersion", ncclResult_t, (int*))                                                            \
  X(getUniqueId, "ncclGetUniqueId", ncclResult_t, (ncclUniqueId*))                                                 \
  X(commInitRankConfig, "ncclCommInitRankConfig", ncclResult_t, (ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*)) \
  X(commAbort, "ncclCommAbort", ncclResult_t, (ncclComm_t))                                                        \
  X(commDestroy, "ncclCommDestroy", ncclResult_t, (ncclComm_t))                                                    \
  X(commGetAsyncError, "ncclCommGetAsyncError", ncclResult_t, (ncclComm_t, ncclResult_t*))                         \
  X(getErrorString, "ncclGetErrorString", const char*, (ncclResult_t))                                             \
  X(commCount, "ncclCommCount", ncclResult_t, (ncclComm_t, int*))                                                  \
  X(commUserRank, "ncclCommUserRank", ncclResult_t, (ncclComm_t, int*))                                            \
  X(allReduce, "ncclAllReduce", ncclResult_t,                                                                      \
    (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))                           \
  X(broadcast, "ncclBroadcast", ncclResult_t, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
  X(reduce, "ncclReduce", ncclResult_t,                                                                            \
    (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t))                      \
  X(allGather, "ncclAllGather", ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)) \
  X(reduceScatter, "ncclReduceScatter", ncclResult_t,                                                              \
    (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))                           \
  X(send, "ncclSend", ncclResult_t, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))          \
  X(recv, "ncclRecv", ncclResult_t, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                \
  X(groupStart, "ncclGroupStart", ncclResult_t, ())                                                                \
  X(groupEnd, "ncclGroupEnd", ncclResult_t, ())

// Entry points of later NCCLs: each found or not, and reported (ncclLoad's
// `symbols`); only the calls that need a missing one fail.
#define SMCUDA_NCCL_OPTIONAL_FUNCTIONS(X)                                                                         \
  X(commSplit, "ncclCommSplit", ncclResult_t, (ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*))  /* 2.18 */    \
  X(getLastError, "ncclGetLastError", const char*, (ncclComm_t))                                   /* 2.13 */    \
  X(commRegister, "ncclCommRegister", ncclResult_t, (ncclComm_t, void*, size_t, void**))           /* 2.19 */    \
  X(commDeregister, "ncclCommDeregister", ncclResult_t, (ncclComm_t, void*))                       /* 2.19 */    \
  X(commWindowRegister, "ncclCommWindowRegister", ncclResult_t, (ncclComm_t, void*, size_t, ncclWindow_t*, int)) \
  X(commWindowDeregister, "ncclCommWindowDeregister", ncclResult_t, (ncclComm_t, ncclWindow_t))    /* 2.27 */ \
  X(memAlloc, "ncclMemAlloc", ncclResult_t, (void**, size_t))                                      /* 2.19 */    \
  X(memFree, "ncclMemFree", ncclResult_t, (void*))                                                 /* 2.19 */

struct NcclTable {
#define SMCUDA_NCCL_FIELD(field, name, ret, params) ret(*field) params = nullptr;
  SMCUDA_NCCL_FUNCTIONS(SMCUDA_NCCL_FIELD)
  SMCUDA_NCCL_OPTIONAL_FUNCTIONS(SMCUDA_NCCL_FIELD)
#undef SMCUDA_NCCL_FIELD
};

}  // namespace smcuda
