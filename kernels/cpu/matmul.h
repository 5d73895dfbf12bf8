// Matrix products and row gathers on GGUF-typed weights for the CPU backend. A weight row is
// decoded from its blocks into a small f32 buffer (one row, in L1/L2) and multiplied with every
// activation row of the batch, so the model is never dequantized as a whole and each weight
// byte is read once per batch. Scalar reference paths exist for every type; AVX2 and AVX-512
// paths are picked at run time from CPUID (see cpu_features.h).
//
// Activations of quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are by
// default quantized to int8 once per call, as llama.cpp does (Q8_0 blocks of 32 with an f16
// scale for the legacy types, Q8_K blocks of 256 for the K-quants), and multiplied with integer
// dot products (AVX-512 VNNI): a register-blocked tile kernel for batches of four rows or more,
// fused one-row kernels (Q8_0, Q4_K, Q5_K, Q6_K) below that. Why int8 is the default:
// - it is what the reference computes, so quantized models track llama.cpp's logits more
//   closely (engine_golden_test, mean |logit diff| vs llama.cpp: tiny-dense-q8_0 0.032 -> 0.018,
//   tiny-dense-q4_k_m 0.043 -> 0.022);
// - it is faster: 4096 x 4096, 2 threads, AVX-512: 2.3-3.1x at T = 64, 2.9-3.9x at T = 512,
//   1.6-2x at T = 1 on Q8_0/Q4_K/Q5_K/Q6_K (bench/matmul_bench.cc); prefill of a 0.8B model
//   1.7-1.9x (deltaserve-bench-engine).
// What it costs: each activation moves by up to half a step, d / 2 with d = amax / 127 of its
// block (32 or 256 values), so a product may differ from the exact f32 one by up to
// sum_k |w_k| * d_k / 2 (plus the f16 rounding of the Q8_0 scale); the errors are independent
// and mostly cancel (~0.6% RMS per value for Gaussian blocks of 32). F32/F16/BF16 weights always
// keep f32 activations, as do the ISA paths without an int8 kernel (AVX2: its maddubs would need
// sign tricks and saturating pairs; the f32 path stays), and Q4_0/Q5_0/Q4_1/Q5_1 batches of one
// to three rows (f32 fused kernels).
// DELTASERVE_MATMUL_ACT=f32|int8 (read once) or SetMatMulActivations picks the mode; int8 is
// used only where the ISA path has an int8 kernel (AVX-512 with VNNI, and the scalar reference).
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// How MatMulCpu multiplies activations with quantized weights (see above).
enum class MatMulActivations {
  kF32,   // weights decoded to f32, f32 products
  kInt8,  // activations quantized to int8 blocks, integer products
};

// The mode in force: the one set by SetMatMulActivations, else DELTASERVE_MATMUL_ACT (read
// once; "f32" or "int8", anything else ignored), else kInt8.
MatMulActivations ActiveMatMulActivations();
// Forces a mode for the whole process (tests, benchmarks); nullopt returns to the default.
void SetMatMulActivations(std::optional<MatMulActivations> mode);

// y[r][o] = sum_i W[o][i] * x[r][i] (Backend::MatMul), parallel over weight rows.
KernelStatus MatMulCpu(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y);

// y[i][r][o] = sum_k w[i][o][k] * x[r][k] for i < n (Backend::MatMulGroup): products sharing
// their input. Where every product takes a fused int8 kernel (batches of up to 16 rows, the
// decode steps) x is quantized once per weight type and all products run as one parallel job;
// otherwise (prefill, f32 activations) as n MatMulCpu calls. Either way each output is bit for
// bit the one MatMulCpu gives.
KernelStatus MatMulGroupCpu(ThreadPool& pool, const WeightView* w, int n, const Mat& x, Mat* y);

// out[i] = row ids[i] of `table`, decoded to f32 (Backend::GetRows). Ids outside
// [0, table.out) give kInvalidArgument.
KernelStatus GetRowsCpu(const WeightView& table, const int32_t* ids, int64_t n, Mat& out);

}  // namespace deltaserve::kernels
