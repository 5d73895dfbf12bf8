// deltaserve-plan: prints the worker's memory plan (docs/memory_plan.md) for a GGUF file or a
// model size: weight bytes by type, KV bytes per token of each K/V type pair, recurrent state per
// sequence, workspace, page bytes, and the largest context per number of parallel sequences.
//
//   deltaserve-plan (-m FILE.gguf | --preset P [--type T]) (--vram SIZE | --ram SIZE)
//                   [--cache-type-k T] [--cache-type-v T] [--page-tokens N] [--conv-state T]
//                   [--batch-tokens N] [--logits-rows N] [--threads N] [--overhead SIZE]
//                   [--ctx N [--parallel N]]
//
// Nothing is loaded: a GGUF is read for its metadata and tensor infos only.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "common/str_util.h"
#include "worker/cache/memory_plan.h"
#include "worker/cache/model_footprint.h"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::worker {
namespace {

using common::Sv;

struct Options {
  std::string model;
  std::string preset;
  std::string type;
  std::string vram;
  std::string ram;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  std::string conv_state = "f32";
  std::string overhead = "0";
  int64_t page_tokens = 256;
  int64_t batch_tokens = 512;
  int64_t logits_rows = 0;
  int threads = 1;
  int64_t ctx = 0;
  int parallel = 1;
  bool parallel_set = false;
};

// The command line (common/flags.h): every value is required to be non-empty, counts are
// bounded; tests/worker/deltaserve_plan_cli_test.cc checks the messages.
std::vector<common::Flag> FlagTable(Options& o, bool& help) {
  using common::IntegerFlag;
  using common::StringFlag;
  std::string presets = "a Qwen3.5 size instead of a file:";
  for (const SynthPreset& p : SynthPresets()) absl::StrAppend(&presets, " ", Sv(p.name));
  absl::StrAppend(&presets, "\n(real checkpoint shapes, 248,320 vocabulary rows)");
  auto text = [](std::string name, std::string* out) {
    return StringFlag(std::move(name), out).NonEmpty();
  };
  auto count = [](std::string name, auto* out, int64_t min, int64_t max) {
    return IntegerFlag(std::move(name), out, min, max).NonEmpty();
  };
  return {
      common::SwitchFlag("--help", &help).Alias("-h").StopsParsing(),
      text("--model", &o.model)
          .Alias("-m")
          .Help("F", "GGUF file (metadata and tensor infos only are read)"),
      text("--preset", &o.preset).Help("P", presets),
      text("--type", &o.type)
          .Help("T",
                "weight mixture of a preset: f32 f16 q8_0 q4_k_m q5_k_m q6_k\n"
                "(default q4_k_m; as deltaserve-synth and llama-quantize)"),
      text("--vram", &o.vram)
          .Help("SIZE", "device memory budget: 8GiB, 512MiB, 64G, 1.5GiB, 24GB ..."),
      text("--ram", &o.ram).Help("SIZE", "host memory budget (CPU worker), same syntax"),
      text("--cache-type-k", &o.cache_type_k)
          .Alias("-ctk")
          .Help("T", "K cache type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 (default f16)"),
      text("--cache-type-v", &o.cache_type_v)
          .Alias("-ctv")
          .Help("T", "V cache type, same choices (default f16)"),
      count("--page-tokens", &o.page_tokens, 1, 65536)
          .Help("N", "token positions per KV page (default 256)"),
      text("--conv-state", &o.conv_state)
          .Help("T", "DeltaNet conv window type: f32 f16 bf16 (default f32)"),
      count("--batch-tokens", &o.batch_tokens, 1, 1 << 20)
          .Help("N", "tokens of one forward pass, sizing the workspace (default 512)"),
      count("--logits-rows", &o.logits_rows, 1, 1 << 20)
          .Help("N", "logits rows of one pass (default: --batch-tokens)"),
      count("--threads", &o.threads, 1, 4096)
          .Alias("-t")
          .Help("N", "attention kernel threads, for its scratch (default 1)"),
      text("--overhead", &o.overhead)
          .Help("SIZE", "fixed reserve: runtime context, allocator slack (default 0)"),
      count("--ctx", &o.ctx, 1, int64_t{1} << 40)
          .Help("N",
                "also check that N tokens x --parallel sequences fit; exit 1\n"
                "with the reason when they do not"),
      IntegerFlag(
          "--parallel",
          [&o](int64_t n) {
            o.parallel = static_cast<int>(n);
            o.parallel_set = true;
          },
          1, 1 << 20)
          .NonEmpty()
          .Help("N", "sequences for --ctx (default 1)"),
  };
}

// The usage on stdout (help) or, after what is wrong, on stderr (common::UsageExit).
int Usage(const std::string& why) {
  Options o;
  bool help = false;
  return common::UsageExit(
      "deltaserve-plan", why,
      "usage: deltaserve-plan (-m FILE.gguf | --preset P [--type T]) (--vram SIZE | --ram SIZE)\n"
      "                       [--cache-type-k T] [--cache-type-v T] [--page-tokens N]\n"
      "                       [--conv-state T] [--batch-tokens N] [--logits-rows N]\n"
      "                       [--threads N] [--overhead SIZE] [--ctx N [--parallel N]]\n",
      "Prints how the worker's memory divides between weights, the paged KV cache of the\n"
      "full-attention layers, the DeltaNet recurrent state of each sequence and the\n"
      "forward-pass workspace, and the largest context that fits for 1..64 parallel\n"
      "sequences (docs/memory_plan.md).\n"
      "\n" +
          common::FlagHelp(FlagTable(o, help)));
}

int Fail(const absl::Status& s) {
  std::cerr << "deltaserve-plan: " << s.message() << "\n";
  return 1;
}

// Parses argv into `o`; returns what is wrong, or "" (and sets `help`) on success.
std::string Parse(int argc, char** argv, Options& o, bool& help) {
  if (std::string err = common::ParseFlags(FlagTable(o, help), argc, argv); !err.empty() || help) {
    return err;
  }
  if (o.model.empty() == o.preset.empty()) return "give exactly one of -m FILE.gguf and --preset";
  if (!o.model.empty() && !o.type.empty()) return "--type applies to --preset only";
  if (o.vram.empty() == o.ram.empty()) return "give exactly one of --vram SIZE and --ram SIZE";
  if (o.parallel_set && o.ctx == 0) return "--parallel needs --ctx";
  if (o.logits_rows > o.batch_tokens) return "--logits-rows is larger than --batch-tokens";
  return "";
}

int Run(const Options& o) {
  MemoryPlanInputs in;
  // Flag values first, so a typo is reported before a large file is opened.
  const std::string& budget = o.vram.empty() ? o.ram : o.vram;
  in.budget_name = o.vram.empty() ? "RAM" : "VRAM";
  absl::StatusOr<uint64_t> budget_bytes = ParseByteSize(budget);
  if (!budget_bytes.ok()) return Fail(budget_bytes.status());
  if (*budget_bytes == 0) return Fail(absl::InvalidArgumentError("the budget must be above 0"));
  in.budget_bytes = *budget_bytes;
  absl::StatusOr<uint64_t> overhead = ParseByteSize(o.overhead);
  if (!overhead.ok()) return Fail(overhead.status());
  in.fixed_overhead_bytes = *overhead;
  absl::StatusOr<common::GgmlType> k = ParseCacheType(o.cache_type_k);
  if (!k.ok()) return Fail(k.status());
  absl::StatusOr<common::GgmlType> v = ParseCacheType(o.cache_type_v);
  if (!v.ok()) return Fail(v.status());
  absl::StatusOr<common::GgmlType> conv = ParseConvStateType(o.conv_state);
  if (!conv.ok()) return Fail(conv.status());
  in.k_type = *k;
  in.v_type = *v;
  in.conv_state_type = *conv;
  in.page_tokens = o.page_tokens;
  in.max_batch_tokens = o.batch_tokens;
  in.logits_rows = o.logits_rows;
  in.n_threads = o.threads;

  std::string unread;
  if (!o.preset.empty()) {
    absl::StatusOr<SynthPreset> preset = FindPreset(o.preset);
    if (!preset.ok()) return Fail(preset.status());
    absl::StatusOr<WeightMixture> mixture = ParseMixture(o.type.empty() ? "q4_k_m" : o.type);
    if (!mixture.ok()) return Fail(mixture.status());
    absl::StatusOr<ModelPlan> plan = PlanModel(*preset, *mixture, kQwen35VocabRows, 0);
    if (!plan.ok()) return Fail(plan.status());
    in.hp = PresetHParams(*preset, kQwen35VocabRows);
    in.weights = SynthPlanWeightBytes(*plan);
    in.model_name = absl::StrCat("preset ", Sv(preset->name), " ", Sv(MixtureName(*mixture)));
  } else {
    absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(o.model);
    if (!file.ok()) return Fail(file.status());
    absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**file);
    if (!hp.ok()) return Fail(hp.status());
    absl::StatusOr<ModelWeightBytes> weights = ForwardPassWeightBytes(**file, *hp);
    if (!weights.ok()) return Fail(weights.status());
    in.hp = *std::move(hp);
    in.weights = weights->read;
    in.model_name = o.model;
    if (weights->n_unread_tensors > 0) {
      unread = absl::StrCat("(", weights->n_unread_tensors, " tensors of the file, ",
                            HumanBytes(weights->unread_bytes),
                            ", are not read by the forward pass and not counted: MTP layers "
                            "or extras)\n");
    }
  }
  absl::StatusOr<MemoryPlan> plan = PlanMemory(std::move(in));
  if (!plan.ok()) return Fail(plan.status());
  std::cout << RenderMemoryPlan(*plan) << unread;
  if (o.ctx > 0) {
    if (absl::Status s = CheckFits(*plan, o.ctx, o.parallel); !s.ok()) return Fail(s);
    std::cout << "\ncontext " << o.ctx << " x " << o.parallel
              << " sequences fits: " << HumanBytes(BytesNeeded(*plan, o.ctx, o.parallel)) << " of "
              << HumanBytes(plan->inputs.budget_bytes) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) {
  deltaserve::worker::Options o;
  bool help = false;
  const std::string err = deltaserve::worker::Parse(argc, argv, o, help);
  if (help) return deltaserve::worker::Usage(std::string(deltaserve::common::kHelpRequested));
  if (!err.empty()) return deltaserve::worker::Usage(err);
  return deltaserve::worker::Run(o);
}
