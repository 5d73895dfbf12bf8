// Index math of the kernels CudaBackend runs itself (elementwise.cuh, norm.cuh, rope.cuh,
// conv1d.cuh, moe_route.cuh): how a grid covers a strided [rows][cols] matrix, how the conv1d
// kernel splits one sequence's tokens over warps and where each input of a window comes from,
// and the expert order and warp merge of MoE routing. Written as DS_HOST_DEVICE functions over
// the C++ library only, so tests/kernels/cuda_index_math_test.cc checks them on the CPU against
// the CPU backend's definitions (every element covered once, the same top-k as MoeRouteCpu).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

// --- element-wise grids --------------------------------------------------------------------
// An element-wise kernel over [rows][cols]: thread (bx, tx) of block row by handles column
// c = bx * threads + tx of rows by, by + grid_y, by + 2 grid_y, ... (grid_y <= 65535, the CUDA
// limit of gridDim.y; columns beyond cols do nothing).
inline constexpr int64_t kMaxGridY = 65535;
inline constexpr int kElementwiseMaxThreads = 256;

struct Grid2 {
  int64_t x = 0;  // blocks along columns
  int64_t y = 0;  // blocks along rows
  int threads = 0;
};

// Threads per block: the columns rounded up to a warp, at most kElementwiseMaxThreads (a
// 32-column matrix, DeltaNetGates over 32 heads, gets one warp per row instead of 256 idle
// threads).
DS_HOST_DEVICE DS_INLINE int ElementwiseThreads(int64_t cols) {
  const int64_t warps = (cols + 31) / 32;
  const int64_t threads = warps * 32;
  return threads < kElementwiseMaxThreads ? static_cast<int>(threads < 32 ? 32 : threads)
                                          : kElementwiseMaxThreads;
}

// The grid of an element-wise kernel; {0, 0} for an empty matrix (nothing to launch).
DS_HOST_DEVICE DS_INLINE Grid2 ElementwiseGrid(int64_t rows, int64_t cols) {
  Grid2 g;
  if (rows <= 0 || cols <= 0) return g;
  g.threads = ElementwiseThreads(cols);
  g.x = (cols + g.threads - 1) / g.threads;
  g.y = rows < kMaxGridY ? rows : kMaxGridY;
  return g;
}

// --- row reductions ------------------------------------------------------------------------
// RmsNorm, GatedRmsNorm and L2Norm reduce runs of `n` values (a row or one head's group). Up
// to kWarpRowMax values a warp owns a run (rows of a block's warps are consecutive runs),
// above it a whole block does (one run per block); either way values are summed in f32 with
// per-thread strided partial sums, then a shuffle tree.
inline constexpr int64_t kWarpRowMax = 1024;
inline constexpr int kRowBlockThreads = 256;
inline constexpr int kWarpsPerRowBlock = kRowBlockThreads / 32;

// Runs of `n` values handled by one block (8 warps, or one block of 256 threads).
DS_HOST_DEVICE DS_INLINE int64_t RunsPerBlock(int64_t n) {
  return n <= kWarpRowMax ? kWarpsPerRowBlock : 1;
}
// Blocks to launch over `runs` runs of length n (a 1-D grid; 0 when there is nothing).
DS_HOST_DEVICE DS_INLINE int64_t RowReductionBlocks(int64_t runs, int64_t n) {
  if (runs <= 0 || n <= 0) return 0;
  const int64_t per = RunsPerBlock(n);
  return (runs + per - 1) / per;
}
// Run index of warp `warp` of block `block` (warp-per-run mode; may be >= runs: that warp idles).
DS_HOST_DEVICE DS_INLINE int64_t WarpRun(int64_t block, int warp) {
  return block * kWarpsPerRowBlock + warp;
}
// L2Norm's runs are (row, group) pairs: run j is group j % groups of row j / groups, whose
// first value sits at row * stride + (j % groups) * group.
DS_HOST_DEVICE DS_INLINE int64_t GroupOffset(int64_t run, int64_t groups, int64_t group,
                                             int64_t stride) {
  return (run / groups) * stride + (run % groups) * group;
}

// --- rope ----------------------------------------------------------------------------------
// One block per token: row t * n_heads + h of x is head h of token t; pair i < n_rot/2 rotates
// columns i and i + n_rot/2. The block fills cos/sin of up to kRopeChunk pairs in shared
// memory, then rotates those pairs of every head; n_rot above 2 * kRopeChunk loops over chunks.
inline constexpr int64_t kRopeChunk = 512;
inline constexpr int kRopeThreads = 256;
// Inverse frequency of pair i, in double like RopeNeoxCpu (f32 angles near position 2^18 are
// 0.03 rad apart).
DS_HOST_DEVICE DS_INLINE double RopeExponent(int64_t i, int64_t n_rot) {
  return -2.0 * static_cast<double>(i) / static_cast<double>(n_rot);
}

// --- causal conv1d -------------------------------------------------------------------------
// A block owns 32 channels (one per lane, so every row access is one coalesced 128-byte load)
// of all T tokens; its warps split the tokens into consecutive segments. Each warp first reads
// the kernel-1 inputs before its segment (its halo: earlier x rows, or the state for the first
// segment) and the last block-wide kernel-1 inputs (the new state) into shared memory; after a
// barrier each warp convolves its own segment. A warp writes y rows only of its own segment and
// reads x rows only of its own segment after the barrier, so y may alias x.
inline constexpr int kConvMaxWarps = 8;

// Warps for T tokens: one per token up to kConvMaxWarps (decode gets one).
DS_HOST_DEVICE DS_INLINE int ConvWarps(int64_t n_tokens) {
  return n_tokens < kConvMaxWarps ? (n_tokens < 1 ? 1 : static_cast<int>(n_tokens)) : kConvMaxWarps;
}
// Tokens [SegmentBegin(s), SegmentBegin(s + 1)) belong to warp s of n_seg; the segments
// partition [0, T) and differ in length by at most one.
DS_HOST_DEVICE DS_INLINE int64_t SegmentBegin(int64_t n_tokens, int n_seg, int seg) {
  return n_tokens * seg / n_seg;
}
// Where input position t (t < 0: before this call) of the window lives: x row t when t >= 0,
// else state row window + t (state is [window][C], oldest first: state row window-1 is t = -1).
struct ConvSource {
  bool from_state;
  int64_t row;
};
DS_HOST_DEVICE DS_INLINE ConvSource ConvInputSource(int64_t t, int64_t window) {
  return t >= 0 ? ConvSource{false, t} : ConvSource{true, window + t};
}
// Channels per block: one per lane.
inline constexpr int kConvChannels = 32;

// --- MoE routing ---------------------------------------------------------------------------
// One warp per token row. The experts are ordered by probability, descending, ties to the
// lower id (MoeRouteCpu's stable insertion). Round r picks, among the experts after round
// r-1's pick in that order, the first one: each lane scans its experts (e = lane, lane + 32,
// ...), then a butterfly of RouteCombine leaves the winner in every lane. The p of a row are
// either all finite (softmax of finite logits: max p = 1) or all NaN (a NaN or inf logit); for
// all-NaN rows the order degrades to plain id order, which is what MoeRouteCpu returns there.
// The renormalisation denominator's floor: kMoeMinWeightSum of kernels/cpu/moe.h (GGUF_QWEN35.md
// "Numerics", llama.cpp); a unit test holds the two equal.
inline constexpr float kRouteMinWeightSum = 6.1e-5f;

struct RouteKey {
  float p;
  int32_t id;  // -1: no expert (a lane with nothing left to offer)
};

// True when a comes before b in the routing order (a none comes after everything).
DS_HOST_DEVICE DS_INLINE bool RouteBefore(RouteKey a, RouteKey b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  if (a.p > b.p) return true;
  // Equal, or unordered because one is NaN: the lower id first.
  return !(b.p > a.p) && a.id < b.id;
}
// The earlier of two keys: the warp merge step.
DS_HOST_DEVICE DS_INLINE RouteKey RouteCombine(RouteKey a, RouteKey b) {
  return RouteBefore(b, a) ? b : a;
}
// The first expert of lane `lane` (of `lanes`) after `prev` in the routing order (prev.id < 0:
// from the start); p(e) gives expert e's probability. {0, -1} when the lane has none left.
template <typename ProbFn>
DS_HOST_DEVICE DS_INLINE RouteKey RouteLaneCandidate(const ProbFn& p, int64_t n_expert, int lane,
                                                     int lanes, RouteKey prev) {
  RouteKey best{0.0f, -1};
  for (int64_t e = lane; e < n_expert; e += lanes) {
    const RouteKey key{p(e), static_cast<int32_t>(e)};
    if (prev.id >= 0 && !RouteBefore(prev, key)) continue;
    if (RouteBefore(key, best)) best = key;
  }
  return best;
}
// 1 / the renormalisation denominator: the top-k sum clamped at min_sum, written so that a NaN
// sum stays NaN (std::max(sum, min) in MoeRouteCpu; fmaxf would drop the NaN).
DS_HOST_DEVICE DS_INLINE float RouteInvSum(float top_sum, float min_sum) {
  return 1.0f / (top_sum < min_sum ? min_sum : top_sum);
}

}  // namespace deltaserve::kernels::cuda
