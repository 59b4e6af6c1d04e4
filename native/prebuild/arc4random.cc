// Linked into prebuilt addons only (CMakeLists.txt, SMCUDA_STATIC_LIBSTDCXX).
// The static libstdc++ of GCC 12 reaches arc4random (std::random_device, which
// smcuda never uses) — a glibc 2.36 symbol that alone would raise the prebuild's
// floor from glibc 2.34 (Ubuntu 22.04, RHEL 9) to 2.36. This definition binds
// that reference inside the addon, from getrandom (glibc 2.25).
#include <cerrno>
#include <cstdint>
#include <sys/random.h>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t value = 0;
  while (getrandom(&value, sizeof value, 0) != static_cast<ssize_t>(sizeof value)) {
    if (errno != EINTR) __builtin_trap();  // the kernel lacks getrandom (< 3.17): nothing sane to return
  }
  return value;
}
