// What the worker runs on (--device: cpu, cuda:N, or the `sim` test device) and what a GPU costs beyond the memory plan's own figures:
// the parsing of "cpu" / "cuda:N", the CUDA context reserve, and the device scratch area that the
// CUDA launchers share (kernels/cuda/cuda_ops.h), sized as the largest *ScratchBytes() of any
// launcher call one forward pass makes at the planned batch and context. Pure arithmetic: the
// CUDA functions come in as pointers (DeviceScratchFunctions), so this compiles and is tested
// without CUDA; worker/main.cc passes kernels::cuda's in CUDA builds. docs/gpu.md, "VRAM plan".
//
//   ASSIGN_OR_RETURN(DeviceSpec d, ParseDevice("cuda:1"));
//   uint64_t scratch = ForwardPassScratchBytes(hp, batch, ctx, CudaScratchFunctions());
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/qwen35_hparams.h"

namespace deltaserve::worker {

// --device: "cpu", "cuda" (= cuda:0), "cuda:N", or "sim": the test and development device
// (kernels/sim/sim_backend.h; CPU math on memory that behaves like a GPU's, --vram its capacity).
struct DeviceSpec {
  enum class Kind { kCpu, kCuda, kSim };
  Kind kind = Kind::kCpu;
  int index = 0;  // N of cuda:N
  // "cpu", "cuda:N" (canonical) or "sim".
  std::string Name() const;
  // A device with a memory of its own (cuda, sim): budget --vram, the plan a VRAM plan.
  bool has_device_memory() const { return kind != Kind::kCpu; }
};
absl::StatusOr<DeviceSpec> ParseDevice(std::string_view text);

// Device memory a CUDA worker holds beyond its allocations: the primary context (code of every
// kernel of the fat binary for this architecture, the runtime's heaps, printf/malloc heaps,
// stream and event pools) and the driver allocator's rounding. 512 MiB: an H100 context with
// lazy module loading off measures 300-500 MiB (nvidia-smi, the CUDA samples' deviceQuery);
// --overhead adds to it where a machine needs more. To be checked on a GPU (bench/gpu/run.sh
// prints the measured figure: total - free after the worker's start minus its plan).
inline constexpr uint64_t kCudaContextReserveBytes = uint64_t{512} << 20;

// The scratch functions of kernels/cuda/cuda_ops.h (same signatures).
struct DeviceScratchFunctions {
  size_t (*matmul)(int64_t n_tokens, int64_t in, int64_t out) = nullptr;
  size_t (*moe_ffn)(int64_t n_tokens, int64_t k, int64_t n_expert, int64_t in,
                    int64_t ff) = nullptr;
  size_t (*paged_attention)(int64_t n_tokens, int64_t n_head, int64_t head_dim,
                            int64_t n_ctx) = nullptr;
  size_t (*gated_delta_rule)(int64_t n_tokens, int64_t n_v_heads, int64_t head_dim) = nullptr;
};

// One launcher call shape of the forward pass (for tests and the plan's explanation).
struct ScratchQuery {
  enum class Op { kMatMul, kMoeFfn, kPagedAttention, kGatedDeltaRule } op;
  std::string_view what;  // "attn_qkv", "output", "ffn_down", ...
  int64_t args[5] = {};   // the function's arguments in order
};

// Every call shape the engine makes (worker/engine/qwen35.cc) in a pass of up to
// `max_batch_tokens` tokens with up to `logits_rows` logits rows, for sequences of up to `ctx`
// positions: each weight matrix at max_batch_tokens rows (the output head at logits_rows), each
// MatMulGroup also as one product over its concatenated rows (cuda_ops.h has no group figure), MoE
// at max_batch_tokens, and the per-sequence ops (attention, delta rule) at every power of two up
// to min(max_batch_tokens, ctx) tokens and that count itself — one sequence may hold the whole
// batch, and a decode step (1 token) may split the context differently from a prefill — with the
// attention context at ctx.
std::vector<ScratchQuery> ForwardPassScratchQueries(const common::Qwen35HParams& hp,
                                                    int64_t max_batch_tokens, int64_t logits_rows,
                                                    int64_t ctx);

// The scratch area a backend needs for those calls: the largest answer of `f` (a null function
// counts 0). The area is shared by calls that run one after another on one stream, so the
// maximum, not the sum.
uint64_t ForwardPassScratchBytes(const common::Qwen35HParams& hp, int64_t max_batch_tokens,
                                 int64_t logits_rows, int64_t ctx, const DeviceScratchFunctions& f);

}  // namespace deltaserve::worker
