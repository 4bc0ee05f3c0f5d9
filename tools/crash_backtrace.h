// For the example and benchmark programs: on SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT, print the
// crashing thread's backtrace to stderr and die of the same signal. The GPU machine has no gdb,
// and a crash that vanishes under cuda-gdb still leaves this trace.
#pragma once

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace hotpath_tools {

inline void crash_handler(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char* head = "\n*** fatal signal ";
  (void)!write(STDERR_FILENO, head, std::strlen(head));
  const char* name = strsignal(sig);
  (void)!write(STDERR_FILENO, name, std::strlen(name));
  (void)!write(STDERR_FILENO, "; backtrace:\n", 13);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

// Call first thing in main().
inline void install_crash_backtrace() {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now, not inside the handler
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, crash_handler);
}

}  // namespace hotpath_tools
