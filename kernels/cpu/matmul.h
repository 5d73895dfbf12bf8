// Matrix products and row gathers on GGUF-typed weights for the CPU backend. A weight row is
// decoded from its blocks into a small f32 buffer (one row, in L1/L2) and multiplied with every
// activation row of the batch, so the model is never dequantized as a whole and each weight
// byte is read once per batch. Scalar reference paths exist for every type; AVX2 and AVX-512
// paths are picked at run time from CPUID (see cpu_features.h).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// y[r][o] = sum_i W[o][i] * x[r][i] (Backend::MatMul), parallel over weight rows.
KernelStatus MatMulCpu(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y);

// out[i] = row ids[i] of `table`, decoded to f32 (Backend::GetRows). Ids outside
// [0, table.out) give kInvalidArgument.
KernelStatus GetRowsCpu(const WeightView& table, const int32_t* ids, int64_t n, Mat& out);

}  // namespace deltaserve::kernels
