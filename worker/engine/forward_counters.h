#pragma once
// Counters of the engine's forward passes for the worker's /metrics (docs/metrics.md,
// "Worker"): prefill and decode tokens (counters: rate() is tokens per second), histograms of
// sequences and tokens per pass, and for MoE models the tokens routed to each expert of each
// layer (what expert placement needs: which experts are hot). Qwen35Model owns one.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace deltaserve::worker {

// What the forward pass counts for /metrics (docs/metrics.md, "Worker"): written by the thread
// that runs Forward, read by any (relaxed atomics; a scrape may see one pass half counted).
class ForwardCounters {
 public:
  // Upper bounds of the batch histograms: sequences per pass, tokens per pass.
  static constexpr std::array<double, 9> kSequenceBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  static constexpr std::array<double, 12> kTokenBounds = {1,   4,   16,   32,   64,   128,
                                                          256, 512, 1024, 2048, 4096, 8192};
  ForwardCounters(int64_t n_layer, int64_t n_expert);

  // One pass: `prefill` prompt tokens, `decode` tokens of sequences generating (the sampled
  // token and its speculative drafts), of `sequences` sequences.
  void CountPass(int64_t sequences, int64_t prefill, int64_t decode);
  // Tokens routed to each expert of MoE layer `layer` ([n_tokens][k] expert ids).
  void CountRoutes(int64_t layer, const int32_t* ids, int64_t n);
  // Step graphs (CUDA graphs of decode steps, Qwen35Model::set_step_graphs): one launched
  // graph, built from scratch (`instantiated`) or applied to a kept one in place; a capture
  // that failed, its step run without a graph.
  void CountGraphLaunch(bool instantiated);
  void CountGraphFallback();
  void Reset();

  uint64_t passes() const { return passes_.load(std::memory_order_relaxed); }
  uint64_t prefill_tokens() const { return prefill_.load(std::memory_order_relaxed); }
  uint64_t decode_tokens() const { return decode_.load(std::memory_order_relaxed); }
  // Non-cumulative counts per bucket (last: +Inf) and the sums of the two histograms.
  std::vector<uint64_t> sequence_buckets() const;
  std::vector<uint64_t> token_buckets() const;
  uint64_t sequences_sum() const { return sequences_sum_.load(std::memory_order_relaxed); }
  uint64_t tokens_sum() const { return tokens_sum_.load(std::memory_order_relaxed); }
  uint64_t graphs_instantiated() const { return graph_inst_.load(std::memory_order_relaxed); }
  uint64_t graphs_updated() const { return graph_upd_.load(std::memory_order_relaxed); }
  uint64_t graphs_launched() const { return graph_launch_.load(std::memory_order_relaxed); }
  uint64_t graph_fallbacks() const { return graph_fallback_.load(std::memory_order_relaxed); }
  int64_t n_layer() const { return n_layer_; }
  int64_t n_expert() const { return n_expert_; }
  // Tokens routed to `expert` in `layer` (0 for a dense model).
  uint64_t routed(int64_t layer, int64_t expert) const;

 private:
  const int64_t n_layer_, n_expert_;
  std::atomic<uint64_t> passes_{0}, prefill_{0}, decode_{0};
  std::array<std::atomic<uint64_t>, kSequenceBounds.size() + 1> sequence_buckets_{};
  std::array<std::atomic<uint64_t>, kTokenBounds.size() + 1> token_buckets_{};
  std::atomic<uint64_t> sequences_sum_{0}, tokens_sum_{0};
  std::atomic<uint64_t> graph_inst_{0}, graph_upd_{0}, graph_launch_{0}, graph_fallback_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> routed_;  // [n_layer][n_expert]; null when dense
};

}  // namespace deltaserve::worker
