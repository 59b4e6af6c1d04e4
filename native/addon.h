// Shared declarations of the native addon. The native layer is thin: driver
// calls, memory, completion. All protocol logic lives in TypeScript.
#pragma once
#include <napi.h>

namespace smcuda {
// cuda_calls.cc: dlopen("libcuda.so.1") and one JS function per driver call.
void InitCuda(Napi::Env env, Napi::Object exports);
// gpu_driven.cc: stream memory operations, capture and graphs, PTX modules, kernel launch.
void InitGpuDriven(Napi::Env env, Napi::Object exports);
// completion.cc: event completion -> Promise, through one poller thread.
void InitCompletion(Napi::Env env, Napi::Object exports);
// shm.cc: POSIX shared memory segments mapped into ArrayBuffers.
void InitShm(Napi::Env env, Napi::Object exports);
// peercred.cc: SO_PEERCRED of a connected Unix socket (who is the peer).
void InitPeerCred(Napi::Env env, Napi::Object exports);
// fd_passing.cc: SCM_RIGHTS over Unix SOCK_SEQPACKET sockets, fd readiness, memfd.
void InitFdPassing(Napi::Env env, Napi::Object exports);
// host_mapping.cc: host address ranges made of file mappings (the simulator's VMM).
void InitHostMapping(Napi::Env env, Napi::Object exports);
// floor.cc: the bench's native floor, an RGET ping-pong of two processes spinning on shared host flags.
void InitFloor(Napi::Env env, Napi::Object exports);
// nccl.cc: libnccl.so.2 dlopen'ed at run time, one function per NCCL call.
void InitNccl(Napi::Env env, Napi::Object exports);
}  // namespace smcuda
