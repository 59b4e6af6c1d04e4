// File descriptors between processes: SCM_RIGHTS over a Unix SOCK_SEQPACKET
// socket, plus the few fd calls the rest needs (memfd, fstat, close).
//
// Node's sockets cannot carry descriptors (libuv's non-IPC pipes read() and
// the kernel drops every descriptor in flight), so the descriptor channel is
// a socket of its own, driven from here. SOCK_SEQPACKET keeps each message
// whole, so a descriptor always arrives with the metadata that names it.
//
// Readiness: one watcher thread per watched socket waits in poll() and, when
// the socket is ready, tells JS through a thread-safe function and disarms
// itself (one-shot); JS drains with fdRecv/fdAccept until they say "would
// block" and arms it again. The TSFN is ref'd only while armed, so a channel
// waiting for nothing keeps no process alive. No libuv header is needed
// (the node-api-headers package has none).
//
// Descriptors received are always either returned to JS or closed here:
// a message with more than one descriptor closes them all and says so.
// When the receiver has no free descriptor slot (EMFILE) the kernel drops
// the descriptor and sets MSG_CTRUNC; that is reported as `dropped`, with the
// message's bytes, so JS can name what was lost.
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "addon.h"

namespace smcuda {
namespace {

const char* FdErrnoName(int err) {
  switch (err) {
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EBADF: return "EBADF";
    case EAGAIN: return "EAGAIN";
    case EPIPE: return "EPIPE";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case ENOTSOCK: return "ENOTSOCK";
    case EADDRINUSE: return "EADDRINUSE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOSYS: return "ENOSYS";
    case ENOTCONN: return "ENOTCONN";
    default: return nullptr;
  }
}

// Throws an Error with code = errno name, call = the system call, errno = n.
Napi::Value ThrowFdErrno(Napi::Env env, const char* call, int err, const std::string& what = "") {
  const char* known = FdErrnoName(err);
  std::string code = known ? known : "E" + std::to_string(err);
  std::string msg = std::string(call) + (what.empty() ? "" : "(" + what + ")") + " failed: " + code + " (" +
                    std::strerror(err) + ")";
  if (err == EMFILE) msg += ": this process has no free file descriptor slot; raise `ulimit -n` or close descriptors";
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::String::New(env, code));
  e.Set("call", Napi::String::New(env, call));
  e.Set("errno", Napi::Number::New(env, err));
  e.ThrowAsJavaScriptException();
  return Napi::Value();
}

bool ArgFd(const Napi::CallbackInfo& info, size_t i, int* out, bool allowNone = false) {
  if (!info[i].IsNumber()) {
    Napi::TypeError::New(info.Env(), "fd must be a number").ThrowAsJavaScriptException();
    return false;
  }
  double v = info[i].As<Napi::Number>().DoubleValue();
  if (!(v >= (allowNone ? -1 : 0) && v <= 0x7fffffff) || v != static_cast<double>(static_cast<int>(v))) {
    Napi::RangeError::New(info.Env(), "fd must be a non-negative int32").ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

// A size in bytes: a number that is a non-negative safe integer (NaN,
// negatives, fractions and values past 2^53 are refused before any cast).
bool ArgBytes(const Napi::CallbackInfo& info, size_t i, off_t* out) {
  if (!info[i].IsNumber()) {
    Napi::TypeError::New(info.Env(), "bytes must be a number").ThrowAsJavaScriptException();
    return false;
  }
  double v = info[i].As<Napi::Number>().DoubleValue();
  if (!(v >= 0 && v <= 9007199254740991.0) || v != static_cast<double>(static_cast<int64_t>(v))) {
    Napi::RangeError::New(info.Env(), "bytes must be a non-negative safe integer").ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<off_t>(v);
  return true;
}

bool ArgPath(const Napi::CallbackInfo& info, size_t i, sockaddr_un* addr) {
  if (!info[i].IsString()) {
    Napi::TypeError::New(info.Env(), "path must be a string").ThrowAsJavaScriptException();
    return false;
  }
  std::string p = info[i].As<Napi::String>().Utf8Value();
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (p.empty() || p.size() >= sizeof addr->sun_path) {
    Napi::RangeError::New(info.Env(), "socket path must be 1.." + std::to_string(sizeof addr->sun_path - 1) + " bytes")
        .ThrowAsJavaScriptException();
    return false;
  }
  std::memcpy(addr->sun_path, p.data(), p.size());
  return true;
}

// ---- sockets ------------------------------------------------------------------

// fdListen(path) -> listening SOCK_SEQPACKET fd (nonblocking, close-on-exec, mode 0600)
Napi::Value FdListen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_un addr;
  if (!ArgPath(info, 0, &addr)) return Napi::Value();
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ThrowFdErrno(env, "socket", errno);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || chmod(addr.sun_path, 0600) != 0 ||
      listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    return ThrowFdErrno(env, "bind/listen", err, addr.sun_path);
  }
  return Napi::Number::New(env, fd);
}

// fdAccept(listenFd) -> connected fd, or null when none is waiting
Napi::Value FdAccept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int lfd = -1;
  if (!ArgFd(info, 0, &lfd)) return Napi::Value();
  int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return env.Null();
    return ThrowFdErrno(env, "accept4", errno);
  }
  return Napi::Number::New(env, fd);
}

// fdConnect(path) -> connected fd (nonblocking). A full backlog is EAGAIN: retry.
Napi::Value FdConnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_un addr;
  if (!ArgPath(info, 0, &addr)) return Napi::Value();
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ThrowFdErrno(env, "socket", errno);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    return ThrowFdErrno(env, "connect", err, addr.sun_path);
  }
  return Napi::Number::New(env, fd);
}

// fdSocketPair() -> [fd, fd]: a connected SOCK_SEQPACKET pair (tests, in-process peers).
Napi::Value FdSocketPair(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    return ThrowFdErrno(env, "socketpair", errno);
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, sv[0]));
  out.Set(1u, Napi::Number::New(env, sv[1]));
  return out;
}

// fdSend(sock, fd | -1, bytes: ArrayBuffer, offset, length) -> true sent, false would block.
// The descriptor stays the caller's (the kernel passes a duplicate).
Napi::Value FdSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sock = -1, fd = -1;
  if (!ArgFd(info, 0, &sock) || !ArgFd(info, 1, &fd, true)) return Napi::Value();
  if (!info[2].IsArrayBuffer() || !info[3].IsNumber() || !info[4].IsNumber()) {
    Napi::TypeError::New(env, "fdSend(sock, fd, buffer, offset, length)").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::ArrayBuffer ab = info[2].As<Napi::ArrayBuffer>();
  size_t off = info[3].As<Napi::Number>().Uint32Value();
  size_t len = info[4].As<Napi::Number>().Uint32Value();
  if (off > ab.ByteLength() || len > ab.ByteLength() - off || len == 0) {
    Napi::RangeError::New(env, "fdSend: 1..n bytes inside the buffer").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  iovec iov{static_cast<char*>(ab.Data()) + off, len};
  msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return Napi::Boolean::New(env, true);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Napi::Boolean::New(env, false);
    return ThrowFdErrno(env, "sendmsg", errno);
  }
}

// fdRecv(sock, buffer: ArrayBuffer) -> null (would block) |
//   { bytes, fd (-1: none), truncated, dropped, extra }
// bytes 0 and fd -1: the peer closed (SEQPACKET never delivers empty packets
// smcuda sends). truncated: the message was larger than the buffer (its
// descriptor, if any, is closed). dropped: the kernel could not install a
// descriptor (EMFILE). extra: more than one descriptor came; all were closed.
Napi::Value FdRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sock = -1;
  if (!ArgFd(info, 0, &sock)) return Napi::Value();
  if (!info[1].IsArrayBuffer()) {
    Napi::TypeError::New(env, "fdRecv(sock, buffer)").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  Napi::ArrayBuffer ab = info[1].As<Napi::ArrayBuffer>();
  iovec iov{ab.Data(), ab.ByteLength()};
  constexpr int kMaxFds = 8;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg;
  ssize_t n;
  for (;;) {
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n >= 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return env.Null();
    return ThrowFdErrno(env, "recvmsg", errno);
  }
  int fds[kMaxFds];
  int count = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t j = 0; j < k && count < kMaxFds; j++) std::memcpy(&fds[count++], CMSG_DATA(c) + j * sizeof(int), sizeof(int));
  }
  bool truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  bool dropped = (msg.msg_flags & MSG_CTRUNC) != 0;
  int fd = -1;
  int extra = 0;
  if (count == 1 && !truncated) {
    fd = fds[0];
  } else {
    for (int j = 0; j < count; j++) close(fds[j]);  // never leak what we will not hand out
    extra = count > 1 ? count - 1 : 0;
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("bytes", Napi::Number::New(env, static_cast<double>(n)));
  out.Set("fd", Napi::Number::New(env, fd));
  out.Set("truncated", Napi::Boolean::New(env, truncated));
  out.Set("dropped", Napi::Boolean::New(env, dropped));
  out.Set("extra", Napi::Number::New(env, extra));
  return out;
}

Napi::Value FdClose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = -1;
  if (!ArgFd(info, 0, &fd)) return Napi::Value();
  // Linux releases the descriptor even when close reports EINTR: never retry.
  if (close(fd) != 0 && errno != EINTR) return ThrowFdErrno(env, "close", errno);
  return env.Undefined();
}

// memfdCreate(name, bytes) -> fd of an anonymous shared file of `bytes` bytes.
Napi::Value MemfdCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) {
    Napi::TypeError::New(env, "memfdCreate(name, bytes)").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  std::string name = info[0].As<Napi::String>().Utf8Value();
  off_t bytes = 0;
  if (!ArgBytes(info, 1, &bytes)) return Napi::Value();
  int fd = static_cast<int>(syscall(SYS_memfd_create, name.c_str(), 1u /* MFD_CLOEXEC */));
  if (fd < 0) return ThrowFdErrno(env, "memfd_create", errno, name);
  if (ftruncate(fd, bytes) != 0) {
    int err = errno;
    close(fd);
    return ThrowFdErrno(env, "ftruncate", err, name);
  }
  return Napi::Number::New(env, fd);
}

// fdResize(fd, bytes): ftruncate (a pool's backing file grows with it).
Napi::Value FdResize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = -1;
  off_t bytes = 0;
  if (!ArgFd(info, 0, &fd) || !ArgBytes(info, 1, &bytes)) return Napi::Value();
  if (ftruncate(fd, bytes) != 0)
    return ThrowFdErrno(env, "ftruncate", errno);
  return env.Undefined();
}

// fdSize(fd) -> bytes (fstat)
Napi::Value FdSize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = -1;
  if (!ArgFd(info, 0, &fd)) return Napi::Value();
  struct stat st;
  if (fstat(fd, &st) != 0) return ThrowFdErrno(env, "fstat", errno);
  return Napi::Number::New(env, static_cast<double>(st.st_size));
}

// ---- readiness ------------------------------------------------------------------

struct Watch {
  int fd = -1;
  int wake = -1;  // eventfd: arm / stop
  short events = 0;
  bool stopping = false;
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  Napi::ThreadSafeFunction tsfn;
  bool refd = false;
};

void WatchLoop(Watch* w) {
  for (;;) {
    short events;
    {
      std::unique_lock<std::mutex> lock(w->mu);
      w->cv.wait(lock, [w] { return w->stopping || w->events != 0; });
      if (w->stopping) return;
      events = w->events;
    }
    pollfd p[2] = {{w->fd, events, 0}, {w->wake, POLLIN, 0}};
    int r = poll(p, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      p[0].revents = POLLERR;  // report, and let JS find out what is wrong
    }
    if (p[1].revents & POLLIN) {
      uint64_t v;
      ssize_t ignored = read(w->wake, &v, sizeof v);
      (void)ignored;
    }
    if (p[0].revents == 0) continue;
    int revents = p[0].revents;
    {
      std::lock_guard<std::mutex> lock(w->mu);
      if (w->stopping) return;
      w->events = 0;  // one-shot: JS drains, then arms again
    }
    w->tsfn.BlockingCall([revents](Napi::Env env, Napi::Function cb) {
      cb.Call({Napi::Number::New(env, revents)});
    });
  }
}

// Wakes the thread, joins it, releases the callback and frees the watch.
void StopWatch(Watch* w) {
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->stopping = true;
  }
  uint64_t one = 1;
  ssize_t ignored = write(w->wake, &one, sizeof one);
  (void)ignored;
  w->cv.notify_all();
  if (w->thread.joinable()) w->thread.join();
  w->tsfn.Release();
  close(w->wake);
  delete w;
}

void FinalizeWatch(napi_env, void* data, void*) {
  // fdWatchStop joins the thread; a watch dropped without stop is stopped here.
  StopWatch(static_cast<Watch*>(data));
}

Watch* ArgWatch(const Napi::CallbackInfo& info, size_t i) {
  if (!info[i].IsObject()) {
    Napi::TypeError::New(info.Env(), "watch must come from fdWatchStart").ThrowAsJavaScriptException();
    return nullptr;
  }
  void* data = nullptr;
  if (napi_unwrap(info.Env(), info[i], &data) != napi_ok || !data) {
    Napi::Error::New(info.Env(), "watch was stopped already or is not a watch").ThrowAsJavaScriptException();
    return nullptr;
  }
  return static_cast<Watch*>(data);
}

// fdWatchStart(fd, callback(revents)) -> watch object. Not armed yet.
Napi::Value FdWatchStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = -1;
  if (!ArgFd(info, 0, &fd)) return Napi::Value();
  if (!info[1].IsFunction()) {
    Napi::TypeError::New(env, "callback must be a function").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return ThrowFdErrno(env, "eventfd", errno);
  auto* w = new Watch();
  w->fd = fd;
  w->wake = wake;
  w->tsfn = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "smcuda-fd-watch", 0, 1);
  w->tsfn.Unref(env);
  Napi::Object handle = Napi::Object::New(env);
  if (napi_wrap(env, handle, w, FinalizeWatch, nullptr, nullptr) != napi_ok) {
    w->tsfn.Release();
    close(wake);
    delete w;
    Napi::Error::New(env, "napi_wrap failed on an fd watch").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  w->thread = std::thread(WatchLoop, w);
  return handle;
}

// fdWatchArm(watch, events: 1 readable | 4 writable, ref: boolean)
Napi::Value FdWatchArm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Watch* w = ArgWatch(info, 0);
  if (!w) return Napi::Value();
  if (!info[1].IsNumber() || !info[2].IsBoolean()) {
    Napi::TypeError::New(env, "fdWatchArm(watch, events: number, ref: boolean)").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  double mask = info[1].As<Napi::Number>().DoubleValue();
  if (!(mask >= 0 && mask <= (POLLIN | POLLOUT)) || mask != static_cast<double>(static_cast<int>(mask)) ||
      (static_cast<int>(mask) & ~(POLLIN | POLLOUT)) != 0) {
    Napi::RangeError::New(env, "events must be 0, 1 (readable), 4 (writable) or 5").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  short events = static_cast<short>(mask);
  bool ref = info[2].As<Napi::Boolean>().Value();
  if (ref != w->refd) {
    if (ref) w->tsfn.Ref(env);
    else w->tsfn.Unref(env);
    w->refd = ref;
  }
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->events = events;
  }
  uint64_t one = 1;
  ssize_t ignored = write(w->wake, &one, sizeof one);  // re-poll with the new mask
  (void)ignored;
  w->cv.notify_all();
  return env.Undefined();
}

// fdWatchStop(watch): stops and joins the thread; the fd is not closed.
Napi::Value FdWatchStop(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  void* data = nullptr;
  if (!info[0].IsObject() || napi_remove_wrap(env, info[0], &data) != napi_ok || !data) return env.Undefined();
  StopWatch(static_cast<Watch*>(data));
  return env.Undefined();
}

}  // namespace

void InitFdPassing(Napi::Env env, Napi::Object exports) {
  exports.Set("fdListen", Napi::Function::New(env, FdListen, "fdListen"));
  exports.Set("fdAccept", Napi::Function::New(env, FdAccept, "fdAccept"));
  exports.Set("fdConnect", Napi::Function::New(env, FdConnect, "fdConnect"));
  exports.Set("fdSocketPair", Napi::Function::New(env, FdSocketPair, "fdSocketPair"));
  exports.Set("fdSend", Napi::Function::New(env, FdSend, "fdSend"));
  exports.Set("fdRecv", Napi::Function::New(env, FdRecv, "fdRecv"));
  exports.Set("fdClose", Napi::Function::New(env, FdClose, "fdClose"));
  exports.Set("memfdCreate", Napi::Function::New(env, MemfdCreate, "memfdCreate"));
  exports.Set("fdResize", Napi::Function::New(env, FdResize, "fdResize"));
  exports.Set("fdSize", Napi::Function::New(env, FdSize, "fdSize"));
  exports.Set("fdWatchStart", Napi::Function::New(env, FdWatchStart, "fdWatchStart"));
  exports.Set("fdWatchArm", Napi::Function::New(env, FdWatchArm, "fdWatchArm"));
  exports.Set("fdWatchStop", Napi::Function::New(env, FdWatchStop, "fdWatchStop"));
}

}  // namespace smcuda
