// The fused Gated DeltaNet decode step (Backend::DeltaNetDecodeStep, kernels/cuda/gdn_decode.cu)
// on the GPU against the CPU backend's composition of single ops (the engine's reference), and
// against the GPU's own single ops composed by the default implementation. Part of the
// cuda_gated_delta_rule_test binary. Inputs drawn as the projections produce them (qkv, z, alpha
// ~ N(0, 1), beta ~ N(0, 2), conv taps ~ N(0, 0.5), conv windows ~ N(0, 1), delta states
// ~ N(0, 0.3), ssm_a = -exp(U(-1, 1.5)), dt_bias ~ U(-1, 1), norm ~ U(0.5, 1.5)), in padded rows
// whose sentinels must survive.
// Covered: B = 1, 3, 8, 64; the golden models' heads (n_k 2, n_v 4, d 32), Qwen3.5-9B's (16, 32,
// 128), n_v == n_k, every register width (d 16, 64, 100, 128, 256) and rows/lanes past d (24,
// 100); conv kernels 1, 4, 6; 16 steps in a row on the same states; zero and NaN sequences; qkv
// and out as column views; the op inside a CUDA graph capture. The launcher's argument checks
// need no GPU and always run.
//
// Tolerances (derived in tests/kernels/cuda_gdn_decode_test.cc, which runs these kernels on the
// CUDA emulator: worst 2.4e-7 on the states, 1.2e-6 on out there): the conv state is copies
// (bit-exact); delta states 2e-6 + 2e-6 relative; out 2e-5 + 2e-5 relative. On the GPU the sums
// also run with FMA contraction and CUDA's expf (2 ulp): a few more f32 ulps of O(1) values per
// step; the recurrence is contractive (decay < 1, I - β k kᵀ a contraction), so 16 steps stay
// within the same bounds. Wrong ownership, indexing or a missing barrier give errors of 1e-2+.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend_class.h"
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/gpu_test_support.h"

namespace deltaserve::kernels::gpu_test {
namespace {

constexpr float kSentinel = -12345.0f;
constexpr double kStateAbs = 2e-6, kStateRel = 2e-6, kOutAbs = 2e-5, kOutRel = 2e-5;

struct Shape {
  int b, n_k, n_v, d, kernel;
};

std::string Name(const Shape& s) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "B %d, n_k %d, n_v %d, d %d, kernel %d", s.b, s.n_k, s.n_v, s.d,
                s.kernel);
  return buf;
}

// One call's inputs on the host; matrices in rows padded by `pad` sentinels.
struct Inputs {
  Inputs(const Shape& s, uint32_t seed)
      : s(s),
        c(int64_t{2 * s.n_k + s.n_v} * s.d),
        qkv_stride(c + 5),
        z_stride(int64_t{s.n_v} * s.d + 3),
        ab_stride(s.n_v + 2),
        out_stride(int64_t{s.n_v} * s.d + 4) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride, float sd) {
      v.assign(static_cast<size_t>(rows * stride), kSentinel);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < cols; ++i) v[r * stride + i] = sd * normal(gen);
      }
    };
    fill(qkv, s.b, c, qkv_stride, 1.0f);
    fill(z, s.b, int64_t{s.n_v} * s.d, z_stride, 1.0f);
    fill(alpha, s.b, s.n_v, ab_stride, 1.0f);
    fill(beta, s.b, s.n_v, ab_stride, 2.0f);
    fill(conv_w, c, s.kernel, s.kernel, 0.5f);
    for (int h = 0; h < s.n_v; ++h) {
      ssm_a.push_back(-std::exp(-1.0f + 2.5f * unit(gen)));
      dt_bias.push_back(2.0f * unit(gen) - 1.0f);
    }
    for (int i = 0; i < s.d; ++i) norm.push_back(0.5f + unit(gen));
    for (int b = 0; b < s.b; ++b) {
      std::vector<float> cs, ds;
      fill(cs, s.kernel - 1, c, c, 1.0f);
      fill(ds, int64_t{s.n_v} * s.d, s.d, s.d, 0.3f);
      conv_states.push_back(cs);
      delta_states.push_back(ds);
    }
  }
  // New projections for the next step (the states carry over).
  void NextToken(uint32_t seed) {
    Inputs fresh(s, seed);
    qkv = fresh.qkv;
    z = fresh.z;
    alpha = fresh.alpha;
    beta = fresh.beta;
  }

  Shape s;
  int64_t c, qkv_stride, z_stride, ab_stride, out_stride;
  std::vector<float> qkv, z, alpha, beta, conv_w, ssm_a, dt_bias, norm;
  std::vector<std::vector<float>> conv_states, delta_states;
};

// Inputs in one backend's memory, the states and out included; Step() is the call.
struct OnBackend {
  OnBackend(Backend& be, const Inputs& in) : be(be), in(in) {
    qkv = GpuBackendTest::Upload(be, in.qkv);
    z = GpuBackendTest::Upload(be, in.z);
    alpha = GpuBackendTest::Upload(be, in.alpha);
    beta = GpuBackendTest::Upload(be, in.beta);
    conv_w = GpuBackendTest::Upload(be, in.conv_w);
    ssm_a = GpuBackendTest::Upload(be, in.ssm_a);
    dt_bias = GpuBackendTest::Upload(be, in.dt_bias);
    norm = GpuBackendTest::Upload(be, in.norm);
    out = GpuBackendTest::Upload(
        be, std::vector<float>(static_cast<size_t>(in.s.b * in.out_stride), kSentinel));
    for (int b = 0; b < in.s.b; ++b) {
      conv.push_back(GpuBackendTest::Upload(be, in.conv_states[b]));
      delta.push_back(GpuBackendTest::Upload(be, in.delta_states[b]));
      conv_host.push_back(conv.back().floats());
      delta_host.push_back(delta.back().floats());
    }
    conv_arr = GpuBackendTest::Upload(be, conv_host);
    delta_arr = GpuBackendTest::Upload(be, delta_host);
  }
  // Overwrites the per-token inputs (qkv, z, alpha, beta) with `next`'s.
  void Load(const Inputs& next) {
    for (auto [buf, v] :
         {std::pair{&qkv, &next.qkv}, {&z, &next.z}, {&alpha, &next.alpha}, {&beta, &next.beta}}) {
      EXPECT_EQ(be.CopyToDevice(buf->data(), v->data(), v->size() * 4), KernelStatus::kOk);
    }
  }
  DeltaNetStep Step() const {
    const Shape& s = in.s;
    DeltaNetStep st;
    st.qkv = {qkv.floats(), s.b, in.c, in.qkv_stride};
    st.z = {z.floats(), s.b, int64_t{s.n_v} * s.d, in.z_stride};
    st.alpha = {alpha.floats(), s.b, s.n_v, in.ab_stride};
    st.beta = {beta.floats(), s.b, s.n_v, in.ab_stride};
    st.conv_w = conv_w.floats();
    st.conv_kernel = s.kernel;
    st.conv_states = static_cast<float* const*>(conv_arr.data());
    st.delta_states = static_cast<float* const*>(delta_arr.data());
    st.conv_states_host = conv_host.data();
    st.delta_states_host = delta_host.data();
    st.ssm_a = {ssm_a.floats(), s.n_v};
    st.dt_bias = {dt_bias.floats(), s.n_v};
    st.norm = {norm.floats(), s.d};
    st.l2_eps = st.norm_eps = 1e-6f;
    st.n_k_heads = s.n_k;
    st.n_v_heads = s.n_v;
    st.head_dim = s.d;
    st.out = {out.floats(), s.b, int64_t{s.n_v} * s.d, in.out_stride};
    return st;
  }
  std::vector<float> Out() const {
    return GpuBackendTest::Download<float>(be, out.data(),
                                           static_cast<size_t>(in.s.b) * in.out_stride);
  }
  std::vector<float> Conv(int b) const {
    return GpuBackendTest::Download<float>(be, conv[b].data(), in.conv_states[b].size());
  }
  std::vector<float> Delta(int b) const {
    return GpuBackendTest::Download<float>(be, delta[b].data(), in.delta_states[b].size());
  }

  Backend& be;
  const Inputs& in;
  DeviceBuffer qkv, z, alpha, beta, conv_w, ssm_a, dt_bias, norm, out, conv_arr, delta_arr;
  std::vector<DeviceBuffer> conv, delta;
  std::vector<float*> conv_host, delta_host;
};

// |got - want| <= abs + rel |want|; NaN exactly where want is NaN; sentinels equal.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double abs,
                double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i])
                        ? std::isnan(got[i])
                        : std::fabs(double{got[i]} - want[i]) <= abs + rel * std::fabs(want[i]);
    if (!std::isnan(want[i])) worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": worst abs error " << worst;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaGdnDecodeStepTest : public GpuBackendTest {
 protected:
  // Runs the step on `subject` (its own op, or the default composition) and on the CPU backend;
  // compares out (padding included) and every state.
  void Compare(const OnBackend& subject, const OnBackend& ref, const std::string& what) {
    ExpectNear(subject.Out(), ref.Out(), kOutAbs, kOutRel, what + ": out");
    for (int b = 0; b < ref.in.s.b; ++b) {
      EXPECT_TRUE(SameBits(subject.Conv(b), ref.Conv(b))) << what << ": conv state " << b;
      ExpectNear(subject.Delta(b), ref.Delta(b), kStateAbs, kStateRel,
                 what + ": delta state " + std::to_string(b));
    }
  }
};

TEST_F(CudaGdnDecodeStepTest, MatchesTheCpuBackend) {
  for (const Shape s :
       {Shape{1, 2, 4, 32, 4}, Shape{3, 2, 4, 32, 4}, Shape{8, 2, 4, 32, 4}, Shape{64, 2, 4, 32, 4},
        Shape{1, 16, 32, 128, 4}, Shape{8, 16, 32, 128, 4}, Shape{64, 16, 32, 128, 4},
        Shape{3, 4, 4, 128, 4}, Shape{3, 2, 2, 64, 4}, Shape{3, 1, 4, 24, 4},
        Shape{3, 1, 2, 100, 6}, Shape{3, 1, 2, 256, 4}, Shape{8, 4, 8, 16, 1}}) {
    Inputs in(s, static_cast<uint32_t>(s.b * 977 + s.d));
    OnBackend gpu(*gpu_, in), cpu(*cpu_, in);
    ASSERT_EQ(gpu_->DeltaNetDecodeStep(gpu.Step()), KernelStatus::kOk) << Name(s);
    ASSERT_EQ(cpu_->DeltaNetDecodeStep(cpu.Step()), KernelStatus::kOk) << Name(s);
    Compare(gpu, cpu, Name(s));
  }
}

TEST_F(CudaGdnDecodeStepTest, MatchesTheGpuSingleOps) {
  // The fused kernels against the CUDA backend's own conv, norms, step kernel and gated norm,
  // composed by Backend's default implementation (the engine's path before the op).
  for (const Shape s : {Shape{8, 16, 32, 128, 4}, Shape{3, 2, 4, 32, 4}}) {
    Inputs in(s, 5);
    OnBackend fused(*gpu_, in), composed(*gpu_, in);
    ASSERT_EQ(gpu_->DeltaNetDecodeStep(fused.Step()), KernelStatus::kOk);
    ASSERT_EQ(gpu_->Backend::DeltaNetDecodeStep(composed.Step()), KernelStatus::kOk);
    Compare(fused, composed, "fused vs single ops, " + Name(s));
  }
}

TEST_F(CudaGdnDecodeStepTest, SixteenStepsInARow) {
  const Shape s{8, 16, 32, 128, 4};
  Inputs in(s, 17);
  OnBackend gpu(*gpu_, in), cpu(*cpu_, in);
  for (int step = 0; step < 16; ++step) {
    if (step > 0) {
      in.NextToken(100 + step);
      gpu.Load(in);
      cpu.Load(in);
    }
    ASSERT_EQ(gpu_->DeltaNetDecodeStep(gpu.Step()), KernelStatus::kOk);
    ASSERT_EQ(cpu_->DeltaNetDecodeStep(cpu.Step()), KernelStatus::kOk);
  }
  Compare(gpu, cpu, "after 16 steps");
}

TEST_F(CudaGdnDecodeStepTest, ZeroAndNanSequencesStayTheirOwn) {
  // Sequence 1 all zero (inputs and states): out exactly 0. Sequence 2 with a NaN in k head 0:
  // value heads 0 and 2 (n_k 2) NaN, as on the CPU; the other sequences untouched.
  const Shape s{3, 2, 4, 32, 4};
  Inputs in(s, 23);
  for (int64_t i = 0; i < in.c; ++i) in.qkv[1 * in.qkv_stride + i] = 0.0f;
  for (int64_t i = 0; i < int64_t{s.n_v} * s.d; ++i) in.z[1 * in.z_stride + i] = 0.0f;
  for (float& x : in.conv_states[1]) x = 0.0f;
  for (float& x : in.delta_states[1]) x = 0.0f;
  in.qkv[2 * in.qkv_stride + int64_t{s.n_k} * s.d + 3] = std::numeric_limits<float>::quiet_NaN();
  OnBackend gpu(*gpu_, in), cpu(*cpu_, in);
  ASSERT_EQ(gpu_->DeltaNetDecodeStep(gpu.Step()), KernelStatus::kOk);
  ASSERT_EQ(cpu_->DeltaNetDecodeStep(cpu.Step()), KernelStatus::kOk);
  Compare(gpu, cpu, "zero and NaN sequences");
  const std::vector<float> out = gpu.Out();
  for (int64_t i = 0; i < int64_t{s.n_v} * s.d; ++i) {
    EXPECT_EQ(out[1 * in.out_stride + i], 0.0f) << i;
    EXPECT_FALSE(std::isnan(out[i])) << i;
  }
}

TEST_F(CudaGdnDecodeStepTest, CapturedInAGraphRunsTheSame) {
  CudaBackend* cuda = AsCudaBackend(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  const Shape s{8, 16, 32, 128, 4};
  Inputs in(s, 29);
  OnBackend gpu(*gpu_, in), cpu(*cpu_, in);
  ASSERT_EQ(cuda->BeginCapture(), KernelStatus::kOk);
  ASSERT_EQ(gpu_->DeltaNetDecodeStep(gpu.Step()), KernelStatus::kOk) << cuda->last_error();
  ASSERT_EQ(cuda->EndCaptureAndLaunch(7), KernelStatus::kOk) << cuda->last_error();
  ASSERT_EQ(cpu_->DeltaNetDecodeStep(cpu.Step()), KernelStatus::kOk);
  Compare(gpu, cpu, "captured");
}

TEST(CudaGdnDecodeStepChecks, RefusedBeforeAnyLaunch) {
  // No GPU needed: the launcher returns before touching the device.
  std::vector<float> f(4096, 0.0f);
  std::vector<float*> ptrs = {f.data()};
  DeltaNetStep st;
  st.qkv = {f.data(), 1, 3 * 16, 3 * 16};
  st.z = st.out = {f.data(), 1, 16, 16};
  st.alpha = st.beta = {f.data(), 1, 1, 1};
  st.conv_w = f.data();
  st.conv_kernel = 4;
  st.conv_states = st.delta_states = st.conv_states_host = st.delta_states_host = ptrs.data();
  st.ssm_a = st.dt_bias = {f.data(), 1};
  st.norm = {f.data(), 16};
  st.n_k_heads = st.n_v_heads = 1;
  st.head_dim = 16;
  const cuda::LaunchContext none;
  EXPECT_EQ(ValidateDeltaNetStep(st), KernelStatus::kOk);
  DeltaNetStep bad = st;
  bad.n_k_heads = 2;
  EXPECT_EQ(cuda::LaunchDeltaNetDecodeStep(none, bad), KernelStatus::kInvalidArgument);
  bad = st;
  bad.conv_states_host = nullptr;
  EXPECT_EQ(cuda::LaunchDeltaNetDecodeStep(none, bad), KernelStatus::kInvalidArgument);
  // head_dim 257: the CPU accepts it, the rule kernel holds at most 256 outputs.
  bad = st;
  bad.head_dim = 257;
  bad.qkv.cols = bad.qkv.stride = 3 * 257;
  bad.z.cols = bad.z.stride = bad.out.cols = bad.out.stride = 257;
  bad.norm.n = 257;
  bad.qkv.rows = bad.z.rows = bad.out.rows = bad.alpha.rows = bad.beta.rows = 0;  // no memory
  EXPECT_EQ(cuda::LaunchDeltaNetDecodeStep(none, bad), KernelStatus::kUnsupportedType);
  // An empty batch launches nothing.
  bad = st;
  bad.qkv.rows = bad.z.rows = bad.out.rows = bad.alpha.rows = bad.beta.rows = 0;
  EXPECT_EQ(cuda::LaunchDeltaNetDecodeStep(none, bad), KernelStatus::kOk);
}

// Times the fused step against the single ops on Qwen3.5-9B's DeltaNet shape (per layer):
// tests/gpu/cuda_gated_delta_rule_test --gtest_also_run_disabled_tests --gtest_filter='*Timing*'
TEST_F(CudaGdnDecodeStepTest, DISABLED_Timings) {
  for (const int b : {1, 8, 32, 64}) {
    const Shape s{b, 16, 32, 128, 4};
    Inputs in(s, 41);
    OnBackend gpu(*gpu_, in);
    for (const bool fused : {true, false}) {
      auto run = [&] {
        const DeltaNetStep st = gpu.Step();
        return fused ? gpu_->DeltaNetDecodeStep(st) : gpu_->Backend::DeltaNetDecodeStep(st);
      };
      for (int i = 0; i < 10; ++i) ASSERT_EQ(run(), KernelStatus::kOk);
      ASSERT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
      constexpr int kIters = 200;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kIters; ++i) ASSERT_EQ(run(), KernelStatus::kOk);
      ASSERT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          kIters;
      std::printf("[ B %2d ] %-10s %8.1f us per layer step\n", b, fused ? "fused" : "single ops",
                  us);
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
