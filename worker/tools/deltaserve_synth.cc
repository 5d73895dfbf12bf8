// deltaserve-synth: writes a random-weight Qwen3.5 GGUF with the real shapes of one model size,
// for load, memory and speed tests of sizes whose weights are not at hand (docs/synth.md).
//
//   deltaserve-synth --preset 9b --type q4_k_m --vocab-from VOCAB.gguf -o OUT.gguf
//                    [--seed S] [--layers N] [--threads N] [--plan]
//                    [--expert-skew S [--expert-topics N] [--topic-stickiness L]]
//
// The model is never held in memory: tensors are declared first and their bytes generated in
// slabs of rows while the file is written (GgufWriter::WriteFileStreaming). Values depend only
// on the seed, the tensor name and the position, so the output is the same for any --threads.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/gguf_file.h"
#include "common/gguf_writer.h"
#include "common/str_util.h"
#include "common/tokenizer.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::worker {
namespace {

using common::Sv;

struct Options {
  std::string preset;
  std::string type;
  std::string vocab;
  std::string out;
  uint64_t seed = 1;
  int64_t layers = 0;
  int threads = 2;
  bool plan_only = false;
  bool skewed = false;  // --expert-skew given
  ExpertSkew skew;
  bool skew_detail = false;  // --expert-topics or --topic-stickiness given
};

constexpr const char* kSynopsis =
    "usage: deltaserve-synth --preset P --type T --vocab-from VOCAB.gguf -o OUT.gguf\n"
    "                        [--seed S] [--layers N] [--threads N] [--plan]\n"
    "                        [--expert-skew S [--expert-topics N] [--topic-stickiness L]]\n";

void PrintHelp() {
  // clang-format off
  std::cout << kSynopsis <<
      "\n"
      "Writes a random-weight Qwen3.5 GGUF (arch qwen35, or qwen35moe for the MoE presets) with\n"
      "the real shapes of one size (MODEL_SPEC 1.2). Weights are scaled so a forward pass stays\n"
      "finite at full depth; the text generated is gibberish.\n"
      "\n"
      "  --preset P        model size (hidden, layers, heads q/kv, DeltaNet heads k/v, FFN):\n";
  // clang-format on
  for (const SynthPreset& p : SynthPresets()) {
    std::cout << absl::StrFormat("                      %-10s H=%-5d L=%-3d %d/%d  %d/%d  ",
                                 std::string(p.name), p.n_embd, p.n_layer, p.n_head, p.n_head_kv,
                                 p.ssm_n_k_heads, p.ssm_n_v_heads);
    if (p.is_moe()) {
      std::cout << absl::StrFormat("%d experts top-%d, I=%d, shared %d\n", p.n_expert,
                                   p.n_expert_used, p.n_ff_expert, p.n_ff_shared);
    } else {
      std::cout << absl::StrFormat("I=%d%s\n", p.n_ff, p.tied ? ", tied" : "");
    }
  }
  // clang-format off
  std::cout <<
      "  --type T          f32 | f16 | q8_0 | q4_k_m | q5_k_m | q6_k (mixtures as llama-quantize;\n"
      "                    norms, ssm_a, ssm_dt.bias, ssm_conv1d and routers stay f32)\n"
      "  --vocab-from F    GGUF whose tokenizer.* keys are copied (tokens, types, merges, pre,\n"
      "                    special ids, chat template). token_embd / output get one row per token\n"
      "                    of F: 151,936 for ../shared/golden/qwen3-vocab-qwen35pre.gguf. Real\n"
      "                    Qwen3.5 checkpoints have 248,320 rows, so files are a little smaller.\n"
      "  -o, --output F    file to write (through F.tmp, renamed when complete)\n"
      "  --seed S          random seed (default 1); same seed, same bytes\n"
      "  --layers N        override the layer count (quick tests; layer i is full attention\n"
      "                    when (i+1) % 4 == 0)\n"
      "  --threads N       generator threads (default 2)\n"
      "  --plan            print the tensor plan, parameter counts and size; write nothing\n"
      "  --expert-skew S   MoE presets: route with Zipf-distributed expert popularity of\n"
      "                    exponent S (0..8; 0: no preference) instead of evenly; each of the\n"
      "                    topics (equal token-id ranges) has its own hot experts per layer\n"
      "  --expert-topics N topics for --expert-skew (default 8, 1..64)\n"
      "  --topic-stickiness L  logits the head adds to tokens of the current token's topic, so\n"
      "                    a generation keeps its prompt's topic (default 16, 0..64)\n";
  // clang-format on
}

int Usage(const std::string& why) {
  std::cerr << "deltaserve-synth: " << why << "\n"
            << kSynopsis << "(deltaserve-synth --help says more)\n";
  return common::kExitUsage;
}

int Fail(const absl::Status& s) {
  std::cerr << "deltaserve-synth: " << s.message() << "\n";
  return 1;
}

// The command line (common/flags.h): every value is required to be non-empty;
// tests/worker/deltaserve_synth_cli_test.cc checks the messages. PrintHelp says what each does.
std::vector<common::Flag> FlagTable(Options& o, bool& help) {
  auto text = [](std::string name, std::string* out) {
    return common::StringFlag(std::move(name), out).NonEmpty();
  };
  return {
      common::SwitchFlag("--help", &help).Alias("-h").StopsParsing(),
      common::SwitchFlag("--plan", &o.plan_only),
      text("--preset", &o.preset),
      text("--type", &o.type),
      text("--vocab-from", &o.vocab),
      text("--output", &o.out).Alias("-o"),
      common::CustomFlag("--seed",
                         [&o](std::string_view v) -> std::string {
                           if (!absl::SimpleAtoi(Sv(v), &o.seed)) {
                             return "--seed needs an unsigned integer";
                           }
                           return "";
                         })
          .NonEmpty(),
      common::IntegerFlag("--layers", &o.layers, 1, 1024)
          .NonEmpty()
          .InvalidMessage("--layers '{value}' is not a layer count (1..1024)"),
      common::IntegerFlag("--threads", &o.threads, 1, 256)
          .NonEmpty()
          .InvalidMessage("--threads '{value}' is not a thread count (1..256)"),
      common::CustomFlag("--expert-skew",
                         [&o](std::string_view v) -> std::string {
                           o.skewed = true;
                           if (!absl::SimpleAtod(Sv(v), &o.skew.exponent) ||
                               !(o.skew.exponent >= 0 && o.skew.exponent <= 8)) {
                             return "--expert-skew needs a Zipf exponent in [0, 8]";
                           }
                           return "";
                         })
          .NonEmpty(),
      common::CustomFlag("--expert-topics",
                         [&o](std::string_view v) -> std::string {
                           o.skew_detail = true;
                           if (!absl::SimpleAtoi(Sv(v), &o.skew.topics) || o.skew.topics < 1 ||
                               o.skew.topics > 64) {
                             return "--expert-topics needs a topic count (1..64)";
                           }
                           return "";
                         })
          .NonEmpty(),
      common::CustomFlag("--topic-stickiness",
                         [&o](std::string_view v) -> std::string {
                           o.skew_detail = true;
                           if (!absl::SimpleAtod(Sv(v), &o.skew.stickiness) ||
                               !(o.skew.stickiness >= 0 && o.skew.stickiness <= 64)) {
                             return "--topic-stickiness needs logits in [0, 64]";
                           }
                           return "";
                         })
          .NonEmpty(),
  };
}

// Parses argv into `o`; returns what is wrong, or "" (and sets `help`) on success.
std::string Parse(int argc, char** argv, Options& o, bool& help) {
  if (std::string err = common::ParseFlags(FlagTable(o, help), argc, argv); !err.empty() || help) {
    return err;
  }
  if (o.preset.empty()) return "--preset is required";
  if (o.type.empty()) return "--type is required";
  if (o.vocab.empty()) return "--vocab-from is required";
  if (o.out.empty() && !o.plan_only) return "-o OUT.gguf is required";
  if (o.skew_detail && !o.skewed) {
    return "--expert-topics and --topic-stickiness go with --expert-skew";
  }
  return "";
}

double Megabytes(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }
std::string Mb(uint64_t bytes) { return absl::StrFormat("%.1f MB", Megabytes(bytes)); }

// Progress on stderr: percent of tensor bytes and throughput, redrawn in place on a terminal,
// one line every 10 s otherwise (logs of CI runs).
class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}

  void Add(uint64_t bytes, std::string_view tensor) {
    done_ += bytes;
    const double now = Seconds();
    if (now - last_ < (tty_ ? 0.25 : 10.0) && done_ < total_) return;
    last_ = now;
    std::cerr << absl::StrFormat(
        "%s[%5.1f%%] %9.1f / %.1f MB  %6.1f MB/s  %-40s%s", tty_ ? "\r" : "",
        100.0 * Megabytes(done_) / std::max(Megabytes(total_), 1e-9), Megabytes(done_),
        Megabytes(total_), Megabytes(done_) / std::max(now, 1e-9), std::string(tensor),
        tty_ ? "" : "\n");
  }
  void Finish() {
    if (tty_) std::cerr << "\n";
  }
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  uint64_t total_;
  uint64_t done_ = 0;
  bool tty_;
  double last_ = -1e9;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Produces each planned tensor's bytes in slabs of rows, the rows of a slab split over the
// pool's threads. Peak memory: one slab of encoded rows plus one f32 row per thread.
class TensorStreamer {
 public:
  // Values generated per slab (64 MiB of f32 at most).
  static constexpr int64_t kSlabValues = int64_t{16} << 20;

  TensorStreamer(const ModelPlan& plan, uint64_t seed, int threads, Progress& progress)
      : plan_(plan), seed_(seed), pool_(threads), scratch_(threads), progress_(progress) {}

  absl::Status Produce(size_t index, common::GgufTensorSink& sink) {
    const PlannedTensor& t = plan_.tensors.at(index);
    const auto type = static_cast<kernels::WeightType>(t.type);
    const int64_t row = t.ne[0];
    const size_t row_bytes = kernels::RowBytes(type, row);
    if (row_bytes == 0) {
      return absl::InternalError(
          absl::StrCat("tensor '", t.name, "': no encoder for ", Sv(common::GgmlTypeName(t.type))));
    }
    const int64_t n_rows = t.n_rows();
    const int64_t slab_rows = std::clamp<int64_t>(kSlabValues / row, 1, n_rows);
    slab_.resize(static_cast<size_t>(slab_rows) * row_bytes);
    for (std::vector<float>& s : scratch_) s.resize(row);
    for (int64_t first = 0; first < n_rows; first += slab_rows) {
      const int64_t n = std::min(slab_rows, n_rows - first);
      std::atomic<bool> failed{false};
      pool_.Run([&](int ti, int nt) {
        float* values = scratch_[ti].data();
        for (int64_t r = n * ti / nt; r < n * (ti + 1) / nt; ++r) {
          FillRows(t, seed_, first + r, 1, values);
          if (kernels::QuantizeRow(type, values, slab_.data() + r * row_bytes, row) !=
              kernels::KernelStatus::kOk) {
            failed = true;
          }
        }
      });
      if (failed) {
        return absl::InternalError(absl::StrCat("tensor '", t.name, "': cannot encode rows as ",
                                                Sv(common::GgmlTypeName(t.type))));
      }
      const size_t bytes = static_cast<size_t>(n) * row_bytes;
      if (absl::Status s = sink.Write(absl::MakeConstSpan(slab_.data(), bytes)); !s.ok()) return s;
      progress_.Add(bytes, t.name);
    }
    return absl::OkStatus();
  }

 private:
  const ModelPlan& plan_;
  uint64_t seed_;
  kernels::ThreadPool pool_;
  std::vector<std::vector<float>> scratch_;  // one row per thread
  std::vector<uint8_t> slab_;
  Progress& progress_;
};

// The token count of a vocabulary file whose tokenizer DeltaServe can build.
absl::StatusOr<int64_t> VocabRows(const common::GgufFile& vocab) {
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok = common::Tokenizer::FromGguf(vocab);
  if (!tok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary file ", vocab.name(), " has no usable tokenizer: ", tok.status().message()));
  }
  absl::StatusOr<const common::GgufValue*> tokens = vocab.GetArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  return static_cast<int64_t>((*tokens)->ArraySize());
}

void PrintPlan(const ModelPlan& plan) {
  for (const PlannedTensor& t : plan.tensors) {
    std::string shape;
    for (int64_t d : t.ne) absl::StrAppend(&shape, shape.empty() ? "" : " x ", d);
    std::cout << absl::StrFormat("%-36s %-5s %-22s %s\n", t.name,
                                 std::string(common::GgmlTypeName(t.type)), shape,
                                 Mb(*common::GgufTensorByteSize(t.type, t.ne)));
  }
}

int Main(int argc, char** argv) {
  Options o;
  bool help = false;
  if (std::string err = Parse(argc, argv, o, help); !err.empty()) return Usage(err);
  if (help) {
    PrintHelp();
    return 0;
  }
  absl::StatusOr<SynthPreset> preset = FindPreset(o.preset);
  if (!preset.ok()) return Usage(std::string(preset.status().message()));
  absl::StatusOr<WeightMixture> mixture = ParseMixture(o.type);
  if (!mixture.ok()) return Usage(std::string(mixture.status().message()));

  absl::StatusOr<std::unique_ptr<common::GgufFile>> vocab = common::GgufFile::Open(o.vocab);
  if (!vocab.ok()) return Fail(vocab.status());
  absl::StatusOr<int64_t> n_vocab = VocabRows(**vocab);
  if (!n_vocab.ok()) return Fail(n_vocab.status());
  absl::StatusOr<ModelPlan> plan =
      PlanModel(*preset, *mixture, *n_vocab, o.layers,
                o.skewed ? std::optional<ExpertSkew>(o.skew) : std::nullopt);
  if (!plan.ok())
    return o.skewed ? Usage(std::string(plan.status().message())) : Fail(plan.status());

  common::GgufWriter writer;
  if (absl::Status s = AddModelMetadata(*plan, o.seed, writer); !s.ok()) return Fail(s);
  for (const common::GgufKeyValue& kv : (*vocab)->metadata()) {
    if (!absl::StartsWith(Sv(kv.key), "tokenizer.")) continue;
    if (absl::Status s = writer.AddMetadata(kv.key, common::GgufMetadataValue::CopyOf(kv.value));
        !s.ok()) {
      return Fail(s);
    }
  }
  for (const PlannedTensor& t : plan->tensors) {
    if (absl::Status s = writer.DeclareTensor(t.name, t.type, t.ne); !s.ok()) return Fail(s);
  }

  const std::string summary = absl::StrFormat(
      "%s %s (%s), %d layers, %d-token vocabulary: %.3fB parameters (%.3fB active), %s%s",
      std::string(plan->preset.name), std::string(MixtureName(plan->mixture)),
      std::string(plan->arch()), plan->preset.n_layer, plan->n_vocab,
      static_cast<double>(TotalParams(*plan)) / 1e9, static_cast<double>(ActiveParams(*plan)) / 1e9,
      Mb(writer.FileSize()),
      plan->skew.has_value()
          ? absl::StrFormat(", expert skew %g over %d topics (stickiness %g)", plan->skew->exponent,
                            plan->skew->topics, plan->skew->stickiness)
          : "");
  if (o.plan_only) {
    PrintPlan(*plan);
    std::cout << summary << "\n";
    return 0;
  }
  std::cerr << "deltaserve-synth: " << summary << " -> " << o.out << "\n";

  Progress progress(TensorDataBytes(*plan));
  TensorStreamer streamer(*plan, o.seed, o.threads, progress);
  absl::Status s = writer.WriteFileStreaming(
      o.out, [&](size_t i, common::GgufTensorSink& sink) { return streamer.Produce(i, sink); });
  progress.Finish();
  if (!s.ok()) return Fail(s);
  const double seconds = progress.Seconds();
  std::cerr << absl::StrFormat("deltaserve-synth: wrote %s: %s in %.1f s (%.1f MB/s, %d threads)\n",
                               o.out, Mb(writer.FileSize()), seconds,
                               Megabytes(writer.FileSize()) / std::max(seconds, 1e-9), o.threads);
  return 0;
}

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) { return deltaserve::worker::Main(argc, argv); }
