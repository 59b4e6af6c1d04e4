// POSIX shared memory segments, mapped into external ArrayBuffers.
//
// Used by the simulated CUDA driver (each "device allocation" is a segment
// another process can open) and by host staging (pinned shared buffers).
//
// Ownership: every ArrayBuffer handed to JS carries a `Mapping` attached with
// napi_wrap. shmClose removes the wrap, munmaps and detaches the buffer, so JS
// can never touch unmapped memory; if JS drops the buffer without closing it,
// the wrap's finalizer munmaps at garbage collection. A zero-byte segment
// cannot be mmap'ed: it gets an ordinary empty ArrayBuffer (still wrapped, so
// shmClose treats it like any other).
#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addon.h"

namespace smcuda {
namespace {

struct Mapping {
  void* addr;     // nullptr for a zero-byte segment
  size_t length;  // bytes mapped (the segment size)
};

// errno as its symbolic name; a small table rather than strerrorname_np,
// which older glibc (< 2.32) lacks.
const char* ErrnoName(int err) {
  switch (err) {
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case ENOSPC: return "ENOSPC";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EFBIG: return "EFBIG";
    case EBADF: return "EBADF";
    case EINTR: return "EINTR";
    case ENODEV: return "ENODEV";
    case EOVERFLOW: return "EOVERFLOW";
    case EAGAIN: return "EAGAIN";
    default: return nullptr;
  }
}

// Throws an Error with code = errno name, call = the system call, errno = n.
void ThrowErrno(Napi::Env env, const char* call, int err, const std::string& name) {
  const char* known = ErrnoName(err);
  std::string code = known ? known : "E" + std::to_string(err);
  std::string msg = std::string(call) + "('" + name + "') failed: " + code + " (" + std::strerror(err) + ")";
  if (err == ENOSPC || err == ENOMEM) msg += ": /dev/shm is full or too small; free space or enlarge it (e.g. docker --shm-size)";
  if (err == EEXIST) msg += ": a segment with this name already exists; pick another name or shm_unlink it";
  if (err == ENOENT) msg += ": no such segment; it was never created or was already unlinked";
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::String::New(env, code));
  e.Set("call", Napi::String::New(env, call));
  e.Set("errno", Napi::Number::New(env, err));
  e.ThrowAsJavaScriptException();
}

void ThrowType(Napi::Env env, const std::string& msg) {
  Napi::TypeError::New(env, msg).ThrowAsJavaScriptException();
}

void FinalizeMapping(napi_env /*env*/, void* data, void* /*hint*/) {
  auto* m = static_cast<Mapping*>(data);
  if (m->addr) munmap(m->addr, m->length);
  delete m;
}

// Wraps a mapping of `fd` (`length` bytes) into an external ArrayBuffer.
// Closes nothing: the caller owns `fd`. Returns an empty value on error
// (an exception is pending).
Napi::Value MapToArrayBuffer(Napi::Env env, int fd, size_t length, const std::string& name) {
  void* addr = nullptr;
  Napi::ArrayBuffer ab;
  if (length > 0) {
    addr = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
      ThrowErrno(env, "mmap", errno, name);
      return Napi::Value();
    }
    // No finalizer on the buffer itself: the wrap below owns the mapping.
    ab = Napi::ArrayBuffer::New(env, addr, length);
  } else {
    ab = Napi::ArrayBuffer::New(env, 0);
  }
  auto* m = new Mapping{addr, length};
  napi_status st = napi_wrap(env, ab, m, FinalizeMapping, nullptr, nullptr);
  if (st != napi_ok) {
    if (addr) munmap(addr, length);
    delete m;
    Napi::Error::New(env, "napi_wrap failed on a shared-memory ArrayBuffer").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return ab;
}

bool GetName(const Napi::CallbackInfo& info, std::string* out) {
  if (info.Length() < 1 || !info[0].IsString()) {
    ThrowType(info.Env(), "name must be a string like '/segment'");
    return false;
  }
  *out = info[0].As<Napi::String>().Utf8Value();
  return true;
}

// shmCreate(name, bytes): O_CREAT|O_EXCL, mode 0600, ftruncate, mmap.
Napi::Value ShmCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name;
  if (!GetName(info, &name)) return env.Undefined();
  if (info.Length() < 2 || !info[1].IsNumber()) {
    ThrowType(env, "bytes must be a non-negative integer");
    return env.Undefined();
  }
  double bytes = info[1].As<Napi::Number>().DoubleValue();
  // Range first: casting a double past int64's range is undefined behaviour.
  if (!(bytes >= 0 && bytes <= 9007199254740991.0) || bytes != static_cast<double>(static_cast<int64_t>(bytes))) {
    Napi::RangeError::New(env, "bytes must be a non-negative safe integer").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    ThrowErrno(env, "shm_open", errno, name);
    return env.Undefined();
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    ThrowErrno(env, "ftruncate", err, name);
    return env.Undefined();
  }
  // Reserve the pages now: on a full tmpfs a sparse segment would SIGBUS the
  // process at first touch; reserving turns that into ENOSPC here.
  if (bytes > 0) {
    int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      close(fd);
      shm_unlink(name.c_str());
      ThrowErrno(env, "posix_fallocate", err, name);
      return env.Undefined();
    }
  }
  Napi::Value ab = MapToArrayBuffer(env, fd, static_cast<size_t>(bytes), name);
  close(fd);  // the mapping stays valid without the descriptor
  if (ab.IsEmpty()) {
    shm_unlink(name.c_str());
    return env.Undefined();
  }
  return ab;
}

// shmOpen(name): existing segment, size from fstat.
Napi::Value ShmOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name;
  if (!GetName(info, &name)) return env.Undefined();
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    ThrowErrno(env, "shm_open", errno, name);
    return env.Undefined();
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    ThrowErrno(env, "fstat", err, name);
    return env.Undefined();
  }
  Napi::Value ab = MapToArrayBuffer(env, fd, static_cast<size_t>(st.st_size), name);
  close(fd);
  if (ab.IsEmpty()) return env.Undefined();
  return ab;
}

// shmClose(buffer): munmap + detach. Idempotent: closing a detached buffer
// that was ours is a no-op.
Napi::Value ShmClose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) {
    ThrowType(env, "shmClose expects the ArrayBuffer returned by shmCreate/shmOpen");
    return env.Undefined();
  }
  napi_value ab = info[0];
  void* data = nullptr;
  if (napi_remove_wrap(env, ab, &data) != napi_ok || data == nullptr) {
    // Not (or no longer) wrapped: fine if it was already closed.
    bool detached = false;
    napi_is_detached_arraybuffer(env, ab, &detached);
    if (env.IsExceptionPending()) env.GetAndClearPendingException();
    if (detached) return env.Undefined();
    ThrowType(env, "shmClose: this ArrayBuffer is not a shared-memory mapping from shmCreate/shmOpen");
    return env.Undefined();
  }
  auto* m = static_cast<Mapping*>(data);
  // Detach first so no JS view can reach the pages once they are gone.
  napi_status st = napi_detach_arraybuffer(env, ab);
  if (m->addr) munmap(m->addr, m->length);
  delete m;
  if (st != napi_ok) {
    Napi::Error::New(env, "shmClose: could not detach the ArrayBuffer (it was unmapped anyway; do not use it)")
        .ThrowAsJavaScriptException();
  }
  return env.Undefined();
}

Napi::Value ShmUnlink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name;
  if (!GetName(info, &name)) return env.Undefined();
  if (shm_unlink(name.c_str()) != 0) ThrowErrno(env, "shm_unlink", errno, name);
  return env.Undefined();
}

// bufferAddress(buffer): address of the first byte, for cuMemHostRegister.
Napi::Value BufferAddress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) {
    ThrowType(env, "bufferAddress expects an ArrayBuffer");
    return env.Undefined();
  }
  void* data = info[0].As<Napi::ArrayBuffer>().Data();
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data)));
}

}  // namespace

void InitShm(Napi::Env env, Napi::Object exports) {
  exports.Set("shmCreate", Napi::Function::New(env, ShmCreate, "shmCreate"));
  exports.Set("shmOpen", Napi::Function::New(env, ShmOpen, "shmOpen"));
  exports.Set("shmClose", Napi::Function::New(env, ShmClose, "shmClose"));
  exports.Set("shmUnlink", Napi::Function::New(env, ShmUnlink, "shmUnlink"));
  exports.Set("bufferAddress", Napi::Function::New(env, BufferAddress, "bufferAddress"));
}

}  // namespace smcuda
