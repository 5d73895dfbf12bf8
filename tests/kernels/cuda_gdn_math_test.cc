// The arithmetic of the CUDA gated delta rule (kernels/cuda/gdn_math.h) on the CPU: host loops
// that call the per-element functions exactly as the kernels' threads do (gdn_step.cuh: one
// state row per token; gdn_chunked.cuh: the prep kernel's tiled Gram products, in-place forward
// substitution and tiled W/U into the chunk records of a scratch buffer sized by
// GdnChunkedScratchFloats, then the scan's V′, outputs and state update, in passes of 16
// chunks), checked against the CPU backend's gated delta rule (kernels/cpu/gated_delta_rule.cc)
// on random inputs: T from 1 to 1100 (chunk and pass boundaries), n_k_heads != n_v_heads (value
// head h reads q/k head h % n_k), head_dim 16..256 (including sizes that are not multiples of the
// 32-column tiles), typical, strong and weak decays, strided views. Compared are the outputs and
// the state after the call.
//
// Tolerance: 1e-5 absolute + 1e-5 relative, the CPU tests' bound. Both sides are f32 with O(1)
// values (unit q and k, v ~ N(0, 1), β in (0, 1), state ~ N(0, 0.3)); the CPU test
// (gated_delta_rule_test.cc) measured its two f32 forms within 1.2e-7 of a double reference.
// These compositions differ from the CPU's only in summation order and in where the decays are
// rounded to f32 (here exp of a rounded double difference, there a rounded double exp: ~1e-7
// relative per factor). Measured worst over all cases below: 1.1e-6, on the state with weak
// decay (which carries ~100 tokens of history and grows to a few units); the bound leaves ~9x.
// Algebra errors show up far above it: a P without its diagonal, the grouped head map h / r, a
// forward substitution missing one term and kdec off by 0.1% each fail these tests.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/gdn_math.h"
#include "tests/kernels/cuda_gdn_test_util.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels::cuda {
namespace {

using gdn_test::CompareWithCpu;
using gdn_test::Decays;
using gdn_test::ExpectNear;
using gdn_test::Flatten;
using gdn_test::Inputs;
using gdn_test::kDecays;
using gdn_test::MakeProblem;
using gdn_test::Name;
using testing::HostMat;
using testing::Rng;

// gdn_step.cuh, one row at a time: the warp's reductions become plain sums.
void HostStep(const GdnProblem& p, int64_t n_tokens) {
  const int d = p.d;
  for (int h = 0; h < p.n_v; ++h) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* kt = p.KRow(t, h);
      const float* qt = p.QRow(t, h);
      const float decay = std::exp(p.G(t, h));
      const float beta = p.Beta(t, h);
      for (int r = 0; r < d; ++r) {
        float* m = p.StateRow(h, r);
        const float u = GdnDeltaCoef(p.VRow(t, h)[r], GdnDot(m, 1, kt, 1, d), decay, beta);
        for (int j = 0; j < d; ++j) m[j] = GdnRowUpdate(m[j], kt[j], decay, u);
        p.OutRow(t, h)[r] = p.scale * GdnDot(m, 1, qt, 1, d);
      }
    }
  }
}

// GdnChunkPrepKernel for chunk slot c of head h of the pass `p` (n_tokens long).
void HostPrep(const GdnProblem& p, int64_t n_tokens, int c, int h, std::vector<float>& scratch) {
  constexpr int kC = kGdnChunk, kLd = kC + 1, kTl = kGdnTile + 1;
  const int d = p.d;
  const int64_t t0 = int64_t{c} * kC;
  const int n = static_cast<int>(std::min<int64_t>(kC, n_tokens - t0));
  const GdnRecordLayout lay = GdnRecord(d);
  const int64_t offset = GdnRecordOffset(c, h, p.n_v, d);
  ASSERT_LE(offset + lay.floats, static_cast<int64_t>(scratch.size()));
  float* rec = scratch.data() + offset;
  std::vector<double> gamma(kC);
  std::vector<float> beta(kC), w_weight(kC), at(kC * kLd), tile_a(kC * kTl), tile_b(kC * kTl);
  std::vector<float> kk(kC * kC, 0.0f), qk(kC * kC, 0.0f);

  GdnCumsum(p.g + t0 * p.g_stride + h, p.g_stride, n, gamma.data());
  for (int i = 0; i < n; ++i) beta[i] = p.Beta(t0 + i, h);
  for (int i = 0; i < n; ++i) {
    w_weight[i] = GdnWWeight(gamma.data(), beta.data(), i);
    rec[lay.dec + kGdnDecQuery + i] = GdnQueryDecay(gamma.data(), i, p.scale);
    rec[lay.dec + kGdnDecKey + i] = GdnKeyDecay(gamma.data(), n, i);
  }
  rec[lay.dec + kGdnDecChunk] = std::exp(static_cast<float>(gamma[n - 1]));

  for (int k0 = 0; k0 < d; k0 += kGdnTile) {
    const int cols = std::min(kGdnTile, d - k0);
    for (int i = 0; i < kC; ++i) {
      for (int x = 0; x < kGdnTile; ++x) {
        const bool in = i < n && x < cols;
        tile_a[i * kTl + x] = in ? p.KRow(t0 + i, h)[k0 + x] : 0.0f;
        tile_b[i * kTl + x] = in ? p.QRow(t0 + i, h)[k0 + x] : 0.0f;
      }
    }
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j <= i; ++j) {
        kk[i * kC + j] += GdnDot(&tile_a[i * kTl], 1, &tile_a[j * kTl], 1, cols);
        qk[i * kC + j] += GdnDot(&tile_b[i * kTl], 1, &tile_a[j * kTl], 1, cols);
      }
    }
  }
  for (int i = 0; i < kC; ++i) {
    for (int j = 0; j < kC; ++j) {
      const bool in = i < n && j < n;
      at[i * kLd + j] = in ? GdnAEntry(kk[i * kC + j], beta.data(), gamma.data(), i, j) : 0.0f;
      rec[lay.p + i * kC + j] = in ? GdnPEntry(qk[i * kC + j], p.scale, gamma.data(), i, j) : 0.0f;
    }
  }
  std::vector<float> row(kC);
  for (int i = 1; i < n; ++i) {
    for (int j = 0; j < i; ++j) row[j] = GdnInverseEntry(at.data(), kLd, i, j);
    for (int j = 0; j < i; ++j) at[i * kLd + j] = row[j];
  }
  for (int k0 = 0; k0 < d; k0 += kGdnTile) {
    const int cols = std::min(kGdnTile, d - k0);
    for (int i = 0; i < kC; ++i) {
      for (int x = 0; x < kGdnTile; ++x) {
        const bool in = i < n && x < cols;
        tile_a[i * kTl + x] = in ? p.KRow(t0 + i, h)[k0 + x] : 0.0f;
        tile_b[i * kTl + x] = in ? p.VRow(t0 + i, h)[k0 + x] : 0.0f;
      }
    }
    for (int i = 0; i < n; ++i) {
      for (int x = 0; x < cols; ++x) {
        rec[lay.w + i * d + k0 + x] =
            GdnWyEntry(at.data(), kLd, w_weight.data(), &tile_a[x], kTl, i);
        rec[lay.u + i * d + k0 + x] = GdnWyEntry(at.data(), kLd, beta.data(), &tile_b[x], kTl, i);
      }
    }
  }
}

// GdnChunkScanKernel for head h of the pass (all state rows at once: blocks own disjoint rows).
void HostScan(const GdnProblem& p, int64_t n_tokens, int h, const std::vector<float>& scratch) {
  constexpr int kC = kGdnChunk;
  const int d = p.d;
  const GdnRecordLayout lay = GdnRecord(d);
  std::vector<float> vp(kC * d), qs(kC * d);  // [i][r], r over all d state rows
  for (int64_t c = 0; c < GdnChunks(n_tokens); ++c) {
    const int64_t t0 = c * kC;
    const int n = static_cast<int>(std::min<int64_t>(kC, n_tokens - t0));
    const float* rec = scratch.data() + GdnRecordOffset(c, h, p.n_v, d);
    const float* dec = rec + lay.dec;
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < d; ++r) {
        const float* s_row = p.StateRow(h, r);
        vp[i * d + r] = GdnVPrime(rec[lay.u + i * d + r], rec + lay.w + i * d, s_row, d);
        qs[i * d + r] = GdnDot(p.QRow(t0 + i, h), 1, s_row, 1, d);
      }
    }
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < d; ++r) {
        p.OutRow(t0 + i, h)[r] =
            GdnOutEntry(qs[i * d + r], dec[kGdnDecQuery + i], rec + lay.p + i * kC, &vp[r], d, i);
      }
    }
    const float* k_chunk = p.KRow(t0, h);
    for (int r = 0; r < d; ++r) {
      float* s_row = p.StateRow(h, r);
      for (int x = 0; x < d; ++x) {
        s_row[x] = GdnStateEntry(s_row[x], dec[kGdnDecChunk], k_chunk + x, p.k_stride,
                                 dec + kGdnDecKey, &vp[r], d, n);
      }
    }
  }
}

// The chunked launcher (gated_delta_rule.cu RunChunked): passes of kGdnPassChunks chunks, the
// prep of every chunk of a pass, then the scan of the pass, in a scratch of the exact size.
void HostChunked(const GdnProblem& p, int64_t n_tokens) {
  std::vector<float> scratch(GdnChunkedScratchFloats(n_tokens, p.n_v, p.d), std::nanf(""));
  const int64_t pass_tokens = int64_t{kGdnPassChunks} * kGdnChunk;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += pass_tokens) {
    const int64_t n = std::min(pass_tokens, n_tokens - t0);
    const GdnProblem pass = p.FromToken(t0);
    for (int c = 0; c < GdnChunks(n); ++c) {
      for (int h = 0; h < p.n_v; ++h) HostPrep(pass, n, c, h, scratch);
    }
    for (int h = 0; h < p.n_v; ++h) HostScan(pass, n, h, scratch);
  }
}

TEST(CudaGdnMathTest, StepCompositionMatchesCpuRecurrence) {
  struct Shape {
    int n_k, n_v, d;
  };
  for (const Shape s : {Shape{2, 6, 32}, Shape{1, 1, 128}, Shape{4, 8, 24}, Shape{1, 2, 256}}) {
    for (const int64_t t : {1, 2, 3, 17}) {
      for (const Decays& dec : kDecays) {
        Inputs in(t, s.n_k, s.n_v, s.d, static_cast<uint32_t>(t * 131 + s.d), dec.g_min, dec.g_max);
        CompareWithCpu(&HostStep, &GatedDeltaRuleRecurrentCpu, in,
                       Name("step", t, s.n_k, s.n_v, s.d, dec));
      }
    }
  }
}

TEST(CudaGdnMathTest, ChunkedCompositionMatchesCpuAroundChunkBoundaries) {
  // The CPU backend's op (recurrent below 12 tokens, its own chunked form from there) and the
  // per-token recurrence as references; 2 k heads for 4 v heads (tiled map h % 2). Strong and
  // weak decays at the two smaller head sizes (the asan build runs this too).
  for (const int64_t t : {1, 2, 63, 64, 65, 128, 129, 300}) {
    for (const int d : {16, 64, 128}) {
      for (const Decays& dec : kDecays) {
        if (d == 128 && dec.g_min != kDecays[0].g_min) continue;
        Inputs in(t, 2, 4, d, static_cast<uint32_t>(t * 7 + d), dec.g_min, dec.g_max);
        CompareWithCpu(&HostChunked, &GatedDeltaRuleCpu, in, Name("chunked", t, 2, 4, d, dec));
        CompareWithCpu(&HostChunked, &GatedDeltaRuleRecurrentCpu, in,
                       Name("chunked vs recurrence", t, 2, 4, d, dec));
      }
    }
  }
}

TEST(CudaGdnMathTest, ChunkedCompositionOddShapes) {
  // Head sizes that are not multiples of the 32-column tiles or the 16-row scan slices, three
  // k heads for six v heads, and the largest supported head size.
  struct Shape {
    int n_k, n_v, d;
    int64_t t;
  };
  for (const Shape s :
       {Shape{3, 6, 24, 70}, Shape{1, 3, 100, 129}, Shape{1, 2, 256, 80}, Shape{2, 2, 40, 64}}) {
    for (const Decays& dec : kDecays) {
      Inputs in(s.t, s.n_k, s.n_v, s.d, static_cast<uint32_t>(s.d + s.t), dec.g_min, dec.g_max);
      CompareWithCpu(&HostChunked, &GatedDeltaRuleRecurrentCpu, in,
                     Name("chunked", s.t, s.n_k, s.n_v, s.d, dec));
    }
  }
}

TEST(CudaGdnMathTest, ChunkedCompositionWithNearlyParallelKeysAndStrongWrites) {
  // The hard case for T = (I + A)⁻¹: every key of a head within ~0.1 of one direction (|k_i·k_j|
  // near 1) and β near 1, so A is close to all-ones below the diagonal; weak decay keeps Γ ~ 1.
  for (const int d : {16, 128}) {
    Inputs in(200, 1, 2, d, 77, -0.02f, 0.0f);
    Rng rng(78);
    std::vector<float> base = rng.NormalVector(d);
    for (int64_t t = 0; t < 200; ++t) {
      double ss = 0.0;
      for (int i = 0; i < d; ++i) {
        in.k.at(t, i) = base[i] + 0.1f * rng.Normal();
        ss += double{in.k.at(t, i)} * in.k.at(t, i);
      }
      for (int i = 0; i < d; ++i) in.k.at(t, i) = static_cast<float>(in.k.at(t, i) / std::sqrt(ss));
      for (int h = 0; h < 2; ++h) in.beta.at(t, h) = rng.Uniform(0.9f, 1.0f);
    }
    CompareWithCpu(&HostChunked, &GatedDeltaRuleRecurrentCpu, in,
                   "chunked, nearly parallel keys, d=" + std::to_string(d));
  }
}

TEST(CudaGdnMathTest, ChunkedCompositionAcrossPasses) {
  // 1100 tokens: one full pass of 16 chunks (1024 tokens) and a second of 76 (a full chunk and a
  // 12-token one), reusing record slots 0 and 1.
  const Decays typical = kDecays[0];
  Inputs in(1100, 1, 2, 16, 5, typical.g_min, typical.g_max);
  CompareWithCpu(&HostChunked, &GatedDeltaRuleRecurrentCpu, in,
                 Name("chunked", 1100, 1, 2, 16, typical));
}

TEST(CudaGdnMathTest, StateContinuesAcrossCallsOfEitherForm) {
  // 150 tokens as chunked(70) + step(3) + chunked(77) == the CPU over all 150 at once.
  Inputs in(150, 2, 4, 64, 11, -1.5f, 0.0f);
  ThreadPool pool(1);
  HostMat ref(150, 4 * 64), out(150, 4 * 64);
  std::vector<float> ref_state = in.state, state = in.state;
  Mat ref_m = ref.mat();
  ASSERT_EQ(GatedDeltaRuleRecurrentCpu(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(),
                                       in.beta.mat(), 2, 4, 64, ref_state.data(), ref_m),
            KernelStatus::kOk);
  int64_t t0 = 0;
  for (const int64_t n : {70, 3, 77}) {
    HostMat part(n, 4 * 64);
    const GdnProblem p = MakeProblem(in, t0, part, state);
    (n == 3 ? &HostStep : &HostChunked)(p, n);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < part.cols(); ++c) out.at(t0 + r, c) = part.at(r, c);
    }
    t0 += n;
  }
  ExpectNear(Flatten(out), Flatten(ref), "split calls outputs");
  ExpectNear(state, ref_state, "split calls state");
}

TEST(CudaGdnMathTest, InverseEntriesInvertUnitLowerTriangular) {
  // Independent of the model: for a random strictly lower A, the in-place row-by-row forward
  // substitution gives T with (I + A) T = I (checked in double).
  constexpr int kN = kGdnChunk, kLd = kN + 1;
  Rng rng(3);
  std::vector<float> a(kN * kLd, 0.0f);
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < i; ++j) a[i * kLd + j] = rng.Uniform(-0.3f, 0.3f) / std::sqrt(kN * 1.0f);
  }
  std::vector<float> m = a, row(kN);
  for (int i = 1; i < kN; ++i) {
    for (int j = 0; j < i; ++j) row[j] = GdnInverseEntry(m.data(), kLd, i, j);
    for (int j = 0; j < i; ++j) m[i * kLd + j] = row[j];
  }
  const auto t_at = [&](int i, int j) {
    return i == j ? 1.0 : (j < i ? double{m[i * kLd + j]} : 0.0);
  };
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      double s = t_at(i, j);
      for (int l = 0; l < i; ++l) s += double{a[i * kLd + l]} * t_at(l, j);
      EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-6) << "(I + A) T at " << i << ", " << j;
    }
  }
}

TEST(CudaGdnMathTest, DecayIsMaskedBeforeTheExponential) {
  // γ_0 = 0, γ_1 = -1000: Γ_01 would be exp(1000) = inf; it must be 0 (and A, P with it).
  const double gamma[2] = {0.0, -1000.0};
  const float beta[2] = {0.5f, 0.5f};
  EXPECT_EQ(GdnGamma(gamma, 0, 1), 0.0f);
  EXPECT_EQ(GdnGamma(gamma, 1, 0), 0.0f);  // exp(-1000) underflows to 0, not NaN
  EXPECT_EQ(GdnGamma(gamma, 1, 1), 1.0f);
  EXPECT_EQ(GdnAEntry(0.7f, beta, gamma, 0, 1), 0.0f);
  EXPECT_EQ(GdnAEntry(0.7f, beta, gamma, 1, 1), 0.0f);  // strictly lower
  EXPECT_EQ(GdnPEntry(0.7f, 2.0f, gamma, 0, 1), 0.0f);
  EXPECT_EQ(GdnPEntry(0.7f, 2.0f, gamma, 1, 1), 1.4f);  // diagonal kept
  EXPECT_EQ(GdnKeyDecay(gamma, 2, 1), 1.0f);
}

TEST(CudaGdnMathTest, ScratchIsOnePassOfDisjointAlignedRecords) {
  for (const int d : {16, 24, 128, 256}) {
    const GdnRecordLayout lay = GdnRecord(d);
    EXPECT_EQ(lay.w, 0);
    EXPECT_EQ(lay.u, int64_t{kGdnChunk} * d);
    EXPECT_EQ(lay.p, 2 * int64_t{kGdnChunk} * d);
    EXPECT_EQ(lay.dec, lay.p + kGdnChunk * kGdnChunk);
    EXPECT_GE(lay.floats, lay.dec + 3 * kGdnChunk);
    EXPECT_LT(lay.floats, lay.dec + 3 * kGdnChunk + 64);
    EXPECT_EQ(lay.floats % 64, 0) << "records keep the scratch's 256-byte alignment";
    // Chunks 0..15 of a pass, 3 heads: records tile the scratch exactly.
    EXPECT_EQ(GdnRecordOffset(1, 0, 3, d), 3 * lay.floats);
    EXPECT_EQ(GdnRecordOffset(15, 2, 3, d) + lay.floats, GdnChunkedScratchFloats(5000, 3, d));
  }
  EXPECT_EQ(GdnChunkedScratchFloats(1, 4, 128), 4 * GdnRecord(128).floats);
  EXPECT_EQ(GdnChunkedScratchFloats(65, 4, 128), 2 * 4 * GdnRecord(128).floats);
  EXPECT_EQ(GdnChunkedScratchFloats(1024, 4, 128), 16 * 4 * GdnRecord(128).floats);
  EXPECT_EQ(GdnChunkedScratchFloats(1025, 4, 128), 16 * 4 * GdnRecord(128).floats);
  EXPECT_EQ(GdnChunkedScratchFloats(0, 4, 128), 0);
  EXPECT_EQ(GdnChunkedScratchFloats(100, 4, 257), 0);  // refused: no scratch
  // The dispatching launcher's size: nothing while it runs the step kernel.
  EXPECT_EQ(GdnScratchFloats(kGdnChunkedMinTokens - 1, 4, 128), 0);
  EXPECT_EQ(GdnScratchFloats(kGdnChunkedMinTokens, 4, 128),
            GdnChunkedScratchFloats(kGdnChunkedMinTokens, 4, 128));
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
