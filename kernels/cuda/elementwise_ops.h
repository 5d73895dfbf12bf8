// Launchers of the ops CudaBackend computes with its own kernels (elementwise.cuh, norm.cuh,
// rope.cuh, conv1d.cuh, moe_route.cuh), with cuda_ops.h's contract: device pointers, the CPU
// backend's argument checks (elementwise_checks.h) before anything is launched, work only
// enqueued on ctx.stream (graph-capturable), kDeviceError when a launch fails. None needs
// scratch memory. Semantics: the same-named methods of kernels/backend.h.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"

namespace deltaserve::kernels::cuda {

KernelStatus LaunchRmsNorm(const LaunchContext& ctx, const Mat& x, Vec w, float eps, Mat& y);
KernelStatus LaunchL2Norm(const LaunchContext& ctx, Mat& x, int64_t group, float eps);
KernelStatus LaunchCopy(const LaunchContext& ctx, const Mat& src, Mat& dst);
KernelStatus LaunchAdd(const LaunchContext& ctx, Mat& x, const Mat& y);
KernelStatus LaunchSwiGlu(const LaunchContext& ctx, const Mat& gate, const Mat& up, Mat& out);
KernelStatus LaunchMulSigmoid(const LaunchContext& ctx, Mat& x, const Mat& gate);
// positions: [x.rows / n_heads] int32 in device memory.
KernelStatus LaunchRopeNeox(const LaunchContext& ctx, Mat& x, const int32_t* positions,
                            int64_t n_heads, int64_t n_rot, float freq_base);
KernelStatus LaunchCausalConv1dSilu(const LaunchContext& ctx, const Mat& x, const float* w,
                                    int64_t kernel, float* state, Mat& y);
KernelStatus LaunchGatedRmsNorm(const LaunchContext& ctx, const Mat& x, Vec w, const Mat& z,
                                float eps, Mat& y);
KernelStatus LaunchDeltaNetGates(const LaunchContext& ctx, Mat& alpha_to_g, Mat& beta, Vec ssm_a,
                                 Vec dt_bias);
// ids, weights: [logits.rows][k] in device memory.
KernelStatus LaunchMoeRoute(const LaunchContext& ctx, const Mat& logits, int64_t k, int32_t* ids,
                            float* weights);

}  // namespace deltaserve::kernels::cuda
