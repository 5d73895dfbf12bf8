#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels {
namespace {

// Below this many multiply-adds (q·k plus p·v over all heads) the op stays on the calling thread.
constexpr int64_t kParallelFlops = 1 << 16;
// Query tokens per work item in prefill: every K/V row loaded serves this many tokens times the
// query heads of its group.
constexpr int64_t kQueryBlock = 4;

bool IsValid(const Mat& m) {
  return m.rows >= 0 && m.cols >= 0 && m.stride >= m.cols &&
         (m.data != nullptr || m.rows == 0 || m.cols == 0);
}

// Dot product with 32 independent partial sums so that g++ -O3 vectorises it without
// -ffast-math.
DELTASERVE_ALWAYS_INLINE float Dot(const float* __restrict a, const float* __restrict b,
                                   int64_t n) {
  float acc[32] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 32; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 32; ++j) s += acc[j];
  return s;
}

struct Problem {
  const Mat& q;
  const Mat& k;
  const Mat& v;
  int64_t n_past;
  int64_t n_head;
  int64_t head_dim;
  int64_t group;  // query heads per kv head
  float scale;
  Mat& out;
};

// Per-thread buffers for a block of `rows` query vectors against up to n_kv keys.
struct Scratch {
  Scratch(int64_t rows, int64_t n_kv, int64_t head_dim)
      : q(rows * head_dim), acc(rows * head_dim), scores(rows * n_kv), inv_sum(rows) {}
  std::vector<float> q, acc;   // [rows][head_dim]
  std::vector<float> scores;   // [rows][n_kv]
  std::vector<float> inv_sum;  // [rows]
};

// Tokens [t0, t0 + nt) and query heads [h0, h0 + nh) of kv head kvh. Rows r = ti * nh + hi; row
// r sees keys 0 .. n_past + t0 + ti. K and V rows are read once for all rows of the block.
DELTASERVE_ISA_CLONES void AttendBlock(const Problem& p, int64_t t0, int64_t nt, int64_t kvh,
                                       int64_t h0, int64_t nh, Scratch& s) {
  const int64_t hd = p.head_dim;
  const int64_t rows = nt * nh;
  const int64_t n_keys = p.n_past + t0 + nt;  // keys seen by the block's last token
  const int64_t n_kv = p.n_past + p.q.rows;   // row length of the scores buffer
  float* q = s.q.data();
  float* acc = s.acc.data();
  float* scores = s.scores.data();
  // Private query copies let out alias q.
  for (int64_t ti = 0; ti < nt; ++ti) {
    for (int64_t hi = 0; hi < nh; ++hi) {
      std::copy_n(p.q.data + (t0 + ti) * p.q.stride + (h0 + hi) * hd, hd, q + (ti * nh + hi) * hd);
    }
  }
  const float* kbase = p.k.data + kvh * hd;
  const float* vbase = p.v.data + kvh * hd;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* kj = kbase + j * p.k.stride;
    // Tokens before ti_min do not see key j (causality).
    const int64_t ti_min = std::max<int64_t>(0, j - p.n_past - t0);
    for (int64_t r = ti_min * nh; r < rows; ++r) {
      scores[r * n_kv + j] = p.scale * Dot(q + r * hd, kj, hd);
    }
  }
  float* inv_sum = s.inv_sum.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n_visible = p.n_past + t0 + r / nh + 1;
    float* sr = scores + r * n_kv;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_visible; ++j) max_score = std::max(max_score, sr[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_visible; ++j) {
      sr[j] = internal::FastExp(sr[j] - max_score);
      sum += sr[j];
    }
    inv_sum[r] = 1.0f / sum;
  }
  std::fill_n(acc, rows * hd, 0.0f);
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* __restrict vj = vbase + j * p.v.stride;
    const int64_t ti_min = std::max<int64_t>(0, j - p.n_past - t0);
    for (int64_t r = ti_min * nh; r < rows; ++r) {
      const float pj = scores[r * n_kv + j];
      float* __restrict ar = acc + r * hd;
      for (int64_t x = 0; x < hd; ++x) ar[x] += pj * vj[x];
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* o = p.out.data + (t0 + r / nh) * p.out.stride + (h0 + r % nh) * hd;
    for (int64_t x = 0; x < hd; ++x) o[x] = acc[r * hd + x] * inv_sum[r];
  }
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
  const Problem p{q, k, v, n_past, n_head, head_dim, group, scale, out};

  // Work items: (token block, kv head, slice of the group's query heads). Decode has one token,
  // so the group is sliced when there would otherwise be fewer items than threads.
  const int64_t q_block = n_tokens > 1 ? kQueryBlock : 1;
  const int64_t n_tblocks = (n_tokens + q_block - 1) / q_block;
  const int64_t flops = n_tokens * n_head * (n_past + (n_tokens + 1) / 2) * 2 * head_dim;
  const bool parallel = flops >= kParallelFlops && pool.size() > 1;
  int64_t n_slices = 1;
  if (parallel) {
    const int64_t want = 2 * pool.size();
    n_slices =
        std::clamp<int64_t>((want + n_tblocks * n_head_kv - 1) / (n_tblocks * n_head_kv), 1, group);
  }
  const int64_t slice = (group + n_slices - 1) / n_slices;
  n_slices = (group + slice - 1) / slice;
  const int64_t n_items = n_tblocks * n_head_kv * n_slices;

  // The last token blocks see the most keys: they are handed out first so the tail balances.
  auto run_item = [&](int64_t item, Scratch& s) {
    const int64_t tb = n_tblocks - 1 - item / (n_head_kv * n_slices);
    const int64_t kvh = item / n_slices % n_head_kv;
    const int64_t h0 = kvh * group + item % n_slices * slice;
    const int64_t t0 = tb * q_block;
    AttendBlock(p, t0, std::min(q_block, n_tokens - t0), kvh, h0,
                std::min(slice, (kvh + 1) * group - h0), s);
  };
  if (!parallel) {
    Scratch s(q_block * slice, n_kv, head_dim);
    for (int64_t item = 0; item < n_items; ++item) run_item(item, s);
    return KernelStatus::kOk;
  }
  // Each thread builds its scratch once and takes items until none are left.
  std::atomic<int64_t> next{0};
  pool.Run([&](int, int) {
    int64_t item = next.fetch_add(1, std::memory_order_relaxed);
    if (item >= n_items) return;
    Scratch s(q_block * slice, n_kv, head_dim);
    for (; item < n_items; item = next.fetch_add(1, std::memory_order_relaxed)) run_item(item, s);
  });
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
