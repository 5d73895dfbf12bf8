// Whole tiny layers run through the Backend interface of MakeCpuBackend, the way an engine would
// (GGUF conventions: plain norm weights, ssm_a = -exp(A_log), tiled DeltaNet heads, q projection
// interleaved per head), against a double-precision per-token reference written straight from
// MODEL_SPEC §2.1-2.6. It catches wiring mistakes the per-op tests cannot: views, column splits,
// reshapes, state carried between calls (prefill, then decode steps). Tolerance: f32 through
// about ten dependent ops on O(1) activations, measured worst error below 2e-6 with f32 weights;
// bound 1e-4 absolute + 1e-4 relative.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels {
namespace {

using testing::Rng;
using Vecd = std::vector<double>;

constexpr float kEps = 1e-6f;

// ---- double-precision reference ---------------------------------------------------------

double Silu(double x) { return x / (1.0 + std::exp(-x)); }
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// w [out][in] times x.
Vecd MatVec(const std::vector<float>& w, int64_t out, const Vecd& x, int64_t offset = 0) {
  const int64_t in = static_cast<int64_t>(x.size());
  Vecd y(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) y[o] += double{w[offset + o * in + i]} * x[i];
  }
  return y;
}

Vecd RmsNorm(const Vecd& x, const float* w) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + kEps);
  Vecd y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

Vecd Slice(const Vecd& x, int64_t first, int64_t n) {
  return Vecd(x.begin() + first, x.begin() + first + n);
}

// SwiGLU FFN of MODEL_SPEC §2.5 with weights at `offset` of stacked f32 arrays.
Vecd Ffn(const std::vector<float>& gate, const std::vector<float>& up,
         const std::vector<float>& down, int64_t ff, int64_t n_embd, const Vecd& x,
         int64_t index = 0) {
  const Vecd g = MatVec(gate, ff, x, index * ff * n_embd);
  const Vecd u = MatVec(up, ff, x, index * ff * n_embd);
  Vecd act(ff);
  for (int64_t f = 0; f < ff; ++f) act[f] = Silu(g[f]) * u[f];
  return MatVec(down, n_embd, act, index * n_embd * ff);
}

// ---- device helpers ----------------------------------------------------------------------

struct DevMat {
  DeviceBuffer buf;
  int64_t rows = 0, cols = 0;
  Mat mat() const { return {buf.floats(), rows, cols, cols}; }
};

DevMat Upload(Backend& b, const std::vector<float>& host, int64_t rows, int64_t cols) {
  DevMat m{b.Allocate(host.size() * sizeof(float)), rows, cols};
  EXPECT_EQ(b.CopyToDevice(m.buf.data(), host.data(), host.size() * sizeof(float)),
            KernelStatus::kOk);
  return m;
}

DeviceBuffer UploadInts(Backend& b, const int32_t* host, int64_t n) {
  DeviceBuffer buf = b.Allocate(n * sizeof(int32_t));
  EXPECT_EQ(b.CopyToDevice(buf.data(), host, n * sizeof(int32_t)), KernelStatus::kOk);
  return buf;
}

DevMat Zeros(Backend& b, int64_t rows, int64_t cols) {
  return DevMat{b.Allocate(rows * cols * sizeof(float)), rows, cols};
}

std::vector<float> Download(Backend& b, const Mat& m) {
  std::vector<float> host(m.rows * m.cols);
  for (int64_t r = 0; r < m.rows; ++r) {
    EXPECT_EQ(b.CopyToHost(host.data() + r * m.cols, m.data + r * m.stride, m.cols * 4),
              KernelStatus::kOk);
  }
  return host;
}

// An f32 weight [count][out][in] imported zero-copy from host memory.
WeightView Weight(Backend& b, const std::vector<float>& host, int64_t in, int64_t out,
                  int64_t count = 1) {
  DeviceBuffer unused;
  return WeightView{b.ImportWeights(host.data(), host.size() * 4, unused),
                    WeightType::kF32,
                    in,
                    out,
                    static_cast<size_t>(in) * 4,
                    count};
}

#define DS_OK(expr) ASSERT_EQ((expr), KernelStatus::kOk) << #expr

void ExpectNear(const std::vector<float>& got, const std::vector<Vecd>& want, int64_t t0,
                const char* what) {
  const int64_t n = static_cast<int64_t>(want[0].size());
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const double e = want[t0 + i / n][i % n];
    const double err = std::fabs(got[i] - e);
    ASSERT_LE(err, 1e-4 + 1e-4 * std::fabs(e))
        << what << " token " << t0 + i / n << " dim " << i % n;
  }
}

std::vector<float> Random(Rng& rng, int64_t n, double sigma) {
  return rng.NormalVector(n, static_cast<float>(sigma));
}

constexpr int64_t kVocab = 50, kEmbd = 32;
const std::vector<int32_t> kTokens = {3, 17, 42, 8, 8, 29, 0, 11, 5};

// ---- DeltaNet layer + MoE FFN ------------------------------------------------------------

TEST(CpuBackendLayerTest, DeltaNetLayerWithMoeMatchesReference) {
  constexpr int64_t nk = 2, nv = 4, d = 16, conv_c = 2 * nk * d + nv * d, kernel = 4;
  constexpr int64_t n_exp = 4, top_k = 2, ff = 24, ff_sh = 16;
  Rng rng(61);
  const double s_in = 1.0 / std::sqrt(double{kEmbd});
  const std::vector<float> embd = Random(rng, kVocab * kEmbd, 1.0);
  std::vector<float> attn_norm = Random(rng, kEmbd, 0.2), post_norm = Random(rng, kEmbd, 0.2);
  for (float& w : attn_norm) w += 1.0f;  // GGUF stores 1 + w
  for (float& w : post_norm) w += 1.0f;
  const std::vector<float> w_qkv = Random(rng, conv_c * kEmbd, s_in),
                           w_z = Random(rng, nv * d * kEmbd, s_in),
                           w_beta = Random(rng, nv * kEmbd, s_in),
                           w_alpha = Random(rng, nv * kEmbd, s_in),
                           conv_w = Random(rng, conv_c * kernel, 0.5),
                           dt_bias = Random(rng, nv, 0.5), ssm_norm = Random(rng, d, 1.0),
                           w_out = Random(rng, kEmbd * nv * d, 1.0 / std::sqrt(double{nv * d}));
  std::vector<float> ssm_a(nv);
  for (float& a : ssm_a) a = -std::exp(rng.Normal(0.5f));
  const std::vector<float> router = Random(rng, n_exp * kEmbd, 1.0),
                           gate_exps = Random(rng, n_exp * ff * kEmbd, s_in),
                           up_exps = Random(rng, n_exp * ff * kEmbd, s_in),
                           down_exps = Random(rng, n_exp * kEmbd * ff, 1.0 / std::sqrt(ff)),
                           gate_sh = Random(rng, ff_sh * kEmbd, s_in),
                           up_sh = Random(rng, ff_sh * kEmbd, s_in),
                           down_sh = Random(rng, kEmbd * ff_sh, 1.0 / std::sqrt(ff_sh)),
                           w_sg = Random(rng, kEmbd, s_in);

  // Reference over all tokens at once (MODEL_SPEC §2.4, §2.6).
  const int64_t n_tok = static_cast<int64_t>(kTokens.size());
  std::vector<Vecd> ref(n_tok);
  {
    std::vector<Vecd> x(n_tok), mixed(n_tok), z(n_tok), beta(n_tok), g(n_tok);
    for (int64_t t = 0; t < n_tok; ++t) {
      x[t] = Vecd(embd.begin() + kTokens[t] * kEmbd, embd.begin() + (kTokens[t] + 1) * kEmbd);
      const Vecd xn = RmsNorm(x[t], attn_norm.data());
      mixed[t] = MatVec(w_qkv, conv_c, xn);
      z[t] = MatVec(w_z, nv * d, xn);
      const Vecd b = MatVec(w_beta, nv, xn), a = MatVec(w_alpha, nv, xn);
      for (int64_t h = 0; h < nv; ++h) {
        beta[t].push_back(Sigmoid(b[h]));
        g[t].push_back(ssm_a[h] * std::log1p(std::exp(a[h] + dt_bias[h])));
      }
    }
    std::vector<std::vector<double>> s(nv, Vecd(d * d, 0.0));  // S[key][value] per head
    for (int64_t t = 0; t < n_tok; ++t) {
      Vecd y(conv_c);
      for (int64_t c = 0; c < conv_c; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < kernel; ++j) {
          const int64_t src = t - (kernel - 1) + j;
          if (src >= 0) acc += conv_w[c * kernel + j] * mixed[src][c];
        }
        y[c] = Silu(acc);
      }
      auto l2 = [](Vecd v) {
        double ss = 0.0;
        for (double e : v) ss += e * e;
        for (double& e : v) e /= std::max(std::sqrt(ss), double{kEps});
        return v;
      };
      Vecd o_all;
      for (int64_t h = 0; h < nv; ++h) {
        const int64_t kh = h % nk;  // tiled V heads (GGUF)
        const Vecd q = l2(Slice(y, kh * d, d)), k = l2(Slice(y, nk * d + kh * d, d));
        const Vecd v = Slice(y, 2 * nk * d + h * d, d);
        Vecd& st = s[h];
        for (double& e : st) e *= std::exp(g[t][h]);
        for (int64_t j = 0; j < d; ++j) {
          double stk = 0.0;
          for (int64_t i = 0; i < d; ++i) stk += st[i * d + j] * k[i];
          const double u = beta[t][h] * (v[j] - stk);
          for (int64_t i = 0; i < d; ++i) st[i * d + j] += k[i] * u;
        }
        Vecd o(d, 0.0);
        for (int64_t j = 0; j < d; ++j) {
          for (int64_t i = 0; i < d; ++i) o[j] += st[i * d + j] * q[i] / std::sqrt(double{d});
        }
        const Vecd on = RmsNorm(o, ssm_norm.data());
        for (int64_t j = 0; j < d; ++j) o_all.push_back(on[j] * Silu(z[t][h * d + j]));
      }
      const Vecd mix = MatVec(w_out, kEmbd, o_all);
      Vecd hid(kEmbd);
      for (int64_t i = 0; i < kEmbd; ++i) hid[i] = x[t][i] + mix[i];
      const Vecd hn = RmsNorm(hid, post_norm.data());
      const Vecd logits = MatVec(router, n_exp, hn);
      const double mx = *std::max_element(logits.begin(), logits.end());
      Vecd p(n_exp);
      double sum = 0.0;
      for (int64_t e = 0; e < n_exp; ++e) sum += (p[e] = std::exp(logits[e] - mx));
      for (double& e : p) e /= sum;
      std::vector<int64_t> order(n_exp);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      double top = 0.0;
      for (int64_t j = 0; j < top_k; ++j) top += p[order[j]];
      Vecd out = hid;
      for (int64_t j = 0; j < top_k; ++j) {
        const Vecd ye = Ffn(gate_exps, up_exps, down_exps, ff, kEmbd, hn, order[j]);
        for (int64_t i = 0; i < kEmbd; ++i) out[i] += p[order[j]] / std::max(top, 6.1e-5) * ye[i];
      }
      const Vecd sh = Ffn(gate_sh, up_sh, down_sh, ff_sh, kEmbd, hn);
      const double sg = Sigmoid(MatVec(w_sg, 1, hn)[0]);
      for (int64_t i = 0; i < kEmbd; ++i) out[i] += sg * sh[i];
      ref[t] = out;
    }
  }

  // The engine's side: prefill 5 tokens, decode 2, prefill 2, carrying both states.
  std::unique_ptr<Backend> backend = MakeCpuBackend(2);
  Backend& b = *backend;
  const DevMat conv_state = Zeros(b, kernel - 1, conv_c);
  const DevMat delta_state = Zeros(b, nv * d, d);
  const DevMat ssm_a_dev = Upload(b, ssm_a, 1, nv), dt_dev = Upload(b, dt_bias, 1, nv);
  const DevMat norm_dev = Upload(b, attn_norm, 1, kEmbd), post_dev = Upload(b, post_norm, 1, kEmbd);
  const DevMat ssm_norm_dev = Upload(b, ssm_norm, 1, d),
               conv_dev = Upload(b, conv_w, conv_c, kernel);
  int64_t t0 = 0;
  for (const int64_t n : {5, 1, 1, 2}) {
    const DeviceBuffer ids = UploadInts(b, kTokens.data() + t0, n);
    DevMat x = Zeros(b, n, kEmbd), xn = Zeros(b, n, kEmbd), qkv = Zeros(b, n, conv_c),
           z = Zeros(b, n, nv * d), bb = Zeros(b, n, nv), aa = Zeros(b, n, nv),
           o = Zeros(b, n, nv * d), mix = Zeros(b, n, kEmbd);
    Mat xm = x.mat(), xnm = xn.mat(), qkvm = qkv.mat(), zm = z.mat(), bm = bb.mat(), am = aa.mat(),
        om = o.mat(), mixm = mix.mat();
    DS_OK(
        b.GetRows(Weight(b, embd, kEmbd, kVocab), static_cast<const int32_t*>(ids.data()), n, xm));
    DS_OK(b.RmsNorm(xm, Vec{norm_dev.buf.floats(), kEmbd}, kEps, xnm));
    DS_OK(b.MatMul(Weight(b, w_qkv, kEmbd, conv_c), xnm, qkvm));
    DS_OK(b.MatMul(Weight(b, w_z, kEmbd, nv * d), xnm, zm));
    DS_OK(b.MatMul(Weight(b, w_beta, kEmbd, nv), xnm, bm));
    DS_OK(b.MatMul(Weight(b, w_alpha, kEmbd, nv), xnm, am));
    DS_OK(b.CausalConv1dSilu(qkvm, conv_dev.buf.floats(), kernel, conv_state.buf.floats(), qkvm));
    Mat q = qkvm.Cols(0, nk * d), k = qkvm.Cols(nk * d, nk * d), v = qkvm.Cols(2 * nk * d, nv * d);
    DS_OK(b.L2Norm(q, d, kEps));
    DS_OK(b.L2Norm(k, d, kEps));
    DS_OK(b.DeltaNetGates(am, bm, Vec{ssm_a_dev.buf.floats(), nv}, Vec{dt_dev.buf.floats(), nv}));
    DS_OK(b.GatedDeltaRule(q, k, v, am, bm, nk, nv, d, delta_state.buf.floats(), om));
    Mat heads = om.Reshaped(d);
    DS_OK(b.GatedRmsNorm(heads, Vec{ssm_norm_dev.buf.floats(), d}, zm.Reshaped(d), kEps, heads));
    DS_OK(b.MatMul(Weight(b, w_out, nv * d, kEmbd), om, mixm));
    DS_OK(b.Add(xm, mixm));

    // MoE FFN with the shared expert (MODEL_SPEC §2.6).
    DevMat hn = Zeros(b, n, kEmbd), logits = Zeros(b, n, n_exp), y = Zeros(b, n, kEmbd),
           gs = Zeros(b, n, ff_sh), us = Zeros(b, n, ff_sh), sh = Zeros(b, n, kEmbd),
           sg = Zeros(b, n, 1), route_w = Zeros(b, n, top_k), route_ids = Zeros(b, n, top_k);
    Mat hnm = hn.mat(), lm = logits.mat(), ym = y.mat(), gsm = gs.mat(), usm = us.mat(),
        shm = sh.mat(), sgm = sg.mat();
    auto* rid = static_cast<int32_t*>(route_ids.buf.data());
    DS_OK(b.RmsNorm(xm, Vec{post_dev.buf.floats(), kEmbd}, kEps, hnm));
    DS_OK(b.MatMul(Weight(b, router, kEmbd, n_exp), hnm, lm));
    DS_OK(b.MoeRoute(lm, top_k, rid, route_w.buf.floats()));
    DS_OK(b.MoeFfn(hnm, rid, route_w.buf.floats(), top_k, Weight(b, gate_exps, kEmbd, ff, n_exp),
                   Weight(b, up_exps, kEmbd, ff, n_exp), Weight(b, down_exps, ff, kEmbd, n_exp),
                   ym));
    DS_OK(b.MatMul(Weight(b, gate_sh, kEmbd, ff_sh), hnm, gsm));
    DS_OK(b.MatMul(Weight(b, up_sh, kEmbd, ff_sh), hnm, usm));
    DS_OK(b.SwiGlu(gsm, usm, gsm));
    DS_OK(b.MatMul(Weight(b, down_sh, ff_sh, kEmbd), gsm, shm));
    DS_OK(b.MatMul(Weight(b, w_sg, kEmbd, 1), hnm, sgm));
    DS_OK(b.MulSigmoid(shm, sgm));
    DS_OK(b.Add(ym, shm));
    DS_OK(b.Add(xm, ym));
    DS_OK(b.Synchronize());
    ExpectNear(Download(b, xm), ref, t0, "deltanet_moe_layer");
    t0 += n;
  }
}

// ---- gated attention layer + dense FFN ----------------------------------------------------

TEST(CpuBackendLayerTest, AttentionLayerWithDenseFfnMatchesReference) {
  constexpr int64_t nh = 4, nkv = 2, hd = 16, n_rot = 8, ffn = 48;
  constexpr float base = 1e7f;
  Rng rng(62);
  const double s_in = 1.0 / std::sqrt(double{kEmbd});
  const std::vector<float> embd = Random(rng, kVocab * kEmbd, 1.0);
  std::vector<float> attn_norm = Random(rng, kEmbd, 0.2), post_norm = Random(rng, kEmbd, 0.2),
                     q_norm = Random(rng, hd, 0.2), k_norm = Random(rng, hd, 0.2);
  for (auto* w : {&attn_norm, &post_norm, &q_norm, &k_norm}) {
    for (float& e : *w) e += 1.0f;
  }
  const std::vector<float> w_q = Random(rng, nh * 2 * hd * kEmbd, s_in),
                           w_k = Random(rng, nkv * hd * kEmbd, s_in),
                           w_v = Random(rng, nkv * hd * kEmbd, s_in),
                           w_o = Random(rng, kEmbd * nh * hd, 1.0 / std::sqrt(double{nh * hd})),
                           w_gate = Random(rng, ffn * kEmbd, s_in),
                           w_up = Random(rng, ffn * kEmbd, s_in),
                           w_down = Random(rng, kEmbd * ffn, 1.0 / std::sqrt(double{ffn}));

  // Reference (MODEL_SPEC §2.3, §2.5); token t sits at position t.
  const int64_t n_tok = static_cast<int64_t>(kTokens.size());
  std::vector<Vecd> ref(n_tok), keys(n_tok), values(n_tok);
  auto rope = [&](Vecd head, int64_t pos) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double a = pos * std::pow(double{base}, -2.0 * i / n_rot);
      const double x0 = head[i], x1 = head[i + n_rot / 2];
      head[i] = x0 * std::cos(a) - x1 * std::sin(a);
      head[i + n_rot / 2] = x1 * std::cos(a) + x0 * std::sin(a);
    }
    return head;
  };
  for (int64_t t = 0; t < n_tok; ++t) {
    const Vecd x(embd.begin() + kTokens[t] * kEmbd, embd.begin() + (kTokens[t] + 1) * kEmbd);
    const Vecd xn = RmsNorm(x, attn_norm.data());
    const Vecd qg = MatVec(w_q, nh * 2 * hd, xn), kk = MatVec(w_k, nkv * hd, xn),
               vv = MatVec(w_v, nkv * hd, xn);
    for (int64_t g = 0; g < nkv; ++g) {
      const Vecd kh = rope(RmsNorm(Slice(kk, g * hd, hd), k_norm.data()), t);
      keys[t].insert(keys[t].end(), kh.begin(), kh.end());
    }
    values[t] = vv;
    Vecd attn;
    for (int64_t h = 0; h < nh; ++h) {
      const Vecd q = rope(RmsNorm(Slice(qg, h * 2 * hd, hd), q_norm.data()), t);
      const int64_t g = h / (nh / nkv);
      Vecd sc(t + 1);
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0.0;
        for (int64_t i = 0; i < hd; ++i) dot += q[i] * keys[j][g * hd + i];
        sc[j] = dot / std::sqrt(double{hd});
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0.0;
      for (double& e : sc) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j <= t; ++j) acc += sc[j] * values[j][g * hd + i];
        attn.push_back(acc / sum * Sigmoid(qg[h * 2 * hd + hd + i]));
      }
    }
    const Vecd o = MatVec(w_o, kEmbd, attn);
    Vecd hid(kEmbd);
    for (int64_t i = 0; i < kEmbd; ++i) hid[i] = x[i] + o[i];
    const Vecd f = Ffn(w_gate, w_up, w_down, ffn, kEmbd, RmsNorm(hid, post_norm.data()));
    for (int64_t i = 0; i < kEmbd; ++i) hid[i] += f[i];
    ref[t] = hid;
  }

  // The engine's side: prefill 5, decode 1, prefill 3, with a KV cache of 16 positions.
  std::unique_ptr<Backend> backend = MakeCpuBackend(2);
  Backend& b = *backend;
  // The KV cache: f32 pools of 4 pages of 4 positions, the sequence on pages 2, 0, 3, 1.
  const DevMat k_pool = Zeros(b, 16, nkv * hd), v_pool = Zeros(b, 16, nkv * hd);
  const int32_t table_host[4] = {2, 0, 3, 1};
  const DeviceBuffer table = UploadInts(b, table_host, 4);
  PagedKvView cache;
  cache.k = {k_pool.buf.data(), WeightType::kF32, nkv * hd * sizeof(float), 4};
  cache.v = {v_pool.buf.data(), WeightType::kF32, nkv * hd * sizeof(float), 4};
  cache.page_tokens = 4;
  cache.page_table = static_cast<const int32_t*>(table.data());
  cache.n_pages = 4;
  cache.n_head_kv = nkv;
  const DevMat norm_dev = Upload(b, attn_norm, 1, kEmbd), post_dev = Upload(b, post_norm, 1, kEmbd);
  const DevMat qn_dev = Upload(b, q_norm, 1, hd), kn_dev = Upload(b, k_norm, 1, hd);
  int64_t n_past = 0;
  for (const int64_t n : {5, 1, 3}) {
    std::vector<int32_t> pos_host(n);
    std::iota(pos_host.begin(), pos_host.end(), static_cast<int32_t>(n_past));
    const DeviceBuffer ids = UploadInts(b, kTokens.data() + n_past, n);
    const DeviceBuffer pos_dev = UploadInts(b, pos_host.data(), n);
    const auto* pos = static_cast<const int32_t*>(pos_dev.data());
    DevMat x = Zeros(b, n, kEmbd), xn = Zeros(b, n, kEmbd), qg = Zeros(b, n, nh * 2 * hd),
           q = Zeros(b, n * nh, hd), gate = Zeros(b, n * nh, hd), attn = Zeros(b, n, nh * hd),
           o = Zeros(b, n, kEmbd), hn = Zeros(b, n, kEmbd), fg = Zeros(b, n, ffn),
           fu = Zeros(b, n, ffn), fd = Zeros(b, n, kEmbd);
    Mat xm = x.mat(), xnm = xn.mat(), qgm = qg.mat(), qm = q.mat(), gatem = gate.mat(),
        attnm = attn.mat(), omat = o.mat(), hnm = hn.mat(), fgm = fg.mat(), fum = fu.mat(),
        fdm = fd.mat();
    DevMat k_dev = Zeros(b, n, nkv * hd), v_dev = Zeros(b, n, nkv * hd);
    Mat k_new = k_dev.mat(), v_new = v_dev.mat();
    DS_OK(
        b.GetRows(Weight(b, embd, kEmbd, kVocab), static_cast<const int32_t*>(ids.data()), n, xm));
    DS_OK(b.RmsNorm(xm, Vec{norm_dev.buf.floats(), kEmbd}, kEps, xnm));
    DS_OK(b.MatMul(Weight(b, w_q, kEmbd, nh * 2 * hd), xnm, qgm));
    const Mat per_head = qgm.Reshaped(2 * hd);  // [n * nh][query | gate]
    DS_OK(b.Copy(per_head.Cols(0, hd), qm));
    DS_OK(b.Copy(per_head.Cols(hd, hd), gatem));
    DS_OK(b.MatMul(Weight(b, w_k, kEmbd, nkv * hd), xnm, k_new));
    DS_OK(b.MatMul(Weight(b, w_v, kEmbd, nkv * hd), xnm, v_new));
    Mat k_heads = k_new.Reshaped(hd);
    DS_OK(b.RmsNorm(qm, Vec{qn_dev.buf.floats(), hd}, kEps, qm));
    DS_OK(b.RmsNorm(k_heads, Vec{kn_dev.buf.floats(), hd}, kEps, k_heads));
    DS_OK(b.RopeNeox(qm, pos, nh, n_rot, base));
    DS_OK(b.RopeNeox(k_heads, pos, nkv, n_rot, base));
    DS_OK(b.StoreKv(k_new, v_new, cache, n_past));
    DS_OK(b.PagedAttention(qm.Reshaped(nh * hd), cache, n_past, nh, nkv,
                           1.0f / std::sqrt(float{hd}), attnm));
    DS_OK(b.MulSigmoid(attnm, gatem.Reshaped(nh * hd)));
    DS_OK(b.MatMul(Weight(b, w_o, nh * hd, kEmbd), attnm, omat));
    DS_OK(b.Add(xm, omat));
    DS_OK(b.RmsNorm(xm, Vec{post_dev.buf.floats(), kEmbd}, kEps, hnm));
    DS_OK(b.MatMul(Weight(b, w_gate, kEmbd, ffn), hnm, fgm));
    DS_OK(b.MatMul(Weight(b, w_up, kEmbd, ffn), hnm, fum));
    DS_OK(b.SwiGlu(fgm, fum, fgm));
    DS_OK(b.MatMul(Weight(b, w_down, ffn, kEmbd), fgm, fdm));
    DS_OK(b.Add(xm, fdm));
    ExpectNear(Download(b, xm), ref, n_past, "attention_layer");
    n_past += n;
  }
}

}  // namespace
}  // namespace deltaserve::kernels
