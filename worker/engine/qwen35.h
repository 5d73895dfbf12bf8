// The Qwen3.5 hybrid model (GGUF `qwen35` dense and `qwen35moe`): the forward pass of
// MODEL_SPEC §2 over a batch of tokens from one or more sequences, each with its own position,
// recurrent state and attention KV. Written once against kernels::Backend.
//
//   ASSIGN_OR_RETURN(auto model, Qwen35Model::Load("model.gguf", *backend));
//   ASSIGN_OR_RETURN(auto seq, model->NewSequence(/*max_tokens=*/4096));
//   std::vector<float> logits;   // [rows][n_vocab]
//   RETURN_IF_ERROR(model->Forward({{seq.get(), prompt_ids, /*all_logits=*/false}}, logits));
//
// A qwen35moe model on a device whose expert budget holds fewer than all routed experts keeps
// them in two tiers (expert_tiers.h; Load with ExpertTierOptions): its MoE layers run the
// device-resident experts on the backend and the others on CPU threads, in the same pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "kernels/backend.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/engine/expert_layout.h"
#include "worker/engine/expert_tiers.h"
#include "worker/engine/forward_counters.h"
#include "worker/engine/model_weights.h"
#include "worker/engine/sequence_state.h"

namespace deltaserve::worker {

// What a loaded model needs in memory, for the plan printed before allocating.
struct ModelMemory {
  // Weights the backend holds (or maps, on the CPU): every tensor the forward pass reads, except
  // that a model with expert tiers counts its device expert arena instead of the routed stacks.
  uint64_t weight_bytes = 0;
  uint64_t state_bytes_per_sequence = 0;  // conv windows + delta-rule matrices, f32
  uint64_t kv_bytes_per_token = 0;        // K and V of every attention layer, cache types
  // MoE models (zeros for dense ones; expert_layout.h): every routed expert stack as the file
  // holds them, wherever they live; one expert's gate + up + down per layer; the largest slot
  // of the device expert arenas (ExpertSlotBytes); with tiers, the slots and the routed bytes left
  // in host memory (the file's mapping, outside weight_bytes).
  uint64_t routed_expert_bytes = 0;
  std::vector<uint64_t> expert_bytes_per_layer;
  uint64_t expert_slot_bytes = 0;
  int64_t expert_slots = 0;
  uint64_t host_expert_bytes = 0;
};

// KV cache types of a sequence made by NewSequence(max_tokens): f32 unless asked otherwise, so
// that the engine alone reproduces llama.cpp's f32 logits.
inline KvCacheOptions F32KvCache() {
  return {kernels::WeightType::kF32, kernels::WeightType::kF32, 256};
}

// A copy of a sequence's recurrent state taken inside a forward pass, after the first `after`
// tokens of its entry (0 < after < the entry's token count): what the state would be had the
// pass stopped there. The attention KV needs no copy: positions [0, n_past + after) are in the
// sequence's pages once the pass has run. A session snapshot at a position inside a prefill
// chunk takes its state from a tap, so the chunk need not stop there (a small chunk costs
// nearly a decode step per token on the CPU). `host` holds RecurrentStateLayout::bytes():
// [DeltaNet layer][conv window | delta-rule matrices] f32, the layout of a state slot.
struct StateTap {
  int64_t after = 0;
  uint8_t* host = nullptr;
};

// Tokens of one sequence in a forward pass.
struct BatchEntry {
  SequenceState* sequence;
  absl::Span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token, else only for the last one
  bool no_logits = false;   // no logits rows at all (a prompt chunk that is not the last)
  int64_t last_logits = 0;  // > 0: rows for the last this-many tokens (speculative drafts)
  // Recurrent state copies inside this entry's tokens, `after` strictly ascending. The delta
  // rule and the conv run in pieces split at these positions, exactly as chunks ending there
  // would (the projections and attention run once over all the tokens).
  absl::Span<const StateTap> taps = {};

  // Logits rows this entry asks for, of its n tokens.
  int64_t LogitsRows() const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (no_logits) return 0;
    if (all_logits) return n;
    return last_logits > 0 ? std::min(last_logits, n) : 1;
  }
};

// See the file comment.
class Qwen35Model {
 public:
  // Maps `path`, reads and validates hyperparameters and tensors. Nothing is read from disk yet
  // on the CPU backend (weights stay in the mapping): see Memory() and Prefetch().
  static absl::StatusOr<std::unique_ptr<Qwen35Model>> Load(const std::string& path,
                                                           kernels::Backend& backend);
  // The same from a file already open (the worker plans memory from its header first, so that
  // a GPU backend's weight copies start only once the plan fits).
  static absl::StatusOr<std::unique_ptr<Qwen35Model>> Load(std::unique_ptr<common::GgufFile> file,
                                                           kernels::Backend& backend);
  // The same, placing a qwen35moe model's routed experts as `tiers` says: on a backend whose
  // memory is not host memory, when tiers.device_bytes holds fewer than all experts (split
  // over the expert sizes by ExpertSlotLayout::SlotsFor), the routed stacks stay in the mapping,
  // an arena per expert size of that many slots is allocated and tiers.initial (else
  // EvenExpertPlacement) is copied into it before this returns; expert_tiers() is then the model's
  // ExpertTiers. Otherwise as Load above.
  static absl::StatusOr<std::unique_ptr<Qwen35Model>> Load(std::unique_ptr<common::GgufFile> file,
                                                           kernels::Backend& backend,
                                                           const ExpertTierOptions& tiers);

  // Reads the mapped weights into memory ahead of the first forward pass, calling
  // `progress(fraction)` every 64 MiB, so a large model shows progress while it loads and the
  // first token's latency does not include disk reads.
  void Prefetch(const std::function<void(double)>& progress) const;

  const common::Qwen35HParams& hparams() const { return hp_; }
  const common::GgufFile& file() const { return *file_; }
  int64_t n_vocab() const { return hp_.n_vocab; }
  // Memory needs computed from the hyperparameters (before anything per-sequence exists).
  ModelMemory Memory(const KvCacheOptions& kv = F32KvCache()) const;
  // What the attention layers cache per position, and the DeltaNet state per sequence.
  KvCacheShape kv_shape() const;
  RecurrentStateLayout state_layout() const;

  // A fresh sequence (zero state) able to hold `max_tokens` positions, with a private KV cache
  // of just enough pages and its own recurrent state.
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequence(
      int64_t max_tokens, const KvCacheOptions& kv = F32KvCache());
  // A fresh sequence whose KV pages come from a shared `cache` (as they are needed, up to
  // `capacity` positions) and whose state is a slot of `slots` (ResourceExhausted when none is
  // free).
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequence(
      std::shared_ptr<PagedKvCache> cache, std::shared_ptr<RecurrentStateSlots> slots,
      int64_t capacity);

  // Runs the tokens of `batch` and writes logits to `logits` ([rows][n_vocab], f32): for each
  // entry in order, its LogitsRows() rows: one per token if all_logits, none if no_logits, the
  // last last_logits tokens', else its last token's. Each
  // sequence's n_past advances by its token count. Fails (state unchanged for sequences not yet
  // run is not guaranteed) on bad token ids or when a sequence would exceed its capacity.
  absl::Status Forward(absl::Span<const BatchEntry> batch, std::vector<float>& logits);

  // What the passes so far computed (for /metrics). An entry whose logits rows cover all its
  // tokens (a decode step, with its drafts) counts as decode, any other as prefill; so a prompt
  // whose last chunk is one token counts that token as decode.
  const ForwardCounters& counters() const { return *counters_; }
  ForwardCounters& counters() { return *counters_; }

  // The routed experts' two tiers (expert_tiers.h), or null: a dense model, a host-memory
  // backend, or every expert on the device.
  ExpertTiers* expert_tiers() { return tiers_.get(); }
  const ExpertTiers* expert_tiers() const { return tiers_.get(); }
  // Called after each pass of a MoE model with every layer's expert ids (RoutingObserver, on the
  // engine thread); empty: none.
  void set_routing_observer(RoutingObserver observer) { routing_observer_ = std::move(observer); }

  // Decode steps as step graphs (CUDA graphs; kernels/backend.h "step capture"): on a backend
  // that supports capture, a decode-only pass (every entry's logits rows cover all its tokens,
  // at most kMaxGraphEntryTokens each) records its ops from GetRows through the output head
  // and launches them as one graph kept per batch shape. On by default (the worker's
  // --cuda-graphs); no effect on a backend without capture (the CPU), nor on a model with expert
  // tiers, whose MoE layers copy routes to the host and back in the middle of a pass (a graph
  // cannot hold a copy, nor the host's half of the experts).
  void set_step_graphs(bool on) { step_graphs_ = on; }
  bool step_graphs() const { return step_graphs_; }
  static constexpr int64_t kMaxGraphEntryTokens = 32;  // a token and its drafts
  static constexpr size_t kMaxStepGraphs = 64;         // graphs kept per model

 private:
  Qwen35Model() = default;

  // Scratch activations for up to `tokens` tokens and `out_rows` logits rows.
  absl::Status ReserveWorkspace(int64_t tokens, int64_t out_rows);
  absl::Status RunDeltaNet(const LayerWeights& l, int dn_index, absl::Span<const BatchEntry> batch);
  // The conv1d and the gated delta rule of RunDeltaNet for one entry's rows [row, row + n) of
  // the workspace, in pieces split at its taps, each tap copying that part of the state.
  absl::Status RunDeltaNetConv(const LayerWeights& l, int dn_index, const BatchEntry& e,
                               int64_t row);
  absl::Status RunDeltaRule(int dn_index, const BatchEntry& e, int64_t row);
  // For a pass whose entries have one token each (a decode step), every DeltaNet layer's
  // per-sequence conv and delta-state pointers, in backend memory for Backend::DeltaNetDecodeStep
  // (copied before any layer runs: nothing inside the layers allocates or copies).
  absl::Status PrepareDeltaNetStep(absl::Span<const BatchEntry> batch);
  absl::Status RunAttention(const LayerWeights& l, int attn_index,
                            absl::Span<const BatchEntry> batch);
  // Load with tiers: an arena per expert size of `slots`, the host stacks, the start-up placement.
  absl::Status MakeExpertTiers(const common::ExpertSlotClasses& slots,
                               const ExpertTierOptions& options);
  absl::Status RunFfn(const LayerWeights& l);
  // The routed experts of a MoE layer (qwen35_ffn.cc): into ws_.mix from ws_.xn, after routing
  // into `route_ids` / route_w; on the backend alone, or over the two tiers.
  absl::Status RunRoutedExperts(const LayerWeights& l, const int32_t* route_ids,
                                const kernels::Mat& route_w);
  absl::Status RunTieredExperts(const int32_t* route_ids, const kernels::Mat& route_w);
  // The pass's ops from GetRows through the output head, once the inputs are in backend
  // memory (ids, positions, page tables) and the views are sized.
  absl::Status RunOps(absl::Span<const BatchEntry> batch, int64_t out_rows);
  // The graph key of a pass to be captured, or nullopt (see set_step_graphs).
  std::optional<uint64_t> StepGraphKey(absl::Span<const BatchEntry> batch) const;
  // RunOps captured and launched as the graph under `key`; a failed capture runs RunOps
  // uncaptured instead (counted, logged once, and that key is not captured again).
  absl::Status RunOpsAsGraph(absl::Span<const BatchEntry> batch, int64_t out_rows, uint64_t key);

  std::unique_ptr<common::GgufFile> file_;
  common::Qwen35HParams hp_;
  kernels::Backend* backend_ = nullptr;
  ModelWeights weights_;
  std::vector<int> deltanet_index_;   // per layer: index among DeltaNet layers, or -1
  std::vector<int> attention_index_;  // per layer: index among attention layers, or -1

  // Workspace (backend memory) and the views of the current pass.
  int64_t ws_tokens_ = 0;
  int64_t ws_out_rows_ = 0;
  std::vector<kernels::DeviceBuffer> ws_buffers_;
  kernels::DeviceBuffer ids_buf_, pos_buf_, route_ids_buf_;
  kernels::DeviceBuffer page_table_buf_;    // every sequence's page table, back to back
  int64_t page_table_capacity_ = 0;         // entries
  std::vector<int64_t> page_table_offset_;  // per batch entry
  // Decode steps: [DeltaNet layer][conv, delta][B] state pointers, on the host (the op's host
  // copy) and in backend memory (grown like the page tables); empty when the pass is not one.
  std::vector<float*> state_ptrs_host_;
  kernels::DeviceBuffer state_ptr_buf_;
  int64_t state_ptr_capacity_ = 0;  // entries
  struct Views {
    kernels::Mat x, xn, mix;                             // [T][d]
    kernels::Mat qkv, z, alpha, beta, o;                 // DeltaNet
    kernels::Mat qg, k, v, qc, ao;                       // attention
    kernels::Mat ff_gate, ff_up;                         // dense FFN / shared expert
    kernels::Mat router, route_w, shared_g, shared_out;  // MoE
    kernels::Mat out_x, logits;                          // [rows][d], [rows][n_vocab]
  } ws_;
  int64_t n_tokens_ = 0;  // T of the current pass
  int64_t layer_ = 0;     // the layer RunFfn runs (MoE routing counts)
  std::vector<int32_t> route_ids_host_;
  std::unique_ptr<ForwardCounters> counters_;
  RoutingObserver routing_observer_;
  // MoE models: where experts go in a device arena (also without tiers, for Memory()).
  std::optional<ExpertSlotLayout> expert_layout_;
  // Expert tiers: the tiers, and the host side of a layer's split (ids, weights, xn copied from
  // the backend; the device and host ids; the host experts' output) and the device ids' buffer.
  std::unique_ptr<ArenaExpertTiers> tiers_;
  std::vector<int32_t> tier_route_ids_, tier_device_ids_, tier_host_ids_;
  std::vector<float> tier_weights_, tier_x_, tier_y_;
  kernels::DeviceBuffer tier_ids_buf_;
  int64_t tier_ids_capacity_ = 0;  // entries
  // Step graphs: this model's part of the backend's keys (models may share a backend), the
  // keys it has graphs for, and those whose capture failed (run uncaptured from then on).
  bool step_graphs_ = true;
  uint64_t graph_salt_ = 0;
  std::set<uint64_t> graph_keys_, failed_graph_keys_;
  bool capture_failure_logged_ = false;
};

}  // namespace deltaserve::worker
