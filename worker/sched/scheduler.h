// Continuous batching for the hybrid engine: requests go in (prompt token ids + sampling
// settings), streams of tokens come out through a GenerationSink, and every engine step mixes the
// decode tokens of the running sequences with chunks of waiting prompts under a per-step token
// budget (chunked prefill). Sequences join and leave between steps.
//
// Memory: a sequence is admitted only when a recurrent-state slot is free and the KV cache has
// the pages for its whole prompt beyond what the prompts already being prefilled still need, so
// an admitted prompt always finishes its prefill. Decoding sequences take pages as they grow; when
// a step finds no free page, the most recently admitted sequence is preempted: its pages and slot
// are freed and it goes back to the head of the queue with its prompt and the tokens generated so
// far, which it recomputes when readmitted (its sampler and stop state continue where they were,
// so the client sees one uninterrupted stream). A request that cannot fit the cache even alone
// ends with an error. Waiting is FIFO with a bound (Submit fails beyond it).
//
// n-gram speculation (ngram_draft.h): a decoding sequence whose recent tokens repeat earlier ones
// feeds the drafted tokens with its next token and samples every position; the drafts that match
// what the sampler picks are kept. DeltaNet state cannot be rewound, so the state is snapshotted
// into a spare slot first; when a draft is rejected the snapshot is restored and the accepted
// tokens are fed again with the next step. Sampling consumes the RNG exactly as without
// speculation, so the same seed gives the same tokens either way.
//
// Output constraints (constrained_decoding.h, docs/structured_outputs.md): a sequence with a
// grammar samples each token from the logits masked to what continues it (the masks cached per
// grammar state in the scheduler's TokenMaskCache), and ends with "stop" as soon as the grammar
// is complete and nothing can follow. Speculation drafts are cut where the grammar rejects them
// before they are fed; every kept token is still sampled from its masked row, so a constrained
// output is the same with speculation or without.
//
// Session snapshots (docs/snapshots.md), when a SnapshotCache is given: Submit hashes the
// prompt at its snapshot positions (the message boundaries the request carries, every
// snapshot_interval tokens inside long messages); admission restores the longest prefix held in
// RAM (or the request's snapshot fetched from Redis, when longer) instead of prefilling it;
// chunked prefill stops at each position past the restored one to snapshot the sequence there
// (at most max_snapshots_per_sequence, the last ones); and when the output ends, the turn-end
// tokens the request names are fed without logits and the sequence is snapshotted where the
// next turn's prompt will end this reply's message. The client's stream is finished before that
// last step. Snapshots taken go to the publisher (the Redis tier) when the sequence is done.
//
// Choices (n > 1, scheduler_fork.cc, docs/scheduler.md "Forking"): Submit with n sinks queues
// one sequence (choice 0) that is admitted with room for all n; once its prompt is prefilled the
// other n - 1 are forked from it — recurrent-state slot copied, KV pages shared copy-on-write —
// and each samples its first token from the same last-prompt logits with seed `seed + i`, then
// decodes as a sequence of its own (preempted, cancelled and finished on its own; Cancel ends
// them all). Choice i's tokens are those of a one-choice request with seed + i.
//
// MoE expert migration (worker/engine/expert_tiers.h, docs/moe_placement.md), when set: between
// engine steps, never during one, the stepping thread calls ExpertTiers::Advance while moves are
// pending, and an idle scheduler wakes up for them, so a new placement completes without
// traffic. A failed Advance is logged and counted and the moves wait for the next placement;
// serving goes on with the experts where they are.
//
// Threading: Submit, Cancel and stats() may be called from any thread; the steps run on the
// scheduler's own thread (Start) or on the caller's (Step, for tests), never both. Sinks are
// called on the stepping thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/cache/snapshot_cache.h"
#include "worker/engine/expert_tiers.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/constrained_decoding.h"
#include "worker/sampling/ngram_draft.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/token_mask.h"

namespace deltaserve::worker {

// Most choices (GenerationRequest n, proto GenerateRequest.n) one request may ask for.
inline constexpr int kMaxChoices = 16;

// Scheduler settings.
struct SchedulerOptions {
  int max_sequences = 8;          // running at once (recurrent-state slots)
  int64_t step_tokens = 512;      // tokens per engine step, decode and prompt chunks together
  int64_t max_waiting = 256;      // queued requests beyond which Submit refuses
  int64_t max_context = 4096;     // positions per sequence (prompt + generated)
  bool speculation = false;       // n-gram drafting
  NgramDraftOptions ngram;
  int64_t snapshot_interval = 1024;   // tokens between snapshots inside one long message
  int max_snapshots_per_sequence = 8;  // snapshots one sequence takes at most (the last ones)
  // Snapshot positions inside a prompt chunk are taken from state taps (StateTap, qwen35.h)
  // instead of ending the chunk there. Off: every snapshot position ends a chunk (small chunks
  // at message boundaries; kept for comparison).
  bool capture_inside_chunks = true;
  // Host memory the state taps of one step may take (each a state copy, which becomes the
  // snapshot's); past it a chunk ends at the next snapshot position instead. One tap per step is
  // always allowed.
  uint64_t max_step_tap_bytes = 512ull << 20;
};

// One generation request.
struct GenerationRequest {
  std::string id;                 // for logs; the scheduler's own handle is Submit's result
  std::vector<int32_t> prompt;    // token ids, at least one
  SamplingParams sampling;
  bool logprobs = false;          // the chosen token's logprob (top_logprobs adds alternatives)
  // Session snapshots: where the prompt's messages end (token positions, ascending), and the
  // tokens the template writes after an assistant message (proto GenerateRequest fields 7, 8).
  std::vector<int32_t> message_boundaries;
  std::vector<int32_t> turn_end_tokens;
  // A snapshot of a prefix of `prompt` fetched from another tier (Redis); restored at admission
  // when the RAM tier holds no longer prefix.
  std::shared_ptr<const SnapshotImage> remote_snapshot;
  // Reasoning budget (proto GenerateRequest.reasoning_budget): with reasoning_budget >= 0, at
  // most that many tokens are generated inside a reasoning block — the one the prompt left open
  // (reasoning_open) or one opened by generating reasoning_start_token — and then the scheduler
  // emits reasoning_end_tokens itself (logprob 0) and sampling continues after them.
  int32_t reasoning_budget = -1;
  bool reasoning_open = false;
  int32_t reasoning_start_token = -1;
  std::vector<int32_t> reasoning_end_tokens;
  // Output constraint (proto GenerateRequest.output_constraint; constrained_decoding.h): the
  // compiled grammar every generated token must continue, from the first token or, with
  // grammar_after_reasoning, once the reasoning block the prompt left open (reasoning_open)
  // closes; `trie` is the model's token trie (the same for every request of a scheduler). Needs
  // SetConstrainedDecoding. Null: unconstrained.
  std::shared_ptr<common::grammar::CompiledGrammar> grammar;
  std::shared_ptr<const TokenTrie> trie;
  bool grammar_after_reasoning = false;
  // With grammar_after_reasoning and no block open: the model may open one as its first token.
  bool grammar_reasoning_may_open = false;
};

// One generated token as streamed.
struct GeneratedToken {
  int32_t token = 0;
  std::optional<TokenLogprobs> logprobs;  // when sampling.top_logprobs > 0 or asked
};

// Where a sequence's restored prefix came from.
enum class SnapshotSource { kNone, kRam, kRemote };

// Why a generation ended.
enum class EndReason { kStop, kLength, kCancelled, kError };
// "stop", "length", "cancelled", "error".
std::string_view EndReasonName(EndReason reason);

// The end of a generation, with its accounting.
struct GenerationResult {
  EndReason reason = EndReason::kStop;
  absl::Status error;                // set for kError
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens restored from a snapshot, not computed
  SnapshotSource cached_from = SnapshotSource::kNone;
  int snapshots_taken = 0;
  int64_t completion_tokens = 0;     // generated, the stop token included
  double queue_ms = 0, prefill_ms = 0, decode_ms = 0, first_token_ms = 0;  // from submission
  // Of prefill_ms: choosing the snapshot to resume from and restoring it (0 with no snapshots).
  double restore_ms = 0;
  int preemptions = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculation
};

// Receives one request's output (on the stepping thread). OnFinish is called exactly once, last.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void OnTokens(absl::Span<const GeneratedToken> tokens) = 0;
  virtual void OnFinish(const GenerationResult& result) = 0;
};

// Load figures for metrics and routing.
struct SchedulerStats {
  int64_t running = 0, waiting = 0;
  int64_t free_pages = 0, total_pages = 0;  // free: unused or held only by RAM snapshots
  int64_t free_slots = 0;
  int64_t steps = 0, preemptions = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  int64_t completed = 0;
  // Session snapshots, counted at first admission: lookups made, hits by tier, misses, and
  // prompt tokens restored instead of computed.
  int64_t snapshot_lookups = 0, snapshot_hits_ram = 0, snapshot_hits_remote = 0;
  int64_t snapshot_misses = 0, snapshot_tokens_reused = 0;
  int64_t snapshot_restore_failures = 0;  // a restore failed; the sequence ran cold
  // Snapshots taken at positions inside a prompt chunk, from state taps (no chunk ended there).
  int64_t snapshot_tapped_captures = 0;
  // Constrained decoding: sequences admitted with an output constraint, allowed-token masks
  // served from the scheduler's cache or computed, and constrained sequences ended with an error
  // (a grammar limit left no token, or a token did not continue the grammar).
  int64_t constrained_sequences = 0;
  int64_t grammar_mask_hits = 0, grammar_mask_misses = 0;
  int64_t constraint_failures = 0;
  // Prompt positions run through the model (prefill, and recompute after a preemption): a
  // request with n choices adds its uncached prompt once. Choices forked off a prefilled prompt
  // (n - 1 per request with n choices).
  int64_t prompt_tokens_computed = 0;
  int64_t forked_sequences = 0;
  // Expert migration: Advance calls between steps, and those that failed (logged).
  int64_t expert_advances = 0, expert_move_failures = 0;
};

// Receives the snapshots a finished sequence took, in position order, and its prompt's length
// in tokens (on the stepping thread; must not block).
using SnapshotPublisher = std::function<void(
    std::vector<std::shared_ptr<const LocalSnapshot>> snapshots, int64_t prompt_tokens)>;

// See the file comment.
class Scheduler {
 public:
  // `model` must outlive the scheduler. The KV cache and state slots are shared with nothing
  // else; with speculation the slots must number at least 2 * max_sequences (snapshots).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      Qwen35Model& model, std::shared_ptr<PagedKvCache> cache,
      std::shared_ptr<RecurrentStateSlots> slots, const SchedulerOptions& options,
      std::vector<int32_t> eos_token_ids, int32_t n_valid_tokens,
      std::shared_ptr<SnapshotCache> snapshots = nullptr);
  ~Scheduler();

  // Where the snapshots of finished sequences go (set before Start).
  void SetSnapshotPublisher(SnapshotPublisher publisher) { publisher_ = std::move(publisher); }
  // Enables grammar-constrained decoding (GenerationRequest.grammar), set before Start: the
  // model's tokenizer (token bytes for the matchers; must outlive the scheduler) and the byte
  // budget of the scheduler's mask cache (made on the first constrained sequence, with the
  // request's trie).
  void SetConstrainedDecoding(const common::Tokenizer* tokenizer, size_t mask_budget_bytes) {
    tokenizer_ = tokenizer;
    mask_budget_bytes_ = mask_budget_bytes;
  }
  // The RAM tier, or null when snapshots are off.
  SnapshotCache* snapshots() const { return snapshots_.get(); }
  // Expert migration (see the file comment), set before Start: `tiers` (the model's; null: none)
  // is advanced by up to `max_bytes_per_step` bytes after each step while moves are pending.
  void SetExpertMigration(ExpertTiers* tiers, uint64_t max_bytes_per_step);
  // ExpertTiers::SetTarget queued moves (any thread): the next step boundary starts them, at
  // once when the scheduler is idle.
  void ExpertMovesQueued();

  // Queues a request; its output goes to `sink`. Returns the handle for Cancel. Fails, without
  // calling the sink, on bad input (empty prompt, ids outside the vocabulary, bad sampling
  // settings, prompt + max_tokens over the context) and when the queue is full
  // (ResourceExhausted).
  absl::StatusOr<uint64_t> Submit(GenerationRequest request,
                                  std::shared_ptr<GenerationSink> sink);
  // The same with n = sinks.size() choices (see the file comment): sink i gets choice i's
  // tokens and its own OnFinish. Also refused (InvalidArgument, message starting "n: ") for n
  // outside [1, kMaxChoices] or above max_sequences, and when the n choices at full length
  // (prompt + n * max_tokens positions) could not all be in the KV cache at once.
  absl::StatusOr<uint64_t> Submit(GenerationRequest request,
                                  std::vector<std::shared_ptr<GenerationSink>> sinks);
  // Ends a request (every choice) at the next step boundary (OnFinish with kCancelled); its
  // pages and slots are freed then. Unknown or finished handles are ignored.
  void Cancel(uint64_t handle);
  // Ends only choice `choice` of a request (a stop string matched in its text); the others go on.
  void CancelChoice(uint64_t handle, int choice);

  // Runs one engine step on the calling thread; false when there was nothing to do.
  bool Step();
  // Steps on a thread of its own until Stop(); Stop(drain=true) first lets every queued and
  // running request finish, Stop(false) cancels them.
  void Start();
  void Stop(bool drain);
  // True while requests are queued or running.
  bool busy() const;

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Sequence;
  Scheduler() = default;

  void TakeInbox();
  void Admit();
  bool RunBatch();
  void Finish(Sequence& seq, EndReason reason, absl::Status error = absl::OkStatus());
  void Preempt(Sequence& seq);
  // n > 1 (scheduler_fork.cc): the choices still to fork of running sequences (slots and pages
  // reserved for them); the forks of `parent`, whose prompt was just prefilled, sampled from its
  // last prompt row `logits` and returned to join running_.
  int64_t ReservedForkSlots() const;
  std::vector<std::unique_ptr<Sequence>> ForkChoices(Sequence& parent,
                                                     absl::Span<const float> logits);
  // Counts the prompt positions among `seq`'s input fed this step from position `fed_before`.
  void CountPromptTokens(const Sequence& seq, int64_t fed_before);
  // Makes the sequence's SequenceConstraint at its first admission (on the stepping thread: a
  // matcher steps its grammar's state table, which only this thread may touch).
  void StartConstraint(Sequence& seq);
  // Samples the last token's row and those of its drafts in `logits` ([n_rows][n_vocab]), emits
  // the tokens, and rewinds the state to `fed_before` positions when a draft was rejected.
  void Consume(Sequence& seq, absl::Span<const float> logits, int64_t n_rows, int64_t fed_before);
  // Tracks the reasoning block through `token` (just sampled); true when the budget is spent
  // and the closing tokens must be emitted instead of it.
  static bool ReasoningBudgetSpent(Sequence& seq, int32_t token);
  // Snapshots: restore at admission, capture at a snapshot position, end-of-output capture.
  struct RestorePoint {
    std::shared_ptr<const LocalSnapshot> local;  // the longest RAM snapshot usable
    const SnapshotImage* remote = nullptr;       // the request's Redis image, when longer
  };
  RestorePoint ChooseRestore(Sequence& seq);
  int64_t SharedPages(const RestorePoint& point) const;
  void RestoreAtAdmission(Sequence& seq, const RestorePoint& point, bool first_admission);
  void CaptureIfDue(Sequence& seq);
  // Whether the snapshot position capture_at[index] is worth a snapshot (the prompt's last
  // max_snapshots_per_sequence, a bounded number in the output).
  bool WantsCapture(const Sequence& seq, size_t index) const;
  // Plans this step's chunk of `seq` from n_past: `take` tokens wanted, cut where a snapshot
  // position cannot be tapped; fills seq.taps. Returns the chunk's length and sets
  // `next_capture` to the first snapshot position at or past the chunk's end (or max).
  // `step_tap_bytes`: the tap buffers of this step so far (host memory), bounded by
  // SchedulerOptions::max_step_tap_bytes beyond the step's first tap.
  int64_t PlanChunk(Sequence& seq, int64_t take, int64_t& next_capture, uint64_t& step_tap_bytes);
  // After a pass: the snapshots of seq.taps (positions inside the chunk, before the state moved
  // on), in position order.
  void CaptureTaps(Sequence& seq, int64_t fed_before);
  // A snapshot of seq's first n tokens: from the slot (n == n_past) or a tapped state.
  void CaptureAt(Sequence& seq, int64_t n, std::unique_ptr<uint8_t[]> tapped_state);
  bool BeginClosing(Sequence& seq);
  void Release(Sequence& seq);
  // Between steps: one ExpertTiers::Advance when moves are wanted.
  void AdvanceExpertMoves();

  Qwen35Model* model_ = nullptr;
  std::shared_ptr<PagedKvCache> cache_;
  std::shared_ptr<RecurrentStateSlots> slots_;
  SchedulerOptions options_;
  std::vector<int32_t> eos_;
  int32_t n_valid_ = 0;
  std::shared_ptr<SnapshotCache> snapshots_;
  SnapshotPublisher publisher_;
  // Constrained decoding (stepping thread only once started); null when not enabled.
  const common::Tokenizer* tokenizer_ = nullptr;
  size_t mask_budget_bytes_ = 0;
  std::unique_ptr<TokenMaskCache> masks_;
  ExpertTiers* expert_tiers_ = nullptr;
  uint64_t expert_move_bytes_ = 0;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> inbox_;  // submitted, not yet seen by the stepper
  std::vector<std::pair<uint64_t, int>> cancels_;  // handle, choice (-1: all)
  uint64_t next_handle_ = 1;
  SchedulerStats stats_;
  bool stop_ = false, drain_ = false;
  bool expert_moves_wanted_ = false;  // moves may be pending: advance at the next boundary
  std::thread thread_;

  // Stepping thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<float> logits_;
};

}  // namespace deltaserve::worker
