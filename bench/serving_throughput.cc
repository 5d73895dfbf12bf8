// Serving throughput benchmark: aggregate decode tokens per second of the continuous-batching
// Scheduler (worker/sched) with N concurrent sequences on the CPU backend, for comparison with
// llama.cpp running N parallel sequences (bench/llama_cpp_serving_throughput.py measures the same
// way; bench/serving_bench.sh runs both), and the speed-up of n-gram speculation.
//
//   deltaserve-bench-serving -m FILE --threads N --sequences N [--prompt 128] [--max-tokens 64]
//                            [--reps R] [--speculation] [--workload random|text|text-twice]
//                            [--text FILE] [--teacher-forced] [--json]
//
// Per repetition N greedy requests (ignore EOS, max_tokens M) are submitted at once to a fresh
// round of a Scheduler over a shared PagedKvCache (f16/f16 by default) and RecurrentStateSlots,
// and Step() is called on this thread until all have finished. The per-step token budget is large
// enough for every prompt to be prefilled in the first step, which also samples every sequence's
// first token; that step is the prefill phase (prefill tok/s = prompt tokens / its time). The
// decode phase runs from the next step to the end of the last sequence: aggregate tok/s = tokens
// generated in it / its wall time (the engine's forward passes, sampling and scheduling; without
// speculation each step is one token of every sequence). Per-sequence tok/s = a sequence's decode
// tokens / the time from the decode phase's start to its end (median over sequences).
//
// Workloads (prompt of sequence i, i = 0..N-1):
//   random      P pseudo-random ids below min(2000, n_vocab) drawn with splitmix64 from seed + i
//               (PromptIds; the llama.cpp side draws the identical ids); nothing repeats.
//   text        --text-tokens L tokens of --text (tokenized with the model's vocabulary),
//               starting at token 32 * i: source code, one copy.
//   text-twice  the same L tokens followed by their first --repeat-head H tokens again: code
//               that quotes itself, so the drafter can offer the rest of the first copy.
// --teacher-forced (text-twice, one sequence; the model is not the Scheduler's but the engine's
// own loop, mirroring the Scheduler's speculation step for step: drafting from the history,
// snapshot into a spare slot, one forward pass over the token and its drafts with their logits
// rows, a greedy Sampler on every row, restore on rejection): the "generated" tokens are the
// text's own continuation instead of the model's argmax, i.e. what speculation gives when the
// model does follow the text. A random-weight model does not, so this is the upper bound, labelled
// as such.
//
// stdout: one JSON object per repetition, then a summary ("summary":true) with medians, drafted
// and accepted tokens, peak RSS, CPU seconds, the FNV-1a hash of the prompt ids and every
// sequence's generated ids (the script compares them with llama.cpp's). Progress on stderr.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_ids.h"
#include "common/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/ngram_draft.h"
#include "worker/sampling/sampler.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::bench {
namespace {

using worker::BatchEntry;
using worker::GeneratedToken;
using worker::GenerationRequest;
using worker::GenerationResult;
using worker::GenerationSink;
using worker::Qwen35Model;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: deltaserve-bench-serving -m FILE --threads N --sequences N [options]\n"
    "  -m FILE              Qwen3.5 GGUF model\n"
    "  --threads N          CPU backend threads (default 0: one per core)\n"
    "  --sequences N        concurrent requests (default 1)\n"
    "  --prompt P           prompt tokens of the random workload (default 128)\n"
    "  --max-tokens M       tokens generated per request, the first one by the prefill step\n"
    "                       (default 64)\n"
    "  --reps R             timed repetitions (default 5); the summary gives medians\n"
    "  --seed S             seed of the random prompts (default 1; sequence i uses S + i)\n"
    "  --warmup N           untimed warm-up requests (8-token prompt, 2 tokens) (default 1)\n"
    "  --speculation        n-gram speculation on (SchedulerOptions.speculation)\n"
    "  --ngram-min N, --ngram-max N, --draft-max N   drafter settings (3, 8, 8)\n"
    "  --workload W         random (default), text or text-twice (see the file comment)\n"
    "  --text FILE          the text of the text workloads (tokenized with the model's "
    "vocabulary)\n"
    "  --text-tokens L      tokens of --text per prompt (default 512)\n"
    "  --repeat-head H      text-twice: tokens of the second copy in the prompt (default 32)\n"
    "  --teacher-forced     text-twice, 1 sequence: feed the text's own continuation (upper "
    "bound)\n"
    "  --step-tokens N      scheduler step budget (default: every prompt in the first step)\n"
    "  --cache-type-k T     KV cache type of K (default f16, as llama.cpp); --cache-type-v T\n"
    "  --page-tokens N      KV page size in tokens (default 256)\n"
    "  --json               print the summary as one JSON object\n";

struct Options {
  std::string model;
  int threads = 0;
  int sequences = 1;
  int64_t prompt = 128;
  int64_t max_tokens = 64;
  int reps = 5;
  uint64_t seed = 1;
  int warmup = 1;
  bool speculation = false;
  worker::NgramDraftOptions ngram;
  std::string workload = "random";
  std::string text;
  int64_t text_tokens = 512;
  int64_t repeat_head = 32;
  bool teacher_forced = false;
  int64_t step_tokens = 0;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  int64_t page_tokens = 256;
  bool json = false;
};

std::string Parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto number = [&](auto& out) -> bool {
      const char* v = value();
      return v != nullptr && absl::SimpleAtoi(v, &out);
    };
    auto text = [&](std::string& out) -> bool {
      const char* v = value();
      if (v == nullptr) return false;
      out = v;
      return true;
    };
    if (a == "-m" || a == "--model") {
      if (!text(o.model)) return "-m needs a file";
    } else if (a == "--threads" || a == "-t") {
      if (!number(o.threads) || o.threads < 0) return "--threads needs a count >= 0";
    } else if (a == "--sequences") {
      if (!number(o.sequences) || o.sequences < 1) return "--sequences needs a count >= 1";
    } else if (a == "--prompt") {
      if (!number(o.prompt) || o.prompt < 1) return "--prompt needs a token count >= 1";
    } else if (a == "--max-tokens") {
      if (!number(o.max_tokens) || o.max_tokens < 2) return "--max-tokens needs a count >= 2";
    } else if (a == "--reps") {
      if (!number(o.reps) || o.reps < 1) return "--reps needs a count >= 1";
    } else if (a == "--seed") {
      if (!number(o.seed)) return "--seed needs an unsigned integer";
    } else if (a == "--warmup") {
      if (!number(o.warmup) || o.warmup < 0) return "--warmup needs a count >= 0";
    } else if (a == "--speculation") {
      o.speculation = true;
    } else if (a == "--ngram-min") {
      if (!number(o.ngram.ngram_min) || o.ngram.ngram_min < 1) return "--ngram-min needs >= 1";
    } else if (a == "--ngram-max") {
      if (!number(o.ngram.ngram_max) || o.ngram.ngram_max < 1) return "--ngram-max needs >= 1";
    } else if (a == "--draft-max") {
      if (!number(o.ngram.draft_max) || o.ngram.draft_max < 1) return "--draft-max needs >= 1";
    } else if (a == "--workload") {
      if (!text(o.workload)) return "--workload needs random, text or text-twice";
    } else if (a == "--text") {
      if (!text(o.text)) return "--text needs a file";
    } else if (a == "--text-tokens") {
      if (!number(o.text_tokens) || o.text_tokens < 8) return "--text-tokens needs >= 8";
    } else if (a == "--repeat-head") {
      if (!number(o.repeat_head) || o.repeat_head < 1) return "--repeat-head needs >= 1";
    } else if (a == "--teacher-forced") {
      o.teacher_forced = true;
    } else if (a == "--step-tokens") {
      if (!number(o.step_tokens) || o.step_tokens < 1) return "--step-tokens needs >= 1";
    } else if (a == "--cache-type-k") {
      if (!text(o.cache_type_k)) return "--cache-type-k needs a type";
    } else if (a == "--cache-type-v") {
      if (!text(o.cache_type_v)) return "--cache-type-v needs a type";
    } else if (a == "--page-tokens") {
      if (!number(o.page_tokens) || o.page_tokens < 1) return "--page-tokens needs >= 1";
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-h" || a == "--help") {
      return "help";
    } else {
      return "unknown argument '" + std::string(a) + "'";
    }
  }
  if (o.model.empty()) return "-m FILE is required";
  if (o.workload != "random" && o.workload != "text" && o.workload != "text-twice") {
    return "--workload must be random, text or text-twice";
  }
  if (o.workload != "random" && o.text.empty()) return "--workload " + o.workload + " needs --text";
  if (o.workload == "text-twice" && o.repeat_head >= o.text_tokens) {
    return "--repeat-head must be below --text-tokens";
  }
  if (o.teacher_forced) {
    if (o.workload != "text-twice" || o.sequences != 1) {
      return "--teacher-forced needs --workload text-twice and --sequences 1";
    }
    if (o.repeat_head + o.max_tokens > o.text_tokens) {
      return "--teacher-forced: --repeat-head + --max-tokens must not exceed --text-tokens";
    }
  }
  return "";
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Collects one request's tokens and when it finished.
class RecordingSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) this->tokens.push_back(t.token);
  }
  void OnFinish(const GenerationResult& r) override {
    result = r;
    finished_at = Clock::now();
    done = true;
  }
  std::vector<int32_t> tokens;
  GenerationResult result;
  Clock::time_point finished_at;
  bool done = false;
};

// The prompts of the workload, one per sequence.
absl::StatusOr<std::vector<std::vector<int32_t>>> MakePrompts(const Options& o,
                                                              const Qwen35Model& model) {
  std::vector<std::vector<int32_t>> prompts;
  if (o.workload == "random") {
    for (int i = 0; i < o.sequences; ++i) {
      prompts.push_back(PromptIds(o.prompt, o.seed + static_cast<uint64_t>(i), model.n_vocab()));
    }
    return prompts;
  }
  std::ifstream in(o.text, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --text ", o.text));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok =
      common::Tokenizer::FromGguf(model.file());
  if (!tok.ok()) return tok.status();
  const std::vector<common::TokenId> all = (*tok)->Encode(text, /*parse_special=*/false);
  const int64_t need = o.text_tokens + 32 * static_cast<int64_t>(o.sequences - 1);
  if (static_cast<int64_t>(all.size()) < need) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.text, " has ", all.size(), " tokens; the workload needs ", need));
  }
  for (int i = 0; i < o.sequences; ++i) {
    const auto begin = all.begin() + 32 * i;
    std::vector<int32_t> p(begin, begin + o.text_tokens);
    if (o.workload == "text-twice") p.insert(p.end(), begin, begin + o.repeat_head);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// One repetition's figures.
struct RepResult {
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prompt_tokens = 0, decode_tokens = 0, steps = 0;
  int64_t drafted = 0, accepted = 0;
  std::vector<double> per_seq_tok_s;
  std::vector<std::vector<int32_t>> outputs;
};

// Everything a Scheduler needs, built once and reused by every repetition.
struct ServingStack {
  std::shared_ptr<worker::PagedKvCache> cache;
  std::shared_ptr<worker::RecurrentStateSlots> slots;
  std::unique_ptr<worker::Scheduler> scheduler;
};

absl::StatusOr<ServingStack> MakeStack(const Options& o, kernels::Backend& backend,
                                       Qwen35Model& model, int64_t longest_prompt,
                                       int64_t total_prompt) {
  worker::KvCacheOptions kv;
  absl::StatusOr<kernels::WeightType> k_type = worker::ParseKvCacheType(o.cache_type_k);
  if (!k_type.ok()) return k_type.status();
  absl::StatusOr<kernels::WeightType> v_type = worker::ParseKvCacheType(o.cache_type_v);
  if (!v_type.ok()) return v_type.status();
  kv.k_type = *k_type;
  kv.v_type = *v_type;
  kv.page_tokens = o.page_tokens;
  // Every sequence's whole context (and a draft beyond it) fits: no preemption in the runs.
  const int64_t context = longest_prompt + o.max_tokens + o.ngram.draft_max + 1;
  const int64_t pages = o.sequences * ((context + o.page_tokens - 1) / o.page_tokens);
  ServingStack s;
  absl::StatusOr<std::unique_ptr<worker::PagedKvCache>> cache =
      worker::PagedKvCache::Create(backend, model.kv_shape(), kv, pages);
  if (!cache.ok()) return cache.status();
  s.cache = std::move(*cache);
  absl::StatusOr<std::shared_ptr<worker::RecurrentStateSlots>> slots =
      worker::RecurrentStateSlots::Create(backend, model.state_layout(),
                                          o.sequences * (o.speculation ? 2 : 1));
  if (!slots.ok()) return slots.status();
  s.slots = std::move(*slots);
  worker::SchedulerOptions so;
  so.max_sequences = o.sequences;
  so.step_tokens = o.step_tokens > 0 ? o.step_tokens : std::max<int64_t>(512, total_prompt);
  so.max_context = context;
  so.speculation = o.speculation;
  so.ngram = o.ngram;
  absl::StatusOr<std::unique_ptr<worker::Scheduler>> sched = worker::Scheduler::Create(
      model, s.cache, s.slots, so, /*eos_token_ids=*/{}, static_cast<int32_t>(model.n_vocab()));
  if (!sched.ok()) return sched.status();
  s.scheduler = std::move(*sched);
  return s;
}

absl::StatusOr<std::vector<std::shared_ptr<RecordingSink>>> SubmitAll(
    worker::Scheduler& sched, const std::vector<std::vector<int32_t>>& prompts,
    int64_t max_tokens) {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.id = absl::StrCat("bench-", i);
    r.prompt = prompts[i];
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = static_cast<int32_t>(max_tokens);
    auto sink = std::make_shared<RecordingSink>();
    absl::StatusOr<uint64_t> h = sched.Submit(std::move(r), sink);
    if (!h.ok()) return h.status();
    sinks.push_back(std::move(sink));
  }
  return sinks;
}

absl::StatusOr<RepResult> RunScheduler(const Options& o, worker::Scheduler& sched,
                                       const std::vector<std::vector<int32_t>>& prompts) {
  absl::StatusOr<std::vector<std::shared_ptr<RecordingSink>>> submitted =
      SubmitAll(sched, prompts, o.max_tokens);
  if (!submitted.ok()) return submitted.status();
  const std::vector<std::shared_ptr<RecordingSink>>& sinks = *submitted;
  const worker::SchedulerStats before = sched.stats();
  RepResult r;
  for (const auto& p : prompts) r.prompt_tokens += static_cast<int64_t>(p.size());

  // Prefill phase: until every sequence has its first token.
  const Clock::time_point t0 = Clock::now();
  auto all_started = [&] {
    return std::all_of(sinks.begin(), sinks.end(),
                       [](const auto& s) { return !s->tokens.empty() || s->done; });
  };
  while (!all_started()) {
    if (!sched.Step()) break;
  }
  const Clock::time_point t1 = Clock::now();
  std::vector<int64_t> at_start;
  for (const auto& s : sinks) at_start.push_back(static_cast<int64_t>(s->tokens.size()));
  const int64_t steps_prefill = sched.stats().steps;
  // Decode phase.
  while (sched.busy()) sched.Step();
  const Clock::time_point t2 = Clock::now();

  r.prefill_seconds = Seconds(t0, t1);
  r.decode_seconds = Seconds(t1, t2);
  r.steps = sched.stats().steps - steps_prefill;
  for (size_t i = 0; i < sinks.size(); ++i) {
    const RecordingSink& s = *sinks[i];
    if (!s.done || s.result.reason != worker::EndReason::kLength) {
      return absl::InternalError(absl::StrCat("request ", i, " ended with ",
                                              std::string(worker::EndReasonName(s.result.reason)),
                                              ": ", s.result.error.ToString()));
    }
    const int64_t n = static_cast<int64_t>(s.tokens.size()) - at_start[i];
    r.decode_tokens += n;
    r.per_seq_tok_s.push_back(static_cast<double>(n) / std::max(Seconds(t1, s.finished_at), 1e-12));
    r.outputs.push_back(s.tokens);
  }
  const worker::SchedulerStats after = sched.stats();
  r.drafted = after.drafted_tokens - before.drafted_tokens;
  r.accepted = after.accepted_tokens - before.accepted_tokens;
  return r;
}

// The Scheduler's speculative decode loop for one sequence, with the text's continuation in
// place of the sampled tokens (see the file comment). `full` is the prompt followed by the
// forced continuation (at least max_tokens of it).
absl::StatusOr<RepResult> RunTeacherForced(const Options& o, Qwen35Model& model,
                                           const ServingStack& stack,
                                           const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& continuation) {
  RepResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  const int64_t n_vocab = model.n_vocab();
  worker::SamplingParams greedy;
  greedy.temperature = 0.0f;
  absl::StatusOr<worker::Sampler> sampler =
      worker::Sampler::Create(greedy, static_cast<int32_t>(n_vocab));
  if (!sampler.ok()) return sampler.status();
  const int64_t context =
      static_cast<int64_t>(prompt.size()) + o.max_tokens + o.ngram.draft_max + 1;
  absl::StatusOr<std::unique_ptr<worker::SequenceState>> made =
      model.NewSequence(stack.cache, stack.slots, context);
  if (!made.ok()) return made.status();
  worker::SequenceState& seq = **made;
  auto& slot = static_cast<worker::RecurrentSlot&>(*seq.state);
  std::vector<float> logits;

  std::vector<int32_t> tokens = prompt;
  const Clock::time_point t0 = Clock::now();
  {
    const BatchEntry e{&seq, prompt, false};
    if (absl::Status s = model.Forward({&e, 1}, logits); !s.ok()) return s;
    sampler->Sample(absl::Span<const float>(logits).last(n_vocab));
    tokens.push_back(continuation[0]);
  }
  const Clock::time_point t1 = Clock::now();
  const int64_t end = static_cast<int64_t>(prompt.size()) + o.max_tokens;
  std::vector<int32_t> feed;
  while (static_cast<int64_t>(tokens.size()) < end) {
    const int64_t fed_before = seq.n_past;
    feed.assign(tokens.begin() + fed_before, tokens.end());
    std::vector<int32_t> draft;
    std::unique_ptr<worker::RecurrentSlot> snapshot;
    if (o.speculation) {
      worker::NgramDraftOptions d = o.ngram;
      d.draft_max = static_cast<int>(
          std::min<int64_t>(d.draft_max, end - static_cast<int64_t>(tokens.size())));
      if (d.draft_max > 0) draft = worker::DraftFromHistory(tokens, d);
      if (!draft.empty()) {
        absl::StatusOr<std::unique_ptr<worker::RecurrentSlot>> snap =
            worker::RecurrentSlot::Acquire(stack.slots);
        if (!snap.ok()) return snap.status();
        if (absl::Status s = (*snap)->CopyFrom(slot); !s.ok()) return s;
        snapshot = std::move(*snap);
      }
      feed.insert(feed.end(), draft.begin(), draft.end());
    }
    const int64_t k = static_cast<int64_t>(draft.size());
    BatchEntry e{&seq, feed, /*all_logits=*/false};
    e.last_logits = k + 1;  // as the Scheduler asks: the real token's row and the drafts'
    if (absl::Status s = model.Forward({&e, 1}, logits); !s.ok()) return s;
    ++r.steps;
    const int64_t rows = e.LogitsRows();
    const int64_t first = rows - (k + 1);
    int64_t accepted = 0;
    for (int64_t i = 0; i <= k; ++i) {
      sampler->Sample(absl::Span<const float>(logits).subspan((first + i) * n_vocab, n_vocab));
      const int32_t next = continuation[tokens.size() - prompt.size()];
      tokens.push_back(next);
      if (static_cast<int64_t>(tokens.size()) >= end || i == k || next != draft[i]) break;
      ++accepted;
    }
    if (k > 0) {
      r.drafted += k;
      r.accepted += accepted;
      if (accepted < k) {
        if (absl::Status s = slot.CopyFrom(*snapshot); !s.ok()) return s;
        seq.n_past = fed_before;
      } else {
        seq.n_past = static_cast<int64_t>(tokens.size()) - 1;
      }
    }
  }
  const Clock::time_point t2 = Clock::now();
  r.prefill_seconds = Seconds(t0, t1);
  r.decode_seconds = Seconds(t1, t2);
  r.decode_tokens = o.max_tokens - 1;
  r.per_seq_tok_s.push_back(static_cast<double>(r.decode_tokens) /
                            std::max(r.decode_seconds, 1e-12));
  r.outputs.emplace_back(tokens.begin() + static_cast<int64_t>(prompt.size()), tokens.end());
  return r;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "deltaserve-bench-serving: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Run(const Options& o) {
  std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend(o.threads);
  absl::StatusOr<std::unique_ptr<Qwen35Model>> loaded = Qwen35Model::Load(o.model, *backend);
  if (!loaded.ok()) return Fail(loaded.status());
  Qwen35Model& model = **loaded;
  absl::StatusOr<std::vector<std::vector<int32_t>>> made = MakePrompts(o, model);
  if (!made.ok()) return Fail(made.status());
  const std::vector<std::vector<int32_t>>& prompts = *made;
  int64_t longest = 0, total = 0;
  uint64_t ids_hash = 0xCBF29CE484222325ULL;
  for (const auto& p : prompts) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
    total += static_cast<int64_t>(p.size());
    ids_hash = HashIds(p, ids_hash);
  }
  absl::StatusOr<ServingStack> stack = MakeStack(o, *backend, model, longest, total);
  if (!stack.ok()) return Fail(stack.status());
  std::fprintf(stderr,
               "deltaserve-bench-serving: %s, %d sequences, %s prompts of %lld tokens, "
               "max_tokens=%lld, speculation %s%s, %d threads, %d reps\n",
               o.model.c_str(), o.sequences, o.workload.c_str(), static_cast<long long>(longest),
               static_cast<long long>(o.max_tokens), o.speculation ? "on" : "off",
               o.teacher_forced ? " (teacher-forced)" : "", o.threads, o.reps);

  // Warm-up: touches the mapped weights and sizes the workspace for decode.
  for (int w = 0; w < o.warmup; ++w) {
    Options wo = o;
    wo.max_tokens = 2;
    absl::StatusOr<RepResult> r =
        RunScheduler(wo, *stack->scheduler, {PromptIds(8, o.seed, model.n_vocab())});
    if (!r.ok()) return Fail(r.status());
  }

  // The forced continuation of text-twice: the rest of the first copy after the repeated head.
  std::vector<int32_t> continuation;
  if (o.teacher_forced) {
    const std::vector<int32_t>& p = prompts[0];
    continuation.assign(p.begin() + o.repeat_head, p.begin() + o.text_tokens);
  }

  std::vector<double> agg, per_seq, prefill_rates;
  int64_t drafted = 0, accepted = 0, decode_tokens = 0, steps = 0;
  std::vector<std::vector<int32_t>> outputs;
  uint64_t out_hash = 0;
  bool outputs_stable = true;
  for (int rep = 1; rep <= o.reps; ++rep) {
    absl::StatusOr<RepResult> got =
        o.teacher_forced ? RunTeacherForced(o, model, *stack, prompts[0], continuation)
                         : RunScheduler(o, *stack->scheduler, prompts);
    if (!got.ok()) return Fail(got.status());
    const RepResult& r = *got;
    const double tok_s = static_cast<double>(r.decode_tokens) / std::max(r.decode_seconds, 1e-12);
    const double prefill_tok_s =
        static_cast<double>(r.prompt_tokens) / std::max(r.prefill_seconds, 1e-12);
    agg.push_back(tok_s);
    per_seq.push_back(Median(r.per_seq_tok_s));
    prefill_rates.push_back(prefill_tok_s);
    drafted += r.drafted;
    accepted += r.accepted;
    decode_tokens += r.decode_tokens;
    steps += r.steps;
    uint64_t h = 0xCBF29CE484222325ULL;
    for (const auto& out : r.outputs) h = HashIds(out, h);
    if (rep == 1) {
      outputs = r.outputs;
      out_hash = h;
    } else if (h != out_hash) {
      outputs_stable = false;
    }
    std::printf(
        "{\"engine\":\"deltaserve\",\"workload\":\"%s\",\"sequences\":%d,\"speculation\":%s,"
        "\"teacher_forced\":%s,\"rep\":%d,\"prompt_tokens\":%lld,\"prefill_seconds\":%.6f,"
        "\"prefill_tok_s\":%.3f,\"decode_tokens\":%lld,\"decode_seconds\":%.6f,"
        "\"decode_tok_s\":%.3f,\"per_seq_tok_s\":%.3f,\"steps\":%lld,\"drafted\":%lld,"
        "\"accepted\":%lld,\"outputs_fnv1a\":\"%016llx\"}\n",
        o.workload.c_str(), o.sequences, o.speculation ? "true" : "false",
        o.teacher_forced ? "true" : "false", rep, static_cast<long long>(r.prompt_tokens),
        r.prefill_seconds, prefill_tok_s, static_cast<long long>(r.decode_tokens), r.decode_seconds,
        tok_s, Median(r.per_seq_tok_s), static_cast<long long>(r.steps),
        static_cast<long long>(r.drafted), static_cast<long long>(r.accepted),
        static_cast<unsigned long long>(h));
    std::fflush(stdout);
    std::fprintf(
        stderr, "  rep %d/%d: decode %.2f tok/s (%.2f per sequence), prefill %.1f tok/s%s\n", rep,
        o.reps, tok_s, Median(r.per_seq_tok_s), prefill_tok_s,
        r.drafted > 0 ? absl::StrCat(", accepted ", r.accepted, "/", r.drafted).c_str() : "");
  }

  std::vector<std::string> outs;
  for (const auto& out : outputs) outs.push_back(absl::StrCat("[", absl::StrJoin(out, ","), "]"));
  const double acceptance =
      drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  if (o.json) {
    std::printf(
        "{\"summary\":true,\"engine\":\"deltaserve\",\"workload\":\"%s\",\"sequences\":%d,"
        "\"prompt\":%lld,\"max_tokens\":%lld,\"speculation\":%s,\"teacher_forced\":%s,"
        "\"threads\":%d,\"reps\":%d,\"step_tokens\":%lld,\"median_decode_tok_s\":%.3f,"
        "\"min_decode_tok_s\":%.3f,\"max_decode_tok_s\":%.3f,\"median_per_seq_tok_s\":%.3f,"
        "\"median_prefill_tok_s\":%.3f,\"decode_tokens\":%lld,\"steps\":%lld,\"drafted\":%lld,"
        "\"accepted\":%lld,\"acceptance\":%.4f,\"tokens_per_step\":%.3f,\"peak_rss_mb\":%.1f,"
        "\"cpu_seconds\":%.2f,\"kv_type\":\"%s/%s\",\"ids_fnv1a\":\"%016llx\","
        "\"outputs_fnv1a\":\"%016llx\",\"outputs_stable\":%s,\"outputs\":[%s]}\n",
        o.workload.c_str(), o.sequences, static_cast<long long>(longest),
        static_cast<long long>(o.max_tokens), o.speculation ? "true" : "false",
        o.teacher_forced ? "true" : "false", o.threads, o.reps,
        static_cast<long long>(stack->scheduler->options().step_tokens), Median(agg),
        *std::min_element(agg.begin(), agg.end()), *std::max_element(agg.begin(), agg.end()),
        Median(per_seq), Median(prefill_rates), static_cast<long long>(decode_tokens),
        static_cast<long long>(steps), static_cast<long long>(drafted),
        static_cast<long long>(accepted), acceptance,
        steps > 0 ? static_cast<double>(decode_tokens) / static_cast<double>(steps) : 0.0,
        PeakRssMb(), CpuSeconds(), o.cache_type_k.c_str(), o.cache_type_v.c_str(),
        static_cast<unsigned long long>(ids_hash), static_cast<unsigned long long>(out_hash),
        outputs_stable ? "true" : "false", absl::StrJoin(outs, ",").c_str());
  } else {
    std::printf(
        "summary: engine=deltaserve workload=%s sequences=%d speculation=%s reps=%d "
        "median_decode_tok_s=%.3f median_per_seq_tok_s=%.3f median_prefill_tok_s=%.3f "
        "acceptance=%.4f peak_rss_mb=%.1f\n",
        o.workload.c_str(), o.sequences, o.speculation ? "on" : "off", o.reps, Median(agg),
        Median(per_seq), Median(prefill_rates), acceptance, PeakRssMb());
  }
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) {
  deltaserve::bench::Options options;
  if (std::string why = deltaserve::bench::Parse(argc, argv, options); !why.empty()) {
    if (why != "help") std::fprintf(stderr, "deltaserve-bench-serving: %s\n", why.c_str());
    std::fputs(deltaserve::bench::kUsage, stderr);
    return why == "help" ? 0 : 2;
  }
  // A DELTASERVE_CPU_ISA the CPU cannot run is refused before anything loads.
  if (absl::StatusOr<deltaserve::kernels::CpuIsa> isa = deltaserve::kernels::ResolveCpuIsaFromEnv();
      !isa.ok()) {
    std::fprintf(stderr, "deltaserve-bench-serving: %s\n",
                 std::string(isa.status().message()).c_str());
    return 2;
  }
  return deltaserve::bench::Run(options);
}
