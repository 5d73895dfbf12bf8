// deltaserve-peak-rss: serve a model on the CPU the way the worker does (ServedModel), with
// requests that fill every sequence's context, and compare the memory plan's peak with the
// process's measured peak resident set (VmHWM). The process baseline is measured first thing in
// main(), before the model is opened, and given to the plan (docs/memory_plan.md, "Serving").
//
//   deltaserve-peak-rss -m FILE --ctx N --parallel P --ram SIZE [--cache-type-k T]
//                       [--cache-type-v T] [--page-tokens N] [--batch-tokens N] [--threads N]
//                       [--speculation] [--draft-max N] [--overhead SIZE] [--rounds R]
//
// Prints the plan and the serving overhead, then one line:
//   peak: planned_bytes=N measured_bytes=M baseline_bytes=B error_percent=E
// Exit status: 0 served, 1 refused or failed (the message on stderr), 2 usage error.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "worker/cache/memory_plan.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {
namespace {

struct Flags {
  std::string model;
  ServingOptions serving;
  std::string ram, overhead;
  int rounds = 1;
};

int Usage(const std::string& why) {
  return common::UsageExit(
      "deltaserve-peak-rss", why,
      "usage: deltaserve-peak-rss -m FILE --ctx N --parallel P --ram SIZE\n"
      "         [--cache-type-k T] [--cache-type-v T] [--page-tokens N]\n"
      "         [--batch-tokens N] [--threads N] [--speculation] [--draft-max N]\n"
      "         [--overhead SIZE] [--rounds R]\n",
      "Serves the model on the CPU as the worker does, with requests that fill every sequence's\n"
      "context --rounds times, and compares the memory plan's peak with the measured peak\n"
      "resident set; the flags are the worker's (deltaserve-worker --help).\n");
}

// The command line (common/flags.h). Counts other than --rounds take any integer, as before the
// table: ServedModel refuses what it cannot plan.
std::vector<common::Flag> FlagTable(Flags& f) {
  ServingOptions& o = f.serving;
  auto any = [](std::string name, auto* out, std::string message) {
    using T = std::remove_pointer_t<decltype(out)>;
    return common::IntegerFlag(std::move(name), out, std::numeric_limits<T>::min())
        .Error(std::move(message));
  };
  return {
      common::StringFlag("-m", &f.model).MissingMessage("-m needs a file"),
      any("--ctx", &o.ctx, "--ctx needs a token count"),
      any("--parallel", &o.n_parallel, "--parallel needs a count"),
      common::StringFlag("--ram", &f.ram).MissingMessage("--ram needs a size"),
      common::StringFlag("--overhead", &f.overhead).MissingMessage("--overhead needs a size"),
      KvCacheTypeFlag("--cache-type-k", &o.k_type),
      KvCacheTypeFlag("--cache-type-v", &o.v_type),
      any("--page-tokens", &o.page_tokens, "--page-tokens needs a count"),
      any("--batch-tokens", &o.step_tokens, "--batch-tokens needs a count"),
      any("--threads", &o.n_threads, "--threads needs a count"),
      common::SwitchFlag("--speculation", &o.speculation),
      any("--draft-max", &o.ngram.draft_max, "--draft-max needs a count"),
      common::IntegerFlag("--rounds", &f.rounds, 1).Error("--rounds needs a count >= 1"),
      common::HelpFlag(),
  };
}

std::string Parse(int argc, char** argv, Flags& f) {
  if (std::string why = common::ParseFlags(FlagTable(f), argc, argv); !why.empty()) return why;
  if (f.model.empty()) return "-m FILE is required";
  if (f.ram.empty()) return "--ram SIZE is required";
  return "";
}

// Collects nothing: the run only needs the requests to finish.
class DiscardingSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken>) override {}
  void OnFinish(const GenerationResult& r) override { result = r; }
  GenerationResult result;
};

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) {
  using namespace deltaserve::worker;
  // Before anything is opened or allocated: what the process costs by itself.
  const uint64_t baseline = MeasureProcessBaseline().total();
  Flags f;
  if (std::string why = Parse(argc, argv, f); !why.empty()) return Usage(why);
  // A DELTASERVE_CPU_ISA the CPU cannot run is refused before anything loads.
  if (absl::StatusOr<deltaserve::kernels::CpuIsa> isa = deltaserve::kernels::ResolveCpuIsaFromEnv();
      !isa.ok()) {
    std::fprintf(stderr, "deltaserve-peak-rss: %s\n", std::string(isa.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<uint64_t> ram = ParseByteSize(f.ram);
  if (!ram.ok()) return Usage(std::string(ram.status().message()));
  f.serving.budget_bytes = *ram;
  f.serving.budget_name = "RAM";
  if (!f.overhead.empty()) {
    absl::StatusOr<uint64_t> overhead = ParseByteSize(f.overhead);
    if (!overhead.ok()) return Usage(std::string(overhead.status().message()));
    f.serving.fixed_overhead_bytes = *overhead;
  }
  f.serving.process_baseline_bytes = baseline;
  std::unique_ptr<deltaserve::kernels::Backend> backend =
      deltaserve::kernels::MakeCpuBackend(f.serving.n_threads);
  absl::StatusOr<std::unique_ptr<ServedModel>> served =
      ServedModel::Create(f.model, *backend, f.serving);
  if (!served.ok()) {
    std::cerr << "deltaserve-peak-rss: " << served.status().message() << "\n";
    return 1;
  }
  ServedModel& m = **served;
  std::cout << RenderMemoryPlan(m.plan()) << "\n" << m.overhead().Render();

  // Every sequence runs to its full context: a prompt of ctx - gen tokens, gen generated.
  const int64_t ctx = f.serving.ctx;
  const int32_t gen = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(16, ctx / 4)));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, m.n_valid_tokens() - 1);
  std::vector<std::shared_ptr<DiscardingSink>> sinks;
  for (int r = 0; r < f.rounds * f.serving.n_parallel; ++r) {
    GenerationRequest req;
    req.id = absl::StrCat("fill-", r);
    for (int64_t i = 0; i < ctx - gen; ++i) req.prompt.push_back(token(rng));
    req.sampling.temperature = 0.8f;
    req.sampling.top_k = 0;
    req.sampling.seed = static_cast<uint64_t>(r);
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = gen;
    sinks.push_back(std::make_shared<DiscardingSink>());
    absl::StatusOr<uint64_t> h = m.scheduler().Submit(std::move(req), sinks.back());
    if (!h.ok()) {
      std::cerr << "deltaserve-peak-rss: " << h.status().message() << "\n";
      return 1;
    }
  }
  int64_t max_pages_used = 0;
  while (m.scheduler().busy()) {
    m.scheduler().Step();
    const SchedulerStats s = m.scheduler().stats();
    max_pages_used = std::max(max_pages_used, s.total_pages - s.free_pages);
  }
  for (const auto& s : sinks) {
    if (s->result.reason != EndReason::kLength) {
      std::cerr << "deltaserve-peak-rss: a request ended with " << EndReasonName(s->result.reason)
                << " " << s->result.error.message() << "\n";
      return 1;
    }
  }
  const uint64_t planned = m.planned_bytes();
  const uint64_t measured = ProcessPeakResidentBytes();
  const double error = 100.0 * (static_cast<double>(planned) - static_cast<double>(measured)) /
                       static_cast<double>(measured);
  std::cout << absl::StreamFormat(
      "pages: %d of %d used at most\n"
      "peak: planned_bytes=%d measured_bytes=%d baseline_bytes=%d error_percent=%.2f\n",
      max_pages_used, m.kv_cache().total_pages(), planned, measured, baseline, error);
  return 0;
}
