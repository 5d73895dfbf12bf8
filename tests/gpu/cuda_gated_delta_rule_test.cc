// The CUDA gated delta rule (kernels/cuda/gated_delta_rule.cu) against the CPU backend on random
// inputs drawn as the model produces them (q, k unit per head, v ~ N(0, 1), β in (0, 1), g < 0,
// state ~ N(0, 0.3)). q, k, v are column views of one fused projection row [q | k | v | pad] and
// β, g of one gate row [β | g | pad], as the engine passes them; out has padded rows whose
// sentinels must survive. Run through the backend (the dispatching launcher) and through each
// form forced (gated_delta_rule.h): the step kernel and the chunked one at every T.
// Covered: T = 1, 2, 3, 63, 64, 65, 200, 1000 (and 1100: two passes of the chunked form);
// head_dim 128 (Qwen3.5) and 64, plus 24 / 100 / 256 (partial tiles, the largest supported);
// n_k_heads < n_v_heads (value head h reads q/k head h % n_k); typical, strong and weak decays,
// nearly parallel keys with β near 1; state continuity (two calls of T/2 == one call of T);
// decode == prefill (T tokens one at a time == at once); out aliasing v; the scratch used
// staying inside GatedDeltaRuleScratchBytes.
// The launcher's argument checks (same statuses as the CPU backend) need no GPU and always run.
//
// Tolerance: 2e-5 absolute + 2e-5 relative, against the CPU backend (f32 itself, within 1.2e-7
// of a double reference: tests/kernels/gated_delta_rule_test.cc). The same chunked algorithm
// composed on the CPU from the kernels' own per-element functions stays within 1.1e-6 of the CPU
// backend over these kinds of inputs (tests/kernels/cuda_gdn_math_test.cc); on the GPU the
// sums run in other orders (warp trees, tiles), with FMA contraction and CUDA's expf (2 ulp), all
// of which move results by a few f32 ulps of O(1) values per step, and the recurrence is
// contractive (decay < 1, I - β k kᵀ a contraction), so errors do not build up over T. 2e-5
// leaves ~20x over the host measurement; wrong indexing, masks or decays give errors of 1e-3+.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gated_delta_rule.h"
#include "kernels/cuda/gdn_math.h"
#include "tests/gpu/gpu_test_support.h"

namespace deltaserve::kernels::gpu_test {
namespace {

using cuda::GatedDeltaRuleChunkedScratchBytes;
using cuda::GatedDeltaRuleScratchBytes;
using cuda::LaunchContext;

constexpr double kTol = 2e-5;
constexpr float kSentinel = -12345.0f;

struct Decays {
  const char* name;
  float g_min, g_max;
};
constexpr Decays kTypical{"typical", -1.5f, 0.0f};
// The chunk's cumulative decay reaches about -1000 (exp(γ) underflows; only differences may be
// exponentiated), and one where the state carries ~100 tokens.
constexpr Decays kStrong{"strong", -30.0f, 0.0f};
constexpr Decays kWeak{"weak", -0.02f, 0.0f};

// One sequence's inputs on the host, in the engine's fused layouts.
struct Problem {
  Problem(int64_t t, int n_k, int n_v, int d, uint32_t seed, Decays dec = kTypical)
      : t(t),
        n_k(n_k),
        n_v(n_v),
        d(d),
        proj_stride(2 * int64_t{n_k} * d + int64_t{n_v} * d + 7),
        gate_stride(2 * int64_t{n_v} + 3),
        out_stride(int64_t{n_v} * d + 5),
        proj(static_cast<size_t>(t * proj_stride), kSentinel),
        gates(static_cast<size_t>(t * gate_stride), kSentinel) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f), decay(dec.g_min, dec.g_max);
    for (int64_t r = 0; r < t; ++r) {
      float* row = proj.data() + r * proj_stride;
      for (int64_t c = 0; c < 2 * int64_t{n_k} * d + int64_t{n_v} * d; ++c) row[c] = normal(gen);
      for (int64_t h = 0; h < 2 * int64_t{n_k}; ++h) {  // q heads, then k heads: unit vectors
        double ss = 0.0;
        for (int i = 0; i < d; ++i) ss += double{row[h * d + i]} * row[h * d + i];
        for (int i = 0; i < d; ++i)
          row[h * d + i] = static_cast<float>(row[h * d + i] / std::sqrt(ss));
      }
      float* gate = gates.data() + r * gate_stride;
      for (int h = 0; h < n_v; ++h) gate[h] = unit(gen);
      for (int h = 0; h < n_v; ++h) gate[n_v + h] = decay(gen);
    }
    std::normal_distribution<float> state_dist(0.0f, 0.3f);
    state.resize(static_cast<size_t>(n_v) * d * d);
    for (float& x : state) x = state_dist(gen);
  }

  // Views over a copy of proj / gates / out at `base` (host or device), rows [t0, t0 + n).
  Mat Q(float* base, int64_t t0, int64_t n) const {
    return Mat{base, t, int64_t{n_k} * d, proj_stride}.Rows(t0, n);
  }
  Mat K(float* base, int64_t t0, int64_t n) const {
    return Mat{base + int64_t{n_k} * d, t, int64_t{n_k} * d, proj_stride}.Rows(t0, n);
  }
  Mat V(float* base, int64_t t0, int64_t n) const {
    return Mat{base + 2 * int64_t{n_k} * d, t, int64_t{n_v} * d, proj_stride}.Rows(t0, n);
  }
  Mat Beta(float* base, int64_t t0, int64_t n) const {
    return Mat{base, t, n_v, gate_stride}.Rows(t0, n);
  }
  Mat G(float* base, int64_t t0, int64_t n) const {
    return Mat{base + n_v, t, n_v, gate_stride}.Rows(t0, n);
  }
  Mat Out(float* base, int64_t t0, int64_t n) const {
    return Mat{base, t, int64_t{n_v} * d, out_stride}.Rows(t0, n);
  }
  size_t OutFloats() const { return static_cast<size_t>(t * out_stride); }

  int64_t t;
  int n_k, n_v, d;
  int64_t proj_stride, gate_stride, out_stride;
  std::vector<float> proj, gates, state;
};

// What a run leaves: out ([t][out_stride], padding included) and the state after.
struct Result {
  std::vector<float> out, state;
};

enum class Form { kBackend, kStep, kChunked };
const char* FormName(Form f) {
  return f == Form::kBackend ? "backend" : f == Form::kStep ? "step" : "chunked";
}

class CudaGatedDeltaRuleTest : public GpuBackendTest {
 protected:
  // The CPU backend over all T tokens at once.
  Result Cpu(Problem& p) {
    Result r{std::vector<float>(p.OutFloats(), kSentinel), p.state};
    std::vector<float> proj = p.proj, gates = p.gates;
    Mat out = p.Out(r.out.data(), 0, p.t);
    EXPECT_EQ(
        cpu_->GatedDeltaRule(p.Q(proj.data(), 0, p.t), p.K(proj.data(), 0, p.t),
                             p.V(proj.data(), 0, p.t), p.G(gates.data(), 0, p.t),
                             p.Beta(gates.data(), 0, p.t), p.n_k, p.n_v, p.d, r.state.data(), out),
        KernelStatus::kOk);
    return r;
  }

  // The GPU over the tokens in calls of `split` tokens each (the last one shorter), by `form`;
  // with alias_v, out is written over v's columns of the projection and read back from there.
  Result Gpu(Problem& p, Form form, int64_t split, bool alias_v = false) {
    DeviceBuffer proj = Upload(*gpu_, p.proj);
    DeviceBuffer gates = Upload(*gpu_, p.gates);
    DeviceBuffer state = Upload(*gpu_, p.state);
    DeviceBuffer out = Upload(*gpu_, std::vector<float>(p.OutFloats(), kSentinel));
    // The chunked form's scratch, exact, followed by a guard that must survive.
    const size_t scratch_bytes =
        form == Form::kChunked ? GatedDeltaRuleChunkedScratchBytes(split, p.n_v, p.d) : 0;
    const std::vector<float> guard(1024, kSentinel);
    DeviceBuffer scratch = gpu_->Allocate(scratch_bytes + guard.size() * sizeof(float));
    float* guard_at = reinterpret_cast<float*>(static_cast<char*>(scratch.data()) + scratch_bytes);
    EXPECT_EQ(gpu_->CopyToDevice(guard_at, guard.data(), guard.size() * sizeof(float)),
              KernelStatus::kOk);
    for (int64_t t0 = 0; t0 < p.t; t0 += split) {
      const int64_t n = std::min(split, p.t - t0);
      float* pj = proj.floats();
      float* gt = gates.floats();
      Mat o = alias_v ? p.V(pj, t0, n) : p.Out(out.floats(), t0, n);
      const Mat q = p.Q(pj, t0, n), k = p.K(pj, t0, n), v = p.V(pj, t0, n);
      const Mat g = p.G(gt, t0, n), beta = p.Beta(gt, t0, n);
      KernelStatus st;
      if (form == Form::kBackend) {
        st = gpu_->GatedDeltaRule(q, k, v, g, beta, p.n_k, p.n_v, p.d, state.floats(), o);
      } else {
        // The launchers enqueue on the legacy default stream here; the backend's own stream
        // (uploads) is drained first and the device afterwards.
        EXPECT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
        LaunchContext ctx;
        ctx.scratch = scratch.data();
        ctx.scratch_bytes = scratch_bytes;
        st = form == Form::kStep ? cuda::LaunchGatedDeltaRuleStep(ctx, q, k, v, g, beta, p.n_k,
                                                                  p.n_v, p.d, state.floats(), o)
                                 : cuda::LaunchGatedDeltaRuleChunked(ctx, q, k, v, g, beta, p.n_k,
                                                                     p.n_v, p.d, state.floats(), o);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
      EXPECT_EQ(st, KernelStatus::kOk) << FormName(form) << " at token " << t0;
    }
    if (form != Form::kBackend) {
      const std::vector<float> g_back = Download<float>(*gpu_, guard_at, guard.size());
      EXPECT_EQ(g_back, guard) << "scratch written past GatedDeltaRule*ScratchBytes";
    }
    Result r;
    r.state = Download<float>(*gpu_, state.data(), p.state.size());
    if (alias_v) {
      const std::vector<float> pj = Download<float>(*gpu_, proj.data(), p.proj.size());
      r.out.assign(p.OutFloats(), kSentinel);
      for (int64_t t = 0; t < p.t; ++t) {
        std::memcpy(r.out.data() + t * p.out_stride,
                    pj.data() + t * p.proj_stride + 2 * p.n_k * p.d, sizeof(float) * p.n_v * p.d);
      }
    } else {
      r.out = Download<float>(*gpu_, out.data(), p.OutFloats());
    }
    return r;
  }
};

// Element-wise closeness (sentinels compare exactly: padding must be untouched).
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= worst)) worst = err;  // NaN sticks
    const bool ok =
        want[i] == kSentinel ? got[i] == kSentinel : err <= kTol + kTol * std::fabs(want[i]);
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": worst abs error " << worst;
}

void ExpectSame(const Result& got, const Result& want, const std::string& what) {
  ExpectNear(got.out, want.out, what + " outputs");
  ExpectNear(got.state, want.state, what + " state");
}

std::string Name(Form f, const Problem& p, const char* dec = "typical") {
  return std::string(FormName(f)) + " T=" + std::to_string(p.t) + " n_k=" + std::to_string(p.n_k) +
         " n_v=" + std::to_string(p.n_v) + " d=" + std::to_string(p.d) + " " + dec;
}

TEST_F(CudaGatedDeltaRuleTest, EveryFormMatchesCpuAroundChunkBoundaries) {
  for (const int d : {128, 64}) {
    for (const int64_t t : {1, 2, 3, 63, 64, 65, 200, 1000}) {
      Problem p(t, 2, 4, d, static_cast<uint32_t>(t * 3 + d));
      const Result want = Cpu(p);
      for (const Form f : {Form::kBackend, Form::kStep, Form::kChunked}) {
        ExpectSame(Gpu(p, f, t), want, Name(f, p));
      }
    }
  }
}

TEST_F(CudaGatedDeltaRuleTest, QwenShapesMatchCpu) {
  // 9B / 35B-A3B (16 k heads, 32 v heads) and 27B (16 / 48), d = 128: decode, prefill.
  for (const int n_v : {32, 48}) {
    for (const int64_t t : {1, 4, 130}) {
      Problem p(t, 16, n_v, 128, static_cast<uint32_t>(n_v + t));
      const Result want = Cpu(p);
      ExpectSame(Gpu(p, Form::kBackend, t), want, Name(Form::kBackend, p));
    }
  }
}

TEST_F(CudaGatedDeltaRuleTest, StrongAndWeakDecaysMatchCpu) {
  for (const Decays dec : {kStrong, kWeak}) {
    for (const int64_t t : {3, 65, 200}) {
      Problem p(t, 2, 6, 128, static_cast<uint32_t>(t + 17), dec);
      const Result want = Cpu(p);
      for (const Form f : {Form::kStep, Form::kChunked}) {
        ExpectSame(Gpu(p, f, t), want, Name(f, p, dec.name));
      }
    }
  }
}

TEST_F(CudaGatedDeltaRuleTest, NearlyParallelKeysAndStrongWritesMatchCpu) {
  // The hard case for T = (I + A)⁻¹ (cuda_gdn_math_test has it too): every key within ~0.1 of
  // one direction, β in (0.9, 1), weak decay, so A is nearly all-ones below the diagonal.
  Problem p(200, 1, 2, 128, 77, kWeak);
  std::mt19937 gen(78);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> strong(0.9f, 1.0f);
  std::vector<float> base(128);
  for (float& x : base) x = normal(gen);
  for (int64_t t = 0; t < p.t; ++t) {
    float* key = p.proj.data() + t * p.proj_stride + p.n_k * p.d;
    double ss = 0.0;
    for (int i = 0; i < p.d; ++i) {
      key[i] = base[i] + 0.1f * normal(gen);
      ss += double{key[i]} * key[i];
    }
    for (int i = 0; i < p.d; ++i) key[i] = static_cast<float>(key[i] / std::sqrt(ss));
    for (int h = 0; h < p.n_v; ++h) p.gates[t * p.gate_stride + h] = strong(gen);
  }
  const Result want = Cpu(p);
  for (const Form f : {Form::kStep, Form::kChunked}) {
    ExpectSame(Gpu(p, f, p.t), want, Name(f, p, "weak, nearly parallel keys"));
  }
}

TEST_F(CudaGatedDeltaRuleTest, OddAndLargestHeadSizesMatchCpu) {
  // 24 and 100: partial 32-column tiles, partial 16-row slices, lanes past d; 256: the largest
  // head the kernels hold; 3 k heads for 6 v heads.
  for (const int d : {24, 100, 256}) {
    for (const int64_t t : {2, 70}) {
      Problem p(t, 3, 6, d, static_cast<uint32_t>(d * 5 + t));
      const Result want = Cpu(p);
      for (const Form f : {Form::kStep, Form::kChunked}) {
        ExpectSame(Gpu(p, f, t), want, Name(f, p));
      }
    }
  }
}

TEST_F(CudaGatedDeltaRuleTest, ChunkedSpansPasses) {
  // 1100 tokens: a full pass of 16 chunks, then 76 tokens reusing the first record slots.
  Problem p(1100, 1, 4, 64, 23);
  ExpectSame(Gpu(p, Form::kChunked, 1100), Cpu(p), Name(Form::kChunked, p));
}

TEST_F(CudaGatedDeltaRuleTest, StateContinuesAcrossCalls) {
  // Two calls of T/2 == one call of T, for each form and T (the halves cross chunk boundaries:
  // 65 + 65, 100 + 100, 500 + 500; 3 + 3 runs the step kernel through the backend).
  for (const int64_t t : {6, 130, 200, 1000}) {
    Problem p(t, 2, 4, 128, static_cast<uint32_t>(t + 5));
    const Result want = Cpu(p);
    for (const Form f : {Form::kBackend, Form::kStep, Form::kChunked}) {
      const Result whole = Gpu(p, f, t);
      const Result halves = Gpu(p, f, t / 2);
      ExpectSame(halves, whole, Name(f, p) + " two halves vs whole");
      ExpectSame(halves, want, Name(f, p) + " two halves vs CPU");
    }
  }
}

TEST_F(CudaGatedDeltaRuleTest, DecodeEqualsPrefill) {
  // T tokens one call each (the step kernel, as decode runs them) == all T in one call (the
  // chunked form through the backend from 64 on).
  for (const int64_t t : {64, 65, 200}) {
    Problem p(t, 2, 4, 128, static_cast<uint32_t>(t + 9));
    ExpectSame(Gpu(p, Form::kBackend, 1), Gpu(p, Form::kBackend, t),
               Name(Form::kBackend, p) + " one at a time vs at once");
  }
}

TEST_F(CudaGatedDeltaRuleTest, OutMayAliasV) {
  for (const Form f : {Form::kStep, Form::kChunked, Form::kBackend}) {
    Problem p(70, 2, 4, 64, 31);
    Result want = Cpu(p);
    ExpectSame(Gpu(p, f, 70, /*alias_v=*/true), want, Name(f, p) + " out aliasing v");
  }
}

// Not a check: the numbers behind kGdnChunkedMinTokens (gdn_math.h), for a GPU session to run
// and record in kernels/cuda/README.md:
//   cuda_gated_delta_rule_test --gtest_also_run_disabled_tests --gtest_filter='*Timings*'
// Qwen3.5-9B's DeltaNet shape (16 k heads, 32 v heads, d = 128), each form at each T, mean of 20
// calls after a warm-up, timed with events on the default stream.
TEST_F(CudaGatedDeltaRuleTest, DISABLED_StepVersusChunkedTimings) {
  std::printf("%8s %12s %12s %14s %14s\n", "T", "step us", "chunked us", "step us/tok",
              "chunked us/tok");
  for (const int64_t t : {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 1024, 4096, 8192}) {
    Problem p(t, 16, 32, 128, static_cast<uint32_t>(t));
    DeviceBuffer proj = Upload(*gpu_, p.proj);
    DeviceBuffer gates = Upload(*gpu_, p.gates);
    DeviceBuffer state = Upload(*gpu_, p.state);
    DeviceBuffer out = gpu_->Allocate(p.OutFloats() * sizeof(float));
    const size_t scratch_bytes = GatedDeltaRuleChunkedScratchBytes(t, p.n_v, p.d);
    DeviceBuffer scratch = gpu_->Allocate(scratch_bytes);
    ASSERT_EQ(gpu_->Synchronize(), KernelStatus::kOk);
    LaunchContext ctx;
    ctx.scratch = scratch.data();
    ctx.scratch_bytes = scratch_bytes;
    float* pj = proj.floats();
    float* gt = gates.floats();
    const Mat q = p.Q(pj, 0, t), k = p.K(pj, 0, t), v = p.V(pj, 0, t);
    const Mat g = p.G(gt, 0, t), beta = p.Beta(gt, 0, t);
    Mat o = p.Out(out.floats(), 0, t);
    double us[2];
    for (int form = 0; form < 2; ++form) {
      const auto run = [&] {
        return form == 0 ? cuda::LaunchGatedDeltaRuleStep(ctx, q, k, v, g, beta, p.n_k, p.n_v, p.d,
                                                          state.floats(), o)
                         : cuda::LaunchGatedDeltaRuleChunked(ctx, q, k, v, g, beta, p.n_k, p.n_v,
                                                             p.d, state.floats(), o);
      };
      ASSERT_EQ(run(), KernelStatus::kOk);
      cudaEvent_t start, stop;
      ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
      ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
      constexpr int kReps = 20;
      ASSERT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
      for (int i = 0; i < kReps; ++i) ASSERT_EQ(run(), KernelStatus::kOk);
      ASSERT_EQ(cudaEventRecord(stop, nullptr), cudaSuccess);
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float ms = 0.0f;
      ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
      us[form] = 1000.0 * ms / kReps;
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    std::printf("%8lld %12.1f %12.1f %14.3f %14.3f\n", static_cast<long long>(t), us[0], us[1],
                us[0] / static_cast<double>(t), us[1] / static_cast<double>(t));
  }
}

// --- argument checks: no GPU needed (nothing is launched, no pointer dereferenced) -------------

using LaunchFn = KernelStatus (*)(const LaunchContext&, const Mat&, const Mat&, const Mat&,
                                  const Mat&, const Mat&, int64_t, int64_t, int64_t, float*, Mat&);

TEST(CudaGatedDeltaRuleChecksTest, RefusesWhatTheCpuBackendRefuses) {
  auto cpu = MakeCpuBackend(1);
  const int64_t t = 3, n_k = 2, n_v = 4, d = 8;
  std::vector<float> buf(4096, 0.0f), state(n_v * d * d, 0.0f);
  float* b = buf.data();
  const Mat q{b, t, n_k * d, n_k * d}, k{b, t, n_k * d, n_k * d}, v{b, t, n_v * d, n_v * d};
  const Mat g{b, t, n_v, n_v}, beta{b, t, n_v, n_v};
  struct Case {
    const char* what;
    Mat q, k, v, g, beta, out;
    int64_t n_k, n_v, d;
    bool null_state;
  };
  const Mat out{b + 2048, t, n_v * d, n_v * d};
  const Case cases[] = {
      {"valid", q, k, v, g, beta, out, n_k, n_v, d, false},
      {"no rows", q.Rows(0, 0), k.Rows(0, 0), v.Rows(0, 0), g.Rows(0, 0), beta.Rows(0, 0),
       out.Rows(0, 0), n_k, n_v, d, false},
      {"out cols", q, k, v, g, beta, Mat{b, t, n_v * d - 1, n_v * d}, n_k, n_v, d, false},
      {"g cols", q, k, v, Mat{b, t, n_v - 1, n_v}, beta, out, n_k, n_v, d, false},
      {"beta rows", q, k, v, g, beta.Rows(0, 2), out, n_k, n_v, d, false},
      {"q rows", q.Rows(0, 2), k, v, g, beta, out, n_k, n_v, d, false},
      {"k cols", q, Mat{b, t, n_k * d + 1, n_k * d + 1}, v, g, beta, out, n_k, n_v, d, false},
      {"v heads", q, k, v, g, beta, out, n_k, n_v + 1, d, false},
      {"n_v % n_k", q, k, Mat{b, t, 3 * d, 3 * d}, Mat{b, t, 3, 3}, Mat{b, t, 3, 3},
       Mat{b + 2048, t, 3 * d, 3 * d}, n_k, 3, d, false},
      {"stride < cols", Mat{b, t, n_k * d, n_k * d - 1}, k, v, g, beta, out, n_k, n_v, d, false},
      {"no state", q, k, v, g, beta, out, n_k, n_v, d, true},
      {"zero heads", q, k, v, g, beta, out, 0, n_v, d, false},
  };
  for (const Case& c : cases) {
    std::vector<float> s = state;
    float* sp = c.null_state ? nullptr : s.data();
    Mat cpu_out = c.out;
    // The CPU backend runs the valid calls on this host memory; the launchers get only the
    // invalid ones (a valid call would launch on host pointers).
    const KernelStatus want =
        cpu->GatedDeltaRule(c.q, c.k, c.v, c.g, c.beta, c.n_k, c.n_v, c.d, sp, cpu_out);
    const bool valid = std::string(c.what) == "valid" || std::string(c.what) == "no rows";
    EXPECT_EQ(want == KernelStatus::kOk, valid) << c.what;
    if (want == KernelStatus::kOk) continue;
    for (const LaunchFn fn : {&cuda::LaunchGatedDeltaRule, &cuda::LaunchGatedDeltaRuleStep,
                              &cuda::LaunchGatedDeltaRuleChunked}) {
      Mat o = c.out;
      EXPECT_EQ(fn(LaunchContext{}, c.q, c.k, c.v, c.g, c.beta, c.n_k, c.n_v, c.d, sp, o), want)
          << c.what;
    }
  }
}

TEST(CudaGatedDeltaRuleChecksTest, HeadSizeAndScratchLimits) {
  // head_dim 257 is beyond what the kernels hold: kUnsupportedType (the CPU computes it).
  const int64_t t = 100, n_v = 2;
  std::vector<float> buf(2 * t * 257 * 2, 0.0f), state(n_v * 257 * 257, 0.0f);
  const Mat qk{buf.data(), t, 257, 257}, v{buf.data(), t, n_v * 257, n_v * 257};
  const Mat gb{buf.data(), t, n_v, n_v};
  Mat out = v;
  EXPECT_EQ(cuda::LaunchGatedDeltaRule(LaunchContext{}, qk, qk, v, gb, gb, 1, n_v, 257,
                                       state.data(), out),
            KernelStatus::kUnsupportedType);
  // The chunked form with one byte less scratch than it asks for: kOutOfMemory, before launching.
  const Mat q{buf.data(), t, 128, 128}, vv{buf.data(), t, n_v * 128, n_v * 128};
  Mat o = vv;
  LaunchContext ctx;
  ctx.scratch = buf.data();
  ctx.scratch_bytes = GatedDeltaRuleScratchBytes(t, n_v, 128) - 1;
  ASSERT_GT(GatedDeltaRuleScratchBytes(t, n_v, 128), size_t{1});
  EXPECT_EQ(cuda::LaunchGatedDeltaRule(ctx, q, q, vv, gb, gb, 1, n_v, 128, state.data(), o),
            KernelStatus::kOutOfMemory);
  // The step form needs none, and the dispatcher none below kGdnChunkedMinTokens.
  EXPECT_EQ(GatedDeltaRuleScratchBytes(cuda::kGdnChunkedMinTokens - 1, n_v, 128), 0u);
  EXPECT_EQ(GatedDeltaRuleScratchBytes(cuda::kGdnChunkedMinTokens, n_v, 128),
            GatedDeltaRuleChunkedScratchBytes(cuda::kGdnChunkedMinTokens, n_v, 128));
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
