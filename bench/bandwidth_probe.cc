// Memory read bandwidth probe: how many bytes per second N threads can stream from DRAM, the
// ceiling for a decode step that reads every weight once (bench/engine_bench.sh divides the
// engines' weight-bytes/s by it).
//
//   deltaserve-bench-bandwidth [--threads N] [--mib M] [--reps R]
//
// Allocates M MiB (default 2048, far beyond any cache), touches it from the threads that later
// read it, then R times (default 5) has each of N threads (default: one per core) sum the 64-byte
// lines of its contiguous slice (AVX-512 loads with a software prefetch 4 KiB ahead at the CPU
// kernel level avx512, AVX2 loads at avx2 and avx_vnni, else a plain loop the compiler vectorises;
// the level is the best the CPU has, or DELTASERVE_CPU_ISA's: kernels/cpu/cpu_features.h). The
// prefetch raised the best of 5 from 44-48 to 48-53 GB/s on the dev box (4 interleaved runs):
// without it the probe was a lower ceiling than the decode kernels, which prefetch, can reach.
// Prints the best repetition, GB = 10^9 bytes:
//   bandwidth: threads=N bytes=B best_gb_s=X median_gb_s=Y
// and each repetition on stderr.

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace deltaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kLine = 64;
// Lines are also prefetched this far ahead, as the decode kernels do (matmul_int8_avx512_*):
// the hardware prefetchers alone stop at 4 KiB pages.
constexpr size_t kPrefetchAhead = 4096;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t SumAvx512(const uint8_t* p, size_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 4 * kLine <= bytes; i += 4 * kLine) {
    for (size_t o = 0; o < 4 * kLine; o += kLine) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchAhead + o), _MM_HINT_T0);
    }
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + kLine));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 2 * kLine));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 3 * kLine));
  }
  // A store, not _mm512_reduce_add_epi64: with g++ 12 that one trips -Wuninitialized inside
  // avx512fintrin.h.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 2 * kLine <= bytes; i += 2 * kLine) {
    const auto* q = reinterpret_cast<const __m256i*>(p + i);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(q));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(q + 1));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(q + 2));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(q + 3));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

uint64_t SumScalar(const uint8_t* p, size_t bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i + sizeof(uint64_t) <= bytes; i += sizeof(uint64_t)) {
    uint64_t v;
    std::memcpy(&v, p + i, sizeof(v));
    sum += v;
  }
  return sum;
}

using SumFn = uint64_t (*)(const uint8_t*, size_t);

SumFn PickSum(kernels::CpuIsa level, const char** name) {
#if defined(__x86_64__)
  if (level == kernels::CpuIsa::kAvx512) {
    *name = "avx512";
    return SumAvx512;
  }
  if (level != kernels::CpuIsa::kScalar) {
    *name = "avx2";
    return SumAvx2;
  }
#else
  (void)level;
#endif
  *name = "scalar";
  return SumScalar;
}

bool ParseInt(const char* s, long& out) {
  char* end = nullptr;
  out = std::strtol(s, &end, 10);
  return end != s && *end == '\0' && out > 0;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

int Main(int argc, char** argv) {
  long threads = static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
  long mib = 2048, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    long* target = a == "--threads" ? &threads
                   : a == "--mib"   ? &mib
                   : a == "--reps"  ? &reps
                                    : nullptr;
    if (target == nullptr || i + 1 >= argc || !ParseInt(argv[++i], *target)) {
      std::fprintf(stderr,
                   "usage: deltaserve-bench-bandwidth [--threads N] [--mib M] [--reps R]\n");
      return 2;
    }
  }
  const absl::StatusOr<kernels::CpuIsa> level = kernels::ResolveCpuIsaFromEnv();
  if (!level.ok()) {
    std::fprintf(stderr, "deltaserve-bench-bandwidth: %s\n",
                 std::string(level.status().message()).c_str());
    return 2;
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  std::unique_ptr<uint8_t, FreeDeleter> buffer(
      static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!buffer) {
    std::fprintf(stderr, "deltaserve-bench-bandwidth: cannot allocate %ld MiB\n", mib);
    return 1;
  }
  const char* isa = nullptr;
  const SumFn sum = PickSum(*level, &isa);
  const auto n = static_cast<size_t>(threads);
  // Slices of whole 256-byte groups; the last thread takes the remainder.
  const size_t slice = bytes / n / 256 * 256;
  auto slice_of = [&](size_t t, size_t& begin, size_t& len) {
    begin = t * slice;
    len = t + 1 == n ? bytes - begin : slice;
  };

  std::vector<uint64_t> sums(n);
  std::vector<double> rates;
  std::barrier sync(static_cast<std::ptrdiff_t>(n + 1));
  // Rep 0 touches the pages (first touch by the reading thread), reps 1..R read.
  std::vector<std::thread> pool;
  for (size_t t = 0; t < n; ++t) {
    pool.emplace_back([&, t] {
      size_t begin, len;
      slice_of(t, begin, len);
      std::memset(buffer.get() + begin, static_cast<int>(t + 1), len);
      sync.arrive_and_wait();
      for (long r = 0; r < reps; ++r) {
        sync.arrive_and_wait();  // start
        sums[t] += sum(buffer.get() + begin, len);
        sync.arrive_and_wait();  // end
      }
    });
  }
  sync.arrive_and_wait();
  for (long r = 0; r < reps; ++r) {
    sync.arrive_and_wait();
    const auto t0 = Clock::now();
    sync.arrive_and_wait();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s / 1e9);
    std::fprintf(stderr, "  rep %ld/%ld: %.2f GB/s\n", r + 1, reps, rates.back());
  }
  for (std::thread& th : pool) th.join();
  uint64_t check = 0;
  for (uint64_t s : sums) check += s;
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "bandwidth: threads=%ld bytes=%zu isa=%s best_gb_s=%.3f median_gb_s=%.3f check=%llu\n",
      threads, bytes, isa, sorted.back(), sorted[sorted.size() / 2],
      static_cast<unsigned long long>(check % 1000));
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) { return deltaserve::bench::Main(argc, argv); }
