// MoE routing kernel of the CUDA backend (Backend::MoeRoute), MODEL_SPEC §2.6 step 1: softmax
// over each row of the router logits, the top k experts, their weights renormalised to sum 1
// (the sum clamped at >= min_sum, 6.1e-5).
//
// Layout: logits [T][n_expert] f32 (rows `stride` floats apart); ids and weights [T][k]
// contiguous, device memory; per row the k experts in descending order of probability, ties to
// the lower id (MoeRouteCpu's order).
//
// One warp per row (kRouteWarps rows per block). The warp takes the row max and the sum of
// e^(l - max) with shuffle reductions; p(e) = e^(l_e - max) * (1 / sum), recomputed from the
// logits whenever it is needed (the same instructions, so the same bits every time, and no
// per-row buffer whatever n_expert is). Round j (j < k): every lane proposes its first expert
// after round j-1's pick in the routing order (elementwise_index.h RouteLaneCandidate), a
// butterfly of RouteCombine gives every lane the winner, lane 0 writes its id and p. The
// weights are then divided by the clamped sum of the k picks, summed in pick order as the CPU
// does. Cost per row: (k + 2) passes of n_expert / 32 exponentials per lane.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/elementwise_index.h"

namespace deltaserve::kernels::cuda {

inline constexpr int kRouteWarps = 4;

__global__ void MoeRouteKernel(Mat logits, int64_t k, int32_t* ids, float* weights, float min_sum) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + (threadIdx.x >> 5);
  if (t >= logits.rows) return;  // the whole warp leaves together
  const int64_t n_expert = logits.cols;
  const float* row = logits.data + t * logits.stride;

  float max_logit = -INFINITY;
  for (int64_t e = lane; e < n_expert; e += 32) max_logit = fmaxf(max_logit, row[e]);
  max_logit = WarpMax(max_logit);
  float sum = 0.0f;
  for (int64_t e = lane; e < n_expert; e += 32) sum += expf(row[e] - max_logit);
  const float inv_sum = 1.0f / WarpSum(sum);
  const auto prob = [&](int64_t e) { return expf(row[e] - max_logit) * inv_sum; };

  int32_t* row_ids = ids + t * k;
  float* row_weights = weights + t * k;
  RouteKey prev{0.0f, -1};
  float top_sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    RouteKey best = RouteLaneCandidate(prob, n_expert, lane, 32, prev);
    for (int offset = 16; offset > 0; offset >>= 1) {
      const RouteKey other{__shfl_xor_sync(0xffffffffu, best.p, offset),
                           __shfl_xor_sync(0xffffffffu, best.id, offset)};
      best = RouteCombine(best, other);
    }
    if (lane == 0) {
      row_ids[j] = best.id;
      row_weights[j] = best.p;
    }
    top_sum += best.p;
    prev = best;
  }
  if (lane == 0) {
    const float inv_top = RouteInvSum(top_sum, min_sum);
    for (int64_t j = 0; j < k; ++j) row_weights[j] *= inv_top;
  }
}

}  // namespace deltaserve::kernels::cuda
