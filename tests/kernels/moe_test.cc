// MoE routing and expert FFN against double-precision references written from MODEL_SPEC §2.6
// steps 1-2 and GGUF_QWEN35.md (renormalisation sum clamped at >= 6.1e-5): softmax, top-k with
// ties to the lower id, renormalised weights; and the grouped-by-expert FFN against a per-token
// loop over the same f32 expert weights. Tolerances: routing weights are one f32 softmax away
// from the reference (1e-6); the FFN chains three f32 products of <= 64 terms (1e-5 absolute +
// 1e-4 relative).
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm_ops.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels {
namespace {

using testing::ExpectClose;
using testing::HostMat;
using testing::Rng;

struct Route {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Route RouteRef(const HostMat& logits, int64_t k) {
  Route r;
  const int64_t e_n = logits.cols();
  for (int64_t t = 0; t < logits.rows(); ++t) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < e_n; ++e) mx = std::max(mx, double{logits.at(t, e)});
    std::vector<double> p(e_n);
    for (int64_t e = 0; e < e_n; ++e) sum += (p[e] = std::exp(logits.at(t, e) - mx));
    for (double& x : p) x /= sum;
    std::vector<int32_t> order(e_n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double top = 0.0;
    for (int64_t j = 0; j < k; ++j) top += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      r.ids.push_back(order[j]);
      r.weights.push_back(static_cast<float>(p[order[j]] / std::max(top, 6.1e-5)));
    }
  }
  return r;
}

Route RunRoute(const HostMat& logits, int64_t k) {
  Route r{std::vector<int32_t>(logits.rows() * k, -1), std::vector<float>(logits.rows() * k)};
  HostMat copy = logits;
  EXPECT_EQ(MoeRouteCpu(copy.mat(), k, r.ids.data(), r.weights.data()), KernelStatus::kOk);
  return r;
}

void ExpectRoutesEqual(const Route& got, const Route& want) {
  EXPECT_EQ(got.ids, want.ids);
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (size_t i = 0; i < got.weights.size(); ++i) {
    EXPECT_NEAR(got.weights[i], want.weights[i], 1e-6) << i;
  }
}

TEST(MoeRouteTest, TopKMatchesReference) {
  Rng rng(51);
  HostMat logits(9, 64, 3);
  rng.FillNormal(logits, 2.0f);
  for (const int64_t k : {1, 4, 8, 64}) ExpectRoutesEqual(RunRoute(logits, k), RouteRef(logits, k));
}

TEST(MoeRouteTest, TiesGoToTheLowerId) {
  HostMat logits(2, 6);
  const float row0[] = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f, 2.0f};
  for (int c = 0; c < 6; ++c) {
    logits.at(0, c) = row0[c];
    logits.at(1, c) = 0.5f;  // all equal
  }
  const Route r = RunRoute(logits, 4);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 4, 5, 0, 1, 2, 3}));
  ExpectRoutesEqual(r, RouteRef(logits, 4));
  for (int j = 4; j < 8; ++j) EXPECT_NEAR(r.weights[j], 0.25f, 1e-7);
}

TEST(MoeRouteTest, WeightsSumToOneUnlessTheSumIsClamped) {
  // 20000 equal experts: each p = 5e-5, so the top-1 sum (5e-5) is under the 6.1e-5 clamp and
  // the weight is 5e-5 / 6.1e-5 = 0.8197; top-2 (1e-4) is renormalised to 1/2 each.
  HostMat logits(1, 20000);
  Route r = RunRoute(logits, 1);
  EXPECT_EQ(r.ids[0], 0);
  EXPECT_NEAR(r.weights[0], 5e-5 / 6.1e-5, 1e-5);
  r = RunRoute(logits, 2);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0f, 1e-6);
  Rng rng(52);
  HostMat random(5, 32);
  rng.FillNormal(random, 3.0f);
  r = RunRoute(random, 8);
  for (int64_t t = 0; t < 5; ++t) {
    EXPECT_NEAR(std::accumulate(r.weights.begin() + t * 8, r.weights.begin() + t * 8 + 8, 0.0), 1.0,
                1e-6);
  }
}

TEST(MoeRouteTest, BadArgumentsAreInvalid) {
  HostMat logits(2, 8);
  std::vector<int32_t> ids(16);
  std::vector<float> w(16);
  EXPECT_EQ(MoeRouteCpu(logits.mat(), 0, ids.data(), w.data()), KernelStatus::kInvalidArgument);
  EXPECT_EQ(MoeRouteCpu(logits.mat(), 9, ids.data(), w.data()), KernelStatus::kInvalidArgument);
  EXPECT_EQ(MoeRouteCpu(logits.mat(), 2, nullptr, w.data()), KernelStatus::kInvalidArgument);
  EXPECT_EQ(MoeRouteCpu(logits.mat(), 2, ids.data(), nullptr), KernelStatus::kInvalidArgument);
}

// F32 expert stacks: gate/up [n_expert][ff][n_embd], down [n_expert][n_embd][ff].
struct Experts {
  Experts(int64_t n_expert, int64_t n_embd, int64_t ff, Rng& rng)
      : n_expert(n_expert),
        n_embd(n_embd),
        ff(ff),
        gate(rng.NormalVector(n_expert * ff * n_embd, 0.3f)),
        up(rng.NormalVector(n_expert * ff * n_embd, 0.3f)),
        down(rng.NormalVector(n_expert * n_embd * ff, 0.3f)) {}
  WeightView View(const std::vector<float>& w, int64_t in, int64_t out) const {
    return WeightView{w.data(), WeightType::kF32, in, out, static_cast<size_t>(in) * 4, n_expert};
  }
  WeightView GateView() const { return View(gate, n_embd, ff); }
  WeightView UpView() const { return View(up, n_embd, ff); }
  WeightView DownView() const { return View(down, ff, n_embd); }
  int64_t n_expert, n_embd, ff;
  std::vector<float> gate, up, down;
};

std::vector<double> MoeFfnRef(const HostMat& x, const Route& r, int64_t k, const Experts& ex) {
  std::vector<double> y(x.rows() * ex.n_embd, 0.0);
  for (int64_t t = 0; t < x.rows(); ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = r.ids[t * k + j];
      std::vector<double> act(ex.ff);
      for (int64_t f = 0; f < ex.ff; ++f) {
        double g = 0.0, u = 0.0;
        for (int64_t i = 0; i < ex.n_embd; ++i) {
          g += double{ex.gate[(e * ex.ff + f) * ex.n_embd + i]} * x.at(t, i);
          u += double{ex.up[(e * ex.ff + f) * ex.n_embd + i]} * x.at(t, i);
        }
        act[f] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < ex.n_embd; ++o) {
        double d = 0.0;
        for (int64_t f = 0; f < ex.ff; ++f)
          d += double{ex.down[(e * ex.n_embd + o) * ex.ff + f]} * act[f];
        y[t * ex.n_embd + o] += r.weights[t * k + j] * d;
      }
    }
  }
  return y;
}

class MoeFfnTest : public ::testing::TestWithParam<int> {
 protected:
  MoeFfnTest() : pool_(GetParam()) {}
  ThreadPool pool_;
};

TEST_P(MoeFfnTest, GroupedByExpertEqualsPerTokenReference) {
  Rng rng(53);
  const int64_t t_n = 11, n_embd = 32, ff = 64, n_expert = 6, k = 2;
  const Experts ex(n_expert, n_embd, ff, rng);
  HostMat x(t_n, n_embd, 3), logits(t_n, n_expert);
  rng.FillNormal(x);
  rng.FillNormal(logits, 2.0f);
  const Route routed = RunRoute(logits, k);
  // Hand-made routing too: expert 5 on every token, expert 0 on none, and weights that do not
  // sum to one (one negative): the op applies them as given.
  const Route skewed = [&] {
    Route r;
    for (int64_t t = 0; t < t_n; ++t) {
      r.ids.insert(r.ids.end(), {5, static_cast<int32_t>(1 + t % 4)});
      r.weights.insert(r.weights.end(), {0.7f, -0.4f});
    }
    return r;
  }();
  for (const Route* r : {&routed, &skewed}) {
    HostMat y(t_n, n_embd, 2);
    rng.FillNormal(y);  // stale contents: y must be overwritten
    Mat ym = y.mat();
    ASSERT_EQ(MoeFfnCpu(pool_, x.mat(), r->ids.data(), r->weights.data(), k, ex.GateView(),
                        ex.UpView(), ex.DownView(), ym),
              KernelStatus::kOk);
    ExpectClose(y, MoeFfnRef(x, *r, k, ex), 1e-5, 1e-4, "moe ffn");
    EXPECT_TRUE(y.PaddingIntact());
  }
}

TEST_P(MoeFfnTest, QuantizedExpertStacks) {
  // Q8_0 gate/up and F16 down: Matrix(e) must step by out * row_bytes of the block type, not of
  // f32. The reference uses the decoded weights, so the f32 tolerance holds on the f32-activation
  // path (the int8 default is tested in matmul_int8_test.cc).
  SetMatMulActivations(MatMulActivations::kF32);
  Rng rng(55);
  const int64_t t_n = 9, n_embd = 64, ff = 32, n_expert = 5, k = 3;
  Experts ex(n_expert, n_embd, ff, rng);
  std::vector<uint8_t> gate_q, up_q, down_q;
  auto encode = [](WeightType type, std::vector<float>& w, int64_t in, std::vector<uint8_t>& q) {
    const size_t row_bytes = RowBytes(type, in);
    const int64_t rows = static_cast<int64_t>(w.size()) / in;
    q.assign(rows * row_bytes, 0);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(QuantizeRow(type, w.data() + r * in, q.data() + r * row_bytes, in),
                KernelStatus::kOk);
      ASSERT_EQ(DequantizeRow(type, q.data() + r * row_bytes, w.data() + r * in, in),
                KernelStatus::kOk);
    }
  };
  encode(WeightType::kQ8_0, ex.gate, n_embd, gate_q);
  encode(WeightType::kQ8_0, ex.up, n_embd, up_q);
  encode(WeightType::kF16, ex.down, ff, down_q);
  const WeightView gate{
      gate_q.data(), WeightType::kQ8_0, n_embd, ff, RowBytes(WeightType::kQ8_0, n_embd), n_expert};
  const WeightView up{
      up_q.data(), WeightType::kQ8_0, n_embd, ff, RowBytes(WeightType::kQ8_0, n_embd), n_expert};
  const WeightView down{down_q.data(), WeightType::kF16, ff, n_embd, RowBytes(WeightType::kF16, ff),
                        n_expert};
  HostMat x(t_n, n_embd), logits(t_n, n_expert), y(t_n, n_embd);
  rng.FillNormal(x);
  rng.FillNormal(logits, 2.0f);
  const Route r = RunRoute(logits, k);
  Mat ym = y.mat();
  ASSERT_EQ(MoeFfnCpu(pool_, x.mat(), r.ids.data(), r.weights.data(), k, gate, up, down, ym),
            KernelStatus::kOk);
  SetMatMulActivations(std::nullopt);
  ExpectClose(y, MoeFfnRef(x, r, k, ex), 1e-5, 1e-4, "quantized moe ffn");
}

INSTANTIATE_TEST_SUITE_P(Threads, MoeFfnTest, ::testing::Values(1, 2));

TEST(MoeFfnShapeTest, MismatchesAreInvalidArgument) {
  ThreadPool pool(1);
  Rng rng(54);
  const Experts ex(4, 16, 32, rng);
  HostMat x(3, 16), y(3, 16), y_bad(3, 15);
  std::vector<int32_t> ids = {0, 1, 2, 3, 0, 1};
  const std::vector<float> w(6, 0.5f);
  Mat ym = y.mat(), ybad = y_bad.mat();
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  const WeightView g = ex.GateView(), u = ex.UpView(), d = ex.DownView();
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, u, d, ym), KernelStatus::kOk);
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, u, d, ybad), bad);
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, u, g, ym), bad);  // down shape
  WeightView fewer = u;
  fewer.count = 3;
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, fewer, d, ym), bad);
  ids[4] = 4;  // out of range
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, u, d, ym), bad);
  ids[4] = -1;  // skipped (the other tier's expert), not an error
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, u, d, ym), KernelStatus::kOk);
  ids[4] = 0;
  WeightView overlapping = u;
  overlapping.matrix_stride = u.out * u.row_bytes - 4;  // shorter than one matrix
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, overlapping, d, ym), bad);
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 0, g, u, d, ym), bad);
  Mat xm = x.mat();
  EXPECT_EQ(MoeFfnCpu(pool, x.mat(), ids.data(), w.data(), 2, g, u, d, xm), bad);  // y == x
}

// --- expert stacks over a slot arena, and skipped ids (worker/engine/expert_tiers.h) ---------

// `n_slots` slots of `slot_bytes`, slot s holding the gate, up and down matrices of expert
// slot_expert[s] (or garbage: NaN-filled, so reading a wrong slot poisons the result), each part
// 256-byte aligned inside the slot: the layout of the engine's device expert arena.
struct Arena {
  std::vector<uint8_t> bytes;
  size_t slot_bytes = 0;
  size_t up_at = 0, down_at = 0;
  WeightView gate, up, down;  // stacks of n_slots matrices, matrix_stride = slot_bytes
};

size_t Round256(size_t n) { return (n + 255) / 256 * 256; }

Arena MakeArena(const WeightView& gate, const WeightView& up, const WeightView& down,
                const std::vector<int32_t>& slot_expert) {
  Arena a;
  const size_t gb = gate.out * gate.row_bytes, ub = up.out * up.row_bytes,
               db = down.out * down.row_bytes;
  a.up_at = Round256(gb);
  a.down_at = a.up_at + Round256(ub);
  a.slot_bytes = a.down_at + Round256(db);
  const auto n_slots = static_cast<int64_t>(slot_expert.size());
  a.bytes.assign(a.slot_bytes * n_slots + 64, 0xFF);  // 0xFFFF.. is a NaN in f32, f16, q8_0 scale
  for (int64_t s = 0; s < n_slots; ++s) {
    const int32_t e = slot_expert[s];
    if (e < 0) continue;
    uint8_t* slot = a.bytes.data() + s * a.slot_bytes;
    std::memcpy(slot, gate.Matrix(e).data, gb);
    std::memcpy(slot + a.up_at, up.Matrix(e).data, ub);
    std::memcpy(slot + a.down_at, down.Matrix(e).data, db);
  }
  auto stack = [&](const WeightView& w, size_t at) {
    WeightView v = w;
    v.data = a.bytes.data() + at;
    v.count = n_slots;
    v.matrix_stride = a.slot_bytes;
    return v;
  };
  a.gate = stack(gate, 0);
  a.up = stack(up, a.up_at);
  a.down = stack(down, a.down_at);
  return a;
}

// y[t] = sum over j with ids[t][j] >= 0 of weights[t][j] * down_e(silu(gate_e x) * up_e x), from
// single MatMulCpu and SwiGluCpu calls on one token and one expert at a time, over the original
// (contiguous) stacks: a computation independent of MoeFfnCpu's grouping and stride handling.
std::vector<double> SingleOpsReference(ThreadPool& pool, const HostMat& x,
                                       const std::vector<int32_t>& ids,
                                       const std::vector<float>& weights, int64_t k,
                                       const WeightView& gate, const WeightView& up,
                                       const WeightView& down) {
  const int64_t n_embd = x.cols(), ff = gate.out;
  std::vector<double> y(x.rows() * n_embd, 0.0);
  HostMat xt(1, n_embd), g(1, ff), u(1, ff), d(1, n_embd);
  for (int64_t t = 0; t < x.rows(); ++t) {
    for (int64_t i = 0; i < n_embd; ++i) xt.at(0, i) = x.at(t, i);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      if (e < 0) continue;
      Mat gm = g.mat(), um = u.mat(), dm = d.mat();
      EXPECT_EQ(MatMulCpu(pool, gate.Matrix(e), xt.mat(), gm), KernelStatus::kOk);
      EXPECT_EQ(MatMulCpu(pool, up.Matrix(e), xt.mat(), um), KernelStatus::kOk);
      EXPECT_EQ(SwiGluCpu(pool, gm, um, gm), KernelStatus::kOk);
      EXPECT_EQ(MatMulCpu(pool, down.Matrix(e), gm, dm), KernelStatus::kOk);
      for (int64_t o = 0; o < n_embd; ++o) y[t * n_embd + o] += weights[t * k + j] * d.at(0, o);
    }
  }
  return y;
}

// Quantized copies of an Experts' f32 stacks (the f32 values are replaced by the decoded ones).
struct QuantStack {
  std::vector<uint8_t> bytes;
  WeightView view;
};
QuantStack Quantize(WeightType type, std::vector<float>& w, int64_t in, int64_t out,
                    int64_t count) {
  QuantStack q;
  const size_t row_bytes = RowBytes(type, in);
  q.bytes.assign(out * count * row_bytes, 0);
  for (int64_t r = 0; r < out * count; ++r) {
    EXPECT_EQ(QuantizeRow(type, w.data() + r * in, q.bytes.data() + r * row_bytes, in),
              KernelStatus::kOk);
    EXPECT_EQ(DequantizeRow(type, q.bytes.data() + r * row_bytes, w.data() + r * in, in),
              KernelStatus::kOk);
  }
  q.view = WeightView{q.bytes.data(), type, in, out, row_bytes, count};
  return q;
}

TEST_P(MoeFfnTest, ArenaStacksAndSkippedIdsMatchSingleOps) {
  // f32 activations: the int8 path would round a batch's and a single row's products apart
  // (one quantization step of an activation), beyond the f32 summation tolerance used here.
  SetMatMulActivations(MatMulActivations::kF32);
  struct Types {
    WeightType gate, up, down;
    int64_t n_embd, ff;
  };
  for (const Types& ty :
       {Types{WeightType::kF32, WeightType::kF32, WeightType::kF32, 32, 48},
        Types{WeightType::kQ8_0, WeightType::kQ8_0, WeightType::kF16, 64, 32},
        Types{WeightType::kQ4_K, WeightType::kQ4_K, WeightType::kQ6_K, 256, 256}}) {
    SCOPED_TRACE(static_cast<int>(ty.gate));
    Rng rng(57);
    const int64_t n_expert = 6, k = 3, t_n = 7;
    Experts ex(n_expert, ty.n_embd, ty.ff, rng);
    const QuantStack gq = Quantize(ty.gate, ex.gate, ty.n_embd, ty.ff, n_expert);
    const QuantStack uq = Quantize(ty.up, ex.up, ty.n_embd, ty.ff, n_expert);
    const QuantStack dq = Quantize(ty.down, ex.down, ty.ff, ty.n_embd, n_expert);
    // Experts 4, 1, 5 in slots 0, 2, 3 of 5 (slots 1 and 4 hold garbage); 0, 2, 3 elsewhere.
    const std::vector<int32_t> slot_expert = {4, -1, 1, 5, -1};
    const Arena arena = MakeArena(gq.view, uq.view, dq.view, slot_expert);
    ASSERT_GT(arena.slot_bytes, static_cast<size_t>(ty.ff) * gq.view.row_bytes +
                                    ty.ff * uq.view.row_bytes + ty.n_embd * dq.view.row_bytes - 1);
    HostMat x(t_n, ty.n_embd, 3);
    rng.FillNormal(x);
    // Token ids (original experts): token 2 has none on the device, token 5 all of them.
    const std::vector<int32_t> experts = {4, 0, 1, 2, 5, 3, 0, 2, 3, 1, 4,
                                          5, 3, 1, 0, 5, 4, 1, 2, 3, 4};
    std::vector<float> weights(t_n * k);
    for (float& w : weights) w = rng.Uniform(0.1f, 1.0f);
    std::vector<int32_t> slot_ids(t_n * k), device_ids(t_n * k);  // slot, or -1
    for (size_t a = 0; a < experts.size(); ++a) {
      const auto it = std::find(slot_expert.begin(), slot_expert.end(), experts[a]);
      slot_ids[a] = it == slot_expert.end() ? -1 : static_cast<int32_t>(it - slot_expert.begin());
      device_ids[a] = slot_ids[a] < 0 ? -1 : experts[a];
    }
    ASSERT_EQ(slot_ids[2 * k] + slot_ids[2 * k + 1] + slot_ids[2 * k + 2], -3);
    HostMat y(t_n, ty.n_embd, 2);
    rng.FillNormal(y);  // stale: skipped rows must come out as zeros
    Mat ym = y.mat();
    ASSERT_EQ(MoeFfnCpu(pool_, x.mat(), slot_ids.data(), weights.data(), k, arena.gate, arena.up,
                        arena.down, ym),
              KernelStatus::kOk);
    const std::vector<double> want =
        SingleOpsReference(pool_, x, device_ids, weights, k, gq.view, uq.view, dq.view);
    // f32 rounding of the batched and the one-row products (different summation orders) grows
    // with the terms each output sums: n_embd for gate/up, ff for down.
    const double abs_tol = 1e-5 * static_cast<double>(ty.n_embd * ty.ff) / (32 * 48);
    ExpectClose(y, want, abs_tol, 1e-4, "arena moe ffn");
    EXPECT_TRUE(y.PaddingIntact());
    for (int64_t o = 0; o < ty.n_embd; ++o) EXPECT_EQ(y.at(2, o), 0.0f) << o;

    // The host tier's half over the contiguous stacks: the other ids, original numbering; the
    // two halves add up to the whole FFN.
    std::vector<int32_t> host_ids(t_n * k);
    for (size_t a = 0; a < experts.size(); ++a) host_ids[a] = slot_ids[a] < 0 ? experts[a] : -1;
    HostMat yh(t_n, ty.n_embd);
    Mat yhm = yh.mat();
    ASSERT_EQ(MoeFfnCpu(pool_, x.mat(), host_ids.data(), weights.data(), k, gq.view, uq.view,
                        dq.view, yhm),
              KernelStatus::kOk);
    for (int64_t o = 0; o < ty.n_embd; ++o) EXPECT_EQ(yh.at(5, o), 0.0f) << o;
    HostMat sum(t_n, ty.n_embd);
    for (int64_t t = 0; t < t_n; ++t) {
      for (int64_t o = 0; o < ty.n_embd; ++o) sum.at(t, o) = y.at(t, o) + yh.at(t, o);
    }
    ExpectClose(sum, SingleOpsReference(pool_, x, experts, weights, k, gq.view, uq.view, dq.view),
                abs_tol, 1e-4, "both tiers");

    // An id past the arena's slots is refused, nothing written.
    std::vector<int32_t> bad = slot_ids;
    bad[4] = static_cast<int32_t>(slot_expert.size());
    HostMat untouched(t_n, ty.n_embd);
    Mat um = untouched.mat();
    EXPECT_EQ(MoeFfnCpu(pool_, x.mat(), bad.data(), weights.data(), k, arena.gate, arena.up,
                        arena.down, um),
              KernelStatus::kInvalidArgument);
    for (int64_t t = 0; t < t_n; ++t) {
      for (int64_t o = 0; o < ty.n_embd; ++o) ASSERT_EQ(untouched.at(t, o), 0.0f);
    }
  }
  SetMatMulActivations(std::nullopt);
}

}  // namespace
}  // namespace deltaserve::kernels
