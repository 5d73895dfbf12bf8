// The CUDA gated delta rule kernels themselves (kernels/cuda/gdn_step.cuh, gdn_chunked.cuh),
// compiled by the host compiler against tests/kernels/cuda_emulator/cuda_runtime.h and run on
// the CPU, launched with the grids and block sizes of kernels/cuda/gated_delta_rule.cu (passes of
// the chunked form included), against the CPU backend. Where cuda_gdn_math_test checks the
// arithmetic, this runs the kernels' own thread/block index math, shared-memory tiles, barrier
// placement (the emulator's round-robin scheduling breaks a kernel that misses one: see the
// first test) and warp reductions, and checks that the scratch is used within
// GdnChunkedScratchFloats. Same inputs and tolerance as cuda_gdn_math_test (the sums differ only
// in order: warp trees). Sizes are small: every CUDA thread is a fiber, every barrier a round.
#include <cuda_runtime.h>  // the emulator: this target's include path puts it first

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cuda/gdn_chunked.cuh"
#include "kernels/cuda/gdn_math.h"
#include "kernels/cuda/gdn_step.cuh"
#include "tests/kernels/cuda_gdn_test_util.h"

namespace deltaserve::kernels::cuda {
namespace {

using cuda_emu::Dim3;
using cuda_emu::Launch;
using gdn_test::CompareWithCpu;
using gdn_test::Decays;
using gdn_test::Inputs;
using gdn_test::kDecays;
using gdn_test::Name;

// gated_delta_rule.cu RunStep.
void EmuStep(const GdnProblem& p, int64_t n_tokens) {
  const Dim3 grid{static_cast<unsigned>((p.d + kGdnStepRowsPerBlock - 1) / kGdnStepRowsPerBlock),
                  static_cast<unsigned>(p.n_v), 1};
  const int lanes = (p.d + 31) / 32;
  const bool ok = lanes <= 1   ? Launch(grid, kGdnStepThreads, &GdnStepKernel<1>, p, n_tokens)
                  : lanes <= 2 ? Launch(grid, kGdnStepThreads, &GdnStepKernel<2>, p, n_tokens)
                  : lanes <= 4 ? Launch(grid, kGdnStepThreads, &GdnStepKernel<4>, p, n_tokens)
                               : Launch(grid, kGdnStepThreads, &GdnStepKernel<8>, p, n_tokens);
  EXPECT_TRUE(ok) << "the step kernel's threads hang";
}

// gated_delta_rule.cu RunChunked, with a NaN-filled scratch of the exact size followed by a
// guard that must stay untouched.
void EmuChunked(const GdnProblem& p, int64_t n_tokens) {
  constexpr float kGuard = -777.0f;
  const auto floats = static_cast<size_t>(GdnChunkedScratchFloats(n_tokens, p.n_v, p.d));
  std::vector<float> scratch(floats, std::nanf(""));
  scratch.resize(floats + 256, kGuard);
  const int64_t pass_tokens = int64_t{kGdnPassChunks} * kGdnChunk;
  const Dim3 scan_grid{static_cast<unsigned>((p.d + kGdnScanRows - 1) / kGdnScanRows),
                       static_cast<unsigned>(p.n_v), 1};
  for (int64_t t0 = 0; t0 < n_tokens; t0 += pass_tokens) {
    const int64_t n = n_tokens - t0 < pass_tokens ? n_tokens - t0 : pass_tokens;
    const GdnProblem pass = p.FromToken(t0);
    const Dim3 prep_grid{static_cast<unsigned>(GdnChunks(n)), static_cast<unsigned>(p.n_v), 1};
    EXPECT_TRUE(Launch(prep_grid, kGdnChunkThreads, &GdnChunkPrepKernel, pass, n, scratch.data()))
        << "prep kernel hangs";
    EXPECT_TRUE(Launch(scan_grid, kGdnChunkThreads, &GdnChunkScanKernel, pass, n,
                       static_cast<const float*>(scratch.data())))
        << "scan kernel hangs";
  }
  for (size_t i = floats; i < scratch.size(); ++i) {
    ASSERT_EQ(scratch[i], kGuard) << "scratch written past GdnChunkedScratchFloats at " << i;
  }
}

// The emulator itself: a kernel that reads a neighbour's shared write without a barrier gets
// stale values (the scheduler runs threads in shuffled orders); with the barrier, the right ones.
float g_result[64];
void NeighbourRead(bool with_barrier) {
  __shared__ float slot[64];
  const auto tid = static_cast<int>(threadIdx.x);
  slot[tid] = 0.0f;
  __syncthreads();
  slot[tid] = static_cast<float>(tid + 1);
  if (with_barrier) __syncthreads();
  g_result[tid] = slot[(tid + 1) % 64];
}
void WarpSumKernel() { g_result[threadIdx.x] = GdnWarpSum(static_cast<float>(threadIdx.x)); }

TEST(CudaGdnKernelsTest, EmulatorCatchesAMissingBarrier) {
  ASSERT_TRUE(Launch(Dim3{1, 1, 1}, 64, &NeighbourRead, false));
  int stale = 0;
  for (int i = 0; i < 64; ++i) stale += g_result[i] == 0.0f;
  EXPECT_GT(stale, 8) << "threads ran ahead of their neighbours' writes";
  EXPECT_LT(stale, 56) << "and others behind";
  ASSERT_TRUE(Launch(Dim3{1, 1, 1}, 64, &NeighbourRead, true));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(g_result[i], static_cast<float>((i + 1) % 64 + 1));
  ASSERT_TRUE(Launch(Dim3{1, 1, 1}, 64, &WarpSumKernel));
  EXPECT_EQ(g_result[0], 496.0f);    // 0 + ... + 31
  EXPECT_EQ(g_result[63], 1520.0f);  // 32 + ... + 63
}

TEST(CudaGdnKernelsTest, StepKernelMatchesCpu) {
  struct Shape {
    int n_k, n_v, d;
    int64_t t;
  };
  // Every register width (kE = 1, 2, 4, 8), rows and lanes past d (24, 100), tiled heads.
  for (const Shape s :
       {Shape{2, 4, 24, 3}, Shape{1, 2, 64, 2}, Shape{1, 1, 100, 2}, Shape{1, 1, 256, 1}}) {
    for (const Decays& dec : kDecays) {
      // Strong and weak decays at one shape only: every CUDA thread is a fiber here.
      if (s.d != 24 && dec.g_min != kDecays[0].g_min) continue;
      Inputs in(s.t, s.n_k, s.n_v, s.d, static_cast<uint32_t>(s.d + s.t), dec.g_min, dec.g_max);
      CompareWithCpu(&EmuStep, &GatedDeltaRuleRecurrentCpu, in,
                     Name("emulated step", s.t, s.n_k, s.n_v, s.d, dec));
    }
  }
}

TEST(CudaGdnKernelsTest, ChunkedKernelsMatchCpu) {
  struct Shape {
    int n_k, n_v, d;
    int64_t t;
  };
  // Two chunks with a partial one, partial tiles and slices (24, 100); exactly one chunk; one
  // token; the largest head.
  for (const Shape s : {Shape{2, 4, 24, 70}, Shape{1, 2, 64, 65}, Shape{1, 1, 128, 64},
                        Shape{1, 1, 100, 1}, Shape{1, 1, 256, 3}}) {
    for (const Decays& dec : {kDecays[0], kDecays[1]}) {
      if (s.d != 24 && dec.g_min != kDecays[0].g_min) continue;  // strong decay at one shape
      Inputs in(s.t, s.n_k, s.n_v, s.d, static_cast<uint32_t>(s.d * 3 + s.t), dec.g_min, dec.g_max);
      CompareWithCpu(&EmuChunked, &GatedDeltaRuleRecurrentCpu, in,
                     Name("emulated chunked", s.t, s.n_k, s.n_v, s.d, dec));
    }
  }
}

TEST(CudaGdnKernelsTest, ChunkedKernelsAcrossPassesWithWeakDecay) {
  // 1100 tokens: 16 chunks in the first pass, 2 in the second (record slots reused).
  const Decays weak = kDecays[2];
  Inputs in(1100, 1, 1, 16, 99, weak.g_min, weak.g_max);
  CompareWithCpu(&EmuChunked, &GatedDeltaRuleRecurrentCpu, in,
                 Name("emulated chunked", 1100, 1, 1, 16, weak));
}

TEST(CudaGdnKernelsTest, OutMayAliasV) {
  // Both kernels with out written over v's columns, against the CPU with separate out.
  for (const bool chunked : {false, true}) {
    Inputs in(chunked ? 66 : 3, 1, 2, 32, 5, -1.5f, 0.0f);
    const int64_t t = in.q.rows();
    ThreadPool pool(1);
    gdn_test::HostMat ref(t, 64);
    std::vector<float> ref_state = in.state, state = in.state;
    Mat ref_m = ref.mat();
    ASSERT_EQ(GatedDeltaRuleRecurrentCpu(pool, in.q.mat(), in.k.mat(), in.v.mat(), in.g.mat(),
                                         in.beta.mat(), 1, 2, 32, ref_state.data(), ref_m),
              KernelStatus::kOk);
    gdn_test::HostMat unused(t, 64);
    GdnProblem p = gdn_test::MakeProblem(in, 0, unused, state);
    p.out = in.v.mat().data;
    p.out_stride = in.v.mat().stride;
    (chunked ? &EmuChunked : &EmuStep)(p, t);
    gdn_test::ExpectNear(gdn_test::Flatten(in.v), gdn_test::Flatten(ref),
                         chunked ? "chunked, out = v" : "step, out = v");
    gdn_test::ExpectNear(state, ref_state, "state");
  }
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
