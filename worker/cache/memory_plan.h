// The worker's memory plan: from a model's hyperparameters and weight bytes, the cache types and
// a device (or RAM) budget, how much each part of the serving engine takes (weights, paged
// attention KV, recurrent state slots, forward-pass workspace) and the largest context that fits
// for each number of parallel sequences. The worker calls CheckFits at start-up; the
// deltaserve-plan tool prints RenderMemoryPlan. Formulas: docs/memory_plan.md.
//
//   MemoryPlanInputs in{.hp = hp, .weights = weights, .budget_bytes = 8ull << 30};
//   ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(in));
//   RETURN_IF_ERROR(CheckFits(plan, /*ctx=*/32768, /*n_parallel=*/4));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ggml_types.h"
#include "common/qwen35_hparams.h"
#include "worker/engine/qwen35_workspace.h"

namespace deltaserve::worker {

// --- Parsing ------------------------------------------------------------------------------------

// "8GiB", "512MiB", "64G", "1.5GiB", "4096" -> bytes. Binary multiples for K, M, G, T with or
// without "iB" (64G = 64 GiB), decimal for KB, MB, GB, TB; "B" or no suffix for bytes; suffixes
// are case-insensitive. A fraction is rounded down to whole bytes. Refuses empty text, signs,
// unknown suffixes and sizes of 2^62 bytes or more, naming the text.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

// A KV cache element type: f32, f16, bf16, q8_0, q4_0, q4_1 or q5_0 (case-insensitive). The
// error lists the valid names.
absl::StatusOr<common::GgmlType> ParseCacheType(std::string_view name);

// The element type of the DeltaNet conv window: f32, f16 or bf16.
absl::StatusOr<common::GgmlType> ParseConvStateType(std::string_view name);

// Bits of one value in `type`, block scales not counted (f32 32, f16/bf16 16, q8_0 8,
// q4_0/q4_1 4, q5_0 5); 0 for a type that is not a cache type.
int CacheValueBits(common::GgmlType type);

// --- Figures ------------------------------------------------------------------------------------

// Weight bytes of one GGML type.
struct WeightTypeBytes {
  common::GgmlType type;
  int64_t n_tensors = 0;
  uint64_t bytes = 0;
};

// KV bytes per token of one (K type, V type) pair, over every full-attention layer.
struct KvTokenBytes {
  common::GgmlType k_type;
  common::GgmlType v_type;
  uint64_t k_row_bytes = 0;  // one layer's K row (n_head_kv * head_dim values), with scales
  uint64_t v_row_bytes = 0;  // one layer's V row, with scales
  uint64_t raw_bytes = 0;    // n_attention_layers * 2 rows at the values' bits, no scales
  uint64_t bytes = 0;        // n_attention_layers * (k_row_bytes + v_row_bytes): stored
};

// KV bytes per token for `k` and `v` (both cache types). Fails when a type is not a cache type
// or head_dim is not a whole number of its blocks.
absl::StatusOr<KvTokenBytes> KvBytesPerToken(const common::Qwen35HParams& hp, common::GgmlType k,
                                             common::GgmlType v);

// The (K, V) pairs the plan compares: f32/f32, f16/f16, bf16/bf16, q8_0/q8_0, q8_0/q4_0,
// q5_0/q5_0, q4_1/q4_1, q4_0/q4_0.
absl::Span<const std::pair<common::GgmlType, common::GgmlType>> ComparedKvTypePairs();

// Recurrent state of one sequence (RecurrentStateSlots), bytes. MODEL_SPEC §4.2.
struct RecurrentBytes {
  int64_t n_deltanet_layers = 0;
  uint64_t conv_bytes = 0;   // n_dn * (conv_kernel - 1) * conv_channels * conv element bytes
  uint64_t delta_bytes = 0;  // n_dn * n_v_heads * head_dim_v * head_dim_k * 4 (f32)
  uint64_t total() const { return conv_bytes + delta_bytes; }
};
RecurrentBytes RecurrentBytesPerSequence(const common::Qwen35HParams& hp,
                                         common::GgmlType conv_type);

// A qwen35moe model's routed experts (every MoE layer's ffn_{gate,up,down}_exps) on a device
// budget, split between device memory and host memory (worker/engine/expert_tiers.h): the device
// holds `n_slots` experts in one arena per expert size (ExpertSlotLayout::SlotsFor of the
// bytes given to experts, `arena_bytes` in all); the others are computed on the
// CPU from the model file's mapping (RAM, outside the device budget). --expert-vram sets the
// slots (auto: what the budget leaves after everything else). docs/memory_plan.md, "MoE experts".
struct ExpertSplit {
  bool applies = false;        // a MoE model on a device budget; false: no split, no figures
  int64_t n_moe_layers = 0;    // layers with routed experts
  int64_t n_expert = 0;        // experts per layer
  uint64_t routed_bytes = 0;   // every routed expert stack as the file holds them
  uint64_t slot_bytes = 0;     // one expert's gate + up + down, the largest layer's
  uint64_t split_bytes = 0;    // the bytes given to the slots (what the split was made of)
  uint64_t arena_bytes = 0;    // the slots' bytes (<= split_bytes)
  bool all_on_device = true;   // every stack loaded on the device as in the file (no tiers)
  int64_t n_slots = 0;         // experts in device memory when !all_on_device
  bool auto_sized = true;      // --expert-vram auto (or not given)
  uint64_t requested_bytes = 0;  // --expert-vram BYTES as given (when !auto_sized)

  int64_t n_experts() const { return n_moe_layers * n_expert; }
  // Experts in device memory.
  int64_t device_experts() const { return all_on_device ? n_experts() : n_slots; }
  // Device bytes of the routed experts: every stack, or the slot arena.
  uint64_t device_bytes() const { return all_on_device ? routed_bytes : arena_bytes; }
  // What Qwen35Model::Load's ExpertTierOptions::device_bytes gets: UINT64_MAX for every expert
  // on the device (no tiers), else split_bytes (which Load splits into the same slots).
  uint64_t tier_device_bytes() const;
};

// What the plan is computed from.
struct MemoryPlanInputs {
  common::Qwen35HParams hp;
  std::string model_name;                // for the printed header ("9b q4_k_m", a file name)
  std::vector<WeightTypeBytes> weights;  // tensors the forward pass reads, by type
  common::GgmlType k_type = common::GgmlType::kF16;
  common::GgmlType v_type = common::GgmlType::kF16;
  int64_t page_tokens = 256;  // token positions per KV page
  common::GgmlType conv_state_type = common::GgmlType::kF32;
  int64_t max_batch_tokens = 512;      // tokens of one forward pass (workspace rows)
  int64_t logits_rows = 0;             // logits rows of one pass; 0: max_batch_tokens
  uint64_t budget_bytes = 0;           // device memory (or RAM) the worker may use
  std::string budget_name = "memory";  // "VRAM", "RAM": for messages
  uint64_t fixed_overhead_bytes = 0;   // runtime reserve (CUDA context, allocator slack)
  int n_threads = 1;                   // attention kernel threads (scratch)
  // A GPU budget: the kernel scratch is the backend's device scratch area (device_scratch_bytes,
  // worker/cache/device_memory.h ForwardPassScratchBytes), not the CPU attention kernel's
  // per-thread buffers (which are host memory there).
  bool device_budget = false;
  uint64_t device_scratch_bytes = 0;
  // The routed experts' split (device budgets, MoE models): `weights` lists every tensor; the
  // plan's weight_bytes counts the routed stacks as experts.device_bytes().
  ExpertSplit experts;
};

// The largest context that fits with `n_parallel` sequences.
struct ContextFit {
  int n_parallel = 0;
  int64_t free_bytes = 0;          // budget - fixed_bytes - n * recurrent; negative: no room
  int64_t pages = 0;               // floor(free_bytes / page_bytes), 0 when free_bytes < 0
  int64_t pages_per_sequence = 0;  // floor(pages / n_parallel)
  int64_t max_context = 0;         // pages_per_sequence * page_tokens, at most n_ctx_train
  bool capped = false;             // n_ctx_train, not memory, set max_context
};

// The plan. All sizes in bytes.
struct MemoryPlan {
  MemoryPlanInputs inputs;
  uint64_t weight_bytes = 0;
  int64_t n_attention_layers = 0;
  KvTokenBytes kv;                        // the chosen K/V types
  std::vector<KvTokenBytes> kv_compared;  // ComparedKvTypePairs(), then the chosen pair if new
  RecurrentBytes recurrent;               // per sequence
  std::vector<WorkspaceBuffer> workspace_buffers;
  uint64_t workspace_bytes = 0;
  uint64_t kernel_scratch_bytes = 0;
  uint64_t page_bytes = 0;           // page_tokens * kv.bytes
  std::vector<ContextFit> contexts;  // n_parallel 1, 2, 4, ..., 64

  // weights + workspace + kernel scratch + fixed overhead: what no sequence count changes.
  uint64_t fixed_bytes() const {
    return weight_bytes + workspace_bytes + kernel_scratch_bytes + inputs.fixed_overhead_bytes;
  }
};

// n_parallel values of the plan's table.
inline constexpr int kPlannedParallel[] = {1, 2, 4, 8, 16, 32, 64};

// Computes the plan. Fails on inputs out of range (page_tokens, batch tokens, threads, budget),
// on non-cache types and on a model without attention layers, naming the field.
absl::StatusOr<MemoryPlan> PlanMemory(MemoryPlanInputs inputs);

// The largest context for `n_parallel` sequences (n_parallel >= 1).
ContextFit LargestContext(const MemoryPlan& plan, int n_parallel);

// Bytes needed to serve `n_parallel` sequences of up to `ctx` tokens each: fixed_bytes +
// n_parallel * (recurrent + ceil(ctx / page_tokens) * page_bytes). Saturates at UINT64_MAX.
uint64_t BytesNeeded(const MemoryPlan& plan, int64_t ctx, int n_parallel);

// OK when `n_parallel` sequences of `ctx` tokens fit the budget. ResourceExhausted otherwise,
// with the shortfall, the breakdown and the context table in the message; InvalidArgument for
// ctx or n_parallel below 1 or ctx beyond the model's trained context.
absl::Status CheckFits(const MemoryPlan& plan, int64_t ctx, int n_parallel);

// The context table alone (n_parallel, free bytes, pages, pages per sequence, max context).
std::string RenderContextTable(const MemoryPlan& plan);

// Every figure of the plan as readable text: weights by type, KV bytes per token of each
// compared pair (raw and with scales), recurrent state, workspace, page, the context table.
std::string RenderMemoryPlan(const MemoryPlan& plan);

// The split of a MoE model's routed experts on a device, one line for the worker's start-up log:
// "experts: 1.2 GiB of 9.8 GiB in VRAM (512 of 2,560 experts, 20 %), the rest in RAM". Empty
// when the plan has no split (dense model, host budget).
std::string RenderExpertSplit(const MemoryPlan& plan);

// "8.00 GiB", "512.0 MiB", "12.0 KiB", "100 B".
std::string HumanBytes(uint64_t bytes);

}  // namespace deltaserve::worker
