#pragma once
// Which worker serves one candidate model: a pure function over the workers' last known
// state. Workers that cannot take the request are dropped (unavailable, context too small for
// prompt + max_tokens, saturated); the rest are ordered least loaded first, except that the
// worker holding a snapshot of the longest prefix of the prompt goes first while its queue is
// short (routing by prefix, internal/prefix_policy.h), and otherwise a request with a
// session-affinity key goes first to its rendezvous-hash winner (the same conversation lands
// on the same worker, where its cached prefix lives) while that worker's queue is short.
//
//   WorkerChoice c = ChooseWorkers(workers, AffinityKey(request), options);
//   if (c.outcome == ChoiceOutcome::kChosen) try workers[c.order[0]], then c.order[1], ...

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "router/api/completion_request.h"

namespace deltaserve::router {

// A model's load on one worker (proto ModelLoad plus max_parallel_sequences).
struct WorkerLoad {
  int32_t running = 0;         // sequences admitted
  int32_t waiting = 0;         // sequences queued
  int64_t free_kv_pages = 0;   // pages
  int64_t total_kv_pages = 0;  // pages
  int32_t free_state_slots = 0;
  int32_t max_parallel = 0;  // sequences the worker runs at once (0: unknown, counts as 1)
};

// One worker as ChooseWorkers sees it, for one model.
struct WorkerOption {
  std::string worker;          // stable identity (the address) for hashing
  bool available = false;      // reachable, not draining, circuit admits, tokenizer known
  int32_t context_length = 0;  // tokens, prompt + completion
  int64_t tokens_needed = 0;   // prompt tokens (this worker's tokenizer) + max_tokens (or 1)
  WorkerLoad load;
  // Streams this router has open on the worker for the model. Polled load is up to one poll
  // interval old; the router's own count keeps a burst from all landing on one worker.
  int64_t router_inflight = 0;
  // Routing by prefix: the worker reports snapshot keys for the model (it sent a
  // snapshot_key_root), and of those keys the longest prefix of this request's prompt, in
  // tokens, that it holds a snapshot of (a message boundary; 0: none).
  bool reports_snapshots = false;
  int64_t held_prefix_tokens = 0;
};

struct ChoiceOptions {
  // A worker with this many waiting sequences (or more) takes no more requests; when every
  // fitting worker of every candidate is saturated the client gets 429. The worker's own
  // queue limit (256) refuses with RESOURCE_EXHAUSTED well after this.
  int32_t saturated_waiting = 32;
  // Session affinity holds while the affinity worker has fewer waiting sequences than this;
  // beyond it a cached prefix is worth less than the queue, and the least loaded one wins.
  int32_t affinity_max_waiting = 4;
  // Routing by prefix (docs/router.md, "Routing by prefix"): the worker holding the longest
  // snapshot prefix goes first while its effective waiting is below prefix_max_waiting; beyond
  // it the least loaded worker goes first and fetches the snapshot from Redis. RouterBackend
  // takes both from the RoutingSettings in force (routing.prefix_affinity,
  // routing.prefix_max_waiting), so a SIGHUP reload changes them.
  bool prefix_affinity = true;
  int32_t prefix_max_waiting = 4;
};

// What routing by prefix did for one choice (the metric's `outcome` label).
enum class PrefixOutcome {
  kOff,         // prefix_affinity off, or no fitting worker reports snapshot keys
  kMiss,        // no fitting worker holds a prefix of the prompt: the rule without it applied
  kHit,         // the worker holding the longest prefix goes first
  kOverloaded,  // every worker holding the longest prefix is busy: least loaded first
};

// "off", "miss", "hit", "overloaded" (routing_metrics.h).
std::string_view PrefixOutcomeLabel(PrefixOutcome outcome);

enum class ChoiceOutcome {
  kChosen,           // `order` lists the workers to try
  kNoWorker,         // no available worker
  kContextTooSmall,  // available workers exist, none holds tokens_needed
  kSaturated,        // workers fit, all saturated
};

struct WorkerChoice {
  ChoiceOutcome outcome = ChoiceOutcome::kNoWorker;
  std::vector<size_t> order;      // indices into the input, best first
  bool affinity_applied = false;  // order[0] is the session-affinity worker
  // What routing by prefix did; kHit: order[0] holds the longest prefix.
  PrefixOutcome prefix = PrefixOutcome::kOff;
  int32_t largest_context = 0;  // kContextTooSmall: the largest available context
  int64_t tokens_needed = 0;    // kContextTooSmall: what the largest-context worker needed
};

// See the file comment. `affinity_key` 0: no session affinity.
WorkerChoice ChooseWorkers(const std::vector<WorkerOption>& workers, uint64_t affinity_key,
                           const ChoiceOptions& options);

// Sequences queued on the worker: polled waiting beyond its free sequence slots (all of it when
// no KV page is free), or this router's own streams beyond max_parallel, whichever is more.
int64_t EffectiveWaiting(const WorkerOption& w);
// (running + waiting) / max_parallel, the router's own streams counted when polled load lags.
double LoadScore(const WorkerOption& w);

// Rendezvous (highest random weight) score of `worker` for `key`: stable across processes and
// builds, so several routers agree on a conversation's worker.
uint64_t RendezvousScore(uint64_t key, std::string_view worker);

// A stable 64-bit hash (FNV-1a, then a splitmix64 finalizer).
uint64_t StableHash(std::string_view bytes, uint64_t seed = 0);

// The default session-affinity key of a request: chat — the messages up to and including the
// first user message (system prompt + opening question identify a conversation and are the
// prefix every later turn shares); completions — the first 512 bytes of the prompt or its
// first 128 token ids. 0 when there is nothing to hash.
uint64_t AffinityKey(const api::CompletionRequest& request);

}  // namespace deltaserve::router
