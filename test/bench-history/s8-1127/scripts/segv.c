// Dev only: prints a native backtrace of the thread that faults (LD_PRELOAD), then dies as before.
#define _GNU_SOURCE
#include <execinfo.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <ucontext.h>
#include <pthread.h>
#include <stdlib.h>
static void on_segv(int sig, siginfo_t *si, void *uc) {
  char buf[160];
  int n = snprintf(buf, sizeof buf, "\n*** pid %d signal %d at address %p, thread %ld\n", getpid(), sig, si->si_addr, (long)gettid());
  write(2, buf, n);
  ucontext_t *u = (ucontext_t *)uc;
  unsigned long rip = u->uc_mcontext.gregs[REG_RIP], rsp = u->uc_mcontext.gregs[REG_RSP];
  unsigned long ret = rsp ? *(unsigned long *)rsp : 0;
  n = snprintf(buf, sizeof buf, "rip %#lx rsp %#lx rbp %#llx\n", rip, rsp, u->uc_mcontext.gregs[REG_RBP]);
  write(2, buf, n);
  unsigned long cand[3] = { rip, ret, 0 };
  const char *what[3] = { "rip", "[rsp]", "[rbp+8]" };
  for (int i = 0; i < 3; i++) {
    if (i == 2 && u->uc_mcontext.gregs[REG_RBP]) cand[2] = *(unsigned long *)(u->uc_mcontext.gregs[REG_RBP] + 8);
    Dl_info di;
    memset(&di, 0, sizeof di);
    int ok = cand[i] ? dladdr((void *)cand[i], &di) : 0;
    n = snprintf(buf, sizeof buf, "%s = %#lx in %s (+%#lx) %s\n", what[i], cand[i], ok && di.dli_fname ? di.dli_fname : "?", ok ? cand[i] - (unsigned long)di.dli_fbase : 0, ok && di.dli_sname ? di.dli_sname : "");
    write(2, buf, n);
  }
  n = snprintf(buf, sizeof buf, "rdi %#llx rsi %#llx rdx %#llx rcx %#llx rax %#llx\n", u->uc_mcontext.gregs[REG_RDI], u->uc_mcontext.gregs[REG_RSI], u->uc_mcontext.gregs[REG_RDX], u->uc_mcontext.gregs[REG_RCX], u->uc_mcontext.gregs[REG_RAX]);
  write(2, buf, n);
  void *frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
static void install_now(void);
// Node resets signal dispositions at start and puts its own SIGSEGV handler in: install ours after that.
static void *later(void *a) { (void)a; usleep(1500000); install_now(); return 0; }
__attribute__((constructor)) static void install(void) {
  pthread_t t;
  pthread_create(&t, 0, later, 0);
  pthread_detach(t);
}
static void install_now(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
  if (getenv("SEGV_SAY")) write(2, "segv handler in\n", 16);
}
