#include "kernels/cpu/gated_delta_rule.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

namespace deltaserve::kernels {
namespace {

// The build targets baseline x86-64 (SSE2). The per-head loops below are compiled three times
// (AVX-512, AVX2+FMA, baseline) and the copy for the running CPU is picked at load time.
#if defined(__x86_64__) && defined(__GNUC__)
#define DELTASERVE_ISA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DELTASERVE_ISA_CLONES
#endif

// Below this many multiply-adds (about 4 d^2 per token and head) the op stays on one thread.
constexpr int64_t kParallelFlops = 1 << 16;

bool IsValid(const Mat& m) {
  return m.rows >= 0 && m.cols >= 0 && m.stride >= m.cols &&
         (m.data != nullptr || m.rows == 0 || m.cols == 0);
}

// One call's operands; see the header for the layouts.
struct Problem {
  const Mat& q;
  const Mat& k;
  const Mat& v;
  const Mat& g;
  const Mat& beta;
  int64_t n_k_heads;
  int64_t n_v_heads;
  int64_t d;
  float* state;
  Mat& out;
};

KernelStatus Validate(const Problem& p) {
  const int64_t t = p.q.rows;
  if (!IsValid(p.q) || !IsValid(p.k) || !IsValid(p.v) || !IsValid(p.g) || !IsValid(p.beta) ||
      !IsValid(p.out) || p.n_k_heads <= 0 || p.n_v_heads <= 0 || p.d <= 0 ||
      p.n_v_heads % p.n_k_heads != 0 || p.state == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (p.q.cols != p.n_k_heads * p.d || p.k.cols != p.q.cols || p.v.cols != p.n_v_heads * p.d ||
      p.out.cols != p.v.cols || p.g.cols != p.n_v_heads || p.beta.cols != p.n_v_heads ||
      p.k.rows != t || p.v.rows != t || p.g.rows != t || p.beta.rows != t || p.out.rows != t) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

// Dot product with 32 independent partial sums: the fixed-size inner loop lets g++ -O3
// vectorise a float reduction without -ffast-math, with several chains in flight.
inline float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
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

// Head h over all T tokens, one token at a time. o_buf holds d floats.
DELTASERVE_ISA_CLONES void RecurrentHead(const Problem& p, int64_t h, float* o_buf) {
  const int64_t d = p.d;
  const int64_t kh = h % p.n_k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* m = p.state + h * d * d;
  for (int64_t t = 0; t < p.q.rows; ++t) {
    const float* __restrict qt = p.q.data + t * p.q.stride + kh * d;
    const float* __restrict kt = p.k.data + t * p.k.stride + kh * d;
    const float* vt = p.v.data + t * p.v.stride + h * d;
    const float decay = std::exp(p.g.data[t * p.g.stride + h]);
    const float b = p.beta.data[t * p.beta.stride + h];
    // Row i of m is column i of S: (S^T k)_i = m_i·k, and S += k u^T adds u_i k to row i.
    for (int64_t i = 0; i < d; ++i) {
      float* __restrict row = m + i * d;
      const float u = b * (vt[i] - decay * Dot(row, kt, d));
      for (int64_t j = 0; j < d; ++j) row[j] = decay * row[j] + u * kt[j];
      o_buf[i] = scale * Dot(row, qt, d);
    }
    // Written after the whole head is read, so out may alias v.
    std::copy_n(o_buf, d, p.out.data + t * p.out.stride + h * d);
  }
}

// Per-thread buffers of the chunked form for chunks of up to n rows.
struct ChunkScratch {
  explicit ChunkScratch(int64_t n, int64_t d)
      : q(n * d), k(n * d), v(n * d), w(n * d), u(n * d), vp(n * d), o(n * d), a(n * n),
        tinv(n * n), qk(n * n), gamma(n), beta(n) {}
  std::vector<float> q, k, v, w, u, vp, o;  // [n][d]
  std::vector<float> a, tinv, qk;           // [n][n]
  std::vector<double> gamma;                // [n]
  std::vector<float> beta;                  // [n]
};

// Head h over all T tokens in chunks (MODEL_SPEC §3; step numbers below refer to it).
DELTASERVE_ISA_CLONES void ChunkedHead(const Problem& p, int64_t h, ChunkScratch& s) {
  const int64_t d = p.d;
  const int64_t kh = h % p.n_k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* m = p.state + h * d * d;  // [d (v)][d (k)], the state at chunk start (h_c)
  for (int64_t c0 = 0; c0 < p.q.rows; c0 += kDeltaRuleChunk) {
    const int64_t n = std::min(kDeltaRuleChunk, p.q.rows - c0);
    float* __restrict q = s.q.data();
    float* __restrict k = s.k.data();
    float* __restrict v = s.v.data();
    float* __restrict w = s.w.data();
    float* __restrict u = s.u.data();
    float* __restrict vp = s.vp.data();
    float* __restrict o = s.o.data();
    float* __restrict a = s.a.data();
    float* __restrict tinv = s.tinv.data();
    float* __restrict qk = s.qk.data();
    double* __restrict gamma = s.gamma.data();
    float* __restrict beta = s.beta.data();

    // Gather the chunk; step 1: gamma_i = sum_{j<=i} g_j, in double: the decays below use
    // differences of these sums, and in f32 a sum near -50 is only known to 4e-6.
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = c0 + i;
      const float* qt = p.q.data + t * p.q.stride + kh * d;
      for (int64_t j = 0; j < d; ++j) q[i * d + j] = qt[j] * scale;
      std::copy_n(p.k.data + t * p.k.stride + kh * d, d, k + i * d);
      std::copy_n(p.v.data + t * p.v.stride + h * d, d, v + i * d);
      gamma[i] = (i > 0 ? gamma[i - 1] : 0.0) + p.g.data[t * p.g.stride + h];
      beta[i] = p.beta.data[t * p.beta.stride + h];
    }

    // Step 2 and the intra-chunk scores of step 6, lower triangle only. The decay factor is
    // exp(gamma_i - gamma_j) <= 1, formed from the difference (never exp(gamma_i)/exp(gamma_j)).
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        const float decay = static_cast<float>(std::exp(gamma[i] - gamma[j]));
        a[i * n + j] = j < i ? beta[i] * Dot(k + i * d, k + j * d, d) * decay : 0.0f;
        qk[i * n + j] = Dot(q + i * d, k + j * d, d) * decay;
      }
    }

    // Step 3: T = (I + A)^-1 by forward substitution, row by row: T_i = e_i - sum_{m<i} A_im T_m
    // (T is lower triangular, so row m has entries in columns 0..m only).
    for (int64_t i = 0; i < n; ++i) {
      float* __restrict ti = tinv + i * n;
      std::fill(ti, ti + n, 0.0f);
      ti[i] = 1.0f;
      for (int64_t mm = 0; mm < i; ++mm) {
        const float aim = a[i * n + mm];
        const float* __restrict tm = tinv + mm * n;
        for (int64_t j = 0; j <= mm; ++j) ti[j] -= aim * tm[j];
      }
    }

    // Step 4: W = T diag(beta exp(gamma)) K, U = T diag(beta) V.
    for (int64_t i = 0; i < n; ++i) {
      float* __restrict wi = w + i * d;
      float* __restrict ui = u + i * d;
      std::fill(wi, wi + d, 0.0f);
      std::fill(ui, ui + d, 0.0f);
      for (int64_t j = 0; j <= i; ++j) {
        const float tb = tinv[i * n + j] * beta[j];
        const float tbg = tb * static_cast<float>(std::exp(gamma[j]));
        const float* __restrict kj = k + j * d;
        const float* __restrict vj = v + j * d;
        for (int64_t x = 0; x < d; ++x) wi[x] += tbg * kj[x];
        for (int64_t x = 0; x < d; ++x) ui[x] += tb * vj[x];
      }
    }

    // Step 5 (V' = U - W S) and the inter-chunk half of step 6 (Q S, scaled by exp(gamma_i)
    // below), both against h_c: with S stored transposed, (W S)_{i,x} = w_i · m_x.
    for (int64_t x = 0; x < d; ++x) {
      const float* __restrict mx = m + x * d;
      for (int64_t i = 0; i < n; ++i) {
        vp[i * d + x] = u[i * d + x] - Dot(w + i * d, mx, d);
        o[i * d + x] = Dot(q + i * d, mx, d);
      }
    }

    // Step 6: O = exp(gamma) ⊙ (Q S) + tril_incl((Q K^T) ⊙ Γ) V'.
    for (int64_t i = 0; i < n; ++i) {
      float* __restrict oi = o + i * d;
      const float decay_i = static_cast<float>(std::exp(gamma[i]));
      for (int64_t x = 0; x < d; ++x) oi[x] *= decay_i;
      for (int64_t j = 0; j <= i; ++j) {
        const float pij = qk[i * n + j];
        const float* __restrict vpj = vp + j * d;
        for (int64_t x = 0; x < d; ++x) oi[x] += pij * vpj[x];
      }
    }

    // Step 5, state update: S = exp(gamma_last) S + (K ⊙ exp(gamma_last - gamma))^T V'; row x
    // of the transposed state gains sum_i V'_{i,x} k_i exp(gamma_last - gamma_i).
    const double last = gamma[n - 1];
    for (int64_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(std::exp(last - gamma[i]));
      for (int64_t x = 0; x < d; ++x) k[i * d + x] *= f;
    }
    const float decay_all = static_cast<float>(std::exp(last));
    for (int64_t x = 0; x < d; ++x) {
      float* __restrict mx = m + x * d;
      for (int64_t j = 0; j < d; ++j) mx[j] *= decay_all;
      for (int64_t i = 0; i < n; ++i) {
        const float c = vp[i * d + x];
        const float* __restrict ki = k + i * d;
        for (int64_t j = 0; j < d; ++j) mx[j] += c * ki[j];
      }
    }

    // The chunk's V rows were gathered above, so out may alias v.
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(o + i * d, d, p.out.data + (c0 + i) * p.out.stride + h * d);
    }
  }
}

// Runs head_fn(h, scratch) for every value head, on the pool when the work is big enough;
// each thread builds its scratch once with make_scratch().
template <typename MakeScratch, typename HeadFn>
void ForHeads(ThreadPool& pool, const Problem& p, const MakeScratch& make_scratch,
              const HeadFn& head_fn) {
  const int64_t flops = 4 * p.q.rows * p.n_v_heads * p.d * p.d;
  if (flops < kParallelFlops || pool.size() == 1 || p.n_v_heads == 1) {
    auto scratch = make_scratch();
    for (int64_t h = 0; h < p.n_v_heads; ++h) head_fn(h, scratch);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.Run([&](int, int) {
    int64_t h = next.fetch_add(1, std::memory_order_relaxed);
    if (h >= p.n_v_heads) return;
    auto scratch = make_scratch();
    for (; h < p.n_v_heads; h = next.fetch_add(1, std::memory_order_relaxed)) head_fn(h, scratch);
  });
}

}  // namespace

KernelStatus GatedDeltaRuleRecurrentCpu(ThreadPool& pool, const Mat& q, const Mat& k,
                                        const Mat& v, const Mat& g, const Mat& beta,
                                        int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                        float* state, Mat& out) {
  const Problem p{q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out};
  if (const KernelStatus st = Validate(p); st != KernelStatus::kOk) return st;
  if (q.rows == 0) return KernelStatus::kOk;
  ForHeads(
      pool, p, [&] { return std::vector<float>(head_dim); },
      [&](int64_t h, std::vector<float>& o_buf) { RecurrentHead(p, h, o_buf.data()); });
  return KernelStatus::kOk;
}

KernelStatus GatedDeltaRuleChunkedCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                      const Mat& g, const Mat& beta, int64_t n_k_heads,
                                      int64_t n_v_heads, int64_t head_dim, float* state,
                                      Mat& out) {
  const Problem p{q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out};
  if (const KernelStatus st = Validate(p); st != KernelStatus::kOk) return st;
  if (q.rows == 0) return KernelStatus::kOk;
  const int64_t n = std::min(kDeltaRuleChunk, q.rows);
  ForHeads(
      pool, p, [&] { return ChunkScratch(n, head_dim); },
      [&](int64_t h, ChunkScratch& s) { ChunkedHead(p, h, s); });
  return KernelStatus::kOk;
}

KernelStatus GatedDeltaRuleCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                               const Mat& g, const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                               int64_t head_dim, float* state, Mat& out) {
  if (q.rows <= 1) {
    return GatedDeltaRuleRecurrentCpu(pool, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim,
                                      state, out);
  }
  return GatedDeltaRuleChunkedCpu(pool, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state,
                                  out);
}

}  // namespace deltaserve::kernels
