// The gated delta rule: both forms against a double-precision per-token reference written from
// MODEL_SPEC §2.4 step 6 (S̃ = exp(g) S; u = β (v − S̃ᵀk); S = S̃ + k uᵀ; o = Sᵀq / √d), with the
// state layout of backend.h ([head][v][k], i.e. Sᵀ) and the tiled head map h % n_k_heads; then the
// chunked form (MODEL_SPEC §3) against the recurrent one for T around the chunk size, and state
// continuation across calls.
//
// Tolerances. Inputs are the model's: q, k unit vectors, v ~ N(0,1), β in (0,1), g in (-1.5, 0),
// initial state ~ N(0, 0.3). Outputs and state entries then stay O(1); both f32 forms stay
// within 1.2e-7 of the double reference and of each other (measured over these cases, outputs
// and state, strong decay included). The bound, 1e-5 absolute (+1e-5 relative), is the brief's
// for chunked vs per-token and leaves two orders of magnitude for other compilers and ISAs.
#include "kernels/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels {

// Test names and failure messages say "avx2", not "4-byte object <01-00 00-00>".
void PrintTo(CpuIsa isa, std::ostream* os) { *os << CpuIsaName(isa); }

namespace {

using testing::ExpectClose;
using testing::HostMat;
using testing::Rng;

constexpr double kTol = 1e-5;

// One call's inputs (and the state it starts from), drawn as the model would produce them.
struct Inputs {
  Inputs(int64_t t, int64_t n_k, int64_t n_v, int64_t d, uint32_t seed, float g_min = -1.5f)
      : n_k(n_k),
        n_v(n_v),
        d(d),
        q(t, n_k * d, 1),
        k(t, n_k * d, 2),
        v(t, n_v * d, 3),
        g(t, n_v, 1),
        beta(t, n_v, 2) {
    Rng rng(seed);
    rng.FillNormal(q);
    rng.FillNormal(k);
    rng.FillNormal(v);
    rng.FillUniform(g, g_min, 0.0f);
    rng.FillUniform(beta, 0.0f, 1.0f);
    for (HostMat* m : {&q, &k}) {  // L2-normalise per head, as the op expects
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t h = 0; h < n_k; ++h) {
          double ss = 0.0;
          for (int64_t i = 0; i < d; ++i) ss += double{m->at(r, h * d + i)} * m->at(r, h * d + i);
          for (int64_t i = 0; i < d; ++i) {
            m->at(r, h * d + i) = static_cast<float>(m->at(r, h * d + i) / std::sqrt(ss));
          }
        }
      }
    }
    state = rng.NormalVector(n_v * d * d, 0.3f);
  }
  int64_t n_k, n_v, d;
  HostMat q, k, v, g, beta;
  std::vector<float> state;  // [n_v][d (v)][d (k)]
};

// Runs rows [t0, t0 + n) of `in` from `state` (kernel layout, updated in place, in double).
std::vector<double> ReferenceRun(const Inputs& in, int64_t t0, int64_t n,
                                 std::vector<double>& state) {
  const int64_t d = in.d;
  std::vector<double> out(n * in.n_v * d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t h = 0; h < in.n_v; ++h) {
    const int64_t kh = h % in.n_k;
    // S[i][j], key index i, value index j (MODEL_SPEC orientation).
    std::vector<double> s(d * d);
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) s[i * d + j] = state[(h * d + j) * d + i];
    }
    for (int64_t t = t0; t < t0 + n; ++t) {
      const double decay = std::exp(double{in.g.at(t, h)});
      for (double& x : s) x *= decay;
      for (int64_t j = 0; j < d; ++j) {
        double stk = 0.0;
        for (int64_t i = 0; i < d; ++i) stk += s[i * d + j] * in.k.at(t, kh * d + i);
        const double u = in.beta.at(t, h) * (in.v.at(t, h * d + j) - stk);
        for (int64_t i = 0; i < d; ++i) s[i * d + j] += in.k.at(t, kh * d + i) * u;
      }
      for (int64_t j = 0; j < d; ++j) {
        double o = 0.0;
        for (int64_t i = 0; i < d; ++i) o += s[i * d + j] * in.q.at(t, kh * d + i) * scale;
        out[((t - t0) * in.n_v + h) * d + j] = o;
      }
    }
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) state[(h * d + j) * d + i] = s[i * d + j];
    }
  }
  return out;
}

// The explicit-ISA entry points (internal::GatedDeltaRule*CpuIsa).
using GdrFn = KernelStatus (*)(ThreadPool&, const Mat&, const Mat&, const Mat&, const Mat&,
                               const Mat&, int64_t, int64_t, int64_t, float*, Mat&, CpuIsa);
constexpr GdrFn kRecurrent = &internal::GatedDeltaRuleRecurrentCpuIsa;
constexpr GdrFn kChunked = &internal::GatedDeltaRuleChunkedCpuIsa;
constexpr GdrFn kEither = &internal::GatedDeltaRuleCpuIsa;

// Runs rows [t0, t0 + n) of `in` through `fn` at level `isa` from `state` (updated in place).
HostMat KernelRun(GdrFn fn, ThreadPool& pool, CpuIsa isa, Inputs& in, int64_t t0, int64_t n,
                  std::vector<float>& state) {
  HostMat out(n, in.n_v * in.d, 2);
  Mat om = out.mat();
  const KernelStatus st =
      fn(pool, in.q.mat().Rows(t0, n), in.k.mat().Rows(t0, n), in.v.mat().Rows(t0, n),
         in.g.mat().Rows(t0, n), in.beta.mat().Rows(t0, n), in.n_k, in.n_v, in.d, state.data(), om,
         isa);
  EXPECT_EQ(st, KernelStatus::kOk);
  EXPECT_TRUE(out.PaddingIntact());
  return out;
}

void ExpectStateClose(const std::vector<float>& got, const std::vector<double>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err);
    if (!(err <= kTol + kTol * std::fabs(want[i])) && ++bad <= 5) {
      ADD_FAILURE() << what << " state[" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": worst abs error " << worst;
}

void ExpectStateClose(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ExpectStateClose(got, std::vector<double>(want.begin(), want.end()), what);
}

// Parameters: threads, kernel level. Every level this CPU supports runs in one ctest run,
// whatever DELTASERVE_CPU_ISA says.
class GatedDeltaRuleTest : public ::testing::TestWithParam<std::tuple<int, CpuIsa>> {
 protected:
  GatedDeltaRuleTest() : pool_(std::get<0>(GetParam())), isa_(std::get<1>(GetParam())) {}
  void SetUp() override {
    if (!IsaSupported(isa_)) GTEST_SKIP() << CpuIsaName(isa_) << " not supported here";
  }
  HostMat Run(GdrFn fn, Inputs& in, int64_t t0, int64_t n, std::vector<float>& state) {
    return KernelRun(fn, pool_, isa_, in, t0, n, state);
  }
  ThreadPool pool_;
  CpuIsa isa_;
};

TEST_P(GatedDeltaRuleTest, BothFormsMatchReferenceWithTiledHeads) {
  // 2 k heads, 6 v heads: value head h reads k head h % 2, so a grouped map (h / 3) would fail.
  for (const int64_t t : {1, 7, 65}) {
    Inputs in(t, 2, 6, 32, 41 + static_cast<uint32_t>(t));
    std::vector<double> ref_state(in.state.begin(), in.state.end());
    const std::vector<double> ref = ReferenceRun(in, 0, t, ref_state);
    for (const GdrFn fn : {kRecurrent, kChunked}) {
      std::vector<float> state = in.state;
      const HostMat out = Run(fn, in, 0, t, state);
      ExpectClose(out, ref, kTol, kTol, fn == kChunked ? "chunked" : "recurrent");
      ExpectStateClose(state, ref_state, "state");
    }
  }
}

TEST_P(GatedDeltaRuleTest, OddHeadSizeMatchesReference) {
  // d = 24: not a multiple of the 16-wide tiles or the 32-column product tiles.
  Inputs in(70, 1, 3, 24, 77);
  std::vector<double> ref_state(in.state.begin(), in.state.end());
  const std::vector<double> ref = ReferenceRun(in, 0, 70, ref_state);
  for (const GdrFn fn : {kRecurrent, kChunked}) {
    std::vector<float> state = in.state;
    const HostMat out = Run(fn, in, 0, 70, state);
    ExpectClose(out, ref, kTol, kTol, fn == kChunked ? "chunked" : "recurrent");
    ExpectStateClose(state, ref_state, "state");
  }
}

TEST_P(GatedDeltaRuleTest, RaggedHeadSizesMatchReference) {
  // Head sizes that fill the chunked form's product tiles (2 vectors of columns: 32 floats at
  // avx512, 16 at avx2, 8 at scalar) and the recurrence's 16-float tiles unevenly: 8, 40 and 72
  // leave column tails at every width, 48 only at avx512; T = 12 (the first chunked call) and
  // 77 (a full chunk and a 13-token one), 3 v heads over 1 k head.
  uint32_t seed = 300;
  for (const int64_t d : {8, 40, 48, 72}) {
    for (const int64_t t : {12, 77}) {
      Inputs in(t, 1, 3, d, seed++);
      std::vector<double> ref_state(in.state.begin(), in.state.end());
      const std::vector<double> ref = ReferenceRun(in, 0, t, ref_state);
      for (const GdrFn fn : {kRecurrent, kChunked}) {
        std::vector<float> state = in.state;
        const HostMat out = Run(fn, in, 0, t, state);
        const std::string what = std::string(fn == kChunked ? "chunked" : "recurrent") +
                                 " d=" + std::to_string(d) + " T=" + std::to_string(t);
        ExpectClose(out, ref, kTol, kTol, what);
        ExpectStateClose(state, ref_state, what.c_str());
      }
    }
  }
}

TEST_P(GatedDeltaRuleTest, ChunkedEqualsPerTokenAroundChunkSize) {
  // Real head size (128), T on both sides of the 64-token chunk.
  for (const int64_t t : {1, 7, 63, 64, 65, 200}) {
    Inputs in(t, 2, 4, 128, 100 + static_cast<uint32_t>(t));
    std::vector<float> s_rec = in.state, s_chk = in.state;
    const HostMat rec = Run(kRecurrent, in, 0, t, s_rec);
    const HostMat chk = Run(kChunked, in, 0, t, s_chk);
    std::vector<double> rec_d;
    for (int64_t r = 0; r < rec.rows(); ++r) {
      for (int64_t c = 0; c < rec.cols(); ++c) rec_d.push_back(rec.at(r, c));
    }
    ExpectClose(chk, rec_d, kTol, 0.0, "chunked vs recurrent, T=" + std::to_string(t));
    ExpectStateClose(s_chk, s_rec, "final state");
  }
}

TEST_P(GatedDeltaRuleTest, StateContinuesAcrossCalls) {
  // 200 tokens in one chunked call == prefill 70 + decode 1 + 5 (recurrent) + prefill 124, mixing
  // both forms through the dispatcher, compared with the double reference over all 200.
  const int64_t t = 200;
  Inputs in(t, 2, 4, 64, 7);
  std::vector<double> ref_state(in.state.begin(), in.state.end());
  const std::vector<double> ref = ReferenceRun(in, 0, t, ref_state);
  std::vector<float> state = in.state;
  HostMat all(t, in.n_v * in.d);
  int64_t t0 = 0;
  for (const int64_t n : {70, 1, 5, 124}) {
    const HostMat part = Run(kEither, in, t0, n, state);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < all.cols(); ++c) all.at(t0 + r, c) = part.at(r, c);
    }
    t0 += n;
  }
  ExpectClose(all, ref, kTol, kTol, "split calls");
  ExpectStateClose(state, ref_state, "state after split calls");
}

TEST_P(GatedDeltaRuleTest, StrongDecayStaysFinite) {
  // g down to -30 per token: within a chunk the cumulative decay reaches about -1000, where
  // exp(gamma) underflows. The chunked form only exponentiates differences gamma_i - gamma_j
  // with i >= j (MODEL_SPEC §3 step 1), so nothing overflows.
  Inputs in(130, 1, 2, 32, 9, -30.0f);
  std::vector<double> ref_state(in.state.begin(), in.state.end());
  const std::vector<double> ref = ReferenceRun(in, 0, 130, ref_state);
  std::vector<float> state = in.state;
  const HostMat out = Run(kChunked, in, 0, 130, state);
  ExpectClose(out, ref, kTol, kTol, "strong decay");
  ExpectStateClose(state, ref_state, "strong decay state");
}

TEST_P(GatedDeltaRuleTest, OutMayAliasV) {
  Inputs in(70, 2, 4, 32, 13);
  std::vector<float> s1 = in.state, s2 = in.state;
  for (const GdrFn fn : {kRecurrent, kChunked}) {
    const HostMat expected = Run(fn, in, 0, 70, s1);
    HostMat v = in.v;
    Mat vm = v.mat();
    ASSERT_EQ(fn(pool_, in.q.mat(), in.k.mat(), vm, in.g.mat(), in.beta.mat(), 2, 4, 32, s2.data(),
                 vm, isa_),
              KernelStatus::kOk);
    for (int64_t r = 0; r < 70; ++r) {
      for (int64_t c = 0; c < v.cols(); ++c) ASSERT_EQ(v.at(r, c), expected.at(r, c));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ThreadsAndLevels, GatedDeltaRuleTest,
    ::testing::Combine(::testing::Values(1, 2), ::testing::ValuesIn(kAllCpuIsas)),
    [](const ::testing::TestParamInfo<std::tuple<int, CpuIsa>>& info) {
      return std::string(CpuIsaName(std::get<1>(info.param))) + "_" +
             std::to_string(std::get<0>(info.param)) + "threads";
    });

TEST(GatedDeltaRuleShapeTest, MismatchesAreInvalidArgument) {
  ThreadPool pool(1);
  Inputs in(3, 2, 4, 8, 1);
  HostMat out(3, 32), out_bad(3, 31), g_bad(3, 3), q_short(2, 16);
  Mat om = out.mat(), obad = out_bad.mat();
  float* s = in.state.data();
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  using PublicFn = KernelStatus (*)(ThreadPool&, const Mat&, const Mat&, const Mat&, const Mat&,
                                    const Mat&, int64_t, int64_t, int64_t, float*, Mat&);
  for (const PublicFn fn :
       {&GatedDeltaRuleCpu, &GatedDeltaRuleRecurrentCpu, &GatedDeltaRuleChunkedCpu}) {
    EXPECT_EQ(
        fn(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(), in.beta.mat(), 2, 4, 8, s, om),
        KernelStatus::kOk);
    EXPECT_EQ(
        fn(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(), in.beta.mat(), 2, 4, 8, s, obad),
        bad);
    EXPECT_EQ(
        fn(pool, in.q.mat(), in.k.mat(), in.v.mat(), g_bad.mat(), in.beta.mat(), 2, 4, 8, s, om),
        bad);
    EXPECT_EQ(
        fn(pool, q_short.mat(), in.k.mat(), in.v.mat(), in.g.mat(), in.beta.mat(), 2, 4, 8, s, om),
        bad);
    EXPECT_EQ(
        fn(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(), in.beta.mat(), 3, 4, 8, s, om),
        bad);  // 4 v heads over 3 k heads
    EXPECT_EQ(fn(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(), in.beta.mat(), 2, 4, 8,
                 nullptr, om),
              bad);
  }
}

}  // namespace
}  // namespace deltaserve::kernels
