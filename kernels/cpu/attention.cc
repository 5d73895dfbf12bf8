#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace deltaserve::kernels {
namespace {

// Below this many multiply-adds (q·k plus p·v over all heads) the op stays on the calling thread.
constexpr int64_t kParallelFlops = 1 << 16;

bool IsValid(const Mat& m) {
  return m.rows >= 0 && m.cols >= 0 && m.stride >= m.cols &&
         (m.data != nullptr || m.rows == 0 || m.cols == 0);
}

// Dot product with 16 independent partial sums so that g++ -O3 vectorises it without
// -ffast-math.
float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

}  // namespace

KernelStatus AttentionCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                          int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                          Mat& out) {
  if (!IsValid(q) || !IsValid(k) || !IsValid(v) || !IsValid(out) || n_past < 0 || n_head <= 0 ||
      n_head_kv <= 0 || n_head % n_head_kv != 0 || q.cols % n_head != 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t head_dim = q.cols / n_head;
  const int64_t n_tokens = q.rows;
  const int64_t n_kv = n_past + n_tokens;
  if (head_dim == 0 || k.cols != n_head_kv * head_dim || v.cols != k.cols || k.rows != n_kv ||
      v.rows != n_kv || out.rows != n_tokens || out.cols != q.cols) {
    return KernelStatus::kInvalidArgument;
  }
  if (n_tokens == 0) return KernelStatus::kOk;
  const int64_t group = n_head / n_head_kv;

  // Item i is head i % n_head of token i / n_head: neighbouring items read the same kv head.
  auto attend = [&](int64_t begin, int64_t end) {
    std::vector<float> scores(n_kv);
    std::vector<float> qh(head_dim);
    std::vector<float> acc(head_dim);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_head;
      const int64_t h = item % n_head;
      const int64_t kvh = h / group;
      const int64_t n_visible = n_past + t + 1;
      // A private copy of the query lets out alias q.
      std::copy_n(q.data + t * q.stride + h * head_dim, head_dim, qh.data());
      const float* kbase = k.data + kvh * head_dim;
      const float* vbase = v.data + kvh * head_dim;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n_visible; ++j) {
        const float s = scale * Dot(qh.data(), kbase + j * k.stride, head_dim);
        scores[j] = s;
        max_score = std::max(max_score, s);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n_visible; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float* __restrict a = acc.data();
      for (int64_t j = 0; j < n_visible; ++j) {
        const float p = scores[j];
        const float* __restrict vj = vbase + j * v.stride;
        for (int64_t d = 0; d < head_dim; ++d) a[d] += p * vj[d];
      }
      const float inv_sum = 1.0f / sum;
      float* o = out.data + t * out.stride + h * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = a[d] * inv_sum;
    }
  };

  const int64_t n_items = n_tokens * n_head;
  // Average visible length times q·k and p·v per head.
  const int64_t flops = n_items * (n_past + (n_tokens + 1) / 2) * 2 * head_dim;
  if (flops < kParallelFlops || pool.size() == 1) {
    attend(0, n_items);
  } else {
    const int64_t per_item = std::max<int64_t>(1, n_kv * 2 * head_dim);
    const int64_t grain = std::clamp<int64_t>(kParallelFlops / 4 / per_item, 1,
                                              std::max<int64_t>(1, n_items / (4 * pool.size())));
    pool.ParallelFor(n_items, grain, attend);
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
