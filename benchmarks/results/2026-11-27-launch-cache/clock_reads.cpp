#include <x86intrin.h>
#include <chrono>
#include <cstdio>
#include <atomic>
#include <vector>
int main() {
  using C = std::chrono::steady_clock;
  const int n = 2000000;
  std::vector<unsigned long long> junk(2 << 20, 1);  // 16 MB
  unsigned long long sink = 0;
  for (int pass = 0; pass < 2; ++pass) {
    auto t0 = C::now();
    long long s = 0;
    for (int i = 0; i < n; ++i) s += C::now().time_since_epoch().count();
    auto t1 = C::now();
    for (int i = 0; i < n; ++i) s += __rdtsc();
    auto t2 = C::now();
    std::printf("steady_clock::now %.1f ns, __rdtsc %.1f ns (%lld)\n",
      std::chrono::duration<double, std::nano>(t1 - t0).count() / n,
      std::chrono::duration<double, std::nano>(t2 - t1).count() / n, s % 7);
  }
  // Cold: between reads, walk 256 KB of memory (not timed).
  double a = 0, b = 0; const int m = 20000;
  for (int i = 0; i < m; ++i) {
    for (size_t j = (i * 4096) % junk.size(), k = 0; k < 32768; k += 8) sink += junk[(j + k) % junk.size()]++;
    auto x0 = __rdtsc(); auto c0 = C::now(); auto c1 = C::now(); auto x1 = __rdtsc();
    auto y0 = __rdtsc(); auto y1 = __rdtsc();
    a += x1 - x0; b += y1 - y0; (void)c0; (void)c1;
  }
  std::printf("cold-ish: two steady_clock::now %.0f ticks, one __rdtsc %.0f ticks (%llu)\n", a / m, b / m, sink % 3);
  unsigned a1, b1, c1, d1; __asm__("cpuid" : "=a"(a1), "=b"(b1), "=c"(c1), "=d"(d1) : "a"(0x80000007));
  std::printf("invariant TSC: %u\n", (d1 >> 8) & 1);
}
