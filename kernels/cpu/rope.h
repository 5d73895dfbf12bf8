// NeoX-style rotary position embedding for the CPU backend (Backend::RopeNeox), MODEL_SPEC §2.3
// step 3: partial rotation of the first n_rot dims of every head, pairs (i, i + n_rot/2).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// In place on x [n_tokens * n_heads][head_dim] (row t * n_heads + h is head h of token t).
// For i < n_rot/2 and angle a = positions[t] * freq_base^(-2i/n_rot):
//   x'[i]           = x[i] cos a - x[i + n_rot/2] sin a,
//   x'[i + n_rot/2] = x[i + n_rot/2] cos a + x[i] sin a.
// Dims n_rot .. head_dim-1 are left unchanged. n_rot is even, 0 < n_rot <= head_dim; x.rows is a
// multiple of n_heads; positions has x.rows / n_heads entries (host memory). Angles, cos and sin
// are computed in double (f32 angles near position 2^18 are spaced 0.03 rad apart) and rounded
// once to f32.
KernelStatus RopeNeoxCpu(ThreadPool& pool, Mat& x, const int32_t* positions, int64_t n_heads,
                         int64_t n_rot, float freq_base);

}  // namespace deltaserve::kernels
