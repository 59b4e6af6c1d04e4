// Module entry point. Each concept registers its functions from its own file.
#include "addon.h"

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  smcuda::InitCuda(env, exports);
  smcuda::InitGpuDriven(env, exports);
  smcuda::InitCompletion(env, exports);
  smcuda::InitShm(env, exports);
  smcuda::InitPeerCred(env, exports);
  smcuda::InitFdPassing(env, exports);
  smcuda::InitHostMapping(env, exports);
  smcuda::InitFloor(env, exports);
  smcuda::InitNccl(env, exports);
  return exports;
}

NODE_API_MODULE(smcuda, Init)
