#include "worker/service/expert_startup.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/expert_placement_record.h"
#include "common/redis_client.h"

namespace deltaserve::worker {
namespace {

// What the warm-up runs through the model: a little of what a server sees (chat, prose, code,
// numbers and markup, several languages and scripts), so that the routing counts reflect more
// than one kind of token. Repeated when the warm-up asks for more tokens than it has.
constexpr std::string_view kWarmupText =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Summarise the causes of the French Revolution in three sentences, then translate the "
    "summary into German.<|im_end|>\n<|im_start|>assistant\n"
    "The French Revolution grew out of a fiscal crisis, an unequal society of estates and the "
    "spread of Enlightenment ideas. Bad harvests in 1788 raised bread prices while the crown, "
    "deep in debt, could not reform taxation. When the Estates-General met in 1789, the Third "
    "Estate declared itself a National Assembly. Die Französische Revolution entstand aus einer "
    "Finanzkrise, einer ungleichen Ständegesellschaft und den Ideen der Aufklärung.\n\n"
    "```python\ndef merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
    "    intervals.sort(key=lambda iv: iv[0])\n    merged = []\n    for start, end in intervals:\n"
    "        if merged and start <= merged[-1][1]:\n"
    "            merged[-1] = (merged[-1][0], max(merged[-1][1], end))\n        else:\n"
    "            merged.append((start, end))\n    return merged\n```\n"
    "SELECT customer_id, SUM(amount) AS total FROM orders WHERE created_at >= '2024-01-01' "
    "GROUP BY customer_id HAVING SUM(amount) > 1000 ORDER BY total DESC LIMIT 10;\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
    "Solve for x: 3x^2 - 12x + 9 = 0, so x^2 - 4x + 3 = 0 and (x - 1)(x - 3) = 0: x = 1 or x = 3. "
    "The integral of e^(2t) from 0 to 1 is (e^2 - 1) / 2 ≈ 3.1945.\n"
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习而无需明确编程。"
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。"
    "La inteligencia artificial transforma la manera en que trabajamos y aprendemos. "
    "Москва — столица России и крупнейший город страны. "
    "<html><body><h1>Release notes</h1><ul><li>Faster start-up</li><li>Fewer copies</li></ul>"
    "</body></html>\n| quarter | revenue | growth |\n|---|---|---|\n| Q1 | 4.2M | 12% |\n"
    "| Q2 | 4.9M | 17% |\nfn main() { let v: Vec<u32> = (1..=10).map(|x| x * x).collect(); "
    "println!(\"{:?}\", v); }\n";

// Receives the warm-up's one token and its end.
class WarmupSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken>) override {}
  void OnFinish(const GenerationResult& r) override {
    done = true;
    if (r.reason == EndReason::kError) error = r.error;
  }
  bool done = false;
  absl::Status error;
};

void Log(const std::string& line) {
  std::fprintf(stderr, "deltaserve-worker: %s\n", line.c_str());
}

}  // namespace

std::vector<int32_t> WarmupPrompt(const common::Tokenizer& tokenizer, int64_t n) {
  std::vector<int32_t> text = tokenizer.Encode(kWarmupText, /*parse_special=*/true);
  std::vector<int32_t> out;
  if (text.empty() || n <= 0) return out;
  out.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(out.size()) < n) {
    const size_t take = std::min(text.size(), static_cast<size_t>(n) - out.size());
    out.insert(out.end(), text.begin(), text.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<double>>> WarmupRoutingCounts(ServedModel& model,
                                                                     int64_t n) {
  n = std::min(n, model.options().ctx - 1);
  GenerationRequest req;
  req.id = "expert-warmup";
  req.prompt = WarmupPrompt(model.tokenizer(), n);
  // Ids beyond the embedding rows (a vocabulary larger than the model's) are not sent.
  std::erase_if(req.prompt, [&](int32_t id) { return id >= model.model().n_vocab(); });
  if (req.prompt.empty()) {
    return absl::FailedPreconditionError("the warm-up text has no tokens in this vocabulary");
  }
  req.sampling.temperature = 0;
  req.sampling.max_tokens = 1;
  req.sampling.ignore_eos = true;
  ForwardCounters& counters = model.model().counters();
  counters.Reset();
  auto sink = std::make_shared<WarmupSink>();
  absl::StatusOr<uint64_t> handle = model.scheduler().Submit(std::move(req), sink);
  if (!handle.ok()) return handle.status();
  // A prompt of at most ctx - 1 tokens is admitted at once on an idle scheduler and prefilled
  // in ceil(n / step_tokens) steps; the bound only guards against a scheduler that stalls.
  for (int64_t steps = 0; !sink->done && steps < n + 16; ++steps) model.scheduler().Step();
  if (!sink->done) {
    model.scheduler().Cancel(*handle);
    model.scheduler().Step();
    counters.Reset();
    return absl::InternalError("the warm-up prefill did not finish");
  }
  std::vector<std::vector<double>> heat(static_cast<size_t>(counters.n_layer()),
                                        std::vector<double>(counters.n_expert()));
  double sum = 0;
  for (int64_t l = 0; l < counters.n_layer(); ++l) {
    for (int64_t e = 0; e < counters.n_expert(); ++e) {
      heat[l][e] = static_cast<double>(counters.routed(l, e));
      sum += heat[l][e];
    }
  }
  counters.Reset();
  if (!sink->error.ok()) return sink->error;
  if (sum == 0) return absl::FailedPreconditionError("the warm-up routed no token");
  return heat;
}

absl::Status MoveExpertsTo(ExpertTiers& tiers, const common::ExpertPlacement& target) {
  absl::StatusOr<ExpertMoves> moves = tiers.SetTarget(target, /*generation=*/0);
  if (!moves.ok()) return moves.status();
  // Every Advance completes at least one move while any is pending: this many calls suffice.
  const int64_t bound = 2 * tiers.n_layer() * tiers.n_expert() + 2;
  for (int64_t i = 0; i < bound && tiers.stats().moves_pending > 0; ++i) {
    absl::StatusOr<uint64_t> copied = tiers.Advance(std::numeric_limits<uint64_t>::max());
    if (!copied.ok()) return copied.status();
  }
  if (const int64_t left = tiers.stats().moves_pending; left > 0) {
    return absl::InternalError(absl::StrCat(left, " expert moves still pending"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::vector<std::vector<double>>>> ReadSavedExpertHeat(
    const common::RedisOptions& redis, absl::Duration timeout, const std::string& fingerprint_hex,
    int64_t n_layer, int64_t n_expert) {
  absl::StatusOr<std::unique_ptr<common::RedisClient>> client =
      common::RedisClient::Create(redis, timeout);
  if (!client.ok()) return client.status();
  const std::string key = common::ExpertPlacementRecordKey(fingerprint_hex);
  absl::StatusOr<std::optional<std::string>> blob = (*client)->Get(key);
  if (!blob.ok()) return blob.status();
  if (!blob->has_value()) return std::nullopt;
  absl::StatusOr<common::ExpertPlacementRecord> record =
      common::ParseExpertPlacementRecord(**blob);
  if (!record.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", record.status().message()));
  }
  if (record->model_fingerprint != fingerprint_hex) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": the record is for model ",
                                                   record->model_fingerprint));
  }
  if (record->n_layer != n_layer || record->n_expert != n_expert) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": the record has ", record->n_layer, " layers x ", record->n_expert,
        " experts, the model ", n_layer, " x ", n_expert));
  }
  return std::move(record->heat);
}

namespace {

std::string ChooseStartupPlacement(const std::string& name, ModelExperts& experts,
                                   const StartupPlacementOptions& options) {
  ExpertTiers* tiers = experts.tiers();
  if (tiers == nullptr) {
    experts.set_startup_source(kStartupAll);
    return kStartupAll;
  }
  auto use = [&](const common::ExpertPlacement& p, const char* source) -> bool {
    if (absl::Status s = MoveExpertsTo(*tiers, p); !s.ok()) {
      Log(absl::StrCat(name, ": start-up expert placement (", source, ") not reached: ",
                       s.message()));
      return false;
    }
    experts.set_startup_source(source);
    Log(absl::StrCat(name, ": start-up expert placement from ", source, ": ", p.size(),
                     " experts in ", tiers->n_slots(), " device slots (",
                     common::DescribeExpertPlacement(p), ")"));
    return true;
  };
  if (options.redis.has_value()) {
    absl::StatusOr<std::optional<std::vector<std::vector<double>>>> saved = ReadSavedExpertHeat(
        *options.redis, options.redis_timeout, experts.fingerprint_hex(), experts.n_layer(),
        experts.n_expert());
    if (!saved.ok()) {
      const bool refused = saved.status().code() == absl::StatusCode::kInvalidArgument;
      experts.CountSavedPlacementError(/*redis_failed=*/!refused);
      Log(absl::StrCat(name, ": saved expert placement ",
                       refused ? "refused" : "not read (Redis failed)", ": ",
                       saved.status().message(), "; using the warm-up's counts instead"));
    } else if (!saved->has_value()) {
      Log(absl::StrCat(name, ": no saved expert placement in Redis for this model yet"));
    } else if (use(common::HottestExpertPlacement(**saved, tiers->slot_classes()),
                   kStartupSaved)) {
      return kStartupSaved;
    }
  }
  if (options.warmup_tokens > 0) {
    absl::StatusOr<std::vector<std::vector<double>>> counts =
        WarmupRoutingCounts(experts.model(), options.warmup_tokens);
    if (!counts.ok()) {
      Log(absl::StrCat(name, ": expert warm-up failed: ", counts.status().message(),
                       "; spreading the experts evenly"));
    } else if (use(common::HottestExpertPlacement(*counts, tiers->slot_classes()),
                   kStartupWarmup)) {
      return kStartupWarmup;
    }
  }
  use(common::EvenExpertPlacement(experts.n_layer(), experts.n_expert(), tiers->slot_classes()),
      kStartupEven);
  experts.set_startup_source(kStartupEven);
  return kStartupEven;
}

}  // namespace

std::string ApplyStartupPlacement(const std::string& name, ModelExperts& experts,
                                  const StartupPlacementOptions& options) {
  std::string source = ChooseStartupPlacement(name, experts, options);
  experts.MarkServingStart();
  return source;
}

}  // namespace deltaserve::worker
