// The ops CudaBackend computes with its own kernels (kernels/cuda/elementwise_ops.h), each
// against the CPU backend on the same random inputs: Copy, Add, SwiGlu, MulSigmoid (element-wise
// and per row), DeltaNetGates, RmsNorm, L2Norm, GatedRmsNorm, RopeNeox, CausalConv1dSilu and
// MoeRoute, on padded rows, column views of wider matrices (Mat::Cols) and in place where the
// interface allows it, at shapes on both sides of every kernel's mode switch (warp vs block
// rows at 1024 values, the 65535-row grid limit, RoPE's 512-pair chunks, the conv kernel's
// shared-memory window bound and 8-warp token split). Each comparison covers the whole
// allocation, so a write outside the view shows up as a mismatch in the padding. Batch
// invariance: a row alone gives the bits it gives among others, a conv split into calls the
// bits of one call. Argument errors: every op refuses the same bad calls on both backends.
//
// Tolerances, GPU vs CPU (u = 2^-24, f32 unit roundoff):
// - Copy, Add, the conv state: exact (one IEEE operation or a plain copy on both sides).
// - SwiGlu, MulSigmoid, DeltaNetGates: 1e-5 relative. CUDA's expf/log1pf are within 2 ulp, the
//   CPU's FastExp within 1e-7 relative and libm within 1 ulp; one exp, one add and one division
//   or log per value keep the difference below 1e-6 relative.
// - RmsNorm, L2Norm, GatedRmsNorm: (3 + log2 n) * 1e-6 relative. The sums of squares differ in
//   order (GPU: strided partial sums + shuffle tree, CPU: 16 running sums), each within a few
//   ulp times log2(n) of the exact sum for these positive terms; the scale is its square root
//   (halving the relative error), then 2-3 roundings of the products (and SiLU's exp).
// - RopeNeox: 1e-6 absolute + 1e-6 relative on N(0,1) inputs. Both sides take cos/sin in double
//   rounded once to f32 and rotate without FMA, so results are normally identical; a cos/sin
//   rounded differently (double results within 2 double-ulp of an f32 rounding boundary) moves
//   an output by ~1 f32 ulp of |x|.
// - CausalConv1dSilu: 1e-5 absolute + 1e-5 relative. kernel <= 4 products of N(0,1) x
//   N(0,0.5) summed with or without FMA differ by a few u times sum |w x| (< 10 here), then SiLU.
// - MoeRoute: the same ids, weights 1e-5 relative (one softmax of f32 exps); where an id differs
//   the two experts' CPU probabilities must be within 2e-6 relative (a near tie that the ulp
//   differences of the exps may flip).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels::gpu_test {
namespace {

using testing::Rng;

// A block of rows * stride floats held twice: host memory for the CPU backend (its memory is
// host memory) and a copy in the CUDA backend. Views are taken at the same offsets in both.
class Twin {
 public:
  Twin(Backend& gpu, std::vector<float> host, int64_t rows, int64_t cols, int64_t stride)
      : rows_(rows), cols_(cols), stride_(stride), host_(std::move(host)) {
    dev_ = gpu.Allocate(host_.size() * sizeof(float) + 1);
    EXPECT_NE(dev_.data(), nullptr);
    if (!host_.empty()) {
      EXPECT_EQ(gpu.CopyToDevice(dev_.data(), host_.data(), host_.size() * sizeof(float)),
                KernelStatus::kOk);
    }
  }
  Mat cpu() { return {host_.data(), rows_, cols_, stride_}; }
  Mat gpu() { return {dev_.floats(), rows_, cols_, stride_}; }
  // The whole block (padding included) as the GPU has it now.
  std::vector<float> Fetch(Backend& gpu) const {
    std::vector<float> out(host_.size());
    EXPECT_EQ(gpu.Synchronize(), KernelStatus::kOk);
    if (!out.empty()) {
      EXPECT_EQ(gpu.CopyToHost(out.data(), dev_.data(), out.size() * sizeof(float)),
                KernelStatus::kOk);
    }
    return out;
  }
  const std::vector<float>& host() const { return host_; }

 private:
  int64_t rows_, cols_, stride_;
  std::vector<float> host_;
  DeviceBuffer dev_;
};

// [rows][cols] with `pad` extra floats per row, every float (padding too) N(0, sigma).
Twin RandomTwin(Backend& gpu, Rng& rng, int64_t rows, int64_t cols, int64_t pad,
                float sigma = 1.0f) {
  std::vector<float> host(static_cast<size_t>(rows * (cols + pad)));
  for (float& v : host) v = rng.Normal(sigma);
  return Twin(gpu, std::move(host), rows, cols, cols + pad);
}

// Expects |gpu - cpu| <= abs_tol + rel_tol * |cpu| everywhere (NaN matches NaN).
void ExpectBlockNear(const std::vector<float>& gpu, const std::vector<float>& cpu, double abs_tol,
                     double rel_tol, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int failures = 0;
  double worst = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(cpu[i]) && std::isnan(gpu[i])) continue;
    const double err = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    worst = std::max(worst, err);
    if (!(err <= abs_tol + rel_tol * std::fabs(cpu[i])) && ++failures <= 5) {
      ADD_FAILURE() << what << ": [" << i << "] gpu " << gpu[i] << " cpu " << cpu[i];
    }
  }
  EXPECT_EQ(failures, 0) << what << ": worst abs error " << worst;
}

double ReductionTol(int64_t n) {
  return 1e-6 * (3.0 + std::ceil(std::log2(static_cast<double>(std::max<int64_t>(n, 2)))));
}

using CudaElementwiseTest = GpuBackendTest;

// --- Copy, Add -------------------------------------------------------------------------------

TEST_F(CudaElementwiseTest, CopyIsExactOnViews) {
  Rng rng(1);
  Twin src = RandomTwin(*gpu_, rng, 37, 300, 5);
  Twin dst = RandomTwin(*gpu_, rng, 37, 300, 11);
  Mat d_cpu = dst.cpu(), d_gpu = dst.gpu();
  ASSERT_EQ(cpu_->Copy(src.cpu(), d_cpu), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Copy(src.gpu(), d_gpu), KernelStatus::kOk);
  ExpectBlockNear(dst.Fetch(*gpu_), dst.host(), 0, 0, "copy");
  // Deinterleaving: columns [10, 110) of one padded matrix into columns [50, 150) of another.
  Mat dv_cpu = dst.cpu().Cols(50, 100), dv_gpu = dst.gpu().Cols(50, 100);
  ASSERT_EQ(cpu_->Copy(src.cpu().Cols(10, 100), dv_cpu), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Copy(src.gpu().Cols(10, 100), dv_gpu), KernelStatus::kOk);
  ExpectBlockNear(dst.Fetch(*gpu_), dst.host(), 0, 0, "copy of column views");
  // Onto itself: nothing to do.
  Mat self = src.gpu();
  EXPECT_EQ(gpu_->Copy(src.gpu(), self), KernelStatus::kOk);
  ExpectBlockNear(src.Fetch(*gpu_), src.host(), 0, 0, "copy onto itself");
}

TEST_F(CudaElementwiseTest, AddIsExactPastTheGridRowLimitOnViewsAndInPlace) {
  Rng rng(2);
  // 70000 rows: more than gridDim.y's 65535, so blocks walk rows with a stride.
  Twin x = RandomTwin(*gpu_, rng, 70000, 3, 1);
  Twin y = RandomTwin(*gpu_, rng, 70000, 3, 2);
  Mat x_cpu = x.cpu(), x_gpu = x.gpu();
  ASSERT_EQ(cpu_->Add(x_cpu, y.cpu()), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(x_gpu, y.gpu()), KernelStatus::kOk);
  ExpectBlockNear(x.Fetch(*gpu_), x.host(), 0, 0, "add 70000 x 3");

  Twin wide = RandomTwin(*gpu_, rng, 9, 1000, 3);
  Twin other = RandomTwin(*gpu_, rng, 9, 700, 0);
  Mat v_cpu = wide.cpu().Cols(123, 700), v_gpu = wide.gpu().Cols(123, 700);
  ASSERT_EQ(cpu_->Add(v_cpu, other.cpu()), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(v_gpu, other.gpu()), KernelStatus::kOk);
  ExpectBlockNear(wide.Fetch(*gpu_), wide.host(), 0, 0, "add into a column view");
  // x += x.
  Mat w_cpu = wide.cpu(), w_gpu = wide.gpu();
  ASSERT_EQ(cpu_->Add(w_cpu, wide.cpu()), KernelStatus::kOk);
  ASSERT_EQ(gpu_->Add(w_gpu, wide.gpu()), KernelStatus::kOk);
  ExpectBlockNear(wide.Fetch(*gpu_), wide.host(), 0, 0, "add in place");
}

// --- SwiGlu, MulSigmoid, DeltaNetGates --------------------------------------------------------

TEST_F(CudaElementwiseTest, SwiGluSeparateAliasedAndOnAFusedGateUp) {
  Rng rng(3);
  for (const int alias : {0, 1, 2}) {  // out separate, out = gate, out = up
    Twin gate = RandomTwin(*gpu_, rng, 33, 1000, 4, 3.0f);
    Twin up = RandomTwin(*gpu_, rng, 33, 1000, 0);
    Twin out = RandomTwin(*gpu_, rng, 33, 1000, 7);
    Twin& target = alias == 0 ? out : alias == 1 ? gate : up;
    Mat o_cpu = target.cpu(), o_gpu = target.gpu();
    ASSERT_EQ(cpu_->SwiGlu(gate.cpu(), up.cpu(), o_cpu), KernelStatus::kOk);
    ASSERT_EQ(gpu_->SwiGlu(gate.gpu(), up.gpu(), o_gpu), KernelStatus::kOk);
    ExpectBlockNear(target.Fetch(*gpu_), target.host(), 0, 1e-5,
                    "swiglu alias " + std::to_string(alias));
  }
  // gate | up fused in one projection output [T][2 ff], result into the gate half.
  Twin fused = RandomTwin(*gpu_, rng, 17, 2 * 384, 8, 2.0f);
  Mat g_cpu = fused.cpu().Cols(0, 384), g_gpu = fused.gpu().Cols(0, 384);
  ASSERT_EQ(cpu_->SwiGlu(g_cpu, fused.cpu().Cols(384, 384), g_cpu), KernelStatus::kOk);
  ASSERT_EQ(gpu_->SwiGlu(g_gpu, fused.gpu().Cols(384, 384), g_gpu), KernelStatus::kOk);
  ExpectBlockNear(fused.Fetch(*gpu_), fused.host(), 0, 1e-5, "swiglu on fused gate|up");
}

TEST_F(CudaElementwiseTest, MulSigmoidElementwiseAndPerRow) {
  Rng rng(4);
  Twin x = RandomTwin(*gpu_, rng, 21, 513, 3);
  Twin gate = RandomTwin(*gpu_, rng, 21, 513, 1, 4.0f);
  Mat x_cpu = x.cpu(), x_gpu = x.gpu();
  ASSERT_EQ(cpu_->MulSigmoid(x_cpu, gate.cpu()), KernelStatus::kOk);
  ASSERT_EQ(gpu_->MulSigmoid(x_gpu, gate.gpu()), KernelStatus::kOk);
  ExpectBlockNear(x.Fetch(*gpu_), x.host(), 0, 1e-5, "mul sigmoid");
  // The shared-expert gate: one value per row, column 5 of a wider matrix.
  Twin gates = RandomTwin(*gpu_, rng, 21, 16, 0, 4.0f);
  ASSERT_EQ(cpu_->MulSigmoid(x_cpu, gates.cpu().Cols(5, 1)), KernelStatus::kOk);
  ASSERT_EQ(gpu_->MulSigmoid(x_gpu, gates.gpu().Cols(5, 1)), KernelStatus::kOk);
  ExpectBlockNear(x.Fetch(*gpu_), x.host(), 0, 1e-5, "mul sigmoid per row");
  // One column, gate one column: element-wise.
  Mat col_cpu = x.cpu().Cols(7, 1), col_gpu = x.gpu().Cols(7, 1);
  ASSERT_EQ(cpu_->MulSigmoid(col_cpu, gates.cpu().Cols(2, 1)), KernelStatus::kOk);
  ASSERT_EQ(gpu_->MulSigmoid(col_gpu, gates.gpu().Cols(2, 1)), KernelStatus::kOk);
  ExpectBlockNear(x.Fetch(*gpu_), x.host(), 0, 1e-5, "mul sigmoid one column");
}

TEST_F(CudaElementwiseTest, DeltaNetGatesAcrossTheSoftplusCutoff) {
  Rng rng(5);
  const int64_t heads = 32;
  // alpha | beta as column views of one [T][2 heads] projection output; alpha spans the
  // softplus cut-off at 20 (sigma 12).
  Twin ab = RandomTwin(*gpu_, rng, 45, 2 * heads, 5, 12.0f);
  std::vector<float> a(heads), dt(heads);
  for (int64_t h = 0; h < heads; ++h) {
    a[h] = -std::exp(rng.Normal());
    dt[h] = rng.Normal();
  }
  DeviceBuffer a_dev = Upload(*gpu_, a), dt_dev = Upload(*gpu_, dt);
  Mat al_cpu = ab.cpu().Cols(0, heads), be_cpu = ab.cpu().Cols(heads, heads);
  Mat al_gpu = ab.gpu().Cols(0, heads), be_gpu = ab.gpu().Cols(heads, heads);
  ASSERT_EQ(cpu_->DeltaNetGates(al_cpu, be_cpu, {a.data(), heads}, {dt.data(), heads}),
            KernelStatus::kOk);
  ASSERT_EQ(gpu_->DeltaNetGates(al_gpu, be_gpu, {a_dev.floats(), heads}, {dt_dev.floats(), heads}),
            KernelStatus::kOk);
  ExpectBlockNear(ab.Fetch(*gpu_), ab.host(), 1e-30, 1e-5, "deltanet gates");
}

// --- norms -----------------------------------------------------------------------------------

TEST_F(CudaElementwiseTest, RmsNormWarpAndBlockRowsWithAndWithoutWeightInPlaceAndOnViews) {
  Rng rng(6);
  for (const int64_t cols :
       {int64_t{1}, int64_t{31}, int64_t{128}, int64_t{1024}, int64_t{1025}, int64_t{5120}}) {
    for (const int64_t rows : {int64_t{1}, int64_t{9}, int64_t{300}}) {
      const std::string what = std::to_string(rows) + " x " + std::to_string(cols);
      std::vector<float> w = rng.NormalVector(cols);
      DeviceBuffer w_dev = Upload(*gpu_, w);
      for (const bool weighted : {true, false}) {
        const Vec wc{weighted ? w.data() : nullptr, cols};
        const Vec wg{weighted ? w_dev.floats() : nullptr, cols};
        Twin x = RandomTwin(*gpu_, rng, rows, cols, 3, 2.0f);
        Twin y = RandomTwin(*gpu_, rng, rows, cols, 1);
        Mat y_cpu = y.cpu(), y_gpu = y.gpu();
        ASSERT_EQ(cpu_->RmsNorm(x.cpu(), wc, 1e-6f, y_cpu), KernelStatus::kOk);
        ASSERT_EQ(gpu_->RmsNorm(x.gpu(), wg, 1e-6f, y_gpu), KernelStatus::kOk);
        ExpectBlockNear(y.Fetch(*gpu_), y.host(), 0, ReductionTol(cols), "rmsnorm " + what);
        Mat x_cpu = x.cpu(), x_gpu = x.gpu();
        ASSERT_EQ(cpu_->RmsNorm(x.cpu(), wc, 1e-6f, x_cpu), KernelStatus::kOk);
        ASSERT_EQ(gpu_->RmsNorm(x.gpu(), wg, 1e-6f, x_gpu), KernelStatus::kOk);
        ExpectBlockNear(x.Fetch(*gpu_), x.host(), 0, ReductionTol(cols),
                        "rmsnorm in place " + what);
      }
    }
  }
  // Columns [256, 768) of a wider [T][1536] row (q inside a fused projection), in place.
  Twin qkv = RandomTwin(*gpu_, rng, 5, 1536, 0);
  std::vector<float> w = rng.NormalVector(512);
  DeviceBuffer w_dev = Upload(*gpu_, w);
  Mat q_cpu = qkv.cpu().Cols(256, 512), q_gpu = qkv.gpu().Cols(256, 512);
  ASSERT_EQ(cpu_->RmsNorm(q_cpu, {w.data(), 512}, 1e-6f, q_cpu), KernelStatus::kOk);
  ASSERT_EQ(gpu_->RmsNorm(q_gpu, {w_dev.floats(), 512}, 1e-6f, q_gpu), KernelStatus::kOk);
  ExpectBlockNear(qkv.Fetch(*gpu_), qkv.host(), 0, ReductionTol(512), "rmsnorm on a column view");
}

TEST_F(CudaElementwiseTest, L2NormPerHeadOnAColumnViewAndLongGroups) {
  Rng rng(7);
  // q and k of a [T][q | k | v] DeltaNet projection, heads of 128: groups per row.
  Twin qkv = RandomTwin(*gpu_, rng, 13, 16 * 128 + 16 * 128 + 32 * 128, 4);
  Mat q_cpu = qkv.cpu().Cols(0, 16 * 128), q_gpu = qkv.gpu().Cols(0, 16 * 128);
  ASSERT_EQ(cpu_->L2Norm(q_cpu, 128, 1e-6f), KernelStatus::kOk);
  ASSERT_EQ(gpu_->L2Norm(q_gpu, 128, 1e-6f), KernelStatus::kOk);
  Mat k_cpu = qkv.cpu().Cols(16 * 128, 16 * 128), k_gpu = qkv.gpu().Cols(16 * 128, 16 * 128);
  ASSERT_EQ(cpu_->L2Norm(k_cpu, 128, 1e-6f), KernelStatus::kOk);
  ASSERT_EQ(gpu_->L2Norm(k_gpu, 128, 1e-6f), KernelStatus::kOk);
  ExpectBlockNear(qkv.Fetch(*gpu_), qkv.host(), 0, ReductionTol(128), "l2norm q and k heads");
  // Groups above 1024 values (a block per group) and a tiny-norm row where eps takes over.
  std::vector<float> host(3 * 4096);
  for (float& v : host) v = rng.Normal();
  for (int64_t i = 0; i < 2048; ++i) host[static_cast<size_t>(4096 + i)] = 1e-9f;
  Twin big(*gpu_, host, 3, 4096, 4096);
  Mat b_cpu = big.cpu(), b_gpu = big.gpu();
  ASSERT_EQ(cpu_->L2Norm(b_cpu, 2048, 1e-6f), KernelStatus::kOk);
  ASSERT_EQ(gpu_->L2Norm(b_gpu, 2048, 1e-6f), KernelStatus::kOk);
  ExpectBlockNear(big.Fetch(*gpu_), big.host(), 0, ReductionTol(2048), "l2norm groups of 2048");
}

TEST_F(CudaElementwiseTest, GatedRmsNormSeparateAndAliased) {
  Rng rng(8);
  for (const int64_t cols : {int64_t{128}, int64_t{2000}}) {
    std::vector<float> w = rng.NormalVector(cols);
    DeviceBuffer w_dev = Upload(*gpu_, w);
    for (const int alias : {0, 1, 2}) {  // y separate, y = x, y = z
      const int64_t rows = 48;           // (token, head) pairs
      Twin x = RandomTwin(*gpu_, rng, rows, cols, 2);
      Twin z = RandomTwin(*gpu_, rng, rows, cols, 0, 3.0f);
      Twin y = RandomTwin(*gpu_, rng, rows, cols, 5);
      Twin& target = alias == 0 ? y : alias == 1 ? x : z;
      Mat t_cpu = target.cpu(), t_gpu = target.gpu();
      ASSERT_EQ(cpu_->GatedRmsNorm(x.cpu(), {w.data(), cols}, z.cpu(), 1e-6f, t_cpu),
                KernelStatus::kOk);
      ASSERT_EQ(gpu_->GatedRmsNorm(x.gpu(), {w_dev.floats(), cols}, z.gpu(), 1e-6f, t_gpu),
                KernelStatus::kOk);
      ExpectBlockNear(
          target.Fetch(*gpu_), target.host(), 0, ReductionTol(cols) + 1e-6,
          "gated rmsnorm cols " + std::to_string(cols) + " alias " + std::to_string(alias));
    }
  }
}

// --- RoPE ------------------------------------------------------------------------------------

TEST_F(CudaElementwiseTest, RopeNeoxPartialFullAndChunkedOnPaddedRows) {
  Rng rng(9);
  struct Case {
    int64_t n_tokens, n_heads, head_dim, n_rot;
    float base;
  };
  for (const Case cs :
       {Case{9, 16, 256, 64, 1e7f}, Case{1, 4, 128, 128, 1e4f}, Case{5, 3, 1100, 1026, 5e5f},
        Case{0, 2, 64, 64, 1e4f}, Case{70, 2, 64, 32, 1e7f}}) {
    const std::string what =
        std::to_string(cs.n_tokens) + " tokens, n_rot " + std::to_string(cs.n_rot);
    std::vector<int32_t> pos(static_cast<size_t>(std::max<int64_t>(cs.n_tokens, 1)));
    for (size_t t = 0; t < pos.size(); ++t) {
      // Short and long contexts: positions up to 2^18 and beyond.
      pos[t] = static_cast<int32_t>(t % 2 == 0 ? t : 262144 + 977 * t);
    }
    DeviceBuffer pos_dev = Upload(*gpu_, pos);
    Twin x = RandomTwin(*gpu_, rng, cs.n_tokens * cs.n_heads, cs.head_dim, 6);
    Mat x_cpu = x.cpu(), x_gpu = x.gpu();
    ASSERT_EQ(cpu_->RopeNeox(x_cpu, pos.data(), cs.n_heads, cs.n_rot, cs.base), KernelStatus::kOk);
    ASSERT_EQ(gpu_->RopeNeox(x_gpu, static_cast<const int32_t*>(pos_dev.data()), cs.n_heads,
                             cs.n_rot, cs.base),
              KernelStatus::kOk);
    ExpectBlockNear(x.Fetch(*gpu_), x.host(), 1e-6, 1e-6, "rope " + what);
  }
}

// --- conv1d ----------------------------------------------------------------------------------

TEST_F(CudaElementwiseTest, CausalConv1dSiluDecodePrefillViewsInPlaceAndStateCarry) {
  Rng rng(10);
  struct Case {
    int64_t n_tokens, channels, kernel;
  };
  // Decode (1 token), fewer tokens than warps, the full 8-warp split, kernel 1 and 2, the
  // largest shared-memory window (41: window 40) and the serial kernel beyond it.
  for (const Case cs : {Case{1, 70, 4}, Case{5, 70, 4}, Case{100, 300, 4}, Case{9, 40, 1},
                        Case{7, 33, 2}, Case{12, 65, 41}, Case{13, 20, 50}, Case{2, 8, 4}}) {
    for (const bool in_place : {false, true}) {
      const std::string what = "T " + std::to_string(cs.n_tokens) + " C " +
                               std::to_string(cs.channels) + " kernel " +
                               std::to_string(cs.kernel) + (in_place ? " in place" : "");
      const int64_t window = cs.kernel - 1;
      std::vector<float> w = rng.NormalVector(cs.channels * cs.kernel, 0.5f);
      DeviceBuffer w_dev = Upload(*gpu_, w);
      // State continuing a sequence (random window).
      Twin state = RandomTwin(*gpu_, rng, std::max<int64_t>(window, 1), cs.channels, 0);
      // x: the conv channels as a column view of a wider projection output.
      Twin proj = RandomTwin(*gpu_, rng, cs.n_tokens, cs.channels + 10, 3);
      Twin y = RandomTwin(*gpu_, rng, cs.n_tokens, cs.channels, 2);
      for (int call = 0; call < 2; ++call) {  // the second call continues from the first's state
        Mat x_cpu = proj.cpu().Cols(4, cs.channels), x_gpu = proj.gpu().Cols(4, cs.channels);
        Mat y_cpu = in_place ? x_cpu : y.cpu(), y_gpu = in_place ? x_gpu : y.gpu();
        float* s_cpu = window > 0 ? state.cpu().data : nullptr;
        float* s_gpu = window > 0 ? state.gpu().data : nullptr;
        ASSERT_EQ(cpu_->CausalConv1dSilu(x_cpu, w.data(), cs.kernel, s_cpu, y_cpu),
                  KernelStatus::kOk);
        ASSERT_EQ(gpu_->CausalConv1dSilu(x_gpu, w_dev.floats(), cs.kernel, s_gpu, y_gpu),
                  KernelStatus::kOk);
        ExpectBlockNear(proj.Fetch(*gpu_), proj.host(), 1e-5, 1e-5, what + " x");
        ExpectBlockNear(y.Fetch(*gpu_), y.host(), 1e-5, 1e-5, what + " y");
        ExpectBlockNear(state.Fetch(*gpu_), state.host(), 0, 0, what + " state");
        if (in_place) break;  // x now holds outputs: a second call would convolve those
      }
    }
  }
}

// --- MoE routing -----------------------------------------------------------------------------

TEST_F(CudaElementwiseTest, MoeRouteMatchesCpuIncludingTiesAndKEqualsN) {
  Rng rng(11);
  struct Case {
    int64_t n_tokens, n_expert, k;
    bool ties;
  };
  for (const Case cs : {Case{1, 256, 8, false}, Case{37, 256, 8, false}, Case{5, 512, 10, false},
                        Case{1000, 60, 4, false}, Case{3, 33, 33, false}, Case{9, 128, 8, true},
                        Case{2, 5000, 8, false}}) {
    const std::string what = std::to_string(cs.n_tokens) + " tokens, " +
                             std::to_string(cs.n_expert) + " experts, k " + std::to_string(cs.k);
    Twin logits = RandomTwin(*gpu_, rng, cs.n_tokens, cs.n_expert, 3, 2.0f);
    if (cs.ties) {
      // Few distinct logits: every pick is a tie broken by the lower id.
      std::vector<float> host = logits.host();
      for (float& v : host) v = std::floor(v);
      logits = Twin(*gpu_, host, cs.n_tokens, cs.n_expert, cs.n_expert + 3);
    }
    const size_t n = static_cast<size_t>(cs.n_tokens * cs.k);
    std::vector<int32_t> ids_cpu(n, -1);
    std::vector<float> w_cpu(n);
    DeviceBuffer ids_dev = gpu_->Allocate(n * sizeof(int32_t));
    DeviceBuffer w_dev = gpu_->Allocate(n * sizeof(float));
    ASSERT_EQ(cpu_->MoeRoute(logits.cpu(), cs.k, ids_cpu.data(), w_cpu.data()), KernelStatus::kOk);
    ASSERT_EQ(
        gpu_->MoeRoute(logits.gpu(), cs.k, static_cast<int32_t*>(ids_dev.data()), w_dev.floats()),
        KernelStatus::kOk);
    const std::vector<int32_t> ids_gpu = Download<int32_t>(*gpu_, ids_dev.data(), n);
    const std::vector<float> w_gpu = Download<float>(*gpu_, w_dev.data(), n);
    for (size_t i = 0; i < n; ++i) {
      if (ids_gpu[i] != ids_cpu[i]) {
        // Only a near tie may flip: the GPU's pick has (almost) the CPU's weight there.
        EXPECT_NEAR(w_gpu[i], w_cpu[i], 2e-6 * w_cpu[i])
            << what << " [" << i << "] id " << ids_gpu[i] << " vs " << ids_cpu[i];
      }
      EXPECT_NEAR(w_gpu[i], w_cpu[i], 1e-5 * std::fabs(w_cpu[i]) + 1e-30)
          << what << " [" << i << "]";
    }
    if (cs.ties) {
      EXPECT_EQ(ids_gpu, ids_cpu) << what;  // exact ties: identical p on both sides
    }
  }
}

// --- batch invariance ------------------------------------------------------------------------
// A row's result does not depend on which other rows share the call (each kernel reduces
// within one row, head, token or channel, in an order fixed by that row's length alone), and a
// sequence's conv output does not depend on how its tokens are split into calls: bit for bit.
// The engine's batch invariance (issue 16's tests) rests on this.

TEST_F(CudaElementwiseTest, RowsAreBatchInvariantAndConvSplitsAreExact) {
  Rng rng(13);
  const int64_t rows = 37;
  for (const int64_t cols : {int64_t{256}, int64_t{5120}}) {  // warp rows, block rows
    const std::string what = "cols " + std::to_string(cols);
    Twin x = RandomTwin(*gpu_, rng, rows, cols, 0, 2.0f);
    Twin z = RandomTwin(*gpu_, rng, rows, cols, 0);
    DeviceBuffer w = Upload(*gpu_, rng.NormalVector(cols));
    const Vec wv{w.floats(), cols};
    Twin all = RandomTwin(*gpu_, rng, rows, cols, 0), one = RandomTwin(*gpu_, rng, rows, cols, 0);
    Twin gall = RandomTwin(*gpu_, rng, rows, cols, 0), gone = RandomTwin(*gpu_, rng, rows, cols, 0);
    Mat all_m = all.gpu(), gall_m = gall.gpu();
    ASSERT_EQ(gpu_->RmsNorm(x.gpu(), wv, 1e-6f, all_m), KernelStatus::kOk);
    ASSERT_EQ(gpu_->GatedRmsNorm(x.gpu(), wv, z.gpu(), 1e-6f, gall_m), KernelStatus::kOk);
    for (int64_t r = 0; r < rows; ++r) {
      Mat one_r = one.gpu().Rows(r, 1), gone_r = gone.gpu().Rows(r, 1);
      ASSERT_EQ(gpu_->RmsNorm(x.gpu().Rows(r, 1), wv, 1e-6f, one_r), KernelStatus::kOk);
      ASSERT_EQ(gpu_->GatedRmsNorm(x.gpu().Rows(r, 1), wv, z.gpu().Rows(r, 1), 1e-6f, gone_r),
                KernelStatus::kOk);
    }
    EXPECT_EQ(all.Fetch(*gpu_), one.Fetch(*gpu_)) << "rmsnorm " << what;
    EXPECT_EQ(gall.Fetch(*gpu_), gone.Fetch(*gpu_)) << "gated rmsnorm " << what;

    Twin l_all(*gpu_, x.host(), rows, cols, cols), l_one(*gpu_, x.host(), rows, cols, cols);
    Mat l_all_m = l_all.gpu();
    ASSERT_EQ(gpu_->L2Norm(l_all_m, 128, 1e-6f), KernelStatus::kOk);
    for (int64_t r = 0; r < rows; ++r) {
      Mat row = l_one.gpu().Rows(r, 1);
      ASSERT_EQ(gpu_->L2Norm(row, 128, 1e-6f), KernelStatus::kOk);
    }
    EXPECT_EQ(l_all.Fetch(*gpu_), l_one.Fetch(*gpu_)) << "l2norm " << what;
  }

  // Routing: 37 tokens at once or one by one.
  Twin logits = RandomTwin(*gpu_, rng, rows, 256, 0, 2.0f);
  const int64_t k = 8;
  DeviceBuffer ids_all = gpu_->Allocate(rows * k * 4), w_all = gpu_->Allocate(rows * k * 4);
  DeviceBuffer ids_one = gpu_->Allocate(rows * k * 4), w_one = gpu_->Allocate(rows * k * 4);
  ASSERT_EQ(gpu_->MoeRoute(logits.gpu(), k, static_cast<int32_t*>(ids_all.data()), w_all.floats()),
            KernelStatus::kOk);
  for (int64_t t = 0; t < rows; ++t) {
    ASSERT_EQ(gpu_->MoeRoute(logits.gpu().Rows(t, 1), k,
                             static_cast<int32_t*>(ids_one.data()) + t * k, w_one.floats() + t * k),
              KernelStatus::kOk);
  }
  EXPECT_EQ(Download<int32_t>(*gpu_, ids_all.data(), rows * k),
            Download<int32_t>(*gpu_, ids_one.data(), rows * k));
  EXPECT_EQ(Download<float>(*gpu_, w_all.data(), rows * k),
            Download<float>(*gpu_, w_one.data(), rows * k));

  // RoPE: 9 tokens of 4 heads at once or token by token.
  std::vector<int32_t> pos(9);
  for (int t = 0; t < 9; ++t) pos[t] = 1000 * t + 3;
  DeviceBuffer pos_dev = Upload(*gpu_, pos);
  const auto* pos_ptr = static_cast<const int32_t*>(pos_dev.data());
  Twin q = RandomTwin(*gpu_, rng, 9 * 4, 128, 0);
  Twin q_all(*gpu_, q.host(), 36, 128, 128), q_one(*gpu_, q.host(), 36, 128, 128);
  Mat q_all_m = q_all.gpu();
  ASSERT_EQ(gpu_->RopeNeox(q_all_m, pos_ptr, 4, 64, 1e7f), KernelStatus::kOk);
  for (int64_t t = 0; t < 9; ++t) {
    Mat qt = q_one.gpu().Rows(t * 4, 4);
    ASSERT_EQ(gpu_->RopeNeox(qt, pos_ptr + t, 4, 64, 1e7f), KernelStatus::kOk);
  }
  EXPECT_EQ(q_all.Fetch(*gpu_), q_one.Fetch(*gpu_)) << "rope";

  // Conv: 50 tokens in one call or in calls of 1, 20 and 29 (decode then prefill chunks).
  const int64_t channels = 96, kernel = 4, n_tokens = 50;
  Twin cx = RandomTwin(*gpu_, rng, n_tokens, channels, 0);
  DeviceBuffer cw = Upload(*gpu_, rng.NormalVector(channels * kernel, 0.5f));
  const std::vector<float> state0 = rng.NormalVector((kernel - 1) * channels);
  DeviceBuffer s_all = Upload(*gpu_, state0), s_one = Upload(*gpu_, state0);
  Twin y_all = RandomTwin(*gpu_, rng, n_tokens, channels, 0);
  Twin y_split = RandomTwin(*gpu_, rng, n_tokens, channels, 0);
  Mat y_all_m = y_all.gpu();
  ASSERT_EQ(gpu_->CausalConv1dSilu(cx.gpu(), cw.floats(), kernel, s_all.floats(), y_all_m),
            KernelStatus::kOk);
  for (const auto& [first, n] : {std::pair{0, 1}, std::pair{1, 20}, std::pair{21, 29}}) {
    Mat ys = y_split.gpu().Rows(first, n);
    ASSERT_EQ(
        gpu_->CausalConv1dSilu(cx.gpu().Rows(first, n), cw.floats(), kernel, s_one.floats(), ys),
        KernelStatus::kOk);
  }
  EXPECT_EQ(y_all.Fetch(*gpu_), y_split.Fetch(*gpu_)) << "conv split";
  EXPECT_EQ(Download<float>(*gpu_, s_all.data(), state0.size()),
            Download<float>(*gpu_, s_one.data(), state0.size()))
      << "conv state";
}

// --- argument errors -----------------------------------------------------------------------

TEST_F(CudaElementwiseTest, BadShapesAreRefusedByBothBackends) {
  Rng rng(12);
  Twin a = RandomTwin(*gpu_, rng, 4, 16, 0);
  Twin b = RandomTwin(*gpu_, rng, 4, 16, 0);
  std::vector<int32_t> pos(4, 1);
  DeviceBuffer pos_dev = Upload(*gpu_, pos);
  std::vector<float> w(64, 1.0f);
  DeviceBuffer w_dev = Upload(*gpu_, w);
  std::vector<int32_t> ids(64);
  DeviceBuffer ids_dev = gpu_->Allocate(64 * sizeof(int32_t));
  for (Backend* backend : {cpu_.get(), gpu_.get()}) {
    const bool on_gpu = backend == gpu_.get();
    Mat x = on_gpu ? a.gpu() : a.cpu();
    Mat y = on_gpu ? b.gpu() : b.cpu();
    Mat short_y = y.Rows(0, 3);
    Mat narrow_y = y.Cols(0, 15);
    float* wp = on_gpu ? w_dev.floats() : w.data();
    const int32_t* pp = on_gpu ? static_cast<const int32_t*>(pos_dev.data()) : pos.data();
    int32_t* ip = on_gpu ? static_cast<int32_t*>(ids_dev.data()) : ids.data();
    const std::string who(backend->name());
    const auto kBad = KernelStatus::kInvalidArgument;
    EXPECT_EQ(backend->RmsNorm(x, {wp, 15}, 1e-6f, y), kBad) << who;
    EXPECT_EQ(backend->RmsNorm(x, {wp, 16}, 1e-6f, short_y), kBad) << who;
    EXPECT_EQ(backend->L2Norm(x, 5, 1e-6f), kBad) << who;
    EXPECT_EQ(backend->L2Norm(x, 0, 1e-6f), kBad) << who;
    EXPECT_EQ(backend->Copy(x, narrow_y), kBad) << who;
    EXPECT_EQ(backend->Add(x, short_y), kBad) << who;
    EXPECT_EQ(backend->SwiGlu(x, narrow_y, y), kBad) << who;
    EXPECT_EQ(backend->MulSigmoid(x, y.Cols(0, 2)), kBad) << who;
    EXPECT_EQ(backend->RopeNeox(x, pp, 3, 8, 1e4f), kBad) << who;   // 4 rows, 3 heads
    EXPECT_EQ(backend->RopeNeox(x, pp, 2, 7, 1e4f), kBad) << who;   // odd n_rot
    EXPECT_EQ(backend->RopeNeox(x, pp, 2, 18, 1e4f), kBad) << who;  // n_rot > head_dim
    EXPECT_EQ(backend->RopeNeox(x, nullptr, 2, 8, 1e4f), kBad) << who;
    EXPECT_EQ(backend->CausalConv1dSilu(x, wp, 0, wp, y), kBad) << who;
    EXPECT_EQ(backend->CausalConv1dSilu(x, wp, 4, nullptr, y), kBad) << who;
    EXPECT_EQ(backend->CausalConv1dSilu(x, wp, 4, wp, short_y), kBad) << who;
    EXPECT_EQ(backend->GatedRmsNorm(x, {wp, 16}, narrow_y, 1e-6f, y), kBad) << who;
    EXPECT_EQ(backend->GatedRmsNorm(x, {nullptr, 16}, y, 1e-6f, y), kBad) << who;
    Mat g = x.Cols(0, 8), beta = y.Cols(0, 8);
    EXPECT_EQ(backend->DeltaNetGates(g, beta, {wp, 7}, {wp, 8}), kBad) << who;
    EXPECT_EQ(backend->DeltaNetGates(g, short_y, {wp, 8}, {wp, 8}), kBad) << who;
    EXPECT_EQ(backend->MoeRoute(x, 17, ip, wp), kBad) << who;
    EXPECT_EQ(backend->MoeRoute(x, 0, ip, wp), kBad) << who;
    EXPECT_EQ(backend->MoeRoute(x, 2, nullptr, wp), kBad) << who;
  }
  // Nothing was written by a refused call.
  ExpectBlockNear(a.Fetch(*gpu_), a.host(), 0, 0, "a after refused calls");
  ExpectBlockNear(b.Fetch(*gpu_), b.host(), 0, 0, "b after refused calls");
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
