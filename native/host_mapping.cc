// Host address ranges made of file mappings: what the simulated driver uses to
// model the virtual memory management API with real descriptors.
//
// hostReserve takes a PROT_NONE anonymous range (like cuMemAddressReserve:
// addresses, no memory); hostMapFd maps a file's bytes over part of it with
// MAP_FIXED (like cuMemMap), so chunks from several descriptors appear as one
// contiguous view; hostUnmapRange puts PROT_NONE back (cuMemUnmap, the
// reservation stays); hostRelease gives the range back (cuMemAddressFree).
//
// Ownership as in shm.cc: the ArrayBuffer carries a Range via napi_wrap;
// hostRelease removes it, detaches the buffer and munmaps; a buffer dropped
// unreleased is munmapped at garbage collection. JS must never read a part
// that is not mapped (it would fault): the simulator checks every view
// against its own record of mapped chunks first.
#include <cerrno>
#include <cstring>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "addon.h"

namespace smcuda {
namespace {

struct Range {
  void* addr;
  size_t length;
};

Napi::Value ThrowMapErrno(Napi::Env env, const char* call, int err) {
  std::string code = err == ENOMEM ? "ENOMEM" : err == EINVAL ? "EINVAL" : err == EBADF ? "EBADF" : err == EACCES ? "EACCES"
                                                                                                                   : "E" + std::to_string(err);
  Napi::Error e = Napi::Error::New(env, std::string(call) + " failed: " + code + " (" + std::strerror(err) + ")");
  e.Set("code", Napi::String::New(env, code));
  e.Set("call", Napi::String::New(env, call));
  e.Set("errno", Napi::Number::New(env, err));
  e.ThrowAsJavaScriptException();
  return Napi::Value();
}

void FinalizeRange(napi_env, void* data, void*) {
  auto* r = static_cast<Range*>(data);
  munmap(r->addr, r->length);
  delete r;
}

Range* ArgRange(const Napi::CallbackInfo& info) {
  void* data = nullptr;
  if (!info[0].IsArrayBuffer() || napi_unwrap(info.Env(), info[0], &data) != napi_ok || !data) {
    Napi::TypeError::New(info.Env(), "range must be an ArrayBuffer from hostReserve that is not released")
        .ThrowAsJavaScriptException();
    return nullptr;
  }
  return static_cast<Range*>(data);
}

bool ArgSpan(const Napi::CallbackInfo& info, size_t i, const Range* r, size_t* off, size_t* len) {
  if (!info[i].IsNumber() || !info[i + 1].IsNumber()) {
    Napi::TypeError::New(info.Env(), "offset and length must be numbers").ThrowAsJavaScriptException();
    return false;
  }
  double o = info[i].As<Napi::Number>().DoubleValue();
  double l = info[i + 1].As<Napi::Number>().DoubleValue();
  long page = sysconf(_SC_PAGESIZE);
  if (!(o >= 0 && l > 0) || o + l > static_cast<double>(r->length) || static_cast<size_t>(o) % page != 0) {
    Napi::RangeError::New(info.Env(), "offset (page aligned) and length must lie inside the range")
        .ThrowAsJavaScriptException();
    return false;
  }
  *off = static_cast<size_t>(o);
  *len = static_cast<size_t>(l);
  return true;
}

// hostReserve(bytes) -> ArrayBuffer over PROT_NONE addresses
Napi::Value HostReserve(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  // Range first: casting a double past size_t's range is undefined behaviour.
  if (!info[0].IsNumber() || !(info[0].As<Napi::Number>().DoubleValue() > 0 &&
                               info[0].As<Napi::Number>().DoubleValue() <= 9007199254740991.0)) {
    Napi::RangeError::New(env, "hostReserve(bytes): bytes must be positive and at most 2^53-1").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  size_t bytes = static_cast<size_t>(info[0].As<Napi::Number>().DoubleValue());
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return ThrowMapErrno(env, "mmap", errno);
  napi_value ab = nullptr;
  if (napi_create_external_arraybuffer(env, p, bytes, nullptr, nullptr, &ab) != napi_ok) {
    munmap(p, bytes);
    Napi::Error::New(env, "hostReserve: cannot wrap the range").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  auto* r = new Range{p, bytes};
  if (napi_wrap(env, ab, r, FinalizeRange, nullptr, nullptr) != napi_ok) {
    delete r;
    munmap(p, bytes);
    Napi::Error::New(env, "hostReserve: cannot attach ownership").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return Napi::Value(env, ab);
}

// hostMapFd(range, offset, length, fd, fdOffset): the file's bytes, shared, over [offset, offset+length)
Napi::Value HostMapFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Range* r = ArgRange(info);
  size_t off = 0, len = 0;
  if (!r || !ArgSpan(info, 1, r, &off, &len)) return Napi::Value();
  if (!info[3].IsNumber() || !info[4].IsNumber()) {
    Napi::TypeError::New(env, "fd and fdOffset must be numbers").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  int fd = info[3].As<Napi::Number>().Int32Value();
  double fdOffset = info[4].As<Napi::Number>().DoubleValue();
  if (!(fdOffset >= 0 && fdOffset <= 9007199254740991.0)) {
    Napi::RangeError::New(env, "fdOffset must be a non-negative safe integer").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  off_t fdOff = static_cast<off_t>(fdOffset);
  void* at = static_cast<char*>(r->addr) + off;
  void* p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, fdOff);
  if (p == MAP_FAILED) return ThrowMapErrno(env, "mmap", errno);
  return env.Undefined();
}

// hostUnmapRange(range, offset, length): back to PROT_NONE (the addresses stay reserved)
Napi::Value HostUnmapRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Range* r = ArgRange(info);
  size_t off = 0, len = 0;
  if (!r || !ArgSpan(info, 1, r, &off, &len)) return Napi::Value();
  void* at = static_cast<char*>(r->addr) + off;
  void* p = mmap(at, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) return ThrowMapErrno(env, "mmap", errno);
  return env.Undefined();
}

// hostRelease(range): munmap; the ArrayBuffer is detached.
Napi::Value HostRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  void* data = nullptr;
  if (!info[0].IsArrayBuffer() || napi_remove_wrap(env, info[0], &data) != napi_ok || !data) {
    Napi::TypeError::New(env, "range must be an ArrayBuffer from hostReserve that is not released")
        .ThrowAsJavaScriptException();
    return Napi::Value();
  }
  auto* r = static_cast<Range*>(data);
  info[0].As<Napi::ArrayBuffer>().Detach();
  munmap(r->addr, r->length);
  delete r;
  return env.Undefined();
}

}  // namespace

void InitHostMapping(Napi::Env env, Napi::Object exports) {
  exports.Set("hostReserve", Napi::Function::New(env, HostReserve, "hostReserve"));
  exports.Set("hostMapFd", Napi::Function::New(env, HostMapFd, "hostMapFd"));
  exports.Set("hostUnmapRange", Napi::Function::New(env, HostUnmapRange, "hostUnmapRange"));
  exports.Set("hostRelease", Napi::Function::New(env, HostRelease, "hostRelease"));
}

}  // namespace smcuda
