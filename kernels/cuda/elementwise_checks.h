// Argument checks of the ops CudaBackend computes with its own kernels (norms, element-wise
// ops, RoPE, conv1d, DeltaNet gates, MoE routing): the same rules as the CPU backend
// (kernels/cpu/norm_ops.cc, rope.cc, conv1d.cc, moe.cc), mirrored here because those live
// inside the CPU ops. Each returns kOk when the call is well-formed (possibly with nothing to
// do) and kInvalidArgument otherwise; none dereferences a pointer, so they run on device views.
// tests/kernels/cuda_index_math_test.cc holds them to the CPU backend's answers case by case.
#pragma once

#include <cstdint>

#include "kernels/backend.h"

namespace deltaserve::kernels::cuda {

inline bool SameShape(const Mat& a, const Mat& b) { return a.rows == b.rows && a.cols == b.cols; }

inline KernelStatus Refuse(bool bad) {
  return bad ? KernelStatus::kInvalidArgument : KernelStatus::kOk;
}

inline KernelStatus CheckRmsNorm(const Mat& x, Vec w, const Mat& y) {
  return Refuse(!x.Valid() || !y.Valid() || !SameShape(x, y) ||
                (w.data != nullptr && w.n != x.cols));
}

inline KernelStatus CheckL2Norm(const Mat& x, int64_t group) {
  return Refuse(!x.Valid() || group <= 0 || x.cols % group != 0);
}

inline KernelStatus CheckCopy(const Mat& src, const Mat& dst) {
  return Refuse(!src.Valid() || !dst.Valid() || !SameShape(src, dst));
}

inline KernelStatus CheckAdd(const Mat& x, const Mat& y) {
  return Refuse(!x.Valid() || !y.Valid() || !SameShape(x, y));
}

inline KernelStatus CheckSwiGlu(const Mat& gate, const Mat& up, const Mat& out) {
  return Refuse(!gate.Valid() || !up.Valid() || !out.Valid() || !SameShape(gate, up) ||
                !SameShape(gate, out));
}

inline KernelStatus CheckMulSigmoid(const Mat& x, const Mat& gate) {
  return Refuse(!x.Valid() || !gate.Valid() || gate.rows != x.rows ||
                (gate.cols != x.cols && gate.cols != 1));
}

inline KernelStatus CheckRopeNeox(const Mat& x, const int32_t* positions, int64_t n_heads,
                                  int64_t n_rot, float freq_base) {
  if (x.rows < 0 || x.cols < 0 || x.stride < x.cols || n_heads <= 0 || n_rot <= 0 ||
      n_rot % 2 != 0 || n_rot > x.cols || x.rows % n_heads != 0 || !(freq_base > 0.0f)) {
    return KernelStatus::kInvalidArgument;
  }
  if (x.rows == 0) return KernelStatus::kOk;
  return Refuse(x.data == nullptr || positions == nullptr);
}

inline KernelStatus CheckCausalConv1dSilu(const Mat& x, const float* w, int64_t kernel,
                                          const float* state, const Mat& y) {
  return Refuse(!x.Valid() || !y.Valid() || x.rows != y.rows || x.cols != y.cols || kernel < 1 ||
                w == nullptr || (kernel > 1 && state == nullptr));
}

inline KernelStatus CheckGatedRmsNorm(const Mat& x, Vec w, const Mat& z, const Mat& y) {
  return Refuse(!x.Valid() || !z.Valid() || !y.Valid() || !SameShape(x, z) || !SameShape(x, y) ||
                w.data == nullptr || w.n != x.cols);
}

inline KernelStatus CheckDeltaNetGates(const Mat& alpha_to_g, const Mat& beta, Vec ssm_a,
                                       Vec dt_bias) {
  const int64_t n = alpha_to_g.cols;
  return Refuse(!alpha_to_g.Valid() || !beta.Valid() || !SameShape(alpha_to_g, beta) ||
                ssm_a.data == nullptr || dt_bias.data == nullptr || ssm_a.n != n || dt_bias.n != n);
}

inline KernelStatus CheckMoeRoute(const Mat& logits, int64_t k, const int32_t* ids,
                                  const float* weights) {
  if (!logits.Valid() || k <= 0 || k > logits.cols) return KernelStatus::kInvalidArgument;
  if (logits.rows == 0) return KernelStatus::kOk;
  return Refuse(ids == nullptr || weights == nullptr);
}

}  // namespace deltaserve::kernels::cuda
