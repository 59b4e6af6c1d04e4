// Shared memory segments, mapped into external ArrayBuffers.
//
// Named POSIX segments (shm_open) are used by the simulated CUDA driver (each
// "device allocation" is a segment another process can open by name).
// Anonymous sealed segments (memfd_create) carry a job's control and staging
// rings: they have no name another process could open, and are handed to the
// authenticated peer as descriptors (src/channel/sealed-segment.ts). Sealed
// against shrinking and growing, a peer cannot truncate one under our
// mapping (which would SIGBUS us); the receiver checks the seals and the size
// before it maps (sealedMap).
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
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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
// Closes nothing: the caller owns `fd`. Returns an empty value on error,
// with exactly one exception pending: a second napi_throw while one is
// pending is a fatal error (the process aborts), so every failure below
// clears what the engine left pending before throwing its own.
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
    if (env.IsExceptionPending() || ab.IsEmpty()) {
      // Larger than an ArrayBuffer may be in this runtime (Node 20: 4 GiB).
      if (env.IsExceptionPending()) env.GetAndClearPendingException();
      munmap(addr, length);
      Napi::RangeError e = Napi::RangeError::New(env, "segment '" + name + "' of " + std::to_string(length) +
                                                          " bytes is larger than an ArrayBuffer may be in this runtime");
      e.Set("code", Napi::String::New(env, "EFBIG"));
      e.ThrowAsJavaScriptException();
      return Napi::Value();
    }
  } else {
    ab = Napi::ArrayBuffer::New(env, 0);
    if (env.IsExceptionPending()) return Napi::Value();
  }
  auto* m = new Mapping{addr, length};
  napi_status st = napi_wrap(env, ab, m, FinalizeMapping, nullptr, nullptr);
  if (st != napi_ok) {
    if (addr) munmap(addr, length);
    delete m;
    if (env.IsExceptionPending()) env.GetAndClearPendingException();
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

// shmOpen(name[, bytes]): existing segment, size from fstat. With `bytes`
// (the size a peer announced), a segment of any other size is refused
// before anything is mapped: a peer cannot make this process map more than
// it agreed to (a sparse 8 GiB segment), nor less than it will touch.
Napi::Value ShmOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name;
  if (!GetName(info, &name)) return env.Undefined();
  double expected = -1;
  if (info.Length() >= 2 && !info[1].IsUndefined()) {
    if (!info[1].IsNumber()) {
      ThrowType(env, "bytes must be a non-negative integer or undefined");
      return env.Undefined();
    }
    expected = info[1].As<Napi::Number>().DoubleValue();
    if (!(expected >= 0) || expected != static_cast<double>(static_cast<int64_t>(expected))) {
      Napi::RangeError::New(env, "bytes must be a non-negative integer").ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }
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
  if (expected >= 0 && static_cast<double>(st.st_size) != expected) {
    close(fd);
    Napi::Error e = Napi::Error::New(env, "segment '" + name + "' is " + std::to_string(st.st_size) + " bytes, not the " +
                                              std::to_string(static_cast<int64_t>(expected)) + " announced: refused, not mapped");
    e.Set("code", Napi::String::New(env, "ESIZE"));
    e.ThrowAsJavaScriptException();
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

// The seals every ring segment carries: no shrinking (a peer's mapping would
// SIGBUS), no growing (its size is what was announced), and no further seals
// (F_SEAL_WRITE/FUTURE_WRITE could not be added to make our writes fail).
constexpr int kRingSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

void ThrowCode(Napi::Env env, const char* code, const std::string& msg) {
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::String::New(env, code));
  e.ThrowAsJavaScriptException();
}

bool GetBytes(const Napi::CallbackInfo& info, size_t i, double* out) {
  if (info.Length() <= i || !info[i].IsNumber()) {
    ThrowType(info.Env(), "bytes must be a non-negative integer");
    return false;
  }
  double b = info[i].As<Napi::Number>().DoubleValue();
  if (!(b >= 0) || b != static_cast<double>(static_cast<int64_t>(b))) {
    Napi::RangeError::New(info.Env(), "bytes must be a non-negative integer").ThrowAsJavaScriptException();
    return false;
  }
  *out = b;
  return true;
}

// sealedCreate(label, bytes[, seal = true]) -> { fd, buffer }: an anonymous
// segment (memfd_create, close-on-exec), sized, every page reserved, sealed
// (kRingSeals) and mapped. The caller owns `fd` (pass it, then fdClose it).
// `seal` false exists only to play a hostile peer in tests.
Napi::Value SealedCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) {
    ThrowType(env, "label must be a string");
    return env.Undefined();
  }
  std::string label = info[0].As<Napi::String>().Utf8Value();
  double bytes;
  if (!GetBytes(info, 1, &bytes)) return env.Undefined();
  bool seal = info.Length() < 3 || !info[2].IsBoolean() || info[2].As<Napi::Boolean>().Value();
  int fd = static_cast<int>(syscall(SYS_memfd_create, label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) {
    ThrowErrno(env, "memfd_create", errno, label);
    return env.Undefined();
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    ThrowErrno(env, "ftruncate", err, label);
    return env.Undefined();
  }
  if (bytes > 0) {
    // Reserve the pages now: memory short shows here (ENOSPC/ENOMEM), not as a SIGBUS at first touch.
    int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      close(fd);
      ThrowErrno(env, "posix_fallocate", err, label);
      return env.Undefined();
    }
  }
  if (seal && fcntl(fd, F_ADD_SEALS, kRingSeals) != 0) {
    int err = errno;
    close(fd);
    ThrowErrno(env, "fcntl(F_ADD_SEALS)", err, label);
    return env.Undefined();
  }
  Napi::Value ab = MapToArrayBuffer(env, fd, static_cast<size_t>(bytes), label);
  if (ab.IsEmpty()) {
    close(fd);
    return env.Undefined();
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("fd", Napi::Number::New(env, fd));
  out.Set("buffer", ab);
  return out;
}

// sealedMap(fd, bytes) -> buffer: maps a segment a peer handed over, only if
// it carries kRingSeals (code 'ESEALS': anything else, a file that cannot be
// sealed included) and is exactly `bytes` long (code 'ESIZE'). Checked before
// mmap; the seals make both facts permanent. Does not close `fd`.
Napi::Value SealedMap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) {
    ThrowType(env, "fd must be a non-negative integer");
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  double bytes;
  if (!GetBytes(info, 1, &bytes)) return env.Undefined();
  std::string what = "descriptor " + std::to_string(fd);
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kRingSeals) != kRingSeals) {
    ThrowCode(env, "ESEALS",
              what + (seals < 0 ? " is not a sealable anonymous segment (" + std::string(std::strerror(errno)) + ")"
                                : " lacks the seals F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL") +
                  ": refused, not mapped");
    return env.Undefined();
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ThrowErrno(env, "fstat", errno, what);
    return env.Undefined();
  }
  if (static_cast<double>(st.st_size) != bytes) {
    ThrowCode(env, "ESIZE", what + " is " + std::to_string(st.st_size) + " bytes, not the " +
                                std::to_string(static_cast<int64_t>(bytes)) + " announced: refused, not mapped");
    return env.Undefined();
  }
  Napi::Value ab = MapToArrayBuffer(env, fd, static_cast<size_t>(bytes), what);
  if (ab.IsEmpty()) return env.Undefined();
  return ab;
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
  exports.Set("sealedCreate", Napi::Function::New(env, SealedCreate, "sealedCreate"));
  exports.Set("sealedMap", Napi::Function::New(env, SealedMap, "sealedMap"));
  exports.Set("bufferAddress", Napi::Function::New(env, BufferAddress, "bufferAddress"));
}

}  // namespace smcuda
