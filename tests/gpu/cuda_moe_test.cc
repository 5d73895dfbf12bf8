// The CUDA grouped expert FFN (kernels/cuda/moe_ffn.cu) against a double-precision evaluation
// of backend.h's MoeFfn from the exactly decoded expert weights, and against the CPU backend
// (f32 activations): k = 1..8 experts per token, experts that get no token, batches that take
// the GEMV items (few tokens per expert) and the GEMM tiles, gate/up of different types (two
// launches), down of a third type, strided x and y, repeated runs equal bit for bit, an out-of-
// range id (NaN row for that token only), stacks over an expert arena with skipped ids (the
// device half of two expert tiers), the scratch refusal, and the CPU's shape refusals.
//
// Tolerance: matmul_test_util.h MoeReference, the per-product bounds propagated through gate,
// up, SwiGLU, down and the weighted sum.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/moe_sort.cuh"
#include "tests/gpu/gpu_test_support.h"
#include "tests/gpu/matmul_test_util.h"

namespace deltaserve::kernels::gpu_test {
namespace {

constexpr int64_t kExperts = 12;
// Experts no token is routed to.
bool Excluded(int64_t e) { return e == 1 || e == 5 || e == 9 || e == 10; }

struct Config {
  WeightType gate;
  WeightType up;
  WeightType down;
  int64_t n_embd;
  int64_t ff;
};

struct Route {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// k distinct allowed experts per token, positive weights summing to 1 (as MoeRoute gives).
Route MakeRoute(int64_t n_tokens, int64_t k, std::mt19937& rng) {
  std::vector<int32_t> allowed;
  for (int32_t e = 0; e < kExperts; ++e) {
    if (!Excluded(e)) allowed.push_back(e);
  }
  Route r;
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::shuffle(allowed.begin(), allowed.end(), rng);
    float sum = 0;
    std::vector<float> w(k);
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = weight(rng));
    for (int64_t j = 0; j < k; ++j) {
      r.ids.push_back(allowed[j]);
      r.weights.push_back(w[j] / sum);
    }
  }
  return r;
}

class CudaMoeTest : public GpuBackendTest {
 protected:
  void TearDown() override { SetMatMulActivations(std::nullopt); }

  struct Experts {
    HostWeights gate, up, down;
  };

  Experts MakeExperts(const Config& c, std::mt19937& rng) {
    return {MakeHostWeights(c.gate, c.n_embd, c.ff, kExperts, 0.3f, rng),
            MakeHostWeights(c.up, c.n_embd, c.ff, kExperts, 0.3f, rng),
            MakeHostWeights(c.down, c.ff, c.n_embd, kExperts, 0.3f, rng)};
  }

  // y (n_tokens rows, ys apart) of the GPU for x (xs apart); the weights are uploaded per call.
  std::vector<float> RunGpu(const Experts& ex, const std::vector<float>& x, int64_t n_tokens,
                            int64_t n_embd, int64_t xs, int64_t ys, const Route& route, int64_t k,
                            KernelStatus* status = nullptr) {
    DeviceBuffer g = Upload(*gpu_, ex.gate.bytes);
    DeviceBuffer u = Upload(*gpu_, ex.up.bytes);
    DeviceBuffer d = Upload(*gpu_, ex.down.bytes);
    DeviceBuffer xd = Upload(*gpu_, x);
    DeviceBuffer yd = Upload(*gpu_, std::vector<float>(n_tokens * ys, -5.0f));
    DeviceBuffer idd = Upload(*gpu_, route.ids);
    DeviceBuffer wd = Upload(*gpu_, route.weights);
    const Mat gx{xd.floats(), n_tokens, n_embd, xs};
    Mat gy{yd.floats(), n_tokens, n_embd, ys};
    const KernelStatus s =
        gpu_->MoeFfn(gx, static_cast<const int32_t*>(idd.data()), wd.floats(), k,
                     ex.gate.View(g.data()), ex.up.View(u.data()), ex.down.View(d.data()), gy);
    if (status != nullptr)
      *status = s;
    else
      EXPECT_EQ(s, KernelStatus::kOk);
    return Download<float>(*gpu_, yd.data(), n_tokens * ys);
  }

  void Check(const Config& c, int64_t n_tokens, int64_t k, std::mt19937& rng) {
    SCOPED_TRACE(std::string(TypeName(c.gate)) + "/" + TypeName(c.up) + "/" + TypeName(c.down) +
                 " T=" + std::to_string(n_tokens) + " k=" + std::to_string(k));
    const Experts ex = MakeExperts(c, rng);
    const int64_t xs = c.n_embd + 3;
    const int64_t ys = c.n_embd + 1;
    std::vector<float> x(n_tokens * xs, 0.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t i = 0; i < c.n_embd; ++i) x[t * xs + i] = normal(rng);
    }
    const Route route = MakeRoute(n_tokens, k, rng);
    const std::vector<float> y = RunGpu(ex, x, n_tokens, c.n_embd, xs, ys, route, k);
    const std::vector<float> again = RunGpu(ex, x, n_tokens, c.n_embd, xs, ys, route, k);
    EXPECT_EQ(std::memcmp(y.data(), again.data(), y.size() * sizeof(float)), 0)
        << "two runs differ";

    SetMatMulActivations(MatMulActivations::kF32);
    std::vector<float> yc(n_tokens * ys, -5.0f);
    Mat cx{x.data(), n_tokens, c.n_embd, xs};
    Mat cy{yc.data(), n_tokens, c.n_embd, ys};
    ASSERT_EQ(cpu_->MoeFfn(cx, route.ids.data(), route.weights.data(), k,
                           ex.gate.View(ex.gate.bytes.data()), ex.up.View(ex.up.bytes.data()),
                           ex.down.View(ex.down.bytes.data()), cy),
              KernelStatus::kOk);

    const MoeExpected ref =
        MoeReference(ex.gate, ex.up, ex.down, x.data(), xs, n_tokens, route.ids, route.weights, k,
                     !cuda::MoeUsesGemv(n_tokens, k, kExperts));
    int reported = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t o = 0; o < c.n_embd; ++o) {
        const size_t i = static_cast<size_t>(t * c.n_embd + o);
        const double got = y[t * ys + o];
        const double cpu = yc[t * ys + o];
        // The CPU within its own bound checks the reference itself.
        const bool ok = std::fabs(got - ref.want[i]) <= ref.bound[i] &&
                        std::fabs(cpu - ref.want[i]) <= ref.cpu_bound[i];
        if (!ok && reported++ < 5) {
          ADD_FAILURE() << "t=" << t << " o=" << o << " gpu=" << got << " ref=" << ref.want[i]
                        << " cpu=" << cpu << " bound=" << ref.bound[i]
                        << " cpu_bound=" << ref.cpu_bound[i];
        }
      }
      EXPECT_EQ(y[t * ys + c.n_embd], -5.0f) << "padding of row " << t;
    }
  }
};

const std::vector<Config>& Configs() {
  static const std::vector<Config> configs = {
      {WeightType::kF32, WeightType::kF32, WeightType::kF32, 40, 24},
      {WeightType::kQ4_K, WeightType::kQ4_K, WeightType::kQ6_K, 256, 256},  // Q4_K_M's experts
      {WeightType::kQ8_0, WeightType::kQ8_0, WeightType::kQ8_0, 96, 64},
      {WeightType::kF16, WeightType::kBF16, WeightType::kQ5_1, 64, 32},  // gate != up type
      {WeightType::kQ4_0, WeightType::kQ5_0, WeightType::kQ4_1, 64, 96},
      {WeightType::kQ5_K, WeightType::kQ5_K, WeightType::kQ4_K, 256, 256},
  };
  return configs;
}

TEST_F(CudaMoeTest, DecodeBatchesEveryK) {
  std::mt19937 rng(11);
  for (const Config& c : Configs()) {
    for (int64_t n_tokens : {1, 3, 8}) {
      for (int64_t k : {1, 2, 4, 8}) Check(c, n_tokens, k, rng);
    }
  }
}

TEST_F(CudaMoeTest, PrefillBatchesTakeBothPaths) {
  std::mt19937 rng(12);
  for (const Config& c : Configs()) {
    Check(c, 9, 2, rng);   // 18 assignments: GEMV items
    Check(c, 9, 8, rng);   // 72: GEMM tiles
    Check(c, 40, 1, rng);  // GEMV, up to 40 positions per expert (kGemvMaxRows at a time)
    Check(c, 40, 4, rng);  // GEMM
    // GEMM, several tiles per expert (fewer tokens where the host reference is slow).
    Check(c, c.n_embd * c.ff <= 96 * 64 ? 300 : 100, 8, rng);
  }
}

// An id outside [0, n_expert): the CPU refuses the call; the GPU, which cannot check device ids
// before launching, writes NaN into that token's row and computes the others normally.
TEST_F(CudaMoeTest, BadIdPoisonsOnlyItsToken) {
  std::mt19937 rng(13);
  const Config c{WeightType::kQ8_0, WeightType::kQ8_0, WeightType::kQ8_0, 64, 32};
  const Experts ex = MakeExperts(c, rng);
  const int64_t n_tokens = 3;
  const int64_t k = 2;
  std::vector<float> x(n_tokens * c.n_embd);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  Route route = MakeRoute(n_tokens, k, rng);
  const std::vector<float> good = RunGpu(ex, x, n_tokens, c.n_embd, c.n_embd, c.n_embd, route, k);
  route.ids[1 * k + 1] = static_cast<int32_t>(kExperts);
  const std::vector<float> bad = RunGpu(ex, x, n_tokens, c.n_embd, c.n_embd, c.n_embd, route, k);
  for (int64_t o = 0; o < c.n_embd; ++o) {
    EXPECT_EQ(bad[o], good[o]);
    EXPECT_TRUE(std::isnan(bad[c.n_embd + o]));
    EXPECT_EQ(bad[2 * c.n_embd + o], good[2 * c.n_embd + o]);
  }
  std::vector<float> yc(n_tokens * c.n_embd);
  Mat cx{x.data(), n_tokens, c.n_embd, c.n_embd};
  Mat cy{yc.data(), n_tokens, c.n_embd, c.n_embd};
  EXPECT_EQ(cpu_->MoeFfn(cx, route.ids.data(), route.weights.data(), k,
                         ex.gate.View(ex.gate.bytes.data()), ex.up.View(ex.up.bytes.data()),
                         ex.down.View(ex.down.bytes.data()), cy),
            KernelStatus::kInvalidArgument);
}

// Stacks over an expert arena (matrix_stride = the slot size, slots in another order than the
// experts, empty slots full of NaN bytes) with ids split between the arena and the host
// (worker/engine/expert_tiers.h): the GPU's device half within MoeReference's bound over the
// original stacks with the host's ids skipped, equal to the CPU backend's run on the same arena
// within its bound, tokens with no device expert exactly zero; and the two halves (GPU arena,
// CPU host ids on the original stacks) add up to the whole FFN. GEMV and GEMM paths.
TEST_F(CudaMoeTest, ArenaStacksAndSkippedIds) {
  std::mt19937 rng(15);
  // Experts 6, 1, 3, 0, 11 in slots 0, 2, 3, 5, 6 of 7; the others stay on the host.
  const std::vector<int32_t> slot_expert = {6, -1, 1, 3, -1, 0, 11};
  for (const Config& c : {Configs()[1], Configs()[3], Configs()[0]}) {
    const Experts ex = MakeExperts(c, rng);
    const ExpertArena arena = MakeExpertArena(ex.gate, ex.up, ex.down, slot_expert);
    DeviceBuffer dev_arena = Upload(*gpu_, arena.bytes);
    for (const auto& [n_tokens, k] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {6, 2}, {48, 4}}) {
      SCOPED_TRACE(std::string(TypeName(c.gate)) + " T=" + std::to_string(n_tokens) +
                   " k=" + std::to_string(k));
      Route route = MakeRoute(n_tokens, k, rng);
      // Token 0 (of a batch) on host experts only.
      if (n_tokens > 1) {
        for (int64_t j = 0; j < k; ++j) route.ids[j] = std::vector<int32_t>{2, 4, 7, 8}[j];
      }
      const SplitRoute split = SplitByArena(route.ids, slot_expert);
      std::vector<float> x(n_tokens * c.n_embd);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      DeviceBuffer xd = Upload(*gpu_, x);
      DeviceBuffer yd = Upload(*gpu_, std::vector<float>(n_tokens * c.n_embd, -5.0f));
      DeviceBuffer idd = Upload(*gpu_, split.slot_ids);
      DeviceBuffer wd = Upload(*gpu_, route.weights);
      const Mat gx{xd.floats(), n_tokens, c.n_embd, c.n_embd};
      Mat gy{yd.floats(), n_tokens, c.n_embd, c.n_embd};
      ASSERT_EQ(
          gpu_->MoeFfn(gx, static_cast<const int32_t*>(idd.data()), wd.floats(), k,
                       arena.Gate(ex.gate, dev_arena.data()), arena.Up(ex.up, dev_arena.data()),
                       arena.Down(ex.down, dev_arena.data()), gy),
          KernelStatus::kOk);
      const std::vector<float> y = Download<float>(*gpu_, yd.data(), n_tokens * c.n_embd);

      SetMatMulActivations(MatMulActivations::kF32);
      std::vector<float> yc(n_tokens * c.n_embd), yh(n_tokens * c.n_embd);
      Mat cx{x.data(), n_tokens, c.n_embd, c.n_embd};
      Mat cy{yc.data(), n_tokens, c.n_embd, c.n_embd};
      Mat hy{yh.data(), n_tokens, c.n_embd, c.n_embd};
      ASSERT_EQ(
          cpu_->MoeFfn(cx, split.slot_ids.data(), route.weights.data(), k,
                       arena.Gate(ex.gate, arena.bytes.data()), arena.Up(ex.up, arena.bytes.data()),
                       arena.Down(ex.down, arena.bytes.data()), cy),
          KernelStatus::kOk);
      ASSERT_EQ(cpu_->MoeFfn(cx, split.host_ids.data(), route.weights.data(), k,
                             ex.gate.View(ex.gate.bytes.data()), ex.up.View(ex.up.bytes.data()),
                             ex.down.View(ex.down.bytes.data()), hy),
                KernelStatus::kOk);
      SetMatMulActivations(std::nullopt);

      const bool gemm = !cuda::MoeUsesGemv(n_tokens, k, arena.n_slots);
      const MoeExpected dev_ref =
          MoeReference(ex.gate, ex.up, ex.down, x.data(), c.n_embd, n_tokens, split.device_experts,
                       route.weights, k, gemm);
      const MoeExpected host_ref = MoeReference(ex.gate, ex.up, ex.down, x.data(), c.n_embd,
                                                n_tokens, split.host_ids, route.weights, k, gemm);
      int reported = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const bool ok = std::fabs(y[i] - dev_ref.want[i]) <= dev_ref.bound[i] &&
                        std::fabs(yc[i] - dev_ref.want[i]) <= dev_ref.cpu_bound[i] &&
                        std::fabs(double{y[i]} + yh[i] - (dev_ref.want[i] + host_ref.want[i])) <=
                            dev_ref.bound[i] + host_ref.cpu_bound[i];
        if (!ok && reported++ < 5) {
          ADD_FAILURE() << "i=" << i << " gpu=" << y[i] << " cpu=" << yc[i]
                        << " want=" << dev_ref.want[i] << " host half=" << yh[i]
                        << " host want=" << host_ref.want[i];
        }
      }
      if (n_tokens > 1) {
        for (int64_t o = 0; o < c.n_embd; ++o) EXPECT_EQ(y[o], 0.0f) << o;
      }
    }
  }
}

// A scratch area smaller than MoeFfnScratchBytes: kOutOfMemory, nothing launched.
TEST_F(CudaMoeTest, SmallScratchIsOutOfMemory) {
  std::string error;
  CudaBackendOptions options;
  options.scratch_bytes = 4096;
  std::unique_ptr<Backend> small = MakeCudaBackend(options, &error);
  ASSERT_NE(small, nullptr) << error;
  std::mt19937 rng(14);
  const Config c{WeightType::kF32, WeightType::kF32, WeightType::kF32, 64, 64};
  const Experts ex = MakeExperts(c, rng);
  const int64_t n_tokens = 16;
  const int64_t k = 4;
  const Route route = MakeRoute(n_tokens, k, rng);
  DeviceBuffer g = Upload(*small, ex.gate.bytes);
  DeviceBuffer u = Upload(*small, ex.up.bytes);
  DeviceBuffer d = Upload(*small, ex.down.bytes);
  DeviceBuffer xd = Upload(*small, std::vector<float>(n_tokens * c.n_embd, 1.0f));
  DeviceBuffer yd = Upload(*small, std::vector<float>(n_tokens * c.n_embd, 0.0f));
  DeviceBuffer idd = Upload(*small, route.ids);
  DeviceBuffer wd = Upload(*small, route.weights);
  const Mat gx{xd.floats(), n_tokens, c.n_embd, c.n_embd};
  Mat gy{yd.floats(), n_tokens, c.n_embd, c.n_embd};
  EXPECT_EQ(small->MoeFfn(gx, static_cast<const int32_t*>(idd.data()), wd.floats(), k,
                          ex.gate.View(g.data()), ex.up.View(u.data()), ex.down.View(d.data()), gy),
            KernelStatus::kOutOfMemory);
}

// Shape errors: the same status as the CPU backend (nothing runs; host pointers stand in).
TEST_F(CudaMoeTest, RefusesWhatTheCpuRefuses) {
  std::vector<uint8_t> w(RowBytes(WeightType::kF32, 64) * 32 * 4, 0);
  std::vector<float> buf(64 * 8, 0.0f);
  std::vector<float> other(64 * 8, 0.0f);
  const int32_t ids[8] = {};
  const float weights[8] = {};
  const WeightView gate{w.data(), WeightType::kF32, 64, 32, 256, 4};
  const WeightView down{w.data(), WeightType::kF32, 32, 64, 128, 4};
  WeightView down_wrong = down;
  down_wrong.count = 3;
  WeightView unknown = gate;
  unknown.type = static_cast<WeightType>(11);
  struct Bad {
    const char* what;
    Mat x;
    Mat y;
    int64_t k;
    WeightView g, u, d;
  };
  const std::vector<Bad> bad = {
      {"k = 0", {buf.data(), 2, 64, 64}, {other.data(), 2, 64, 64}, 0, gate, gate, down},
      {"y aliases x", {buf.data(), 2, 64, 64}, {buf.data(), 2, 64, 64}, 2, gate, gate, down},
      {"y rows", {buf.data(), 2, 64, 64}, {other.data(), 3, 64, 64}, 2, gate, gate, down},
      {"x cols != in", {buf.data(), 2, 63, 64}, {other.data(), 2, 63, 64}, 2, gate, gate, down},
      {"down count", {buf.data(), 2, 64, 64}, {other.data(), 2, 64, 64}, 2, gate, gate, down_wrong},
  };
  for (const Bad& b : bad) {
    Mat yc = b.y;
    Mat yg = b.y;
    const KernelStatus want = cpu_->MoeFfn(b.x, ids, weights, b.k, b.g, b.u, b.d, yc);
    EXPECT_NE(want, KernelStatus::kOk) << b.what;
    EXPECT_EQ(gpu_->MoeFfn(b.x, ids, weights, b.k, b.g, b.u, b.d, yg), want) << b.what;
  }
  // A type without a kernel: the GPU refuses it up front (the CPU only when an expert runs).
  Mat x{buf.data(), 2, 64, 64};
  Mat y{other.data(), 2, 64, 64};
  EXPECT_EQ(gpu_->MoeFfn(x, ids, weights, 2, unknown, gate, down, y),
            KernelStatus::kUnsupportedType);
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
