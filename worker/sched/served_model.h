// One model as the worker serves it: the loaded Qwen3.5 model, its tokenizer, the memory plan
// its configuration was checked against, and the paged KV cache, recurrent-state slots,
// forward-pass workspace and scheduler sized by that plan. The gRPC service owns one per model.
// Create refuses, before allocating any cache, a configuration whose ctx x n_parallel does not
// fit the budget (ResourceExhausted, with the plan's context table in the message); what it does
// allocate is everything serving will ever need, so a running worker never runs out of memory.
// Formulas and the measured-RSS check: docs/memory_plan.md ("Serving").
//
//   const uint64_t baseline = MeasureProcessBaseline().total();   // first thing in main()
//   ServingOptions o{.ctx = 8192, .n_parallel = 4, .budget_bytes = 8ull << 30,
//                    .process_baseline_bytes = baseline};
//   ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, ServedModel::Create(path, *backend, o));
//   m->scheduler().Start();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "common/tokenizer.h"
#include "kernels/backend.h"
#include "worker/cache/memory_plan.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/cache/snapshot_cache.h"
#include "worker/engine/expert_tiers.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/constrained_decoding.h"
#include "worker/sampling/ngram_draft.h"
#include "worker/sampling/token_mask.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::worker {

// How a model is served (the worker's command-line flags).
struct ServingOptions {
  int64_t ctx = 4096;  // positions per sequence, prompt + generated (--ctx)
  int n_parallel = 1;  // sequences running at once (--parallel; 0: auto, parallel_auto.h)
  int parallel_auto_cap = 4;  // --parallel auto's cap (the worker sets it by device kind)
  kernels::WeightType k_type = kernels::WeightType::kF16;  // --cache-type-k
  kernels::WeightType v_type = kernels::WeightType::kF16;  // --cache-type-v
  int64_t page_tokens = 256;                               // --page-tokens
  int64_t step_tokens = 512;  // tokens per engine step, decode and prompt chunks (--batch-tokens)
  int64_t max_waiting = 256;  // queued requests beyond which Submit refuses
  bool speculation = false;   // n-gram drafting (--speculation)
  // Decode steps as CUDA graphs where the backend can capture them (--cuda-graphs on|off;
  // Qwen35Model::set_step_graphs).
  bool step_graphs = true;
  NgramDraftOptions ngram;    // --ngram-min, --draft-max, ...
  uint64_t budget_bytes = 0;  // --ram / --vram: the whole budget, bytes
  std::string budget_name = "RAM";    // "RAM" or "VRAM", for messages
  uint64_t fixed_overhead_bytes = 0;  // --overhead: runtime use the plan cannot know (CUDA)
  // On a GPU (the backend's memory is not host memory): the CUDA context reserve
  // (kCudaContextReserveBytes, worker/cache/device_memory.h) and the backend's scratch area
  // (ForwardPassScratchBytes), both counted in the VRAM plan. Models sharing one backend share
  // both: the worker gives them to the first model only, like process_baseline_bytes.
  uint64_t device_context_bytes = 0;
  uint64_t device_scratch_bytes = 0;
  // What the process costs before any model is loaded: MeasureProcessBaseline().total() taken
  // first thing in main(). Counted once per process, so give it to the first model only; counted
  // only when the budget is host memory (CPU backend).
  uint64_t process_baseline_bytes = 0;
  int n_threads = 1;  // threads of the backend's pool (attention kernel scratch)
  // Session snapshots (docs/snapshots.md): RAM for snapshot state copies (--snapshot-ram; unset:
  // a quarter of the RAM left free once the plan's memory is taken; 0: snapshots off) and the
  // tokens between snapshots inside one long message (--snapshot-interval).
  std::optional<uint64_t> snapshot_ram_bytes;
  int64_t snapshot_interval = 1024;
  // Reasoning tokens a request may generate before the worker closes the block
  // (--reasoning-budget; GenerateRequest.reasoning_budget overrides it); -1: no limit.
  int32_t reasoning_budget = -1;
  // MoE experts on a device (docs/moe_placement.md; ignored on a host-memory backend and for
  // dense models). expert_vram_bytes (--expert-vram): device bytes for the routed experts of a
  // qwen35moe model; unset: auto, what the budget leaves after everything else, at most every
  // expert. The memory plan rounds it down to whole expert slots (MemoryPlan::experts).
  std::optional<uint64_t> expert_vram_bytes;
  // Half-life of the decaying routing counts, seconds (--expert-half-life), and the bytes of
  // expert copies per engine step while a placement is being reached (--expert-move-bytes).
  double expert_half_life_seconds = 60;
  uint64_t expert_move_bytes = uint64_t{64} << 20;
  // Called with the fraction of the weights read (0..1) while the model loads (the worker's
  // deltaserve_worker_model_load_progress); may be empty.
  std::function<void(double)> load_progress;
};

// What serving needs beyond the figures of MemoryPlan, bytes; the plan carries the total as its
// fixed overhead (MemoryPlanInputs::fixed_overhead_bytes). Host terms count only when the budget
// is host memory (`host_counted`: the CPU backend); on a GPU they are RAM, not VRAM.
struct ServingOverhead {
  uint64_t user = 0;            // ServingOptions::fixed_overhead_bytes
  uint64_t device_context = 0;  // ServingOptions::device_context_bytes (device budgets only)
  uint64_t snapshot_slots = 0;  // speculation: n_parallel spare recurrent-state slots
  uint64_t zero_slot = 0;       // the slot pool's zeroed source slot (RecurrentStateSlots::Zero)
  uint64_t page_tables = 0;     // the engine's page-table and DeltaNet state-pointer buffers at
                                // their largest, while regrown
  bool host_counted = false;
  uint64_t process_baseline = 0;       // ServingOptions::process_baseline_bytes
  uint64_t tokenizer = 0;              // TokenizerTableBytes
  uint64_t gguf_index = 0;             // the GGUF reader's string views and tensor infos
  uint64_t mapped_beyond_weights = 0;  // GGUF header, unread tensors, padding: mapped, resident
  uint64_t host_logits = 0;            // the scheduler's host copy of one pass's logits
  uint64_t sampler_scratch = 0;        // the stepping thread's full-vocabulary sampler buffers
  uint64_t token_histories = 0;        // every sequence's token ids, ctx each
  uint64_t pass_vectors = 0;           // per-pass host vectors (ids, positions, page tables,
                                       // DeltaNet state pointers, MoE: every layer's expert ids)
  uint64_t moe_kernel = 0;  // the CPU MoE kernel's per-call buffers, every token on one expert

  uint64_t total() const;
  // One line per term, for logs and the refusal message.
  std::string Render() const;
};

// The batch shape the scheduler can produce and the engine reserves for; the plan's
// max_batch_tokens and logits_rows.
struct ServingBatchShape {
  int64_t scheduler_step_tokens = 0;  // max(step_tokens, n_parallel * (1 + draft_max))
  int64_t max_batch_tokens = 0;       // min(scheduler_step_tokens, n_parallel * ctx)
  // Without speculation one row per sequence (n_parallel); with it, every fed position of a
  // drafting sequence, and a prompt's last chunk drafts too: max_batch_tokens.
  int64_t logits_rows = 0;
};
ServingBatchShape BatchShapeFor(const ServingOptions& options);

// Bytes the tokenizer built from `file` keeps resident (computed, not measured), plus what
// building it holds transiently: per vocabulary entry its byte-level text and decoded piece
// (libstdc++ strings: 32 B, heap blocks for more than 15 bytes, glibc chunk rounding) and its type
// byte; the text->id and merge Swiss tables at the capacity reserve() gives; the merge strings
// read while building. Not counted: Encode's word cache (at most 65,536 words) and the 1.1 MB
// code-point class table Encode fills on first use; the serving path receives token ids and
// only decodes.
uint64_t TokenizerTableBytes(const common::GgufFile& file, const common::Tokenizer& tokenizer);

// VmRSS / VmHWM of this process from /proc/self/status, bytes; 0 when unreadable.
uint64_t ProcessResidentBytes();
uint64_t ProcessPeakResidentBytes();

// The process's own cost, measured before a model is opened: what is resident (binary, shared
// libraries, libc and allocator state, static initialisers) plus the part of the executable's own
// file mappings not yet paged in, which serving will run (kernels, engine, scheduler). Library
// code and tables first touched later (libm's tables, parts of libstdc++ and Abseil) are not
// counted: docs/memory_plan.md gives their measured size.
struct ProcessBaseline {
  uint64_t resident_bytes = 0;              // VmRSS
  uint64_t executable_paged_out_bytes = 0;  // executable mappings: size - resident (smaps)
  uint64_t total() const { return resident_bytes + executable_paged_out_bytes; }
};
ProcessBaseline MeasureProcessBaseline();

// The model's reasoning markup, from its vocabulary: `<think>` and the tokens of `</think>\n\n`
// (what the worker writes when a reasoning budget runs out). start < 0 when the vocabulary has
// no `<think>` / `</think>` tokens: no budget applies then.
struct ReasoningTokens {
  int32_t start = -1;
  std::vector<int32_t> end;
};

// True when `prompt` leaves a reasoning block open: its last `start` comes after its last
// `end_first` (a generation prompt that ends in `<think>\n`).
bool PromptOpensReasoning(absl::Span<const int32_t> prompt, int32_t start, int32_t end_first);

// A configuration's plan as Create checks it.
struct PlannedServing {
  MemoryPlan plan;
  ServingOverhead overhead;
  ServingBatchShape shape;
};

// What Qwen35Model::Load gets for the routed experts of `plan` (its ExpertSplit): device_bytes
// UINT64_MAX (every expert on the device, no tiers) unless the plan splits them, then the slot
// arena's bytes; host_threads options.n_threads.
ExpertTierOptions ExpertTierOptionsFor(const MemoryPlan& plan, const ServingOptions& options);

// See the file comment.
class ServedModel {
 public:
  // The plan Create would check, without a backend: reads the GGUF's header and tensor infos
  // (and builds the tokenizer when `host_memory`, whose terms only a host budget counts) and
  // checks ctx x n_parallel against the budget, with Create's ResourceExhausted message. A GPU
  // worker calls it for every model before it makes its backend, so nothing is allocated on the
  // device for a configuration that does not fit.
  static absl::StatusOr<PlannedServing> Plan(const std::string& path, const ServingOptions& options,
                                             bool host_memory);

  // Reads `path`'s header, builds its tokenizer, plans memory for `options` and checks
  // ctx x n_parallel against the budget (ResourceExhausted with the plan when it does not fit;
  // nothing beyond the file's mapping and the tokenizer has been allocated then, and nothing in
  // the backend), then loads the weights into the backend (a GPU copies them). Then allocates the
  // KV cache (n_parallel * ceil(ctx / page_tokens) pages), the state slots (n_parallel, twice that
  // with speculation) and the scheduler, reads the weights in, and runs a warm-up forward pass at
  // the planned batch shape so the workspace is allocated at its planned size before serving.
  // InvalidArgument for options out of range, naming the field.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Create(const std::string& path,
                                                             kernels::Backend& backend,
                                                             const ServingOptions& options);
  ~ServedModel();
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  // Not started: the owner calls scheduler().Start() (or Step() in tests).
  Scheduler& scheduler() { return *scheduler_; }
  const MemoryPlan& plan() const { return plan_; }
  const ServingOverhead& overhead() const { return overhead_; }
  const ServingBatchShape& batch_shape() const { return shape_; }
  const ServingOptions& options() const { return options_; }
  // Bytes the plan says this configuration needs at its peak: BytesNeeded(plan, ctx, n_parallel).
  uint64_t planned_bytes() const;
  const common::Tokenizer& tokenizer() const { return *tokenizer_; }
  Qwen35Model& model() { return *model_; }
  // Ids that end generation (Tokenizer::IsEndOfGeneration), given to the scheduler.
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  // Ids the sampler may pick: min(tokenizer entries, embedding rows).
  int32_t n_valid_tokens() const { return n_valid_; }
  const PagedKvCache& kv_cache() const { return *cache_; }
  const ReasoningTokens& reasoning_tokens() const { return reasoning_; }
  // Constrained decoding (docs/structured_outputs.md): compiled output constraints, and the
  // vocabulary's token trie, built on the first call (it is not in the memory plan: a worker
  // that never sees a constraint never pays for it). Both thread-safe.
  GrammarCache& grammar_cache() { return grammar_cache_; }
  std::shared_ptr<const TokenTrie> token_trie();
  const RecurrentStateSlots& state_slots() const { return *slots_; }
  // The RAM tier of session snapshots (enabled() false when --snapshot-ram is 0).
  SnapshotCache& snapshots() { return *snapshots_; }
  const SnapshotCache& snapshots() const { return *snapshots_; }
  // The same caches as shared owners, for the Redis tier (redis_snapshot_tier.h).
  std::shared_ptr<SnapshotCache> shared_snapshots() const { return snapshots_; }
  std::shared_ptr<const PagedKvCache> shared_kv_cache() const { return cache_; }

 private:
  ServedModel() = default;
  absl::Status WarmUp();

  ServingOptions options_;
  ServingBatchShape shape_;
  ServingOverhead overhead_;
  MemoryPlan plan_;
  std::vector<int32_t> eos_;
  int32_t n_valid_ = 0;
  ReasoningTokens reasoning_;
  GrammarCache grammar_cache_;
  std::once_flag trie_once_;
  std::shared_ptr<const TokenTrie> trie_;
  // Declaration order is destruction order reversed: the scheduler goes first, the model last.
  std::unique_ptr<Qwen35Model> model_;
  std::unique_ptr<common::Tokenizer> tokenizer_;
  std::shared_ptr<PagedKvCache> cache_;
  std::shared_ptr<RecurrentStateSlots> slots_;
  std::shared_ptr<SnapshotCache> snapshots_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace deltaserve::worker
