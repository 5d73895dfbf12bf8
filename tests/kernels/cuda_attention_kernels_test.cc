// The CUDA paged attention kernels themselves (kernels/cuda/kv_store.cuh, attention_kernels.cuh),
// compiled by the host compiler against tests/kernels/cuda_emulator/cuda_runtime.h and run on the
// CPU with the grids and block sizes of kv_store.cu / attention.cu, against the CPU backend's
// StoreKvCpu (pool bytes equal) and PagedAttentionCpu. Where cuda_attention_math_test checks the
// pieces, this runs the kernels' own thread and block index math, shared-memory tiles and warp
// shuffles: row blocks, splits with the partials' layout in an exactly sized scratch, the merge,
// prefill's direct writes, out aliasing q, every K x V type pair. Barriers: the emulator runs
// each phase of the threads in shuffled orders, but its warps reach each shuffle in the same
// round, so it cannot see a barrier missing between two phases that both shuffle (removing the
// one between the score and V phases here still passes); those stay for the GPU's racecheck.
//
// Tolerance: both compute in f32 from identical K/V values (the pool bytes are checked equal);
// each is within 2e-5 + 1e-4 relative of the exact result (the CPU test's bound for dot products
// over <= 256 terms and an online softmax over ~1,000 keys), and the kernel's sums over up to
// 2,000 keys in tiles and splits get another 1e-5: 5e-5 + 2e-4 relative. Sizes are small
// enough for fibers: every CUDA thread is one, every barrier a round.
#include <cuda_runtime.h>  // the emulator: this target's include path puts it first

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// What these kernels use beyond the emulator's subset: gridDim, and __shfl_sync (read lane
// `src`), which is the emulator's xor shuffle with lane mask (lane ^ src).
namespace deltaserve::cuda_emu {
inline Dim3& EmulatedGridDim() {
  static Dim3 grid;
  return grid;
}
}  // namespace deltaserve::cuda_emu
#ifndef gridDim
#define gridDim (::deltaserve::cuda_emu::EmulatedGridDim())
#endif
inline float __shfl_sync(unsigned mask, float value, int src_lane) {
  return __shfl_xor_sync(mask, value, static_cast<int>(threadIdx.x % 32) ^ src_lane);
}

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/attention_checks.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "tests/kernels/cuda_attention_test_util.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels::cuda {
namespace {

using attention_test::HostCache;
using attention_test::kCacheTypes;
using cuda_emu::Dim3;
using testing::HostMat;
using testing::Rng;

constexpr float kNaN = __builtin_nanf("");

template <typename Kernel, typename... Args>
bool RunKernel(Dim3 grid, unsigned threads, Kernel kernel, Args... args) {
  cuda_emu::EmulatedGridDim() = grid;
  return cuda_emu::Launch(grid, threads, kernel, args...);
}

// kv_store.cu LaunchStoreKv.
void EmuStoreKv(const Mat& k, const Mat& v, const PagedKvView& kv, int64_t first_pos) {
  ASSERT_EQ(CheckStoreKv(k, v, kv, first_pos), KernelStatus::kOk);
  if (k.rows == 0) return;
  const StoreParams p = MakeStoreParams(k, v, kv, first_pos);
  ASSERT_TRUE(RunKernel(Dim3{static_cast<unsigned>(StoreBlocks(p)), 1, 1}, kStoreThreads,
                        &StoreKvKernel, p))
      << "the store kernel's threads hang";
}

// attention.cu LaunchPagedAttention, with a NaN-filled scratch of exactly the bytes this call
// uses followed by a guard that must stay untouched; every partial must have been written.
void EmuPagedAttention(const Mat& q, const PagedKvView& kv, int64_t n_past, int64_t n_head,
                       int64_t n_head_kv, float scale, Mat& out) {
  constexpr float kGuard = -777.0f;
  ASSERT_EQ(CheckPagedAttention(q, kv, n_past, n_head, n_head_kv, out), KernelStatus::kOk);
  const int64_t head_dim = q.cols / n_head;
  // What this call uses (0 unless it splits), within what the planner reserves for it.
  const size_t bytes = AttentionScratchBytesFor(q.rows, n_head, head_dim, n_past + q.rows);
  ASSERT_LE(bytes, AttentionScratchBound(q.rows, n_head, head_dim, n_past + q.rows));
  std::vector<float> scratch(bytes / sizeof(float), kNaN);
  scratch.resize(scratch.size() + 64, kGuard);
  const AttnParams p = MakeAttnParams(q, kv, n_past, n_head, n_head_kv, scale, out, scratch.data());
  ASSERT_EQ(bytes > 0, p.plan.n_splits > 1);
  const int kd = HeadDimBucket(head_dim);
  const AttnGrid g = AttentionGrid(p, kd);
  const Dim3 grid{static_cast<unsigned>(g.x), static_cast<unsigned>(g.y),
                  static_cast<unsigned>(g.z)};
  const bool ok = kd == 64    ? RunKernel(grid, kAttnThreads, &PagedAttentionKernel<64>, p)
                  : kd == 128 ? RunKernel(grid, kAttnThreads, &PagedAttentionKernel<128>, p)
                              : RunKernel(grid, kAttnThreads, &PagedAttentionKernel<256>, p);
  ASSERT_TRUE(ok) << "the attention kernel's threads hang";
  if (p.plan.n_splits > 1) {
    const int64_t n_out_rows = p.n_tokens * n_head;
    ASSERT_TRUE(RunKernel(Dim3{static_cast<unsigned>(n_out_rows), 1, 1}, kMergeThreads,
                          &MergePartialsKernel, static_cast<const float*>(p.part_stats),
                          static_cast<const float*>(p.part_acc), p.plan.n_splits, n_out_rows,
                          n_head, p.head_dim, out.data, out.stride))
        << "the merge kernel's threads hang";
  }
  for (size_t i = bytes / sizeof(float); i < scratch.size(); ++i) {
    ASSERT_EQ(scratch[i], kGuard) << "scratch written past its size";
  }
  for (size_t i = 0; i < bytes / sizeof(float); ++i) {
    ASSERT_FALSE(std::isnan(scratch[i])) << "a partial was never written, float " << i;
  }
}

struct Case {
  int64_t n_tokens, n_past, n_head, n_head_kv, head_dim;
  WeightType k_type, v_type;
  int64_t page_tokens;
  bool alias = true;  // out is q itself
};

std::string Describe(const Case& c) {
  return "T=" + std::to_string(c.n_tokens) + " past=" + std::to_string(c.n_past) +
         " heads=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
         " hd=" + std::to_string(c.head_dim) + " k=" + std::to_string(static_cast<int>(c.k_type)) +
         " v=" + std::to_string(static_cast<int>(c.v_type)) +
         " page=" + std::to_string(c.page_tokens) + (c.alias ? " aliased" : "");
}

// Stores through the store kernel and the CPU backend (bytes must be equal), then attends with
// both (see the file comment for the tolerance).
void Check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(Describe(c));
  Rng rng(seed);
  const int64_t n_kv = c.n_past + c.n_tokens, kv_dim = c.n_head_kv * c.head_dim;
  HostMat q(c.n_tokens, c.n_head * c.head_dim, 3), k(n_kv, kv_dim, 1), v(n_kv, kv_dim, 2);
  rng.FillNormal(q);
  rng.FillNormal(k);
  rng.FillNormal(v);
  HostCache gpu(c.k_type, c.v_type, c.n_head_kv, c.head_dim, c.page_tokens, n_kv, seed);
  HostCache cpu(c.k_type, c.v_type, c.n_head_kv, c.head_dim, c.page_tokens, n_kv, seed);
  // Prefix first, then the new tokens, as a prefill chunk after a cached prefix stores them.
  for (auto [first, n] : {std::pair<int64_t, int64_t>{0, c.n_past}, {c.n_past, c.n_tokens}}) {
    if (n == 0) continue;
    EmuStoreKv(k.mat().Rows(first, n), v.mat().Rows(first, n), gpu.view, first);
    ASSERT_EQ(StoreKvCpu(k.mat().Rows(first, n), v.mat().Rows(first, n), cpu.view, first),
              KernelStatus::kOk);
  }
  ASSERT_EQ(gpu.k_bytes, cpu.k_bytes);
  ASSERT_EQ(gpu.v_bytes, cpu.v_bytes);

  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  HostMat expect(c.n_tokens, q.cols(), 1);
  Mat em = expect.mat();
  ThreadPool pool(2);
  ASSERT_EQ(PagedAttentionCpu(pool, q.mat(), cpu.view, c.n_past, c.n_head, c.n_head_kv, scale, em),
            KernelStatus::kOk);
  HostMat separate(c.n_tokens, q.cols(), 2);
  Mat out = c.alias ? q.mat() : separate.mat();
  EmuPagedAttention(q.mat(), gpu.view, c.n_past, c.n_head, c.n_head_kv, scale, out);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<double> want(static_cast<size_t>(expect.rows() * expect.cols()));
  for (int64_t t = 0; t < expect.rows(); ++t) {
    for (int64_t d = 0; d < expect.cols(); ++d) want[t * expect.cols() + d] = expect.at(t, d);
  }
  const HostMat& got = c.alias ? q : separate;
  testing::ExpectClose(got, want, 5e-5, 2e-4, "attention kernels");
  EXPECT_TRUE(got.PaddingIntact());
}

TEST(CudaAttentionKernelsTest, StoreAndAttendMatchTheCpuBackend) {
  uint32_t seed = 100;
  // Each head-size bucket and sizes between, GQA 1/2/3/4/8, decode and short batches (split,
  // partials, merge), prefill (direct writes), pages not dividing the tile, out aliasing q.
  const Case cases[] = {
      {1, 0, 4, 4, 64, WeightType::kF32, WeightType::kF32, 16},
      {1, 700, 8, 1, 64, WeightType::kF32, WeightType::kF32, 16, false},
      {3, 500, 8, 2, 128, WeightType::kF16, WeightType::kF16, 64},
      {8, 600, 16, 2, 256, WeightType::kBF16, WeightType::kQ8_0, 16, false},
      {9, 300, 8, 2, 256, WeightType::kQ8_0, WeightType::kQ8_0, 64},
      {40, 33, 16, 2, 256, WeightType::kF16, WeightType::kF32, 13},
      {17, 0, 6, 2, 24, WeightType::kF32, WeightType::kBF16, 5, false},
      {2, 1000, 12, 4, 80, WeightType::kF16, WeightType::kF16, 64},
      {1, 1999, 4, 1, 256, WeightType::kQ4_0, WeightType::kQ4_1, 16},
      {5, 130, 9, 3, 96, WeightType::kF32, WeightType::kF32, 7},
      {1, 128, 2, 2, 32, WeightType::kQ5_0, WeightType::kQ5_0, 1},  // 129 keys: 2 splits
  };
  for (const Case& c : cases) Check(c, seed++);
}

TEST(CudaAttentionKernelsTest, EveryKTypeWithEveryVType) {
  uint32_t seed = 200;
  for (WeightType kt : kCacheTypes) {
    for (WeightType vt : kCacheTypes) Check({1, 150, 4, 2, 64, kt, vt, 16}, seed++);
  }
  Check({4, 150, 8, 4, 128, WeightType::kQ5_0, WeightType::kQ4_1, 32, false}, seed++);
}

TEST(CudaAttentionKernelsTest, PageOutsideThePoolsIsSkipped) {
  // The store kernel leaves the bytes of positions on a page outside the pools as they were.
  HostCache cache(WeightType::kQ8_0, WeightType::kF16, 1, 64, 2, 4, 9);
  cache.table = {1, 7};  // 7 is outside the 5-page pools
  cache.view.page_table = cache.table.data();
  HostMat k(4, 64), v(4, 64);
  Rng rng(9);
  rng.FillNormal(k);
  rng.FillNormal(v);
  EmuStoreKv(k.mat(), v.mat(), cache.view, 0);
  std::vector<uint8_t> expect(cache.k_bytes.size(), 0xFF);
  for (int64_t pos = 0; pos < 2; ++pos) {
    ASSERT_EQ(QuantizeRow(WeightType::kQ8_0, &k.at(pos, 0), &expect[(2 + pos) * 68], 64),
              KernelStatus::kOk);  // page 1, slot pos: ((1 * 1 + 0) * 2 + pos) * 68
  }
  EXPECT_EQ(cache.k_bytes, expect);
}

}  // namespace
}  // namespace deltaserve::kernels::cuda
