// A wall-clock stack sampler for the probes (the GPU machine has no perf): a POSIX timer on each
// chosen thread sends SIGPROF every `period_us`, and the handler keeps the thread's stack, its
// thread id and a tag the program sets (a step's number). CPU-time timers tick at the scheduler's
// rate (about 4 ms), too coarse for a millisecond step. The raw stacks and the process's memory
// map go to a file for host_samples.py (or first_steps.py) to name the functions with addr2line.
#pragma once

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace probe {

constexpr int kDepth = 48;
constexpr int kMaxSamples = 200000;

struct Samples {
  void* frames[kMaxSamples][kDepth];
  int depth[kMaxSamples];
  int tag[kMaxSamples];
  int tid[kMaxSamples];
  std::atomic<int> count{0};
  std::atomic<bool> on{false};
  std::atomic<int> current_tag{0};
  std::vector<timer_t> timers;
};

inline Samples& samples() {
  static Samples* s = new Samples();  // large: on the heap, never freed (the handler may run late)
  return *s;
}

inline void on_prof(int) {
  Samples& s = samples();
  if (!s.on.load(std::memory_order_relaxed)) return;
  const int i = s.count.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  // Frames 0 and 1 are this handler and the kernel's signal trampoline; frame 2 is where the
  // thread was.
  void* frames[kDepth + 2];
  const int n = backtrace(frames, kDepth + 2);
  s.depth[i] = n > 2 ? n - 2 : 0;
  for (int k = 0; k < s.depth[i]; ++k) s.frames[i][k] = frames[k + 2];
  s.tag[i] = s.current_tag.load(std::memory_order_relaxed);
  s.tid[i] = static_cast<int>(syscall(SYS_gettid));
}

inline std::string thread_name(const std::string& tid) {
  std::ifstream comm("/proc/self/task/" + tid + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

// The process's threads whose name starts with one of `prefixes` ("" takes every thread).
inline std::vector<pid_t> threads_named(const std::vector<std::string>& prefixes) {
  std::vector<pid_t> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string name = thread_name(e->d_name);
      for (const std::string& p : prefixes) {
        if (name.rfind(p, 0) == 0) {
          tids.push_back(std::stoi(e->d_name));
          break;
        }
      }
    }
    closedir(d);
  }
  return tids;
}

inline void start_sampling(const std::vector<pid_t>& tids, int period_us) {
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder outside the handler
  struct sigaction sa {};
  sa.sa_handler = on_prof;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, nullptr);
  Samples& s = samples();
  for (const pid_t tid : tids) {
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = tid;
    timer_t t;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0) continue;
    itimerspec spec{};
    spec.it_interval.tv_nsec = static_cast<long>(period_us) * 1000;
    spec.it_value.tv_nsec = spec.it_interval.tv_nsec;
    timer_settime(t, 0, &spec, nullptr);
    s.timers.push_back(t);
  }
}

inline void stop_sampling() {
  Samples& s = samples();
  s.on = false;
  for (timer_t t : s.timers) timer_delete(t);
  s.timers.clear();
}

// Samples [from, to) with the memory map; `tagged` adds each sample's tag and thread
// ("sample TAG TID frames...", and a "thread TID NAME" line a thread), else "sample frames...".
inline void write_samples(const std::string& path, int from, int to, bool tagged = false) {
  Samples& s = samples();
  std::ofstream out(path);
  {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) out << "map " << line << "\n";
  }
  if (tagged) {
    for (const pid_t tid : threads_named({""}))
      out << "thread " << tid << ' ' << thread_name(std::to_string(tid)) << "\n";
  }
  for (int i = from; i < to && i < kMaxSamples; ++i) {
    out << "sample";
    if (tagged) out << ' ' << s.tag[i] << ' ' << s.tid[i];
    for (int k = 0; k < s.depth[i]; ++k) out << ' ' << s.frames[i][k];
    out << "\n";
  }
}

}  // namespace probe
