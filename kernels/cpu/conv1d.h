// Causal depthwise conv1d + SiLU with a rolling input window, for the CPU backend
// (Backend::CausalConv1dSilu), MODEL_SPEC §2.4 step 2: the DeltaNet short convolution over the
// q|k|v channels of one sequence, continuing from the window a previous call left behind.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// x, y [T][C]; w [C][kernel] (GGUF ssm_conv1d {kernel, C}, tap kernel-1 meets the newest input);
// state [kernel-1][C]: the inputs before x[0], oldest first (zeros at a sequence start).
//   y[t][c] = silu(sum_j w[c][j] * in[t - (kernel-1) + j][c]),  in[-i] = state[kernel-1-i].
// On return state holds the last kernel-1 inputs (the window the next call continues from).
// y may alias x (every input is read before the output over it is written). state may be null
// when kernel == 1.
KernelStatus CausalConv1dSiluCpu(ThreadPool& pool, const Mat& x, const float* w, int64_t kernel,
                                 float* state, Mat& y);

}  // namespace deltaserve::kernels
