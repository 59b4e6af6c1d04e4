// File descriptors between processes: SCM_RIGHTS over a Unix SOCK_SEQPACKET
// socket, plus the few fd calls the rest needs (memfd, fstat, close).
// One file over 500 lines, as one concept: those sockets and the one
// readiness loop that drives them.
//
// Node's sockets cannot carry descriptors (libuv's non-IPC pipes read() and
// the kernel drops every descriptor in flight), so the descriptor channel is
// a socket of its own, driven from here. SOCK_SEQPACKET keeps each message
// whole, so a descriptor always arrives with the metadata that names it.
//
// Readiness: ONE thread per process (per addon instance; it exists while
// something is watched) waits in epoll_wait for every watched socket, listeners and connections alike (a
// thread per socket let token-less connections exhaust a pids limit). When
// a socket is ready it tells JS through one thread-safe function and the
// kernel disarms it (EPOLLONESHOT); JS drains with fdRecv/fdAccept until
// they say "would block" and arms it again. The TSFN is ref'd only while
// some watch is armed with ref, so channels waiting for nothing keep no
// process alive. No libuv header is needed (the node-api-headers package
// has none). Failures (no thread, no memory) are JS errors, never C++
// exceptions.
//
// Descriptors received are always either returned to JS or closed here:
// a message with more than one descriptor closes them all and says so.
// When the receiver has no free descriptor slot (EMFILE) the kernel drops
// the descriptor and sets MSG_CTRUNC; that is reported as `dropped`, with the
// message's bytes, so JS can name what was lost.
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
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

// One poller per addon instance: ONE thread in epoll_wait for every watched
// socket of the process (listeners and channels alike), started with the
// first watch. Each watch is registered EPOLLONESHOT: when its socket is
// ready the kernel disables it, the thread queues (watch, revents) and wakes
// JS through one thread-safe function; JS drains, then arms it again (MOD).
// A watch is known to the thread only by its id and the generation of its
// last arm (epoll data), so an event of a stopped watch, or one from before
// the latest arm, is dropped on the JS thread: nothing is freed under the
// thread. The TSFN is ref'd while some watch is armed with ref.
struct Poller;

struct Watch {
  Poller* poller = nullptr;
  uint64_t id = 0;
  uint32_t gen = 0;  // bumped by every arm
  int fd = -1;
  bool registered = false;  // added to the epoll set (DEL'd on disarm and stop)
  bool armed = false;
  bool refd = false;  // counted in poller->refs
  Napi::FunctionReference callback;
};

struct Ready {
  uint64_t data;
  int revents;
};

void DeliverReady(Napi::Env env, Napi::Function, Poller* poller, std::vector<Ready>* none);
using ReadyTsfn = Napi::TypedThreadSafeFunction<Poller, std::vector<Ready>, DeliverReady>;

constexpr int kIdShift = 24;  // epoll data: id << 24 | generation (24 bits)
constexpr uint64_t kGenMask = (1u << kIdShift) - 1;

struct Poller {
  int epfd = -1;
  int wake = -1;  // eventfd: stop
  std::thread thread;
  bool started = false;
  bool dead = false;  // environment torn down: watches are only freed
  ReadyTsfn tsfn;
  size_t refs = 0;
  uint64_t nextId = 1;
  std::unordered_map<uint64_t, Watch*> watches;  // JS thread only
  std::mutex mu;
  std::vector<Ready> ready;  // filled by the thread, taken by JS
  bool scheduled = false;    // a TSFN call is on its way

  // JS thread: the epoll set, its wake fd and the thread, made with the first watch and gone with the
  // last (a process watching nothing holds none of them). Errors are JS errors, never C++ exceptions.
  bool Start(Napi::Env env) {
    if (started) return true;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) return ThrowFdErrno(env, "epoll_create1", errno), false;
    wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;  // id 0: the wake fd
    if (wake < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, wake, &ev) != 0) {
      int err = errno;
      CloseSet();
      return ThrowFdErrno(env, "eventfd", err), false;
    }
    try {
      thread = std::thread(&Poller::Run, this);
    } catch (const std::exception& e) {  // out of threads (a pids limit): an error value, not terminate()
      CloseSet();
      Napi::Error err = Napi::Error::New(env, std::string("fdWatchStart: cannot start the descriptor poller thread: ") + e.what());
      err.Set("code", Napi::String::New(env, "SMCUDA_THREAD"));
      err.ThrowAsJavaScriptException();
      return false;
    }
    started = true;
    return true;
  }

  void CloseSet() {
    if (wake >= 0) close(wake);
    if (epfd >= 0) close(epfd);
    epfd = wake = -1;
  }

  // JS thread: stops and joins the thread, closes the set (the last watch went, or teardown).
  void Shutdown() {
    if (!started) return;
    uint64_t one = 1;
    ssize_t ignored = write(wake, &one, sizeof one);
    (void)ignored;
    if (thread.joinable()) thread.join();
    CloseSet();
    started = false;
  }

  void Run() {
    epoll_event events[64];
    for (;;) {
      int n = epoll_wait(epfd, events, 64, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;  // the set is gone: nothing more can be watched
      }
      bool call = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (int i = 0; i < n; i++) {
          if (events[i].data.u64 == 0) return;  // stop
          try {
            ready.push_back(Ready{events[i].data.u64, static_cast<int>(events[i].events)});
          } catch (const std::exception&) {
            // No memory for the queue: this event is lost (its socket stays disarmed) rather than the
            // process aborting on an exception thrown out of a thread.
          }
        }
        if (!ready.empty() && !scheduled) call = scheduled = true;
      }
      if (call && tsfn.NonBlockingCall() != napi_ok) return;  // the TSFN is closing: the environment is going
    }
  }

  // JS thread (cleanup hook): stops and joins the thread; watches are freed by stop or their finalizers.
  void Teardown() {
    Shutdown();
    tsfn.Release();
    dead = true;
  }

  void SetRef(Napi::Env env, Watch* w, bool on) {
    if (w->refd == on) return;
    w->refd = on;
    if (on && refs++ == 0) tsfn.Ref(env);
    if (!on && --refs == 0) tsfn.Unref(env);
  }

  // JS thread: (re)arms `w` for `events` (0: disarm).
  int Arm(Napi::Env env, Watch* w, uint32_t events, bool ref) {
    w->gen = (w->gen + 1) & kGenMask;
    epoll_event ev{};
    ev.data.u64 = (w->id << kIdShift) | w->gen;
    if (events == 0) {
      if (w->registered) epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, &ev);
      w->registered = false;
      w->armed = false;
      SetRef(env, w, false);
      return 0;
    }
    ev.events = events | EPOLLONESHOT;
    int r = epoll_ctl(epfd, w->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &ev);
    if (r != 0 && errno == ENOENT && w->registered) r = epoll_ctl(epfd, EPOLL_CTL_ADD, w->fd, &ev);  // the fd was closed and reused
    if (r != 0) return errno;
    w->registered = true;
    w->armed = true;
    SetRef(env, w, ref);
    return 0;
  }

  // JS thread: forgets `w` (its events still queued are dropped) and frees it.
  void Stop(Napi::Env env, Watch* w) {
    if (!dead) {
      if (w->registered) {
        epoll_event ev{};
        epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, &ev);
      }
      SetRef(env, w, false);
      watches.erase(w->id);
      if (watches.empty()) Shutdown();
    }
    delete w;
  }
};

void DeliverReady(Napi::Env env, Napi::Function, Poller* poller, std::vector<Ready>*) {
  if (env == nullptr || poller->dead) return;
  std::vector<Ready> batch;
  {
    std::lock_guard<std::mutex> lock(poller->mu);
    batch.swap(poller->ready);
    poller->scheduled = false;
  }
  for (size_t i = 0; i < batch.size(); i++) {
    const Ready& r = batch[i];
    if (env.IsExceptionPending()) {
      // A callback threw (the process's uncaught exception, as for any callback):
      // the rest are served on the next call, not lost.
      std::lock_guard<std::mutex> lock(poller->mu);
      try {
        poller->ready.insert(poller->ready.begin(), batch.begin() + static_cast<std::ptrdiff_t>(i), batch.end());
      } catch (const std::exception&) {
        return;  // no memory: those events are lost, never an exception out of here
      }
      if (!poller->scheduled) {
        poller->scheduled = true;
        poller->tsfn.NonBlockingCall();
      }
      return;
    }
    auto it = poller->watches.find(r.data >> kIdShift);
    if (it == poller->watches.end()) continue;  // stopped meanwhile
    Watch* w = it->second;
    if ((r.data & kGenMask) != w->gen || !w->armed) continue;  // from before the latest arm: the kernel holds the new one
    w->armed = false;  // one-shot: the kernel disabled it
    poller->SetRef(env, w, false);
    Napi::HandleScope scope(env);
    w->callback.Call({Napi::Number::New(env, r.revents)});
  }
}

void FinalizeWatch(napi_env env, void* data, void*) {
  // fdWatchStop unwraps the handle first; a watch dropped without stop is stopped here.
  auto* w = static_cast<Watch*>(data);
  w->poller->Stop(Napi::Env(env), w);
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
  auto* poller = static_cast<Poller*>(info.Data());
  int fd = -1;
  if (!ArgFd(info, 0, &fd)) return Napi::Value();
  if (!info[1].IsFunction()) {
    Napi::TypeError::New(env, "callback must be a function").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  if (!poller->Start(env)) return Napi::Value();
  auto* w = new (std::nothrow) Watch();
  if (w == nullptr) {
    if (poller->watches.empty()) poller->Shutdown();
    return ThrowFdErrno(env, "fdWatchStart", ENOMEM);
  }
  w->poller = poller;
  w->id = poller->nextId++;
  w->fd = fd;
  w->callback = Napi::Persistent(info[1].As<Napi::Function>());
  try {
    poller->watches.emplace(w->id, w);
  } catch (const std::exception&) {
    delete w;
    if (poller->watches.empty()) poller->Shutdown();
    return ThrowFdErrno(env, "fdWatchStart", ENOMEM);
  }
  Napi::Object handle = Napi::Object::New(env);
  if (napi_wrap(env, handle, w, FinalizeWatch, nullptr, nullptr) != napi_ok) {
    poller->watches.erase(w->id);
    delete w;
    if (poller->watches.empty()) poller->Shutdown();
    Napi::Error::New(env, "napi_wrap failed on an fd watch").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  return handle;
}

// fdWatchArm(watch, events: 1 readable | 4 writable | 0x2000 peer hung up (0: disarm), ref: boolean)
Napi::Value FdWatchArm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Watch* w = ArgWatch(info, 0);
  if (!w) return Napi::Value();
  if (!info[1].IsNumber() || !info[2].IsBoolean()) {
    Napi::TypeError::New(env, "fdWatchArm(watch, events: number, ref: boolean)").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  double mask = info[1].As<Napi::Number>().DoubleValue();
  const uint32_t allowed = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
  if (!(mask >= 0 && mask <= allowed) || mask != static_cast<double>(static_cast<uint32_t>(mask)) ||
      (static_cast<uint32_t>(mask) & ~allowed) != 0) {
    Napi::RangeError::New(env, "events must be a mask of 1 (readable), 4 (writable) and 0x2000 (peer hung up), or 0").ThrowAsJavaScriptException();
    return Napi::Value();
  }
  uint32_t events = static_cast<uint32_t>(mask);
  int err = w->poller->Arm(env, w, events, info[2].As<Napi::Boolean>().Value());
  if (err != 0) return ThrowFdErrno(env, "epoll_ctl", err);
  return env.Undefined();
}

// fdWatchStop(watch): forgets the watch; the fd is not closed.
Napi::Value FdWatchStop(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  void* data = nullptr;
  if (!info[0].IsObject() || napi_remove_wrap(env, info[0], &data) != napi_ok || !data) return env.Undefined();
  auto* w = static_cast<Watch*>(data);
  w->poller->Stop(env, w);
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
  auto* poller = new Poller();
  poller->tsfn = ReadyTsfn::New(env, "smcuda.fdWatch", 0 /* unbounded queue */, 1, poller);
  poller->tsfn.Unref(env);
  // Registered after the TSFN exists, so it runs before the TSFN's own teardown
  // (cleanup hooks run in reverse order). The poller itself stays: finalizers
  // of watches not stopped may still run after it.
  env.AddCleanupHook([poller] { poller->Teardown(); });
  exports.Set("fdWatchStart", Napi::Function::New(env, FdWatchStart, "fdWatchStart", poller));
  exports.Set("fdWatchArm", Napi::Function::New(env, FdWatchArm, "fdWatchArm"));
  exports.Set("fdWatchStop", Napi::Function::New(env, FdWatchStop, "fdWatchStop"));
}

}  // namespace smcuda
