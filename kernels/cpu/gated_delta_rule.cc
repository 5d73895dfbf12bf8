#include "kernels/cpu/gated_delta_rule.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels {
namespace {

using internal::LoadVec;
using internal::StoreVec;
using internal::VecF;

// Below this many multiply-adds (about 4 d^2 per token and head) the op stays on one thread.
constexpr int64_t kParallelFlops = 1 << 16;
// From this many tokens on the chunked form is the faster one. Per token, 16 heads of 128, one
// thread, AVX-512: the recurrence costs the same at any T (45 us on the AMD EPYC dev box, 86 on
// a Xeon VM); the chunked form pays two state transposes per head and call (195 / 550 us at
// T = 1), breaks even between 8 and 16 tokens on both, and is ~2x faster from 64 on (24 / 60).
constexpr int64_t kChunkedMinTokens = 12;

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
  CpuIsa isa;  // the kernel level: ActiveIsa(), or the one an explicit-ISA entry point names
};

KernelStatus Validate(const Problem& p) {
  const int64_t t = p.q.rows;
  if (!p.q.Valid() || !p.k.Valid() || !p.v.Valid() || !p.g.Valid() || !p.beta.Valid() ||
      !p.out.Valid() || p.n_k_heads <= 0 || p.n_v_heads <= 0 || p.d <= 0 ||
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

// Sum of a 16-float accumulator tile.
inline float Sum16(const float* a) {
  float s = 0.0f;
  for (int c = 0; c < 16; ++c) s += a[c];
  return s;
}

// One token's update of rows [i0, i0 + R) of a head's state m ([d][d], row i = column i of S):
// kv_i = decay (m_i · k); u_i = beta (v_i - kv_i); m_i = decay m_i + u_i k; o_i = scale (m_i · q).
// R rows at once give R independent accumulator chains and read k and q once for all of them;
// the 16-wide tiles are what g++ turns into one AVX-512 (two AVX2, four SSE) register each.
template <int R>
DELTASERVE_ALWAYS_INLINE void RecurrentRows(float* __restrict m, int64_t d, int64_t i0,
                                            const float* __restrict k, const float* __restrict q,
                                            const float* v, float decay, float beta, float scale,
                                            float* __restrict o) {
  const int64_t d16 = d / 16 * 16;
  float acc[R][16] = {};
  for (int64_t j = 0; j < d16; j += 16) {
    for (int r = 0; r < R; ++r) {
      const float* row = m + (i0 + r) * d + j;
      for (int c = 0; c < 16; ++c) acc[r][c] += row[c] * k[j + c];
    }
  }
  float u[R];
  for (int r = 0; r < R; ++r) {
    const float* row = m + (i0 + r) * d;
    float kv = Sum16(acc[r]);
    for (int64_t j = d16; j < d; ++j) kv += row[j] * k[j];
    u[r] = beta * (v[i0 + r] - decay * kv);
  }
  float accq[R][16] = {};
  for (int64_t j = 0; j < d16; j += 16) {
    for (int r = 0; r < R; ++r) {
      float* row = m + (i0 + r) * d + j;
      for (int c = 0; c < 16; ++c) {
        const float updated = decay * row[c] + u[r] * k[j + c];
        row[c] = updated;
        accq[r][c] += updated * q[j + c];
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* row = m + (i0 + r) * d;
    float oq = Sum16(accq[r]);
    for (int64_t j = d16; j < d; ++j) {
      row[j] = decay * row[j] + u[r] * k[j];
      oq += row[j] * q[j];
    }
    o[i0 + r] = scale * oq;
  }
}

// State rows (of d floats) that RecurrentHead prefetches ahead of the four it updates.
constexpr int64_t kPrefetchRows = 8;

// Head h over all T tokens, one token at a time. o_buf holds d floats. The tiles are 16 floats at
// every width (kLanes unused): two ymm per state row give AVX2 the 8 independent FMA chains of
// RecurrentRows<4> that its two FMA units need.
template <int kLanes>
DELTASERVE_ALWAYS_INLINE void RecurrentHeadImpl(const Problem& p, int64_t h, float* o_buf) {
  const int64_t d = p.d;
  const int64_t kh = h % p.n_k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* m = p.state + h * d * d;
  for (int64_t t = 0; t < p.q.rows; ++t) {
    const float* qt = p.q.data + t * p.q.stride + kh * d;
    const float* kt = p.k.data + t * p.k.stride + kh * d;
    const float* vt = p.v.data + t * p.v.stride + h * d;
    const float decay = std::exp(p.g.data[t * p.g.stride + h]);
    const float b = p.beta.data[t * p.beta.stride + h];
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) {
      // The state comes from DRAM (the layer's weights went through the caches since it was
      // last touched) and is written back: prefetched for writing kPrefetchRows ahead.
      if (i + kPrefetchRows + 4 <= d) {
        const char* ahead = reinterpret_cast<const char*>(m + (i + kPrefetchRows) * d);
        for (int64_t o = 0; o < 4 * d * static_cast<int64_t>(sizeof(float)); o += 64) {
          __builtin_prefetch(ahead + o, 1, 3);
        }
      }
      RecurrentRows<4>(m, d, i, kt, qt, vt, decay, b, scale, o_buf);
    }
    for (; i < d; ++i) RecurrentRows<1>(m, d, i, kt, qt, vt, decay, b, scale, o_buf);
    // Written after the whole head is read, so out may alias v.
    std::copy_n(o_buf, d, p.out.data + t * p.out.stride + h * d);
  }
}
DELTASERVE_ISA_DISPATCH_LANES(void, RecurrentHead, (const Problem& p, int64_t h, float* o_buf),
                              (p, h, o_buf))

// c[m][n] = a[m][k] b[k][n] + c_scale * c, row-major with leading dimensions lda, ldb, ldc; the
// three must not overlap; c_scale == 0 does not read c. With lower_k, a is lower triangular (row
// i zero past column i, zeros stored), so a 4-row block stops its k loop at its last row. The
// 4 x 2 kLanes output tile stays in registers while k runs: 8 zmm with AVX-512, 8 ymm with AVX2
// (4 x 32 floats there took 16 ymm and the two the b row and the broadcast need were spilled).
template <int kLanes>
DELTASERVE_ALWAYS_INLINE void GemmImpl(int64_t m, int64_t n, int64_t k, const float* __restrict a,
                                       int64_t lda, const float* __restrict b, int64_t ldb,
                                       float* __restrict c, int64_t ldc, float c_scale,
                                       bool lower_k) {
  constexpr int kRows = 4;
  constexpr int kCols = 2 * kLanes;
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, m - i0);
    const int64_t k_end = lower_k ? std::min(k, i0 + rows) : k;
    int64_t x0 = 0;
    if (rows == kRows) {
      // Written over vectors: g++ 12 turned the same tile over float arrays of 16 columns into
      // transposing xmm shuffles in the AVX2 copy, 7x slower than the 32-column one.
      using V = VecF<kLanes>;
      for (; x0 + kCols <= n; x0 += kCols) {
        V acc[kRows][2];
        for (int r = 0; r < kRows; ++r) {
          for (int x = 0; x < 2; ++x) {
            if (c_scale != 0.0f) {
              LoadVec<kLanes>(acc[r][x], c + (i0 + r) * ldc + x0 + x * kLanes);
              acc[r][x] *= c_scale;
            } else {
              acc[r][x] = V{};
            }
          }
        }
        for (int64_t j = 0; j < k_end; ++j) {
          V bj[2];
          LoadVec<kLanes>(bj[0], b + j * ldb + x0);
          LoadVec<kLanes>(bj[1], b + j * ldb + x0 + kLanes);
          for (int r = 0; r < kRows; ++r) {
            const float arj = a[(i0 + r) * lda + j];
            acc[r][0] += arj * bj[0];
            acc[r][1] += arj * bj[1];
          }
        }
        for (int r = 0; r < kRows; ++r) {
          for (int x = 0; x < 2; ++x) {
            StoreVec<kLanes>(c + (i0 + r) * ldc + x0 + x * kLanes, acc[r][x]);
          }
        }
      }
    }
    // Rows of a last partial block, and columns past the last full tile.
    for (int64_t r = 0; r < rows && x0 < n; ++r) {
      float* cr = c + (i0 + r) * ldc;
      if (c_scale == 0.0f) {
        std::fill(cr + x0, cr + n, 0.0f);
      } else if (c_scale != 1.0f) {
        for (int64_t x = x0; x < n; ++x) cr[x] *= c_scale;
      }
      for (int64_t j = 0; j < k_end; ++j) {
        const float arj = a[(i0 + r) * lda + j];
        const float* bj = b + j * ldb;
        for (int64_t x = x0; x < n; ++x) cr[x] += arj * bj[x];
      }
    }
  }
}
DELTASERVE_ISA_DISPATCH_LANES(void, Gemm,
                              (int64_t m, int64_t n, int64_t k, const float* __restrict a,
                               int64_t lda, const float* __restrict b, int64_t ldb,
                               float* __restrict c, int64_t ldc, float c_scale, bool lower_k),
                              (m, n, k, a, lda, b, ldb, c, ldc, c_scale, lower_k))

// dst[c][r] = src[r][c] for a [rows][cols] src, in 16 x 16 tiles: a plain column walk over a
// 128 x 128 state writes a new cache line per element and cost ~80 us per head (Xeon VM).
inline void Transpose(const float* __restrict src, int64_t rows, int64_t cols,
                      float* __restrict dst) {
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
      }
    }
  }
}

// Per-thread buffers of the chunked form for chunks of up to n rows and head size d.
struct ChunkScratch {
  ChunkScratch(int64_t n, int64_t d)
      : s(d * d),
        qw(2 * n * d),
        k(n * d),
        kt(d * n),
        v(n * d),
        u(n * d),
        qsws(2 * n * d),
        qk(n * n),
        kk(n * n),
        tinv(n * n),
        aw(n * n),
        au(n * n),
        gamma(n),
        beta(n) {}
  std::vector<float> s;                     // [d (k)][d (v)]: S, key-major, for the whole call
  std::vector<float> qw;                    // [2n][d]: Q (scaled) rows, then W rows
  std::vector<float> k, kt, v, u, qsws;     // [n][d], [d][n], [n][d], [n][d] (U, then V'), [2n][d]
  std::vector<float> qk, kk, tinv, aw, au;  // [n][n]
  std::vector<double> gamma;                // [n]
  std::vector<float> beta;                  // [n]
};

// Head h over all T tokens in chunks (MODEL_SPEC §3; step numbers below refer to it). The state
// is transposed to S [k][v] for the call so that every product below is a register-tiled Gemm
// over contiguous rows (at the call's level, p.isa), and transposed back at the end.
template <int kLanes>
DELTASERVE_ALWAYS_INLINE void ChunkedHeadImpl(const Problem& p, int64_t h, ChunkScratch& s) {
  const int64_t d = p.d;
  const int64_t kh = h % p.n_k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* m = p.state + h * d * d;
  float* st = s.s.data();
  Transpose(m, d, d, st);
  for (int64_t c0 = 0; c0 < p.q.rows; c0 += kDeltaRuleChunk) {
    const int64_t n = std::min(kDeltaRuleChunk, p.q.rows - c0);
    float* q = s.qw.data();
    float* w = q + n * d;
    float* k = s.k.data();
    float* kt = s.kt.data();
    float* v = s.v.data();
    float* u = s.u.data();
    float* qs = s.qsws.data();
    float* ws = qs + n * d;
    float* qk = s.qk.data();
    float* kk = s.kk.data();
    float* tinv = s.tinv.data();
    float* aw = s.aw.data();
    float* au = s.au.data();
    double* gamma = s.gamma.data();
    float* beta = s.beta.data();

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
    Transpose(k, n, d, kt);

    // Step 2 and the intra-chunk scores of step 6, lower triangle kept, the rest zeroed. The
    // decay exp(gamma_i - gamma_j) <= 1 is formed from the difference (masked before exp).
    Gemm(p.isa, n, n, d, q, d, kt, n, qk, n, 0.0f, false);
    Gemm(p.isa, n, n, d, k, d, kt, n, kk, n, 0.0f, false);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (j > i) {
          qk[i * n + j] = 0.0f;
          kk[i * n + j] = 0.0f;
          continue;
        }
        const float decay = static_cast<float>(std::exp(gamma[i] - gamma[j]));
        qk[i * n + j] *= decay;
        kk[i * n + j] = j < i ? beta[i] * kk[i * n + j] * decay : 0.0f;  // now A
      }
    }

    // Step 3: T = (I + A)^-1 by forward substitution, row by row: T_i = e_i - sum_{l<i} A_il T_l
    // (T is lower triangular, so row l has entries in columns 0..l only).
    for (int64_t i = 0; i < n; ++i) {
      float* __restrict ti = tinv + i * n;
      std::fill(ti, ti + n, 0.0f);
      ti[i] = 1.0f;
      for (int64_t l = 0; l < i; ++l) {
        const float ail = kk[i * n + l];
        const float* __restrict tl = tinv + l * n;
        for (int64_t j = 0; j <= l; ++j) ti[j] -= ail * tl[j];
      }
    }

    // Step 4: W = T diag(beta exp(gamma)) K, U = T diag(beta) V.
    for (int64_t j = 0; j < n; ++j) {
      const float bj = beta[j];
      const float bgj = bj * static_cast<float>(std::exp(gamma[j]));
      for (int64_t i = 0; i < n; ++i) {
        aw[i * n + j] = tinv[i * n + j] * bgj;
        au[i * n + j] = tinv[i * n + j] * bj;
      }
    }
    Gemm(p.isa, n, d, n, aw, n, k, d, w, d, 0.0f, true);
    Gemm(p.isa, n, d, n, au, n, v, d, u, d, 0.0f, true);

    // Steps 5 and 6 against h_c: [Q S; W S] in one product, then V' = U - W S (in u) and
    // O = exp(gamma) ⊙ (Q S) + tril_incl((Q K^T) ⊙ Γ) V' (in qs).
    Gemm(p.isa, 2 * n, d, d, q, d, st, d, qs, d, 0.0f, false);
    for (int64_t i = 0; i < n; ++i) {
      const float decay_i = static_cast<float>(std::exp(gamma[i]));
      for (int64_t x = 0; x < d; ++x) {
        u[i * d + x] -= ws[i * d + x];
        qs[i * d + x] *= decay_i;
      }
    }
    Gemm(p.isa, n, d, n, qk, n, u, d, qs, d, 1.0f, true);

    // Step 5, state update: S = exp(gamma_last) S + (K ⊙ exp(gamma_last - gamma))^T V', with
    // the row scaling of K applied to the columns of K^T.
    const double last = gamma[n - 1];
    const float decay_all = static_cast<float>(std::exp(last));
    float* key_decay = beta;  // beta is used up: its buffer takes exp(gamma_last - gamma_i)
    for (int64_t i = 0; i < n; ++i) key_decay[i] = static_cast<float>(std::exp(last - gamma[i]));
    for (int64_t j = 0; j < d; ++j) {
      for (int64_t i = 0; i < n; ++i) kt[j * n + i] *= key_decay[i];
    }
    Gemm(p.isa, d, d, n, kt, n, u, d, st, d, decay_all, false);

    // The chunk's V rows were gathered above, so out may alias v.
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(qs + i * d, d, p.out.data + (c0 + i) * p.out.stride + h * d);
    }
  }
  Transpose(st, d, d, m);
}
DELTASERVE_ISA_DISPATCH_LANES(void, ChunkedHead, (const Problem& p, int64_t h, ChunkScratch& s),
                              (p, h, s))

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

// The three entry points at the kernel level `isa` (already clamped).
KernelStatus RecurrentAt(ThreadPool& pool, const Problem& p) {
  if (const KernelStatus st = Validate(p); st != KernelStatus::kOk) return st;
  if (p.q.rows == 0) return KernelStatus::kOk;
  ForHeads(
      pool, p, [&] { return std::vector<float>(p.d); },
      [&](int64_t h, std::vector<float>& o_buf) { RecurrentHead(p.isa, p, h, o_buf.data()); });
  return KernelStatus::kOk;
}

KernelStatus ChunkedAt(ThreadPool& pool, const Problem& p) {
  if (const KernelStatus st = Validate(p); st != KernelStatus::kOk) return st;
  if (p.q.rows == 0) return KernelStatus::kOk;
  const int64_t n = std::min(kDeltaRuleChunk, p.q.rows);
  ForHeads(
      pool, p, [&] { return ChunkScratch(n, p.d); },
      [&](int64_t h, ChunkScratch& s) { ChunkedHead(p.isa, p, h, s); });
  return KernelStatus::kOk;
}

KernelStatus EitherAt(ThreadPool& pool, const Problem& p) {
  return p.q.rows < kChunkedMinTokens ? RecurrentAt(pool, p) : ChunkedAt(pool, p);
}

}  // namespace

KernelStatus GatedDeltaRuleRecurrentCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                        const Mat& g, const Mat& beta, int64_t n_k_heads,
                                        int64_t n_v_heads, int64_t head_dim, float* state,
                                        Mat& out) {
  return RecurrentAt(pool, {q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                            ActiveIsa()});
}

KernelStatus GatedDeltaRuleChunkedCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                      const Mat& g, const Mat& beta, int64_t n_k_heads,
                                      int64_t n_v_heads, int64_t head_dim, float* state, Mat& out) {
  return ChunkedAt(pool, {q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                          ActiveIsa()});
}

KernelStatus GatedDeltaRuleCpu(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                               const Mat& g, const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                               int64_t head_dim, float* state, Mat& out) {
  return EitherAt(pool, {q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                         ActiveIsa()});
}

namespace internal {

KernelStatus GatedDeltaRuleRecurrentCpuIsa(ThreadPool& pool, const Mat& q, const Mat& k,
                                           const Mat& v, const Mat& g, const Mat& beta,
                                           int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                           float* state, Mat& out, CpuIsa isa) {
  return RecurrentAt(pool, {q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                            ClampIsa(isa)});
}

KernelStatus GatedDeltaRuleChunkedCpuIsa(ThreadPool& pool, const Mat& q, const Mat& k,
                                         const Mat& v, const Mat& g, const Mat& beta,
                                         int64_t n_k_heads, int64_t n_v_heads, int64_t head_dim,
                                         float* state, Mat& out, CpuIsa isa) {
  return ChunkedAt(pool, {q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                          ClampIsa(isa)});
}

KernelStatus GatedDeltaRuleCpuIsa(ThreadPool& pool, const Mat& q, const Mat& k, const Mat& v,
                                  const Mat& g, const Mat& beta, int64_t n_k_heads,
                                  int64_t n_v_heads, int64_t head_dim, float* state, Mat& out,
                                  CpuIsa isa) {
  return EitherAt(pool, {q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out,
                         ClampIsa(isa)});
}

}  // namespace internal
}  // namespace deltaserve::kernels
