#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm_ops.h"

namespace deltaserve::kernels {

KernelStatus MoeRouteCpu(const Mat& logits, int64_t k, int32_t* ids, float* weights) {
  const int64_t n_expert = logits.cols;
  if (!logits.Valid() || k <= 0 || k > n_expert) return KernelStatus::kInvalidArgument;
  if (logits.rows == 0) return KernelStatus::kOk;
  if (ids == nullptr || weights == nullptr) return KernelStatus::kInvalidArgument;
  std::vector<float> p(n_expert);
  std::vector<float> top_p(k);
  std::vector<int32_t> top_id(k);
  for (int64_t t = 0; t < logits.rows; ++t) {
    const float* row = logits.data + t * logits.stride;
    const float max_logit = *std::max_element(row, row + n_expert);
    float sum = 0.0f;
    for (int64_t e = 0; e < n_expert; ++e) {
      p[e] = std::exp(row[e] - max_logit);
      sum += p[e];
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t e = 0; e < n_expert; ++e) p[e] *= inv_sum;

    // Insertion into a sorted top-k list, scanning ids upwards: an entry moves past another
    // only when strictly larger, so among equal p the lower id stays first. (A NaN never moves
    // up, so the ids stay valid whatever the logits.)
    int64_t filled = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
      const float pe = p[e];
      int64_t pos;
      if (filled < k) {
        pos = filled++;
      } else if (pe > top_p[k - 1]) {
        pos = k - 1;
      } else {
        continue;
      }
      for (; pos > 0 && pe > top_p[pos - 1]; --pos) {
        top_p[pos] = top_p[pos - 1];
        top_id[pos] = top_id[pos - 1];
      }
      top_p[pos] = pe;
      top_id[pos] = static_cast<int32_t>(e);
    }
    float top_sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) top_sum += top_p[j];
    const float inv_top = 1.0f / std::max(top_sum, kMoeMinWeightSum);
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = top_id[j];
      weights[t * k + j] = top_p[j] * inv_top;
    }
  }
  return KernelStatus::kOk;
}

KernelStatus MoeFfnCpu(ThreadPool& pool, const Mat& x, const int32_t* ids, const float* weights,
                       int64_t k, const WeightView& gate_exps, const WeightView& up_exps,
                       const WeightView& down_exps, Mat& y) {
  const int64_t n_tokens = x.rows;
  const int64_t n_embd = x.cols;
  const int64_t n_expert = gate_exps.count;
  const int64_t ff = gate_exps.out;
  if (!x.Valid() || !y.Valid() || y.rows != n_tokens || y.cols != n_embd || k <= 0 ||
      n_expert <= 0 || gate_exps.data == nullptr || up_exps.data == nullptr ||
      down_exps.data == nullptr || gate_exps.in != n_embd || up_exps.in != n_embd ||
      up_exps.out != ff || up_exps.count != n_expert || down_exps.in != ff ||
      down_exps.out != n_embd || down_exps.count != n_expert || ff <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  for (const WeightView* w : {&gate_exps, &up_exps, &down_exps}) {
    if (w->MatrixStride() < static_cast<size_t>(w->out) * w->row_bytes) {
      return KernelStatus::kInvalidArgument;  // matrices of the stack would overlap
    }
  }
  if (n_tokens == 0) return KernelStatus::kOk;
  if (ids == nullptr || weights == nullptr || x.data == y.data) {
    return KernelStatus::kInvalidArgument;
  }

  // Counting sort of the T*k assignments by expert; within an expert, tokens stay in order.
  // Negative ids (experts the other tier computes) take no part.
  const int64_t n_assign = n_tokens * k;
  std::vector<int64_t> first(n_expert + 1, 0);
  for (int64_t a = 0; a < n_assign; ++a) {
    if (ids[a] >= n_expert) return KernelStatus::kInvalidArgument;
    if (ids[a] >= 0) ++first[ids[a] + 1];
  }
  int64_t max_count = 0;
  for (int64_t e = 0; e < n_expert; ++e) {
    max_count = std::max(max_count, first[e + 1]);
    first[e + 1] += first[e];
  }
  std::vector<int64_t> order(n_assign);  // assignment index a = t * k + j, grouped by expert
  {
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t a = 0; a < n_assign; ++a) {
      if (ids[a] >= 0) order[fill[ids[a]]++] = a;
    }
  }

  for (int64_t t = 0; t < n_tokens; ++t) std::fill_n(y.data + t * y.stride, n_embd, 0.0f);

  std::vector<float> xe(max_count * n_embd);
  std::vector<float> gate(max_count * ff);
  std::vector<float> up(max_count * ff);
  std::vector<float> down(max_count * n_embd);
  for (int64_t e = 0; e < n_expert; ++e) {
    const int64_t count = first[e + 1] - first[e];
    if (count == 0) continue;
    const int64_t* rows = order.data() + first[e];
    for (int64_t r = 0; r < count; ++r) {
      std::copy_n(x.data + (rows[r] / k) * x.stride, n_embd, xe.data() + r * n_embd);
    }
    const Mat xm{xe.data(), count, n_embd, n_embd};
    Mat gm{gate.data(), count, ff, ff};
    Mat um{up.data(), count, ff, ff};
    Mat dm{down.data(), count, n_embd, n_embd};
    KernelStatus st = MatMulCpu(pool, gate_exps.Matrix(e), xm, gm);
    if (st == KernelStatus::kOk) st = MatMulCpu(pool, up_exps.Matrix(e), xm, um);
    if (st == KernelStatus::kOk) st = SwiGluCpu(pool, gm, um, gm);
    if (st == KernelStatus::kOk) st = MatMulCpu(pool, down_exps.Matrix(e), gm, dm);
    if (st != KernelStatus::kOk) return st;
    for (int64_t r = 0; r < count; ++r) {
      const float wgt = weights[rows[r]];
      float* __restrict yr = y.data + (rows[r] / k) * y.stride;
      const float* __restrict dr = down.data() + r * n_embd;
      for (int64_t i = 0; i < n_embd; ++i) yr[i] += wgt * dr[i];
    }
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
