// Who is on the other end of a Unix socket: SO_PEERCRED.
//
// The kernel records the peer's pid, uid and gid when the connection is made
// (connect / socketpair); a process cannot lie about them. smcuda refuses a
// control connection from another user even where the socket's file mode
// would let it in (a socket in a shared directory, a permissive umask).
//
// JS passes the connected socket's file descriptor (net.Socket's handle fd);
// nothing is kept or closed here: the fd stays the socket's.
#include <cerrno>
#include <cstring>
#include <string>

#include <sys/socket.h>
#include <sys/types.h>

#include "addon.h"

namespace smcuda {
namespace {

// Throws an Error with code = 'E<name>' (errno) and call = 'getsockopt'.
void ThrowSockErrno(Napi::Env env, int err) {
  std::string code;
  switch (err) {
    case EBADF: code = "EBADF"; break;
    case ENOTSOCK: code = "ENOTSOCK"; break;
    case ENOPROTOOPT: code = "ENOPROTOOPT"; break;
    case EINVAL: code = "EINVAL"; break;
    default: code = "E" + std::to_string(err);
  }
  Napi::Error e = Napi::Error::New(env, std::string("getsockopt(SO_PEERCRED) failed: ") + code + " (" + std::strerror(err) +
                                            "): the fd is not a connected Unix socket");
  e.Set("code", Napi::String::New(env, code));
  e.Set("call", Napi::String::New(env, "getsockopt"));
  e.Set("errno", Napi::Number::New(env, err));
  e.ThrowAsJavaScriptException();
}

// peerCredentials(fd: number) -> { pid, uid, gid }
Napi::Value PeerCredentials(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "peerCredentials(fd): fd must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  struct ucred cred;
  socklen_t len = sizeof(cred);
  std::memset(&cred, 0, sizeof(cred));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    ThrowSockErrno(env, errno);
    return env.Undefined();
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("pid", Napi::Number::New(env, cred.pid));
  out.Set("uid", Napi::Number::New(env, cred.uid));
  out.Set("gid", Napi::Number::New(env, cred.gid));
  return out;
}

}  // namespace

void InitPeerCred(Napi::Env env, Napi::Object exports) {
  exports.Set("peerCredentials", Napi::Function::New(env, PeerCredentials, "peerCredentials"));
}

}  // namespace smcuda
