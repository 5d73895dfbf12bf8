#include "kernels/backend.h"

namespace deltaserve::kernels {

std::string_view KernelStatusName(KernelStatus status) {
  switch (status) {
    case KernelStatus::kOk: return "ok";
    case KernelStatus::kInvalidArgument: return "invalid argument";
    case KernelStatus::kUnsupportedType: return "unsupported weight type";
    case KernelStatus::kOutOfMemory: return "out of memory";
    case KernelStatus::kDeviceError: return "device error";
  }
  return "unknown";
}

BlockLayout BlockLayoutOf(WeightType type) {
  // Block structs of ggml-common.h: e.g. q4_K = 2 x f16 scales + 12 scale bytes + 128 nibble
  // bytes per 256 values.
  switch (type) {
    case WeightType::kF32: return {1, 4};
    case WeightType::kF16: return {1, 2};
    case WeightType::kBF16: return {1, 2};
    case WeightType::kQ4_0: return {32, 18};
    case WeightType::kQ4_1: return {32, 20};
    case WeightType::kQ5_0: return {32, 22};
    case WeightType::kQ5_1: return {32, 24};
    case WeightType::kQ8_0: return {32, 34};
    case WeightType::kQ4_K: return {256, 144};
    case WeightType::kQ5_K: return {256, 176};
    case WeightType::kQ6_K: return {256, 210};
  }
  return {0, 0};
}

KernelStatus Backend::MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y) {
  if (n < 0 || (n > 0 && (w == nullptr || y == nullptr))) return KernelStatus::kInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (KernelStatus s = MatMul(w[i], x, y[i]); s != KernelStatus::kOk) return s;
  }
  return KernelStatus::kOk;
}

KernelStatus ValidateDeltaNetStep(const DeltaNetStep& s) {
  const int64_t b_n = s.qkv.rows, nk = s.n_k_heads, nv = s.n_v_heads, d = s.head_dim;
  if (!s.qkv.Valid() || !s.z.Valid() || !s.alpha.Valid() || !s.beta.Valid() || !s.out.Valid() ||
      nk <= 0 || nv <= 0 || d <= 0 || nv % nk != 0 || s.conv_kernel < 1 || s.conv_w == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (s.qkv.cols != (2 * nk + nv) * d || s.z.rows != b_n || s.z.cols != nv * d ||
      s.alpha.rows != b_n || s.alpha.cols != nv || s.beta.rows != b_n || s.beta.cols != nv ||
      s.out.rows != b_n || s.out.cols != nv * d) {
    return KernelStatus::kInvalidArgument;
  }
  if (s.ssm_a.data == nullptr || s.ssm_a.n != nv || s.dt_bias.data == nullptr ||
      s.dt_bias.n != nv || s.norm.data == nullptr || s.norm.n != d) {
    return KernelStatus::kInvalidArgument;
  }
  if (b_n == 0) return KernelStatus::kOk;
  if (s.conv_states == nullptr || s.delta_states == nullptr || s.conv_states_host == nullptr ||
      s.delta_states_host == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  for (int64_t b = 0; b < b_n; ++b) {
    if ((s.conv_kernel > 1 && s.conv_states_host[b] == nullptr) ||
        s.delta_states_host[b] == nullptr) {
      return KernelStatus::kInvalidArgument;
    }
  }
  return KernelStatus::kOk;
}

// The composition the engine ran per DeltaNet layer before this op existed, op for op (so the
// CPU backend's results are unchanged bit for bit): gates, conv per sequence, L2 norms, the delta
// rule per sequence, then the gated RMSNorm over every (sequence, head) row.
KernelStatus Backend::DeltaNetDecodeStep(const DeltaNetStep& s) {
  if (const KernelStatus st = ValidateDeltaNetStep(s); st != KernelStatus::kOk) return st;
  const int64_t b_n = s.qkv.rows, nk = s.n_k_heads, nv = s.n_v_heads, d = s.head_dim;
  if (b_n == 0) return KernelStatus::kOk;
#define DS_STEP(call)                                           \
  do {                                                          \
    if (const KernelStatus st_ = (call); st_ != KernelStatus::kOk) return st_; \
  } while (0)
  Mat g = s.alpha, beta = s.beta;
  DS_STEP(DeltaNetGates(g, beta, s.ssm_a, s.dt_bias));
  for (int64_t b = 0; b < b_n; ++b) {
    Mat x = s.qkv.Rows(b, 1);
    DS_STEP(CausalConv1dSilu(x, s.conv_w, s.conv_kernel, s.conv_states_host[b], x));
  }
  Mat q = s.qkv.Cols(0, nk * d), k = s.qkv.Cols(nk * d, nk * d);
  const Mat v = s.qkv.Cols(2 * nk * d, nv * d);
  DS_STEP(L2Norm(q, d, s.l2_eps));
  DS_STEP(L2Norm(k, d, s.l2_eps));
  for (int64_t b = 0; b < b_n; ++b) {
    Mat o = s.out.Rows(b, 1);
    DS_STEP(GatedDeltaRule(q.Rows(b, 1), k.Rows(b, 1), v.Rows(b, 1), g.Rows(b, 1),
                           beta.Rows(b, 1), nk, nv, d, s.delta_states_host[b], o));
  }
  // Rows are (sequence, head) pairs: one call when out and z are contiguous, else one per row.
  if (s.out.stride == s.out.cols && s.z.stride == s.z.cols) {
    Mat o_heads = s.out.Reshaped(d);
    DS_STEP(GatedRmsNorm(o_heads, s.norm, s.z.Reshaped(d), s.norm_eps, o_heads));
  } else {
    for (int64_t b = 0; b < b_n; ++b) {
      Mat o_heads{s.out.data + b * s.out.stride, nv, d, d};
      const Mat z_heads{s.z.data + b * s.z.stride, nv, d, d};
      DS_STEP(GatedRmsNorm(o_heads, s.norm, z_heads, s.norm_eps, o_heads));
    }
  }
#undef DS_STEP
  return KernelStatus::kOk;
}

bool IsWeightType(uint32_t type_id) {
  return BlockLayoutOf(static_cast<WeightType>(type_id)).block_size != 0;
}

bool IsKvCacheType(WeightType type) {
  switch (type) {
    case WeightType::kF32:
    case WeightType::kF16:
    case WeightType::kBF16:
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
      return true;
    default:
      return false;
  }
}

}  // namespace deltaserve::kernels
