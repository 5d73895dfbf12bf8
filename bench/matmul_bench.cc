// Throughput of the CPU matrix product (MatMulCpu) per weight type and ISA path, on one
// 4096 x 4096 weight matrix with T = 1 (decode: bound by weight bytes) and T = 64, 512 (prefill:
// bound by multiply-adds). Reports GB/s of weight bytes read and GFLOP/s (2 * out * in * T).
//
//   build/release/bench/deltaserve-bench-matmul [--benchmark_filter=Q4_K] [--threads=N]
//       [--act=f32|int8]  # activation mode (matmul.h); default as MatMulCpu
//       [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]  # adds "_min" rows
//
// Weights are random values quantized with QuantizeRow; activations N(0, 1). Threads default
// to one per core (the pool includes the calling thread).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {
namespace {

constexpr int64_t kIn = 4096;
constexpr int64_t kOut = 4096;

int g_threads = 0;

ThreadPool& Pool() {
  static ThreadPool pool(g_threads);
  return pool;
}

// The quantized 4096 x 4096 matrix of `type`, built once per type.
const std::vector<uint8_t>& WeightBytes(WeightType type) {
  static std::map<WeightType, std::vector<uint8_t>> cache;
  auto it = cache.find(type);
  if (it != cache.end()) return it->second;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(kIn);
  const size_t row_bytes = RowBytes(type, kIn);
  std::vector<uint8_t> bytes(row_bytes * kOut);
  for (int64_t o = 0; o < kOut; ++o) {
    for (float& v : row) v = normal(rng);
    QuantizeRow(type, row.data(), bytes.data() + o * row_bytes, kIn);
  }
  return cache.emplace(type, std::move(bytes)).first->second;
}

void BM_MatMul(benchmark::State& state, WeightType type, CpuIsa isa, int64_t t) {
  const std::vector<uint8_t>& bytes = WeightBytes(type);
  const WeightView w{bytes.data(), type, kIn, kOut, RowBytes(type, kIn), 1};
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(t * kIn));
  for (float& v : x) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(t * kOut));
  const Mat xm{x.data(), t, kIn, kIn};
  Mat ym{y.data(), t, kOut, kOut};
  for (auto _ : state) {
    if (internal::MatMulCpuIsa(Pool(), w, xm, ym, isa) != KernelStatus::kOk) {
      state.SkipWithError("MatMulCpu failed");
      return;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes.size()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kIn * kOut * static_cast<double>(t) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

const char* TypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "F32";
    case WeightType::kF16:
      return "F16";
    case WeightType::kBF16:
      return "BF16";
    case WeightType::kQ8_0:
      return "Q8_0";
    case WeightType::kQ4_0:
      return "Q4_0";
    case WeightType::kQ4_1:
      return "Q4_1";
    case WeightType::kQ5_0:
      return "Q5_0";
    case WeightType::kQ5_1:
      return "Q5_1";
    case WeightType::kQ4_K:
      return "Q4_K";
    case WeightType::kQ5_K:
      return "Q5_K";
    case WeightType::kQ6_K:
      return "Q6_K";
  }
  return "unknown";
}

void RegisterAll() {
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                              WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                              WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                              WeightType::kQ5_K, WeightType::kQ6_K};
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    for (WeightType type : types) {
      for (int64_t t : {1, 64, 512}) {
        const std::string name = std::string("MatMul/") + TypeName(type) + "/" +
                                 std::string(CpuIsaName(isa)) + "/T" + std::to_string(t);
        // "min" over --benchmark_repetitions: on a shared machine the fastest repetition is
        // the one least disturbed (read times from it; its rate counters are the slowest).
        benchmark::RegisterBenchmark(name.c_str(), BM_MatMul, type, isa, t)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->ComputeStatistics("min", [](const std::vector<double>& v) {
              return *std::min_element(v.begin(), v.end());
            });
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels

int main(int argc, char** argv) {
  // --threads=N and --act= are ours; everything else goes to Google Benchmark.
  using deltaserve::kernels::MatMulActivations;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      deltaserve::kernels::g_threads = std::atoi(argv[i] + 10);
    } else if (std::strcmp(argv[i], "--act=f32") == 0) {
      deltaserve::kernels::SetMatMulActivations(MatMulActivations::kF32);
    } else if (std::strcmp(argv[i], "--act=int8") == 0) {
      deltaserve::kernels::SetMatMulActivations(MatMulActivations::kInt8);
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  deltaserve::kernels::RegisterAll();
  benchmark::AddCustomContext("threads", std::to_string(deltaserve::kernels::Pool().size()));
  benchmark::AddCustomContext(
      "activations",
      deltaserve::kernels::ActiveMatMulActivations() == MatMulActivations::kInt8 ? "int8" : "f32");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
