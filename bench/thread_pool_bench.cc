// Cost of handing work to the CPU kernels' ThreadPool (kernels/cpu/thread_pool.h), next to an
// OpenMP parallel region doing the same (libgomp, where the build has OpenMP): a decode step
// hands ~100 jobs to the pool, so the per-job overhead multiplies.
//
//   build/release/bench/deltaserve-bench-thread-pool [--benchmark_repetitions=5]
//
// Rows: an empty job on all threads (Run / `#pragma omp parallel`), and ParallelFor over 64
// items of trivial work (grain 1; OpenMP: `parallel for schedule(dynamic)`). 2 threads: this
// machine's cores.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 2;

void BM_PoolEmptyJob(benchmark::State& state) {
  ThreadPool pool(kThreads);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.Run([&](int index, int) { sink.fetch_add(index, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_PoolEmptyJob)->UseRealTime();

void BM_PoolParallelFor64(benchmark::State& state) {
  ThreadPool pool(kThreads);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.ParallelFor(
        64, 1, [&](int64_t b, int64_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_PoolParallelFor64)->UseRealTime();

#if defined(_OPENMP)
void BM_OpenMpEmptyRegion(benchmark::State& state) {
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
#pragma omp parallel num_threads(kThreads)
    sink.fetch_add(omp_get_thread_num(), std::memory_order_relaxed);
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_OpenMpEmptyRegion)->UseRealTime();

void BM_OpenMpParallelFor64(benchmark::State& state) {
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
#pragma omp parallel for num_threads(kThreads) schedule(dynamic, 1)
    for (int i = 0; i < 64; ++i) sink.fetch_add(1, std::memory_order_relaxed);
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_OpenMpParallelFor64)->UseRealTime();
#endif

}  // namespace
}  // namespace deltaserve::kernels

BENCHMARK_MAIN();
