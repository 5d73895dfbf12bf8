#include "kernels/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm_ops.h"
#include "kernels/cpu/rope.h"

namespace deltaserve::kernels {
namespace {

// Backend::Allocate promises 64-byte alignment: one cache line, one AVX-512 vector.
constexpr size_t kAlignment = 64;

void FreeHost(void* /*owner*/, void* data) { std::free(data); }

}  // namespace

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

DeviceBuffer CpuBackend::Allocate(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a block so
  // that an empty handle keeps meaning "out of memory".
  const size_t rounded =
      bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) return {};
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) return {};
  std::memset(data, 0, rounded);
  return DeviceBuffer(data, bytes, &FreeHost, this);
}

KernelStatus CpuBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return KernelStatus::kOk;
  if (dst == nullptr || src == nullptr) return KernelStatus::kInvalidArgument;
  std::memmove(dst, src, bytes);
  return KernelStatus::kOk;
}

KernelStatus CpuBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  return CopyToDevice(dst, src, bytes);
}

KernelStatus CpuBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return KernelStatus::kOk;
  if (dst == nullptr || src == nullptr) return KernelStatus::kInvalidArgument;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (s < d + bytes && d < s + bytes) return KernelStatus::kInvalidArgument;
  std::memcpy(dst, src, bytes);
  return KernelStatus::kOk;
}

const void* CpuBackend::ImportWeights(const void* host, size_t /*bytes*/,
                                      DeviceBuffer& /*storage*/) {
  return host;
}

KernelStatus CpuBackend::MatMul(const WeightView& w, const Mat& x, Mat& y) {
  if (!x.Valid() || !y.Valid() || x.cols != w.in || y.cols != w.out || x.rows != y.rows ||
      w.count != 1 || (w.data == nullptr && w.in > 0 && w.out > 0)) {
    return KernelStatus::kInvalidArgument;
  }
  return MatMulCpu(pool_, w, x, y);
}

KernelStatus CpuBackend::MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y) {
  if (n < 0 || (n > 0 && (w == nullptr || y == nullptr)) || !x.Valid()) {
    return KernelStatus::kInvalidArgument;
  }
  for (int i = 0; i < n; ++i) {
    if (!y[i].Valid() || x.cols != w[i].in || y[i].cols != w[i].out || x.rows != y[i].rows ||
        w[i].count != 1 || (w[i].data == nullptr && w[i].in > 0 && w[i].out > 0)) {
      return KernelStatus::kInvalidArgument;
    }
  }
  return MatMulGroupCpu(pool_, w, n, x, y);
}

KernelStatus CpuBackend::GetRows(const WeightView& table, const int32_t* ids, int64_t n, Mat& out) {
  if (!out.Valid() || n < 0 || out.rows != n || out.cols != table.in ||
      (n > 0 && (ids == nullptr || table.data == nullptr))) {
    return KernelStatus::kInvalidArgument;
  }
  return GetRowsCpu(table, ids, n, out);
}

KernelStatus CpuBackend::RmsNorm(const Mat& x, Vec w, float eps, Mat& y) {
  return RmsNormCpu(pool_, x, w, eps, y);
}

KernelStatus CpuBackend::L2Norm(Mat& x, int64_t group, float eps) {
  return L2NormCpu(pool_, x, group, eps);
}

KernelStatus CpuBackend::Copy(const Mat& src, Mat& dst) { return CopyCpu(pool_, src, dst); }

KernelStatus CpuBackend::Add(Mat& x, const Mat& y) { return AddCpu(pool_, x, y); }

KernelStatus CpuBackend::SwiGlu(const Mat& gate, const Mat& up, Mat& out) {
  return SwiGluCpu(pool_, gate, up, out);
}

KernelStatus CpuBackend::MulSigmoid(Mat& x, const Mat& gate) {
  return MulSigmoidCpu(pool_, x, gate);
}

KernelStatus CpuBackend::RopeNeox(Mat& x, const int32_t* positions, int64_t n_heads, int64_t n_rot,
                                  float freq_base) {
  return RopeNeoxCpu(pool_, x, positions, n_heads, n_rot, freq_base);
}

KernelStatus CpuBackend::StoreKv(const Mat& k, const Mat& v, const PagedKvView& kv,
                                 int64_t first_pos) {
  return StoreKvCpu(k, v, kv, first_pos);
}

KernelStatus CpuBackend::PagedAttention(const Mat& q, const PagedKvView& kv, int64_t n_past,
                                        int64_t n_head, int64_t n_head_kv, float scale,
                                        Mat& out) {
  return PagedAttentionCpu(pool_, q, kv, n_past, n_head, n_head_kv, scale, out);
}

KernelStatus CpuBackend::CausalConv1dSilu(const Mat& x, const float* w, int64_t kernel,
                                          float* state, Mat& y) {
  return CausalConv1dSiluCpu(pool_, x, w, kernel, state, y);
}

KernelStatus CpuBackend::GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v, const Mat& g,
                                        const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                                        int64_t head_dim, float* state, Mat& out) {
  return GatedDeltaRuleCpu(pool_, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out);
}

KernelStatus CpuBackend::GatedRmsNorm(const Mat& x, Vec w, const Mat& z, float eps, Mat& y) {
  return GatedRmsNormCpu(pool_, x, w, z, eps, y);
}

KernelStatus CpuBackend::DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a, Vec dt_bias) {
  return DeltaNetGatesCpu(alpha_to_g, beta, ssm_a, dt_bias);
}

KernelStatus CpuBackend::MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* weights) {
  return MoeRouteCpu(logits, k, ids, weights);
}

KernelStatus CpuBackend::MoeFfn(const Mat& x, const int32_t* ids, const float* weights, int64_t k,
                                const WeightView& gate_exps, const WeightView& up_exps,
                                const WeightView& down_exps, Mat& y) {
  return MoeFfnCpu(pool_, x, ids, weights, k, gate_exps, up_exps, down_exps, y);
}

std::unique_ptr<Backend> MakeCpuBackend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace deltaserve::kernels
