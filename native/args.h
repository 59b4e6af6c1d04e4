// Argument helpers of the driver-call bindings (cuda_calls.cc,
// gpu_driven.cc): each checks one JS argument enough that a wrong type can
// never become a wild pointer, throws a TypeError/RangeError and returns false
// otherwise. The typed checks with good messages are in TypeScript.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>

namespace smcuda {
namespace args {

inline bool ArgU64(const Napi::CallbackInfo& info, size_t i, const char* name, uint64_t* out) {
  if (!info[i].IsBigInt()) {
    Napi::TypeError::New(info.Env(), std::string(name) + " must be a BigInt").ThrowAsJavaScriptException();
    return false;
  }
  bool lossless = false;
  *out = info[i].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) {
    Napi::RangeError::New(info.Env(), std::string(name) + " must fit in 64 unsigned bits").ThrowAsJavaScriptException();
    return false;
  }
  return true;
}

inline bool ArgSize(const Napi::CallbackInfo& info, size_t i, const char* name, size_t* out) {
  if (!info[i].IsNumber()) {
    Napi::TypeError::New(info.Env(), std::string(name) + " must be a Number").ThrowAsJavaScriptException();
    return false;
  }
  double v = info[i].As<Napi::Number>().DoubleValue();
  if (!(v >= 0 && v <= 9007199254740991.0) || v != static_cast<double>(static_cast<uint64_t>(v))) {
    Napi::RangeError::New(info.Env(), std::string(name) + " must be a non-negative safe integer")
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<size_t>(v);
  return true;
}

inline bool ArgInt(const Napi::CallbackInfo& info, size_t i, const char* name, int* out) {
  size_t v = 0;
  if (!ArgSize(info, i, name, &v)) return false;
  if (v > 0x7fffffff) {
    Napi::RangeError::New(info.Env(), std::string(name) + " must fit in int32").ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

// `bytes` bytes at `offset` inside the ArrayBuffer at argument i.
inline bool ArgHostRange(const Napi::CallbackInfo& info, size_t i, size_t offset, size_t bytes, const char* name,
                  void** out) {
  if (!info[i].IsArrayBuffer()) {
    Napi::TypeError::New(info.Env(), std::string(name) + " must be an ArrayBuffer").ThrowAsJavaScriptException();
    return false;
  }
  Napi::ArrayBuffer ab = info[i].As<Napi::ArrayBuffer>();
  size_t length = ab.ByteLength();
  if (offset > length || bytes > length - offset) {
    Napi::RangeError::New(info.Env(), std::string(name) + ": offset " + std::to_string(offset) + " + " +
                                          std::to_string(bytes) + " bytes exceeds its " + std::to_string(length) +
                                          " bytes")
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<char*>(ab.Data()) + offset;
  return true;
}

#define ARG_U64(var, i) \
  uint64_t var = 0;     \
  if (!::smcuda::args::ArgU64(info, i, #var, &var)) return Napi::Value()
#define ARG_SIZE(var, i) \
  size_t var = 0;        \
  if (!::smcuda::args::ArgSize(info, i, #var, &var)) return Napi::Value()
#define ARG_INT(var, i) \
  int var = 0;          \
  if (!::smcuda::args::ArgInt(info, i, #var, &var)) return Napi::Value()

template <typename T>
inline T As(uint64_t v) { return reinterpret_cast<T>(static_cast<uintptr_t>(v)); }

inline Napi::BigInt Big(Napi::Env env, uint64_t v) { return Napi::BigInt::New(env, v); }
template <typename T>
inline Napi::BigInt Big(Napi::Env env, T* p) { return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }

// A typed array argument of at least `count` elements.
template <typename T>
bool ArgTyped(const Napi::CallbackInfo& info, size_t i, napi_typedarray_type type, size_t count, const char* name,
              T** out) {
  if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != type) {
    Napi::TypeError::New(info.Env(), std::string(name) + " has the wrong typed array type")
        .ThrowAsJavaScriptException();
    return false;
  }
  Napi::TypedArrayOf<T> a = info[i].As<Napi::TypedArrayOf<T>>();
  if (a.ElementLength() < count) {
    Napi::RangeError::New(info.Env(), std::string(name) + " holds fewer than " + std::to_string(count) + " entries")
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = a.Data();
  return true;
}

}  // namespace args
}  // namespace smcuda
