// The fused Gated DeltaNet decode step (kernels/cuda/gdn_decode.cuh) compiled by the host
// compiler against the CUDA emulator (tests/kernels/cuda_emulator: every CUDA thread a fiber,
// barriers and warp shuffles as rounds in shuffled orders) and launched with the grids of
// kernels/cuda/gdn_decode.cu, against the CPU backend's Backend::DeltaNetDecodeStep (the default
// composition: gates, conv per sequence, L2 norms, delta rule per sequence, gated RMSNorm, which
// is what the engine ran before the op existed). Also the shared argument rules
// (ValidateDeltaNetStep) and the default composition's own contract.
//
// Tolerances. The conv state is copies only: equal bit for bit. The rest is f32 on both sides
// with sums in other orders (warp butterflies / block sums against the CPU's 16-wide
// accumulators), libm's expf in SiLU/sigmoid/exp(g) against the CPU's FastExp (< 2e-7
// relative), and FMA contraction in the CPU's ISA clones: each value of q, k, v, g, β is within a
// few ulp. The delta rule adds O(d) rounded products per state element (|m| ~ 0.3, |k| ~ 1/√d):
// absolute error ~ 1e-7 · d^(1/2) on the state, ≤ 1e-6 at d = 256; the gated norm divides o by its
// RMS, so out's error is o's relative to rms(o) times |norm · silu(z)| ≤ ~3, ≤ ~1e-5 relative.
// The bounds below (state 2e-6 + 2e-6 relative, out 2e-5 + 2e-5 relative) are those estimates
// with room for the GPU's own FMA contraction (tests/gpu/cuda_gated_delta_rule_test.cc uses
// them); the worst errors seen here, printed by each case, are 2.4e-7 (state) and 1.2e-6 (out).
#include <cuda_runtime.h>  // the emulator: this target's include path puts it first

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

// What these kernels use beyond the emulator's subset: blockDim (and gridDim, which only
// elementwise.cuh's ElementwiseKernel, included for the scalar functions, names).
namespace deltaserve::cuda_emu {
inline Dim3 EmulatedGridDim() { return Dim3{}; }
inline Dim3 EmulatedBlockDim() {
  return Dim3{static_cast<unsigned>(CurrentBlock()->fibers.size()), 1, 1};
}
}  // namespace deltaserve::cuda_emu
#ifndef gridDim
#define gridDim (::deltaserve::cuda_emu::EmulatedGridDim())
#endif
#ifndef blockDim
#define blockDim (::deltaserve::cuda_emu::EmulatedBlockDim())
#endif

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/gdn_decode.cuh"
#include "kernels/cuda/gdn_decode_math.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels::cuda {
namespace {

using cuda_emu::Dim3;
using cuda_emu::Launch;
using testing::HostMat;
using testing::Rng;

// gdn_decode.cu LaunchDeltaNetDecodeStep, on the emulator.
void EmuDecodeStep(const DeltaNetStep& step) {
  ASSERT_EQ(ValidateDeltaNetStep(step), KernelStatus::kOk);
  if (step.qkv.rows == 0) return;
  const GdnDecodeProblem p = MakeGdnDecodeProblem(step);
  const auto rows = static_cast<unsigned>(step.qkv.rows);
  ASSERT_TRUE(Launch(Dim3{static_cast<unsigned>(p.Segments()), rows, 1}, kGdnDecodeConvThreads,
                     &GdnDecodeConvKernel, p))
      << "conv kernel hangs";
  const Dim3 grid{static_cast<unsigned>(p.n_v), rows, 1};
  bool ok = false;
  switch (GdnDecodeLaneElements(p.d)) {
    case 1:
      ok = Launch(grid, kGdnDecodeRuleThreads, &GdnDecodeRuleKernel<1>, p);
      break;
    case 2:
      ok = Launch(grid, kGdnDecodeRuleThreads, &GdnDecodeRuleKernel<2>, p);
      break;
    case 4:
      ok = Launch(grid, kGdnDecodeRuleThreads, &GdnDecodeRuleKernel<4>, p);
      break;
    default:
      ok = Launch(grid, kGdnDecodeRuleThreads, &GdnDecodeRuleKernel<8>, p);
      break;
  }
  ASSERT_TRUE(ok) << "rule kernel hangs";
}

struct Shape {
  int b, n_k, n_v, d, kernel;
};

// One call's operands, drawn as the model produces them, in padded rows (every access goes
// through the strides; writes into the padding are caught).
struct Case {
  Case(const Shape& s, uint32_t seed)
      : shape(s),
        channels(int64_t{2 * s.n_k + s.n_v} * s.d),
        qkv(s.b, channels, 5),
        z(s.b, int64_t{s.n_v} * s.d, 3),
        alpha(s.b, s.n_v, 1),
        beta(s.b, s.n_v, 2),
        out(s.b, int64_t{s.n_v} * s.d, 4) {
    Rng rng(seed);
    rng.FillNormal(qkv);
    rng.FillNormal(z);
    rng.FillNormal(alpha);
    rng.FillNormal(beta, 2.0f);
    conv_w = rng.NormalVector(channels * s.kernel, 0.5f);
    for (int h = 0; h < s.n_v; ++h) {
      ssm_a.push_back(-std::exp(rng.Uniform(-1.0f, 1.5f)));  // -exp(A_log)
      dt_bias.push_back(rng.Uniform(-1.0f, 1.0f));
    }
    for (int i = 0; i < s.d; ++i) norm.push_back(rng.Uniform(0.5f, 1.5f));
    for (int b = 0; b < s.b; ++b) {
      conv_states.push_back(rng.NormalVector(channels * (s.kernel - 1)));
      delta_states.push_back(rng.NormalVector(int64_t{s.n_v} * s.d * s.d, 0.3f));
    }
  }

  // The step over this case's buffers; `conv_ptrs`/`delta_ptrs` receive the state pointers
  // (the same arrays serve as "device" and host copies: on the CPU both are host memory).
  DeltaNetStep Step(std::vector<float*>& conv_ptrs, std::vector<float*>& delta_ptrs) {
    conv_ptrs.clear();
    delta_ptrs.clear();
    for (auto& st : conv_states) conv_ptrs.push_back(st.data());
    for (auto& st : delta_states) delta_ptrs.push_back(st.data());
    DeltaNetStep s;
    s.qkv = qkv.mat();
    s.z = z.mat();
    s.alpha = alpha.mat();
    s.beta = beta.mat();
    s.conv_w = conv_w.data();
    s.conv_kernel = shape.kernel;
    s.conv_states = s.conv_states_host = conv_ptrs.data();
    s.delta_states = s.delta_states_host = delta_ptrs.data();
    s.ssm_a = {ssm_a.data(), shape.n_v};
    s.dt_bias = {dt_bias.data(), shape.n_v};
    s.norm = {norm.data(), shape.d};
    s.l2_eps = 1e-6f;
    s.norm_eps = 1e-6f;
    s.n_k_heads = shape.n_k;
    s.n_v_heads = shape.n_v;
    s.head_dim = shape.d;
    s.out = out.mat();
    return s;
  }

  Shape shape;
  int64_t channels;
  HostMat qkv, z, alpha, beta, out;
  std::vector<float> conv_w, ssm_a, dt_bias, norm;
  std::vector<std::vector<float>> conv_states, delta_states;
};

std::string Name(const Shape& s) {
  return "B " + std::to_string(s.b) + ", n_k " + std::to_string(s.n_k) + ", n_v " +
         std::to_string(s.n_v) + ", d " + std::to_string(s.d) + ", kernel " +
         std::to_string(s.kernel);
}

// |got - want| <= abs + rel |want|, NaN where and only where want is NaN; returns the worst
// error over the finite values.
double ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double abs,
                  double rel, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    bool ok;
    if (std::isnan(want[i])) {
      ok = std::isnan(got[i]);
    } else {
      const double err = std::fabs(double{got[i]} - want[i]);
      ok = err <= abs + rel * std::fabs(want[i]);
      if (!(err <= worst)) worst = err;
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": worst abs error " << worst;
  return worst;
}

// Equal bit for bit (NaN included).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<float> Flatten(const HostMat& m) {
  std::vector<float> f;
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t c = 0; c < m.cols(); ++c) f.push_back(m.at(r, c));
  }
  return f;
}

constexpr double kStateAbs = 2e-6, kStateRel = 2e-6;
constexpr double kOutAbs = 2e-5, kOutRel = 2e-5;

// Runs the emulated kernels on `got` and the CPU backend on `want` (the same inputs); compares
// out and both states, and checks nothing was written into any padding.
void CompareWithCpu(Case& got, Case& want, const std::string& what) {
  std::vector<float*> gc, gd, wc, wd;
  EmuDecodeStep(got.Step(gc, gd));
  std::unique_ptr<Backend> cpu = MakeCpuBackend(1);
  ASSERT_EQ(cpu->DeltaNetDecodeStep(want.Step(wc, wd)), KernelStatus::kOk) << what;
  for (int b = 0; b < got.shape.b; ++b) {
    const std::string seq = what + ", sequence " + std::to_string(b);
    EXPECT_TRUE(SameBits(got.conv_states[b], want.conv_states[b])) << seq << ": conv state";
    const double ws = ExpectNear(got.delta_states[b], want.delta_states[b], kStateAbs, kStateRel,
                                 seq + ": delta state");
    if (b == 0) std::printf("[ %s ] worst state error %.3g\n", what.c_str(), ws);
  }
  const double wo =
      ExpectNear(Flatten(got.out), Flatten(want.out), kOutAbs, kOutRel, what + ": out");
  std::printf("[ %s ] worst out error %.3g\n", what.c_str(), wo);
  for (HostMat* m : {&got.qkv, &got.z, &got.alpha, &got.beta, &got.out}) {
    EXPECT_TRUE(m->PaddingIntact()) << what << ": a write past a row's columns";
  }
}

TEST(CudaGdnDecodeTest, MatchesTheCpuComposition) {
  // Batches 1, 3, 8; n_v == n_k and n_v = 2 n_k (and 4 n_k); the golden models' head (32, n_k 2,
  // n_v 4), Qwen3.5's 128, every register width (16 -> 1, 64 -> 2, 128 -> 4, 256 -> 8 elements
  // per lane), rows and lanes past d (24, 100), conv kernels 4, 1 (no window) and 6.
  for (const Shape s :
       {Shape{1, 2, 4, 32, 4}, Shape{3, 2, 4, 32, 4}, Shape{8, 2, 4, 32, 4}, Shape{3, 1, 1, 128, 4},
        Shape{1, 2, 4, 128, 4}, Shape{3, 2, 2, 64, 4}, Shape{2, 1, 4, 24, 4},
        Shape{2, 1, 2, 100, 6}, Shape{1, 1, 2, 256, 4}, Shape{3, 2, 2, 16, 1}}) {
    Case got(s, static_cast<uint32_t>(s.b * 1000 + s.d)),
        want(s, static_cast<uint32_t>(s.b * 1000 + s.d));
    CompareWithCpu(got, want, Name(s));
  }
}

TEST(CudaGdnDecodeTest, StepsInARowKeepMatching) {
  // Three decode steps on the same states (new inputs each step), as a sequence decodes.
  const Shape s{3, 2, 4, 32, 4};
  Case got(s, 7), want(s, 7);
  for (int step = 0; step < 3; ++step) {
    Case fresh(s, 200 + step);
    for (Case* c : {&got, &want}) {
      c->qkv = fresh.qkv;
      c->z = fresh.z;
      c->alpha = fresh.alpha;
      c->beta = fresh.beta;
    }
    CompareWithCpu(got, want, "step " + std::to_string(step));
  }
}

TEST(CudaGdnDecodeTest, ZeroAndNanSequencesStayTheirOwn) {
  // Sequence 1 is all zero (inputs and states): its q and k are zero (the L2 norm's eps keeps them
  // so), its output exactly zero. Sequence 2 has a NaN in one k channel of head 0: the value heads
  // reading that k head get NaN states and outputs (as on the CPU); sequences 0 and 1 do not.
  const Shape s{3, 2, 4, 32, 4};
  Case got(s, 11), want(s, 11);
  for (Case* c : {&got, &want}) {
    for (int64_t i = 0; i < c->channels; ++i) c->qkv.at(1, i) = 0.0f;
    for (int64_t i = 0; i < c->z.cols(); ++i) c->z.at(1, i) = 0.0f;
    for (float& x : c->conv_states[1]) x = 0.0f;
    for (float& x : c->delta_states[1]) x = 0.0f;
    c->qkv.at(2, int64_t{s.n_k} * s.d + 5) = std::numeric_limits<float>::quiet_NaN();
  }
  CompareWithCpu(got, want, "zero and NaN sequences");
  for (int64_t i = 0; i < got.out.cols(); ++i) {
    EXPECT_EQ(got.out.at(1, i), 0.0f) << i;
    EXPECT_FALSE(std::isnan(got.out.at(0, i))) << i;
  }
  EXPECT_TRUE(std::isnan(got.out.at(2, 0)));
  EXPECT_FALSE(std::isnan(got.out.at(2, s.d)));  // head 1 reads k head 1
}

TEST(CudaGdnDecodeTest, ColumnViewsOfWiderMatrices) {
  // qkv as the middle columns of a wider buffer (as a fused projection would give it), out as a
  // column view too: the kernels address everything through the strides and touch nothing else.
  const Shape s{3, 2, 4, 32, 4};
  Case got(s, 21), want(s, 21);
  const int64_t lead = 7;
  HostMat wide(s.b, got.channels + lead, 3), wide_out(s.b, got.out.cols() + lead, 1);
  Rng rng(5);
  rng.FillNormal(wide);
  for (int b = 0; b < s.b; ++b) {
    for (int64_t i = 0; i < got.channels; ++i) want.qkv.at(b, i) = wide.at(b, lead + i);
  }
  const HostMat wide_before = wide;
  std::vector<float*> gc, gd, wc, wd;
  DeltaNetStep step = got.Step(gc, gd);
  step.qkv = wide.mat().Cols(lead, got.channels);
  step.out = wide_out.mat().Cols(lead, got.out.cols());
  EmuDecodeStep(step);
  std::unique_ptr<Backend> cpu = MakeCpuBackend(1);
  ASSERT_EQ(cpu->DeltaNetDecodeStep(want.Step(wc, wd)), KernelStatus::kOk);
  std::vector<float> got_out;
  for (int b = 0; b < s.b; ++b) {
    for (int64_t i = 0; i < lead; ++i) {
      EXPECT_EQ(wide.at(b, i), wide_before.at(b, i)) << "qkv's neighbours are not touched";
      EXPECT_EQ(wide_out.at(b, i), 0.0f) << "out's neighbours are not touched";
    }
    for (int64_t i = 0; i < got.out.cols(); ++i) got_out.push_back(wide_out.at(b, lead + i));
  }
  ExpectNear(got_out, Flatten(want.out), kOutAbs, kOutRel, "column views: out");
  for (int b = 0; b < s.b; ++b) {
    EXPECT_TRUE(SameBits(got.conv_states[b], want.conv_states[b]));
    ExpectNear(got.delta_states[b], want.delta_states[b], kStateAbs, kStateRel, "column views");
  }
  EXPECT_TRUE(wide.PaddingIntact());
  EXPECT_TRUE(wide_out.PaddingIntact());
}

TEST(CudaGdnDecodeTest, DefaultCompositionUsesTheHostArrays) {
  // The default reads states only through the host arrays: the backend-memory arrays may hold
  // anything a host must not dereference (here: null-ish garbage), the result is the same.
  const Shape s{2, 1, 2, 16, 4};
  Case a(s, 3), b(s, 3);
  std::vector<float*> ac, ad, bc, bd;
  DeltaNetStep step = b.Step(bc, bd);
  std::vector<float*> poison(2, reinterpret_cast<float*>(uintptr_t{16}));
  step.conv_states = poison.data();
  step.delta_states = poison.data();
  std::unique_ptr<Backend> cpu = MakeCpuBackend(1);
  ASSERT_EQ(cpu->DeltaNetDecodeStep(a.Step(ac, ad)), KernelStatus::kOk);
  ASSERT_EQ(cpu->DeltaNetDecodeStep(step), KernelStatus::kOk);
  EXPECT_EQ(Flatten(a.out), Flatten(b.out));
  EXPECT_EQ(a.delta_states, b.delta_states);
}

TEST(CudaGdnDecodeTest, DefaultIsTheEnginesOpByOpComposition) {
  // The CPU backend's DeltaNetDecodeStep gives the bits of the single ops as the engine called
  // them per layer before the op existed (so a CPU worker's logits did not change).
  const Shape s{3, 2, 4, 32, 4};
  Case a(s, 31), b(s, 31);
  std::unique_ptr<Backend> cpu = MakeCpuBackend(2);
  std::vector<float*> ac, ad;
  ASSERT_EQ(cpu->DeltaNetDecodeStep(a.Step(ac, ad)), KernelStatus::kOk);
  // Contiguous out and z, as the engine's workspace has them.
  HostMat out(s.b, b.out.cols()), z(s.b, b.z.cols());
  for (int r = 0; r < s.b; ++r) {
    for (int64_t i = 0; i < z.cols(); ++i) z.at(r, i) = b.z.at(r, i);
  }
  const int64_t nk = s.n_k, nv = s.n_v, d = s.d;
  Mat g = b.alpha.mat(), beta = b.beta.mat(), qkv = b.qkv.mat();
  ASSERT_EQ(cpu->DeltaNetGates(g, beta, {b.ssm_a.data(), nv}, {b.dt_bias.data(), nv}),
            KernelStatus::kOk);
  for (int r = 0; r < s.b; ++r) {
    Mat x = qkv.Rows(r, 1);
    ASSERT_EQ(cpu->CausalConv1dSilu(x, b.conv_w.data(), s.kernel, b.conv_states[r].data(), x),
              KernelStatus::kOk);
  }
  Mat q = qkv.Cols(0, nk * d), k = qkv.Cols(nk * d, nk * d), v = qkv.Cols(2 * nk * d, nv * d);
  ASSERT_EQ(cpu->L2Norm(q, d, 1e-6f), KernelStatus::kOk);
  ASSERT_EQ(cpu->L2Norm(k, d, 1e-6f), KernelStatus::kOk);
  for (int r = 0; r < s.b; ++r) {
    Mat o = out.mat().Rows(r, 1);
    ASSERT_EQ(cpu->GatedDeltaRule(q.Rows(r, 1), k.Rows(r, 1), v.Rows(r, 1), g.Rows(r, 1),
                                  beta.Rows(r, 1), nk, nv, d, b.delta_states[r].data(), o),
              KernelStatus::kOk);
  }
  Mat heads = out.mat().Reshaped(d);
  ASSERT_EQ(cpu->GatedRmsNorm(heads, {b.norm.data(), d}, z.mat().Reshaped(d), 1e-6f, heads),
            KernelStatus::kOk);
  EXPECT_TRUE(SameBits(Flatten(a.out), Flatten(out)));
  for (int r = 0; r < s.b; ++r) {
    EXPECT_TRUE(SameBits(a.conv_states[r], b.conv_states[r]));
    EXPECT_TRUE(SameBits(a.delta_states[r], b.delta_states[r]));
  }
}

TEST(CudaGdnDecodeTest, ArgumentRules) {
  const Shape s{2, 2, 4, 16, 4};
  Case c(s, 9);
  std::vector<float*> cc, cd;
  const DeltaNetStep good = c.Step(cc, cd);
  EXPECT_EQ(ValidateDeltaNetStep(good), KernelStatus::kOk);
  std::vector<float*> with_null = cc;
  with_null[1] = nullptr;
  std::unique_ptr<Backend> cpu = MakeCpuBackend(1);
  auto refused = [&](const char* what, auto mutate) {
    DeltaNetStep bad = good;
    mutate(bad);
    EXPECT_EQ(ValidateDeltaNetStep(bad), KernelStatus::kInvalidArgument) << what;
    EXPECT_EQ(cpu->DeltaNetDecodeStep(bad), KernelStatus::kInvalidArgument) << what;
  };
  refused("n_v not a multiple of n_k", [](DeltaNetStep& t) { t.n_k_heads = 3; });
  refused("qkv columns", [](DeltaNetStep& t) { t.qkv.cols -= 1; });
  refused("z rows", [](DeltaNetStep& t) { t.z.rows = 1; });
  refused("alpha columns", [](DeltaNetStep& t) { t.alpha.cols = 3; });
  refused("beta rows", [](DeltaNetStep& t) { t.beta.rows = 3; });
  refused("out columns", [](DeltaNetStep& t) { t.out.cols = 16; });
  refused("norm length", [](DeltaNetStep& t) { t.norm.n = 32; });
  refused("ssm_a missing", [](DeltaNetStep& t) { t.ssm_a.data = nullptr; });
  refused("dt_bias length", [](DeltaNetStep& t) { t.dt_bias.n = 2; });
  refused("conv weights", [](DeltaNetStep& t) { t.conv_w = nullptr; });
  refused("conv kernel", [](DeltaNetStep& t) { t.conv_kernel = 0; });
  refused("device array", [](DeltaNetStep& t) { t.delta_states = nullptr; });
  refused("host array", [](DeltaNetStep& t) { t.conv_states_host = nullptr; });
  refused("a null host entry", [&](DeltaNetStep& t) { t.conv_states_host = with_null.data(); });
  refused("head_dim", [](DeltaNetStep& t) { t.head_dim = 0; });
  // An empty batch needs no arrays.
  DeltaNetStep empty = good;
  empty.qkv.rows = empty.z.rows = empty.alpha.rows = empty.beta.rows = empty.out.rows = 0;
  empty.conv_states = empty.delta_states = nullptr;
  empty.conv_states_host = empty.delta_states_host = nullptr;
  EXPECT_EQ(ValidateDeltaNetStep(empty), KernelStatus::kOk);
  EXPECT_EQ(cpu->DeltaNetDecodeStep(empty), KernelStatus::kOk);
}

TEST(CudaGdnDecodeTest, IndexHelpers) {
  // Segments: q heads, k heads, v heads, d channels each, in qkv's channel order.
  GdnDecodeProblem p;
  p.n_k = 2;
  p.n_v = 4;
  p.d = 32;
  std::vector<float> row(static_cast<size_t>(p.Channels()) * 2);
  p.qkv = row.data();
  p.qkv_stride = p.Channels();
  EXPECT_EQ(p.Segments(), 8);
  EXPECT_EQ(p.Channels(), 256);
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(p.Q(1, h) - row.data(), 256 + (h % 2) * 32);
    EXPECT_EQ(p.K(1, h) - row.data(), 256 + 64 + (h % 2) * 32);
    EXPECT_EQ(p.V(1, h) - row.data(), 256 + 128 + h * 32);
  }
  for (int seg = 0; seg < 8; ++seg) {
    EXPECT_EQ(GdnSegmentIsQk(seg, 2), seg < 4);
    if (seg >= 4) {
      EXPECT_EQ(GdnSegmentVHead(seg, 2), seg - 4);
    }
  }
  // The rule kernel's rounds cover every row once, for each d and warp count.
  for (const int d : {1, 3, 4, 24, 100, 128, 256}) {
    std::vector<int> seen(static_cast<size_t>(d), 0);
    const int warps = kGdnDecodeRuleThreads / 32;
    for (int w = 0; w < warps; ++w) {
      for (int round = 0;; ++round) {
        const int row0 = GdnDecodeRow0(round, w, warps, kGdnDecodeRowsPerWarp);
        if (row0 >= d) break;
        for (int r = 0; r < kGdnDecodeRowsPerWarp && row0 + r < d; ++r) ++seen[row0 + r];
      }
    }
    for (int r = 0; r < d; ++r) EXPECT_EQ(seen[r], 1) << "d " << d << " row " << r;
  }
  EXPECT_EQ(GdnDecodeLaneElements(16), 1);
  EXPECT_EQ(GdnDecodeLaneElements(33), 2);
  EXPECT_EQ(GdnDecodeLaneElements(100), 4);
  EXPECT_EQ(GdnDecodeLaneElements(128), 4);
  EXPECT_EQ(GdnDecodeLaneElements(129), 8);
  EXPECT_EQ(GdnDecodeLaneElements(256), 8);
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
