// Throughput of the CPU matrix product (MatMulCpu) per weight type and ISA path, on one
// 4096 x 4096 weight matrix with T = 1 (decode: bound by weight bytes) and T = 64, 512 (prefill:
// bound by multiply-adds). Reports GB/s of weight bytes read and GFLOP/s (2 * out * in * T).
//
//   build/release/bench/deltaserve-bench-matmul [--benchmark_filter=Q4_K] [--threads=N]
//       [--act=f32|int8]  # activation mode (matmul.h); default as MatMulCpu
//       [--shape=INxOUT ...]  # weight shapes instead of 4096x4096 (repeatable; names end /INxOUT)
//       [--shape=qwen35-0.8b]  # the distinct matmul shapes of the Qwen3.5 0.8B layers (hidden
//                              # 1024: DeltaNet qkv / z / beta+alpha / out, attention q / k+v /
//                              # out, FFN gate+up / down), e.g. with --tokens=512 for prefill
//       [--tokens=1,64,512]   # the T values; --tokens=1,2,4,8,16 --copies=8 are the decode
//                             # steps of 1 .. 16 batched sequences (the fused batch kernel for
//                             # 2 .. 16 rows, matmul.cc's kMaxFusedBatchInt8)
//       [--copies=N]          # cycle through N copies of each matrix (N x its bytes beyond the
//                             # caches reads weights from DRAM, as a decode step does)
//       [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]  # adds "_min" rows
//
// Weights are random values quantized with QuantizeRow; activations N(0, 1). Threads default
// to one per core (the pool includes the calling thread). Every ISA path this CPU supports is
// measured, up to the level DELTASERVE_CPU_ISA names (kernels/cpu/cpu_features.h; a level the
// CPU lacks is refused, exit 2).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {
namespace {

struct Shape {
  int64_t in;
  int64_t out;
};

int g_threads = 0;
std::vector<Shape> g_shapes;                   // empty: 4096 x 4096, unnamed
std::vector<int64_t> g_tokens = {1, 64, 512};  // T values
int g_copies = 1;                              // copies of the weights cycled through

ThreadPool& Pool() {
  static ThreadPool pool(g_threads);
  return pool;
}

// The quantized in x out matrix of `type`, built once per type and shape.
const std::vector<uint8_t>& WeightBytes(WeightType type, Shape s) {
  static std::map<std::tuple<WeightType, int64_t, int64_t>, std::vector<uint8_t>> cache;
  const auto key = std::make_tuple(type, s.in, s.out);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(s.in));
  const size_t row_bytes = RowBytes(type, s.in);
  const size_t matrix_bytes = row_bytes * s.out;
  std::vector<uint8_t> bytes(matrix_bytes * g_copies);
  for (int64_t o = 0; o < s.out; ++o) {
    for (float& v : row) v = normal(rng);
    QuantizeRow(type, row.data(), bytes.data() + o * row_bytes, s.in);
  }
  for (int c = 1; c < g_copies; ++c) {
    std::memcpy(bytes.data() + c * matrix_bytes, bytes.data(), matrix_bytes);
  }
  return cache.emplace(key, std::move(bytes)).first->second;
}

void BM_MatMul(benchmark::State& state, WeightType type, CpuIsa isa, int64_t t, Shape s) {
  const std::vector<uint8_t>& bytes = WeightBytes(type, s);
  const size_t matrix_bytes = RowBytes(type, s.in) * s.out;
  WeightView w{bytes.data(), type, s.in, s.out, RowBytes(type, s.in), 1};
  int copy = 0;
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(t * s.in));
  for (float& v : x) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(t * s.out));
  const Mat xm{x.data(), t, s.in, s.in};
  Mat ym{y.data(), t, s.out, s.out};
  for (auto _ : state) {
    w.data = bytes.data() + copy * matrix_bytes;
    copy = copy + 1 == g_copies ? 0 : copy + 1;
    if (internal::MatMulCpuIsa(Pool(), w, xm, ym, isa) != KernelStatus::kOk) {
      state.SkipWithError("MatMulCpu failed");
      return;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(matrix_bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.in * s.out * static_cast<double>(t) * 1e-9,
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
  for (CpuIsa isa : kAllCpuIsas) {
    if (!IsaSupported(isa) || static_cast<int>(isa) > static_cast<int>(ActiveIsa())) continue;
    for (WeightType type : types) {
      for (int64_t t : g_tokens) {
        for (size_t si = 0; si < std::max<size_t>(g_shapes.size(), 1); ++si) {
          const bool named = !g_shapes.empty();
          const Shape shape = named ? g_shapes[si] : Shape{4096, 4096};
          std::string name = std::string("MatMul/") + TypeName(type) + "/" +
                             std::string(CpuIsaName(isa)) + "/T" + std::to_string(t);
          if (named) {
            // One append per piece: GCC 12 flags "/" + std::string with a false -Wrestrict.
            name.append("/").append(std::to_string(shape.in));
            name.append("x").append(std::to_string(shape.out));
          }
          // "min" over --benchmark_repetitions: on a shared machine the fastest repetition is
          // the one least disturbed (read times from it; its rate counters are the slowest).
          benchmark::RegisterBenchmark(name.c_str(), BM_MatMul, type, isa, t, shape)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond)
              ->ComputeStatistics("min", [](const std::vector<double>& v) {
                return *std::min_element(v.begin(), v.end());
              });
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels

int main(int argc, char** argv) {
  // --threads=N and --act= are ours; everything else goes to Google Benchmark.
  using deltaserve::kernels::MatMulActivations;
  if (absl::StatusOr<deltaserve::kernels::CpuIsa> isa = deltaserve::kernels::ResolveCpuIsaFromEnv();
      !isa.ok()) {
    std::fprintf(stderr, "deltaserve-bench-matmul: %s\n",
                 std::string(isa.status().message()).c_str());
    return 2;
  }
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      deltaserve::kernels::g_threads = std::atoi(argv[i] + 10);
    } else if (std::strcmp(argv[i], "--shape=qwen35-0.8b") == 0) {
      // The GGUF tensor shapes of synth-0.8b (worker/engine/qwen35.cc's RunDeltaNet,
      // RunAttention, RunFfn).
      for (const deltaserve::kernels::Shape s : {deltaserve::kernels::Shape{1024, 6144},
                                                 {1024, 2048},
                                                 {1024, 16},
                                                 {2048, 1024},
                                                 {1024, 4096},
                                                 {1024, 512},
                                                 {1024, 3584},
                                                 {3584, 1024}}) {
        deltaserve::kernels::g_shapes.push_back(s);
      }
    } else if (std::strncmp(argv[i], "--shape=", 8) == 0) {
      char* end = nullptr;
      const int64_t in = std::strtoll(argv[i] + 8, &end, 10);
      const int64_t out = *end == 'x' ? std::strtoll(end + 1, &end, 10) : 0;
      if (in <= 0 || out <= 0 || *end != '\0') {
        std::fprintf(stderr, "bad --shape '%s' (INxOUT)\n", argv[i] + 8);
        return 2;
      }
      deltaserve::kernels::g_shapes.push_back({in, out});
    } else if (std::strncmp(argv[i], "--copies=", 9) == 0) {
      deltaserve::kernels::g_copies = std::max(1, std::atoi(argv[i] + 9));
    } else if (std::strncmp(argv[i], "--tokens=", 9) == 0) {
      deltaserve::kernels::g_tokens.clear();
      for (const char* p = argv[i] + 9; *p != '\0';) {
        char* end = nullptr;
        const int64_t t = std::strtoll(p, &end, 10);
        if (t <= 0 || end == p || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "bad --tokens '%s' (T,T,...)\n", argv[i] + 9);
          return 2;
        }
        deltaserve::kernels::g_tokens.push_back(t);
        p = *end == ',' ? end + 1 : end;
      }
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
