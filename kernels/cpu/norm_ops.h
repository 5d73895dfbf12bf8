// Row-wise normalisations and element-wise ops of the CPU backend (Backend::RmsNorm, L2Norm,
// GatedRmsNorm, Copy, Add, SwiGlu, MulSigmoid, DeltaNetGates). Each function checks its shapes
// and returns kInvalidArgument on a mismatch; all arithmetic is f32 with f32 accumulators, rows
// of big batches are split over the pool.
//
// Layouts: every Mat is row-major [rows][cols] f32, rows `stride` floats apart (a column range of
// a wider matrix is accepted as is). Outputs may alias their inputs where the comment says so.
#pragma once

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// y = x / sqrt(mean(x^2) + eps) * w per row; w.data null means no weight (w.n is then ignored),
// else w.n == x.cols. y may alias x.
KernelStatus RmsNormCpu(ThreadPool& pool, const Mat& x, Vec w, float eps, Mat& y);

// x = x / max(||x||_2, eps) over each run of `group` consecutive columns of every row (one head),
// in place; x.cols is a multiple of group (GGUF_QWEN35.md "Numerics": DeltaNet q and k).
KernelStatus L2NormCpu(ThreadPool& pool, Mat& x, int64_t group, float eps);

// y = x / sqrt(mean(x^2) + eps) * w * silu(z) per row; rows are (token, head) pairs, w [cols]
// shared by all rows (DeltaNet output norm, MODEL_SPEC §2.4 step 7, plain weight). z has x's
// shape; y may alias x or z.
KernelStatus GatedRmsNormCpu(ThreadPool& pool, const Mat& x, Vec w, const Mat& z, float eps,
                             Mat& y);

// dst = src (same rows and cols, strides may differ); the two must not overlap.
KernelStatus CopyCpu(ThreadPool& pool, const Mat& src, Mat& dst);

// x += y (same shape).
KernelStatus AddCpu(ThreadPool& pool, Mat& x, const Mat& y);

// out = silu(gate) * up (same shape); out may alias gate or up.
KernelStatus SwiGluCpu(ThreadPool& pool, const Mat& gate, const Mat& up, Mat& out);

// x *= sigmoid(gate) element-wise when gate.cols == x.cols, or by one gate value per row when
// gate.cols == 1 (the shared-expert gate of MODEL_SPEC §2.6).
KernelStatus MulSigmoidCpu(ThreadPool& pool, Mat& x, const Mat& gate);

// The DeltaNet decay and write strength, in place on [T][n_v_heads]:
// g = ssm_a[h] * softplus(alpha + dt_bias[h]) (ssm_a stores -exp(A_log), so g < 0) and
// beta = sigmoid(beta). ssm_a.n == dt_bias.n == n_v_heads == alpha_to_g.cols == beta.cols.
KernelStatus DeltaNetGatesCpu(Mat& alpha_to_g, Mat& beta, Vec ssm_a, Vec dt_bias);

}  // namespace deltaserve::kernels
