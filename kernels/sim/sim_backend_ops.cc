// The sim device's kernels (sim_backend.h): each checks its arguments through OpGuard (backend
// memory only, opened for the op) and runs the CPU backend's kernel on them.
#include <cstdint>
#include <vector>

#include "kernels/sim/internal/sim_op_guard.h"

namespace deltaserve::kernels {

using sim_internal::Indexed;

KernelStatus SimDeviceBackend::MatMul(const WeightView& w, const Mat& x, Mat& y) {
  OpGuard g(*this, "MatMul");
  g.WeightArg("w", w);
  g.MatArg("x", x);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MatMul(w, x, y);
}

KernelStatus SimDeviceBackend::MatMulGroup(const WeightView* w, int n, const Mat& x,
                                                       Mat* y) {
  OpGuard g(*this, "MatMulGroup");
  g.MatArg("x", x);
  for (int i = 0; i < n && w != nullptr && y != nullptr; ++i) {
    g.WeightArg(Indexed("w", i), w[i]);
    g.MatArg(Indexed("y", i), y[i]);
  }
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MatMulGroup(w, n, x, y);
}

KernelStatus SimDeviceBackend::GetRows(const WeightView& table, const int32_t* ids,
                                                   int64_t n, Mat& out) {
  OpGuard g(*this, "GetRows");
  g.WeightArg("table", table);
  g.Device("ids", ids, n > 0 ? static_cast<size_t>(n) * sizeof(int32_t) : 0);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->GetRows(table, ids, n, out);
}

KernelStatus SimDeviceBackend::RmsNorm(const Mat& x, Vec w, float eps, Mat& y) {
  OpGuard g(*this, "RmsNorm");
  g.MatArg("x", x);
  g.VecArg("w", w);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->RmsNorm(x, w, eps, y);
}

KernelStatus SimDeviceBackend::L2Norm(Mat& x, int64_t group, float eps) {
  OpGuard g(*this, "L2Norm");
  g.MatArg("x", x);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->L2Norm(x, group, eps);
}

KernelStatus SimDeviceBackend::Copy(const Mat& src, Mat& dst) {
  OpGuard g(*this, "Copy");
  g.MatArg("src", src);
  g.MatArg("dst", dst);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->Copy(src, dst);
}

KernelStatus SimDeviceBackend::Add(Mat& x, const Mat& y) {
  OpGuard g(*this, "Add");
  g.MatArg("x", x);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->Add(x, y);
}

KernelStatus SimDeviceBackend::SwiGlu(const Mat& gate, const Mat& up, Mat& out) {
  OpGuard g(*this, "SwiGlu");
  g.MatArg("gate", gate);
  g.MatArg("up", up);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->SwiGlu(gate, up, out);
}

KernelStatus SimDeviceBackend::MulSigmoid(Mat& x, const Mat& gate) {
  OpGuard g(*this, "MulSigmoid");
  g.MatArg("x", x);
  g.MatArg("gate", gate);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MulSigmoid(x, gate);
}

KernelStatus SimDeviceBackend::RopeNeox(Mat& x, const int32_t* positions,
                                                    int64_t n_heads, int64_t n_rot,
                                                    float freq_base) {
  OpGuard g(*this, "RopeNeox");
  g.MatArg("x", x);
  const int64_t tokens = n_heads > 0 ? x.rows / n_heads : 0;
  g.Device("positions", positions, tokens > 0 ? static_cast<size_t>(tokens) * sizeof(int32_t) : 0);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->RopeNeox(x, positions, n_heads, n_rot, freq_base);
}

KernelStatus SimDeviceBackend::StoreKv(const Mat& k, const Mat& v,
                                                   const PagedKvView& kv,
                                                   int64_t first_pos) {
  OpGuard g(*this, "StoreKv");
  g.MatArg("k", k);
  g.MatArg("v", v);
  g.KvArg(kv);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->StoreKv(k, v, kv, first_pos);
}

KernelStatus SimDeviceBackend::PagedAttention(const Mat& q,
                                                          const PagedKvView& kv,
                                                          int64_t n_past, int64_t n_head,
                                                          int64_t n_head_kv, float scale,
                                                          Mat& out) {
  OpGuard g(*this, "PagedAttention");
  g.MatArg("q", q);
  g.KvArg(kv);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->PagedAttention(q, kv, n_past, n_head, n_head_kv, scale, out);
}

KernelStatus SimDeviceBackend::CausalConv1dSilu(const Mat& x, const float* w,
                                                            int64_t kernel, float* state, Mat& y) {
  OpGuard g(*this, "CausalConv1dSilu");
  g.MatArg("x", x);
  const size_t channels = x.cols > 0 ? static_cast<size_t>(x.cols) : 0;
  g.Device("w", w, kernel > 0 ? channels * static_cast<size_t>(kernel) * sizeof(float) : 0);
  g.Device("state", state,
           kernel > 1 ? channels * static_cast<size_t>(kernel - 1) * sizeof(float) : 0);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->CausalConv1dSilu(x, w, kernel, state, y);
}

KernelStatus SimDeviceBackend::GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v,
                                                          const Mat& gate, const Mat& beta,
                                                          int64_t n_k_heads, int64_t n_v_heads,
                                                          int64_t head_dim, float* state,
                                                          Mat& out) {
  OpGuard g(*this, "GatedDeltaRule");
  g.MatArg("q", q);
  g.MatArg("k", k);
  g.MatArg("v", v);
  g.MatArg("g", gate);
  g.MatArg("beta", beta);
  g.Device("state", state,
           n_v_heads > 0 && head_dim > 0
               ? static_cast<size_t>(n_v_heads * head_dim * head_dim) * sizeof(float)
               : 0);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->GatedDeltaRule(q, k, v, gate, beta, n_k_heads, n_v_heads, head_dim, state, out);
}

KernelStatus SimDeviceBackend::GatedRmsNorm(const Mat& x, Vec w, const Mat& z,
                                                        float eps, Mat& y) {
  OpGuard g(*this, "GatedRmsNorm");
  g.MatArg("x", x);
  g.VecArg("w", w);
  g.MatArg("z", z);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->GatedRmsNorm(x, w, z, eps, y);
}

KernelStatus SimDeviceBackend::DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a,
                                                         Vec dt_bias) {
  OpGuard g(*this, "DeltaNetGates");
  g.MatArg("alpha_to_g", alpha_to_g);
  g.MatArg("beta", beta);
  g.VecArg("ssm_a", ssm_a);
  g.VecArg("dt_bias", dt_bias);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->DeltaNetGates(alpha_to_g, beta, ssm_a, dt_bias);
}

KernelStatus SimDeviceBackend::DeltaNetDecodeStep(const DeltaNetStep& s) {
  OpGuard g(*this, "DeltaNetDecodeStep");
  g.MatArg("qkv", s.qkv);
  g.MatArg("z", s.z);
  g.MatArg("alpha", s.alpha);
  g.MatArg("beta", s.beta);
  g.MatArg("out", s.out);
  const size_t channels = s.qkv.cols > 0 ? static_cast<size_t>(s.qkv.cols) : 0;
  g.Device("conv_w", s.conv_w,
           s.conv_kernel > 0 ? channels * static_cast<size_t>(s.conv_kernel) * sizeof(float) : 0);
  g.VecArg("ssm_a", s.ssm_a);
  g.VecArg("dt_bias", s.dt_bias);
  g.VecArg("norm", s.norm);
  const int64_t b_n = std::max<int64_t>(s.qkv.rows, 0);
  const size_t array_bytes = static_cast<size_t>(b_n) * sizeof(float*);
  g.Device("conv_states", s.conv_states, array_bytes);
  g.Device("delta_states", s.delta_states, array_bytes);
  g.Host("conv_states_host", s.conv_states_host, array_bytes);
  g.Host("delta_states_host", s.delta_states_host, array_bytes);
  // The pointers inside the arrays, as the GPU kernels will dereference them.
  const size_t conv_bytes =
      s.conv_kernel > 1 ? channels * static_cast<size_t>(s.conv_kernel - 1) * sizeof(float) : 0;
  const size_t delta_bytes = s.n_v_heads > 0 && s.head_dim > 0
                                 ? static_cast<size_t>(s.n_v_heads * s.head_dim * s.head_dim) *
                                       sizeof(float)
                                 : 0;
  std::vector<float*> conv(static_cast<size_t>(b_n)), delta(static_cast<size_t>(b_n));
  if (b_n > 0 && g.Read(s.conv_states, array_bytes, conv.data()) &&
      g.Read(s.delta_states, array_bytes, delta.data())) {
    for (int64_t b = 0; b < b_n; ++b) {
      g.Device(Indexed("conv_states", b), conv[b], conv_bytes);
      g.Device(Indexed("delta_states", b), delta[b], delta_bytes);
      if (s.conv_states_host != nullptr && s.delta_states_host != nullptr &&
          (s.conv_states_host[b] != conv[b] || s.delta_states_host[b] != delta[b])) {
        g.Fail("state pointer " + std::to_string(b) +
               " in backend memory differs from its host copy (stale arrays)");
      }
    }
  }
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->DeltaNetDecodeStep(s);
}

KernelStatus SimDeviceBackend::MoeRoute(const Mat& logits, int64_t k, int32_t* ids,
                                                    float* weights) {
  OpGuard g(*this, "MoeRoute");
  g.MatArg("logits", logits);
  const size_t n = logits.rows > 0 && k > 0 ? static_cast<size_t>(logits.rows * k) : 0;
  g.Device("ids", ids, n * sizeof(int32_t));
  g.Device("weights", weights, n * sizeof(float));
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MoeRoute(logits, k, ids, weights);
}

KernelStatus SimDeviceBackend::MoeFfn(const Mat& x, const int32_t* ids,
                                                  const float* weights, int64_t k,
                                                  const WeightView& gate_exps,
                                                  const WeightView& up_exps,
                                                  const WeightView& down_exps, Mat& y) {
  OpGuard g(*this, "MoeFfn");
  g.MatArg("x", x);
  const size_t n = x.rows > 0 && k > 0 ? static_cast<size_t>(x.rows * k) : 0;
  g.Device("ids", ids, n * sizeof(int32_t));
  g.Device("weights", weights, n * sizeof(float));
  g.WeightArg("gate_exps", gate_exps);
  g.WeightArg("up_exps", up_exps);
  g.WeightArg("down_exps", down_exps);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MoeFfn(x, ids, weights, k, gate_exps, up_exps, down_exps, y);
}

}  // namespace deltaserve::kernels
