// The arithmetic of the CUDA gated delta rule (gdn_step.cuh, gdn_chunked.cuh) as small
// DS_HOST_DEVICE functions, each computing one value the kernels assign to one thread: the
// per-token update of one state row, and the chunk quantities of the WY form (MODEL_SPEC §3:
// decay cumsums, A = strict_tril(β K Kᵀ ⊙ Γ), T = (I + A)⁻¹ by forward substitution, W, U,
// P = tril(Q Kᵀ ⊙ Γ), V′ = U − W S, the outputs and the state update). The kernels call them
// for the elements their threads own, or, where a thread owns several outputs that share an
// operand (the Gram tiles, the scan's rows), run the same sums in the same order with each
// operand loaded once (their comments name the function). tests/kernels/cuda_gdn_math_test.cc
// calls them in loops on the CPU, which is the same chunked algorithm, and checks it against
// the CPU backend; cuda_gdn_kernels_test runs the kernels themselves (emulated).
//
// Layouts (d = head_dim = dk = dv, n ≤ kGdnChunk rows of one chunk of one value head):
//   state      [n_v][d (v)][d (k)]: row r of head h is S[:, r] (contiguous over k), backend.h.
//   q, k rows  d floats of head h % n_k in [T][n_k * d] views; v, out: head h of [T][n_v * d].
//   chunk record (GdnRecordLayout, in the scratch, one per (chunk of a pass, value head)):
//     w [n][d], u [n][d]  W and U of MODEL_SPEC §3 step 4, row i at i * d
//     p [64][64]          P_ij = scale (q_i · k_j) Γ_ij for j ≤ i, 0 above the diagonal
//     dec [3][64]         qdec_i = scale exp(γ_i), kdec_i = exp(γ_{n−1} − γ_i), dec[128] =
//                         exp(γ_{n−1}) (the chunk's whole decay)
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

// Tokens per chunk (MODEL_SPEC §3); chunks start at the call's first token.
inline constexpr int kGdnChunk = 64;
// Largest head size the kernels hold (step: 8 state values per lane and row; scan: a [16][257]
// shared tile). Qwen3.5 and Qwen3-Next use 128.
inline constexpr int kGdnMaxHeadDim = 256;
// From this many tokens on the call runs the chunked form. A guess until measured on a GPU: the
// step kernel costs a few hundred cycles per token (two warp reductions per state row, in
// series over the tokens), the chunked form two launches and ~10 us per chunk (gdn_chunked.cuh).
inline constexpr int64_t kGdnChunkedMinTokens = 64;
// Chunks per pass of the chunked form: the scratch holds one pass (1024 tokens) of chunk
// records, so it does not grow with the prompt; longer calls run several passes.
inline constexpr int kGdnPassChunks = 16;
// Column tile of the prep kernel's shared K/Q/V tiles.
inline constexpr int kGdnTile = 32;

// One call's operands (device pointers in the kernels, host pointers in the tests). Strides are
// in floats; q, k, v, g, beta, out may be column views of wider matrices.
struct GdnProblem {
  const float* q = nullptr;
  int64_t q_stride = 0;
  const float* k = nullptr;
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const float* g = nullptr;
  int64_t g_stride = 0;
  const float* beta = nullptr;
  int64_t beta_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  float* state = nullptr;
  int n_k = 0;
  int n_v = 0;
  int d = 0;
  float scale = 0.0f;  // 1 / sqrt(d)

  // The same problem from token t0 on (a pass of the chunked form).
  GdnProblem FromToken(int64_t t0) const {
    GdnProblem p = *this;
    p.q += t0 * q_stride;
    p.k += t0 * k_stride;
    p.v += t0 * v_stride;
    p.g += t0 * g_stride;
    p.beta += t0 * beta_stride;
    p.out += t0 * out_stride;
    return p;
  }
  // Row t of head h's q, k (its q/k head h % n_k), v, out; g and beta of (t, h).
  DS_HOST_DEVICE const float* QRow(int64_t t, int h) const {
    return q + t * q_stride + static_cast<int64_t>(h % n_k) * d;
  }
  DS_HOST_DEVICE const float* KRow(int64_t t, int h) const {
    return k + t * k_stride + static_cast<int64_t>(h % n_k) * d;
  }
  DS_HOST_DEVICE const float* VRow(int64_t t, int h) const {
    return v + t * v_stride + static_cast<int64_t>(h) * d;
  }
  DS_HOST_DEVICE float* OutRow(int64_t t, int h) const {
    return out + t * out_stride + static_cast<int64_t>(h) * d;
  }
  DS_HOST_DEVICE float G(int64_t t, int h) const { return g[t * g_stride + h]; }
  DS_HOST_DEVICE float Beta(int64_t t, int h) const { return beta[t * beta_stride + h]; }
  // Row r (value index) of head h's state: S[:, r], d floats over k.
  DS_HOST_DEVICE float* StateRow(int h, int r) const {
    return state + (static_cast<int64_t>(h) * d + r) * d;
  }
};

// --- per-token recurrence (MODEL_SPEC §2.4 step 6), one state row m = S[:, r] ---------------
// u_r = β (v_r − decay (m · k)): the delta of row r; m_dot_k is taken before the decay.
DS_HOST_DEVICE DS_INLINE float GdnDeltaCoef(float v_r, float m_dot_k, float decay, float beta) {
  return beta * (v_r - decay * m_dot_k);
}
// One element of the updated row: decay m_j + u_r k_j. The output is then scale (m · q).
DS_HOST_DEVICE DS_INLINE float GdnRowUpdate(float m_j, float k_j, float decay, float u_r) {
  return decay * m_j + u_r * k_j;
}

// Σ_{i<n} a[i * sa] b[i * sb], in order.
DS_HOST_DEVICE DS_INLINE float GdnDot(const float* a, int64_t sa, const float* b, int64_t sb,
                                      int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i * sa] * b[i * sb];
  return s;
}

// --- chunk quantities (MODEL_SPEC §3 steps 1-4) ------------------------------------------
// Step 1: gamma[i] = Σ_{j≤i} g[j * stride] for i < n, in double: the decays below are
// differences of these sums, and in f32 a sum near −50 is only known to 4e-6 (kernels/cpu does
// the same). One thread computes it; 64 double adds are nothing even on consumer GPUs.
DS_HOST_DEVICE DS_INLINE void GdnCumsum(const float* g, int64_t stride, int n, double* gamma) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    s += static_cast<double>(g[i * stride]);
    gamma[i] = s;
  }
}
// Γ_ij = exp(γ_i − γ_j) ≤ 1 for i ≥ j, 0 above the diagonal: masked before the exp (the
// difference is positive there and may overflow), never factored as exp(γ_i) exp(−γ_j).
DS_HOST_DEVICE DS_INLINE float GdnGamma(const double* gamma, int i, int j) {
  return i >= j ? expf(static_cast<float>(gamma[i] - gamma[j])) : 0.0f;
}
// qdec_i = scale exp(γ_i): the query's decay back to the chunk start, with q's 1/sqrt(d).
DS_HOST_DEVICE DS_INLINE float GdnQueryDecay(const double* gamma, int i, float scale) {
  return scale * expf(static_cast<float>(gamma[i]));
}
// kdec_i = exp(γ_{n−1} − γ_i): how much key i's write decays by the chunk end.
DS_HOST_DEVICE DS_INLINE float GdnKeyDecay(const double* gamma, int n, int i) {
  return expf(static_cast<float>(gamma[n - 1] - gamma[i]));
}
// β_i exp(γ_i): W's row weight (step 4).
DS_HOST_DEVICE DS_INLINE float GdnWWeight(const double* gamma, const float* beta, int i) {
  return beta[i] * expf(static_cast<float>(gamma[i]));
}
// Step 2: A_ij = β_i (k_i · k_j) Γ_ij for i > j, else 0.
DS_HOST_DEVICE DS_INLINE float GdnAEntry(float kk_dot, const float* beta, const double* gamma,
                                         int i, int j) {
  return i > j ? beta[i] * kk_dot * GdnGamma(gamma, i, j) : 0.0f;
}
// Step 6's intra-chunk scores: P_ij = scale (q_i · k_j) Γ_ij for i ≥ j, else 0.
DS_HOST_DEVICE DS_INLINE float GdnPEntry(float qk_dot, float scale, const double* gamma, int i,
                                         int j) {
  return i >= j ? scale * qk_dot * GdnGamma(gamma, i, j) : 0.0f;
}
// Step 3: T = (I + A)⁻¹, unit lower triangular, row by row in place: `m` ([.][ld]) holds A in
// rows ≥ i and T (strictly lower parts) in rows < i. Returns T_ij for j < i:
//   T_ij = −Σ_{l=j}^{i−1} A_il T_lj = −(A_ij + Σ_{l=j+1}^{i−1} A_il T_lj)   (T_jj = 1).
// Row i's entries are independent of each other, so a kernel computes them in parallel and
// writes them over A's row i after all of them are read.
DS_HOST_DEVICE DS_INLINE float GdnInverseEntry(const float* m, int ld, int i, int j) {
  float s = m[i * ld + j];
  for (int l = j + 1; l < i; ++l) s += m[i * ld + l] * m[l * ld + j];
  return -s;
}
// Step 4, one entry of T diag(c) X: Σ_{j≤i} T_ij c_j X_j with T_ii = 1, T's strictly lower part
// in `t` ([.][ld]), and x pointing at the column's entry of row 0 (rows x_stride apart).
// W = T diag(β exp(γ)) K with c = GdnWWeight; U = T diag(β) V with c = β.
DS_HOST_DEVICE DS_INLINE float GdnWyEntry(const float* t, int ld, const float* c, const float* x,
                                          int64_t x_stride, int i) {
  float s = c[i] * x[i * x_stride];
  for (int j = 0; j < i; ++j) s += t[i * ld + j] * c[j] * x[j * x_stride];
  return s;
}

// --- across chunks (steps 5-6), state column r = state row r of the kernel layout -------------
// V′_ir = U_ir − W_i · S[:, r].
DS_HOST_DEVICE DS_INLINE float GdnVPrime(float u_ir, const float* w_row, const float* s_row,
                                         int d) {
  return u_ir - GdnDot(w_row, 1, s_row, 1, d);
}
// O_ir = qdec_i (q_i · S[:, r]) + Σ_{j≤i} P_ij V′_jr, with q_s = q_i · S[:, r] (unscaled q).
DS_HOST_DEVICE DS_INLINE float GdnOutEntry(float q_s, float qdec_i, const float* p_row,
                                           const float* vp_col, int64_t vp_stride, int i) {
  return qdec_i * q_s + GdnDot(p_row, 1, vp_col, vp_stride, i + 1);
}
// S_kr ← exp(γ_{n−1}) S_kr + Σ_{i<n} kdec_i K_ik V′_ir (k_col: K's column k, rows k_stride
// apart; vp_col: V′'s column r).
DS_HOST_DEVICE DS_INLINE float GdnStateEntry(float s_kr, float chunk_decay, const float* k_col,
                                             int64_t k_stride, const float* kdec,
                                             const float* vp_col, int64_t vp_stride, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += kdec[i] * k_col[i * k_stride] * vp_col[i * vp_stride];
  return chunk_decay * s_kr + s;
}

// --- scratch -------------------------------------------------------------------------------
// Offsets (floats) inside one chunk record, and the record size; see the file comment.
struct GdnRecordLayout {
  int64_t w, u, p, dec, floats;
};
DS_HOST_DEVICE DS_INLINE GdnRecordLayout GdnRecord(int d) {
  const int64_t nd = static_cast<int64_t>(kGdnChunk) * d;
  const int64_t p = 2 * nd;
  const int64_t dec = p + static_cast<int64_t>(kGdnChunk) * kGdnChunk;
  // Records stay 256-byte aligned (64 floats) like the scratch base.
  const int64_t end = dec + 3 * kGdnChunk;
  return {0, nd, p, dec, (end + 63) / 64 * 64};
}
// Index of qdec, kdec and the chunk decay inside `dec`.
inline constexpr int kGdnDecQuery = 0;
inline constexpr int kGdnDecKey = kGdnChunk;
inline constexpr int kGdnDecChunk = 2 * kGdnChunk;

// Chunks in the call: ceil(T / 64).
DS_HOST_DEVICE DS_INLINE int64_t GdnChunks(int64_t n_tokens) {
  return (n_tokens + kGdnChunk - 1) / kGdnChunk;
}
// Record of chunk slot c (chunk index within its pass) and value head h.
DS_HOST_DEVICE DS_INLINE int64_t GdnRecordOffset(int64_t slot, int h, int n_v, int d) {
  return (slot * n_v + h) * GdnRecord(d).floats;
}
// Scratch floats of the chunked form over n_tokens: one pass of chunk records.
DS_HOST_DEVICE DS_INLINE int64_t GdnChunkedScratchFloats(int64_t n_tokens, int64_t n_v, int64_t d) {
  if (n_tokens <= 0 || n_v <= 0 || d <= 0 || d > kGdnMaxHeadDim) return 0;
  const int64_t chunks = GdnChunks(n_tokens);
  const int64_t slots = chunks < kGdnPassChunks ? chunks : kGdnPassChunks;
  return slots * n_v * GdnRecord(static_cast<int>(d)).floats;
}
// Scratch floats of a call as LaunchGatedDeltaRule runs it: none below kGdnChunkedMinTokens
// (the step form), the chunked form's from there on.
DS_HOST_DEVICE DS_INLINE int64_t GdnScratchFloats(int64_t n_tokens, int64_t n_v, int64_t d) {
  return n_tokens < kGdnChunkedMinTokens ? 0 : GdnChunkedScratchFloats(n_tokens, n_v, d);
}

}  // namespace deltaserve::kernels::cuda
