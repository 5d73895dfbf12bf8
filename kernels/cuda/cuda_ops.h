// The launchers of the CUDA backend: one function per op of kernels/backend.h that is not a
// simple element-wise op, each implemented in its own .cu file (named below) and called by
// CudaBackend (cuda_backend.cu), which owns the stream, the device memory and the scratch area.
//
// Contract of every launcher:
// - Pointers in Mat, Vec, WeightView, KvPool and the id/position/page-table arrays are device
//   pointers (backend memory); sizes and the WeightView/Mat structs themselves are host values.
// - It checks its shapes first and returns kInvalidArgument (kUnsupportedType for a weight or
//   cache type it has no kernel for) before launching anything, with the same rules as the CPU
//   backend (kernels/cpu/cpu_backend.cc), so both backends refuse the same calls.
// - It only enqueues work on ctx.stream: no allocation, no synchronisation, no host copy. That
//   keeps a decode step capturable as a CUDA graph. Temporary device memory comes from
//   ctx.scratch; a launcher whose *ScratchBytes() exceeds ctx.scratch_bytes returns
//   kOutOfMemory (the memory planner sizes the scratch from the same functions).
// - A failed launch (cudaGetLastError) is kDeviceError.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

namespace deltaserve::kernels::cuda {

// What every launcher gets from the backend.
struct LaunchContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;       // streaming multiprocessors (grid sizing)
  int cc_major = 0;       // compute capability (tensor-core paths: 8.0 and above)
  int cc_minor = 0;
  void* scratch = nullptr;  // device memory owned by the backend, 256-byte aligned
  size_t scratch_bytes = 0;
};

// --- matmul.cu: decode GEMV and prefill GEMM on GGUF block types, embedding rows --------------
KernelStatus LaunchMatMul(const LaunchContext& ctx, const WeightView& w, const Mat& x, Mat& y);
KernelStatus LaunchMatMulGroup(const LaunchContext& ctx, const WeightView* w, int n, const Mat& x,
                               Mat* y);
KernelStatus LaunchGetRows(const LaunchContext& ctx, const WeightView& table, const int32_t* ids,
                           int64_t n, Mat& out);
size_t MatMulScratchBytes(int64_t n_tokens, int64_t in, int64_t out);

// --- moe_ffn.cu: grouped expert FFN (tokens sorted by expert) ---------------------------------
KernelStatus LaunchMoeFfn(const LaunchContext& ctx, const Mat& x, const int32_t* ids,
                          const float* weights, int64_t k, const WeightView& gate_exps,
                          const WeightView& up_exps, const WeightView& down_exps, Mat& y);
size_t MoeFfnScratchBytes(int64_t n_tokens, int64_t k, int64_t n_expert, int64_t in, int64_t ff);

// --- attention.cu: KV stores and paged attention (flash-decoding / tiled causal prefill) ------
KernelStatus LaunchStoreKv(const LaunchContext& ctx, const Mat& k, const Mat& v,
                           const PagedKvView& kv, int64_t first_pos);
KernelStatus LaunchPagedAttention(const LaunchContext& ctx, const Mat& q, const PagedKvView& kv,
                                  int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                                  Mat& out);
size_t PagedAttentionScratchBytes(int64_t n_tokens, int64_t n_head, int64_t head_dim,
                                  int64_t n_ctx);

// --- gated_delta_rule.cu: fused decode step and chunked WY prefill ----------------------------
KernelStatus LaunchGatedDeltaRule(const LaunchContext& ctx, const Mat& q, const Mat& k,
                                  const Mat& v, const Mat& g, const Mat& beta, int64_t n_k_heads,
                                  int64_t n_v_heads, int64_t head_dim, float* state, Mat& out);
size_t GatedDeltaRuleScratchBytes(int64_t n_tokens, int64_t n_v_heads, int64_t head_dim);

// --- gdn_decode.cu: the fused DeltaNet decode step of B sequences (backend.h DeltaNetStep) ----
// Reads the states through step.conv_states / step.delta_states (device arrays); the host copies
// are only checked. head_dim above 256 or more than 65535 sequences: kUnsupportedType. No scratch.
KernelStatus LaunchDeltaNetDecodeStep(const LaunchContext& ctx, const DeltaNetStep& step);

}  // namespace deltaserve::kernels::cuda
