#include "router/routing/worker_choice.h"

#include <algorithm>
#include <cstring>

#include "router/routing/internal/prefix_policy.h"
#include "router/routing/routing_metrics.h"

namespace deltaserve::router {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double FreePageFraction(const WorkerLoad& load) {
  if (load.total_kv_pages <= 0) return 1.0;
  return static_cast<double>(load.free_kv_pages) / static_cast<double>(load.total_kv_pages);
}

}  // namespace

uint64_t StableHash(std::string_view bytes, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ULL ^ SplitMix64(seed);
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return SplitMix64(h);
}

uint64_t RendezvousScore(uint64_t key, std::string_view worker) { return StableHash(worker, key); }

int64_t EffectiveWaiting(const WorkerOption& w) {
  const int64_t parallel = std::max<int32_t>(1, w.load.max_parallel);
  // A worker reports sequences that arrived since its last scheduler step as waiting until the
  // next step admits them. While it has free sequence slots and free KV pages those are not a
  // queue: only the part beyond the free slots is. (Counting them all made one poll taken
  // during a burst refuse every request with 429 until the next poll, a second later.)
  int64_t polled = w.load.waiting;
  const bool pages_free = w.load.total_kv_pages == 0 || w.load.free_kv_pages > 0;
  if (pages_free) {
    polled = std::max<int64_t>(0, static_cast<int64_t>(w.load.running) + w.load.waiting - parallel);
  }
  return std::max<int64_t>(polled, w.router_inflight - parallel);
}

double LoadScore(const WorkerOption& w) {
  const int64_t busy =
      std::max<int64_t>(static_cast<int64_t>(w.load.running) + w.load.waiting, w.router_inflight);
  return static_cast<double>(busy) / std::max<int32_t>(1, w.load.max_parallel);
}

WorkerChoice ChooseWorkers(const std::vector<WorkerOption>& workers, uint64_t affinity_key,
                           const ChoiceOptions& options) {
  WorkerChoice choice;
  std::vector<size_t> fitting;
  bool any_available = false;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerOption& w = workers[i];
    if (!w.available) continue;
    any_available = true;
    if (w.context_length < w.tokens_needed) {
      if (w.context_length >= choice.largest_context) {
        choice.largest_context = w.context_length;
        choice.tokens_needed = w.tokens_needed;
      }
      continue;
    }
    fitting.push_back(i);
  }
  if (!any_available) {
    choice.outcome = ChoiceOutcome::kNoWorker;
    return choice;
  }
  if (fitting.empty()) {
    choice.outcome = ChoiceOutcome::kContextTooSmall;
    return choice;
  }
  // Ties (e.g. all idle) break by the rendezvous score, so equal workers share sessions
  // evenly instead of all going to the first configured one.
  std::stable_sort(fitting.begin(), fitting.end(), [&](size_t a, size_t b) {
    const double la = LoadScore(workers[a]), lb = LoadScore(workers[b]);
    if (la != lb) return la < lb;
    const double fa = FreePageFraction(workers[a].load), fb = FreePageFraction(workers[b].load);
    if (fa != fb) return fa > fb;
    return RendezvousScore(affinity_key, workers[a].worker) >
           RendezvousScore(affinity_key, workers[b].worker);
  });
  // Saturated holders stay in the policy's view, so that a busy holder reads "overloaded".
  std::vector<internal::PrefixCandidate> prefix(fitting.size());
  for (size_t k = 0; k < fitting.size(); ++k) {
    const WorkerOption& w = workers[fitting[k]];
    const int64_t waiting = EffectiveWaiting(w);
    prefix[k] = {w.reports_snapshots, w.held_prefix_tokens, waiting,
                 waiting >= options.saturated_waiting};
    if (!prefix[k].saturated) choice.order.push_back(fitting[k]);
  }
  if (choice.order.empty()) {
    choice.outcome = ChoiceOutcome::kSaturated;
    return choice;
  }
  choice.outcome = ChoiceOutcome::kChosen;
  const internal::PrefixVerdict verdict =
      internal::ChooseByPrefix(prefix, options.prefix_affinity, options.prefix_max_waiting);
  choice.prefix = verdict.outcome;
  if (verdict.outcome == PrefixOutcome::kHit) {
    auto it = std::find(choice.order.begin(), choice.order.end(), fitting[verdict.first]);
    std::rotate(choice.order.begin(), it, it + 1);
    return choice;
  }
  if (verdict.outcome == PrefixOutcome::kOverloaded) return choice;  // least loaded first
  if (affinity_key != 0) {
    // The winner among the workers affinity may use; fitting and unsaturated ones only, so the
    // choice moves only when the favourite cannot take the request (rendezvous property).
    size_t best = choice.order.size();
    uint64_t best_score = 0;
    for (size_t k = 0; k < choice.order.size(); ++k) {
      const WorkerOption& w = workers[choice.order[k]];
      if (EffectiveWaiting(w) >= options.affinity_max_waiting) continue;
      const uint64_t score = RendezvousScore(affinity_key, w.worker);
      if (best == choice.order.size() || score > best_score) {
        best = k;
        best_score = score;
      }
    }
    if (best < choice.order.size()) {
      std::rotate(choice.order.begin(), choice.order.begin() + static_cast<ptrdiff_t>(best),
                  choice.order.begin() + static_cast<ptrdiff_t>(best) + 1);
      choice.affinity_applied = true;
    }
  }
  return choice;
}

std::string_view PrefixOutcomeLabel(PrefixOutcome outcome) {
  switch (outcome) {
    case PrefixOutcome::kOff:
      return kPrefixOff;
    case PrefixOutcome::kMiss:
      return kPrefixMiss;
    case PrefixOutcome::kHit:
      return kPrefixHit;
    case PrefixOutcome::kOverloaded:
      return kPrefixOverloaded;
  }
  return kPrefixOff;
}

uint64_t AffinityKey(const api::CompletionRequest& request) {
  std::string bytes;
  if (request.endpoint == api::Endpoint::kChatCompletions) {
    for (const api::ChatMessage& m : request.messages) {
      bytes.append(m.role).push_back('\0');
      bytes.append(m.content).push_back('\x1e');
      if (m.role == "user") break;
    }
  } else if (request.prompt_is_tokens) {
    const size_t n = std::min<size_t>(request.prompt_tokens.size(), 128);
    bytes.resize(n * sizeof(int32_t));
    if (n > 0) std::memcpy(bytes.data(), request.prompt_tokens.data(), bytes.size());
  } else {
    bytes = request.prompt.substr(0, 512);
  }
  if (bytes.empty()) return 0;
  const uint64_t key = StableHash(bytes);
  return key == 0 ? 1 : key;
}

}  // namespace deltaserve::router
