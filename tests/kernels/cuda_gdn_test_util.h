// Shared by the host tests of the CUDA gated delta rule (cuda_gdn_math_test.cc: the kernels'
// arithmetic composed on the CPU; cuda_gdn_kernels_test.cc: the kernels themselves, emulated):
// random inputs drawn as the model produces them, the GdnProblem over them, and the comparison
// with the CPU backend (tolerance: see cuda_gdn_math_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/gdn_math.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels::cuda::gdn_test {

using testing::HostMat;
using testing::Rng;

// The bound of cuda_gdn_math_test.cc (its file comment derives it).
inline constexpr double kTol = 1e-5;

// One call's inputs, drawn as the model produces them (q, k unit per head), in padded rows so
// every access goes through the strides; g uniform in [g_min, g_max].
struct Inputs {
  Inputs(int64_t t, int n_k, int n_v, int d, uint32_t seed, float g_min, float g_max)
      : n_k(n_k),
        n_v(n_v),
        d(d),
        q(t, n_k * d, 3),
        k(t, n_k * d, 1),
        v(t, n_v * d, 2),
        g(t, n_v, 1),
        beta(t, n_v, 2) {
    Rng rng(seed);
    rng.FillNormal(q);
    rng.FillNormal(k);
    rng.FillNormal(v);
    rng.FillUniform(g, g_min, g_max);
    rng.FillUniform(beta, 0.0f, 1.0f);
    for (HostMat* m : {&q, &k}) {
      for (int64_t r = 0; r < t; ++r) {
        for (int h = 0; h < n_k; ++h) {
          double ss = 0.0;
          for (int i = 0; i < d; ++i) ss += double{m->at(r, h * d + i)} * m->at(r, h * d + i);
          for (int i = 0; i < d; ++i) {
            m->at(r, h * d + i) = static_cast<float>(m->at(r, h * d + i) / std::sqrt(ss));
          }
        }
      }
    }
    state = rng.NormalVector(static_cast<int64_t>(n_v) * d * d, 0.3f);
  }
  int n_k, n_v, d;
  HostMat q, k, v, g, beta;
  std::vector<float> state;  // [n_v][d (v)][d (k)]
};

// The problem of rows [t0, t0 + n) of `in`, writing `out` (rows from 0) and `state`.
inline GdnProblem MakeProblem(Inputs& in, int64_t t0, HostMat& out, std::vector<float>& state) {
  GdnProblem p;
  p.q = in.q.mat().Rows(t0, 1).data;
  p.q_stride = in.q.mat().stride;
  p.k = in.k.mat().Rows(t0, 1).data;
  p.k_stride = in.k.mat().stride;
  p.v = in.v.mat().Rows(t0, 1).data;
  p.v_stride = in.v.mat().stride;
  p.g = in.g.mat().Rows(t0, 1).data;
  p.g_stride = in.g.mat().stride;
  p.beta = in.beta.mat().Rows(t0, 1).data;
  p.beta_stride = in.beta.mat().stride;
  p.out = out.mat().data;
  p.out_stride = out.mat().stride;
  p.state = state.data();
  p.n_k = in.n_k;
  p.n_v = in.n_v;
  p.d = in.d;
  p.scale = 1.0f / std::sqrt(static_cast<float>(in.d));
  return p;
}

// gdn_step.cuh, one row at a time: the warp's reductions become plain sums.
using HostForm = void (*)(const GdnProblem&, int64_t);
using CpuFn = KernelStatus (*)(ThreadPool&, const Mat&, const Mat&, const Mat&, const Mat&,
                               const Mat&, int64_t, int64_t, int64_t, float*, Mat&);

inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= worst)) worst = err;  // NaN sticks
    if (!(err <= kTol + kTol * std::fabs(want[i])) && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": worst abs error " << worst;
}

inline std::vector<float> Flatten(const HostMat& m) {
  std::vector<float> f;
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t c = 0; c < m.cols(); ++c) f.push_back(m.at(r, c));
  }
  return f;
}

// Runs `form` on the CPU and the CPU backend's `cpu` over rows [0, T) of `in`; compares outputs
// and the state after.
inline void CompareWithCpu(HostForm form, CpuFn cpu, Inputs& in, const std::string& what) {
  const int64_t t = in.q.rows();
  ThreadPool pool(1);
  HostMat out(t, int64_t{in.n_v} * in.d, 1), ref(t, int64_t{in.n_v} * in.d);
  std::vector<float> state = in.state, ref_state = in.state;
  Mat ref_m = ref.mat();
  ASSERT_EQ(cpu(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(), in.beta.mat(), in.n_k, in.n_v,
                in.d, ref_state.data(), ref_m),
            KernelStatus::kOk);
  form(MakeProblem(in, 0, out, state), t);
  EXPECT_TRUE(out.PaddingIntact()) << what;
  ExpectNear(Flatten(out), Flatten(ref), what + " outputs");
  ExpectNear(state, ref_state, what + " state");
}

struct Decays {
  const char* name;
  float g_min, g_max;
};
// Typical (the model's gates), strong (the chunk's cumulative decay reaches -1000, where exp(γ)
// underflows: only differences may be exponentiated) and weak (state carries ~100 tokens).
inline constexpr Decays kDecays[] = {
    {"typical", -1.5f, 0.0f}, {"strong", -30.0f, 0.0f}, {"weak", -0.02f, 0.0f}};

inline std::string Name(const char* form, int64_t t, int n_k, int n_v, int d, const Decays& dec) {
  return std::string(form) + " T=" + std::to_string(t) + " n_k=" + std::to_string(n_k) +
         " n_v=" + std::to_string(n_v) + " d=" + std::to_string(d) + " " + dec.name;
}

}  // namespace deltaserve::kernels::cuda::gdn_test
