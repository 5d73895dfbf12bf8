// deltaserve-run: run a Qwen3.5 GGUF model on the CPU from the command line.
//
//   deltaserve-run -m FILE -p TEXT [-n N] [--temp T --top-k K --top-p P --min-p M --seed S]
//                  [--threads N] [--chat] [--ctx N] [--ignore-eos]
//       streams the generated text to stdout; ends with one line on stderr:
//       timing: prompt_tokens=N prefill_tok_s=X decode_tokens=M decode_tok_s=Y peak_rss_mb=Z
//   deltaserve-run -m FILE --tokens 1,2,3 --dump-logits OUT.bin
//       evaluates the ids as one sequence from an empty state and writes f32 little-endian
//       logits [n_tokens][n_vocab] (the row format of ../shared/golden).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/str_util.h"
#include "common/streaming_detokenizer.h"
#include "common/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/sampler.h"

namespace deltaserve::worker {
namespace {

using common::Sv;

struct Options {
  std::string model;
  std::string prompt;
  bool have_prompt = false;
  std::vector<int32_t> tokens;
  std::string dump_logits;
  int n_predict = 64;
  int threads = 0;
  int64_t ctx = 0;
  bool chat = false;
  bool ignore_eos = false;
  SamplingParams sampling;
  // Empty: f16 when generating (llama.cpp's default), f32 with --dump-logits (reference mode).
  std::string cache_type_k, cache_type_v;
  int64_t page_tokens = 256;
};

// The KV cache options of the command line.
absl::StatusOr<KvCacheOptions> CacheOptions(const Options& o) {
  const char* fallback = o.dump_logits.empty() ? "f16" : "f32";
  KvCacheOptions kv;
  absl::StatusOr<kernels::WeightType> k =
      ParseKvCacheType(o.cache_type_k.empty() ? fallback : o.cache_type_k);
  if (!k.ok()) return k.status();
  absl::StatusOr<kernels::WeightType> v =
      ParseKvCacheType(o.cache_type_v.empty() ? fallback : o.cache_type_v);
  if (!v.ok()) return v.status();
  kv.k_type = *k;
  kv.v_type = *v;
  kv.page_tokens = o.page_tokens;
  return kv;
}

constexpr const char* kUsage =
    "usage: deltaserve-run -m FILE -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "                      [--min-p M] [--seed S] [--threads N] [--chat] [--ctx N]\n"
    "                      [--ignore-eos] [--cache-type-k T] [--cache-type-v T]\n"
    "                      [--page-tokens N]\n"
    "       deltaserve-run -m FILE --tokens 1,2,3 --dump-logits OUT.bin [--threads N]\n";

std::vector<common::Flag> FlagTable(Options& o);

int Usage(const std::string& why) {
  Options defaults;
  return common::UsageExit(
      "deltaserve-run", why, kUsage,
      "Runs a Qwen3.5 GGUF model on the CPU: streams the generated text to stdout, then one\n"
      "timing line on stderr; or, with --tokens and --dump-logits, writes the logits of the ids\n"
      "(f32 [n_tokens][n_vocab]).\n\nflags:\n" +
          common::FlagHelp(FlagTable(defaults)));
}

int Fail(const absl::Status& s) {
  std::cerr << "deltaserve-run: " << s.message() << "\n";
  return 1;
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

// The command line (common/flags.h); tests/integration/deltaserve_run_cli_test.cc runs it.
std::vector<common::Flag> FlagTable(Options& o) {
  using common::CustomFlag;
  using common::IntegerFlag;
  using common::StringFlag;
  auto real = [](std::string name, float* out, std::string message) {
    return CustomFlag(std::move(name),
                      [out, message](std::string_view v) {
                        return absl::SimpleAtof(Sv(v), out) ? std::string() : message;
                      })
        .MissingMessage(message);
  };
  const std::string cache_type = "{flag} needs a type (f32, f16, bf16, q8_0, q4_0, ...)";
  return {
      StringFlag("-m", &o.model)
          .Alias("--model")
          .MissingMessage("-m needs a file")
          .Help("FILE", "the GGUF model"),
      CustomFlag("-p",
                 [&o](std::string_view v) {
                   o.prompt = std::string(v);
                   o.have_prompt = true;
                   return std::string();
                 })
          .Alias("--prompt")
          .MissingMessage("-p needs a text")
          .Help("TEXT", "the prompt (special tokens such as <|im_start|> are parsed)"),
      CustomFlag("--tokens",
                 [&o](std::string_view v) -> std::string {
                   for (absl::string_view part : absl::StrSplit(Sv(v), ',', absl::SkipEmpty())) {
                     int32_t id;
                     if (!absl::SimpleAtoi(part, &id)) {
                       return absl::StrCat("bad token id '", part, "'");
                     }
                     o.tokens.push_back(id);
                   }
                   return "";
                 })
          .MissingMessage("--tokens needs ids")
          .Help("IDS", "token ids instead of a prompt, comma-separated"),
      StringFlag("--dump-logits", &o.dump_logits)
          .MissingMessage("--dump-logits needs a file")
          .Help("OUT.bin", "with --tokens: write f32 little-endian logits [n_tokens][n_vocab]"),
      IntegerFlag("-n", &o.n_predict, 0)
          .Alias("--n-predict")
          .Error("-n needs a count >= 0")
          .Help("N", "tokens to generate (default 64)"),
      IntegerFlag("--threads", &o.threads, 0)
          .Alias("-t")
          .Error("--threads needs a count")
          .Help("N", "CPU threads (default 0: one per core)"),
      IntegerFlag("--ctx", &o.ctx, 0)
          .Alias("-c")
          .Error("--ctx needs a token count")
          .Help("N", "context in tokens (default 0: the prompt plus -n)"),
      real("--temp", &o.sampling.temperature, "--temp needs a number")
          .Help("T", "temperature (default 0.8; 0: greedy)"),
      IntegerFlag("--top-k", &o.sampling.top_k, std::numeric_limits<int>::min())
          .Error("--top-k needs an integer")
          .Help("K", "top-k (default 40; 0: off)"),
      real("--top-p", &o.sampling.top_p, "--top-p needs a number")
          .Help("P", "top-p (default 0.95; 1: off)"),
      real("--min-p", &o.sampling.min_p, "--min-p needs a number")
          .Help("M", "min-p (default 0.05; 0: off)"),
      CustomFlag("--seed",
                 [&o](std::string_view v) -> std::string {
                   uint64_t seed;
                   if (!absl::SimpleAtoi(Sv(v), &seed)) return "--seed needs an integer";
                   o.sampling.seed = seed;
                   return "";
                 })
          .MissingMessage("--seed needs an integer")
          .Help("S", "sampler seed (default: a random one)"),
      StringFlag("--cache-type-k", &o.cache_type_k)
          .Alias("-ctk")
          .MissingMessage(cache_type)
          .Help("T", "K cache type (default f16; f32 with --dump-logits)"),
      StringFlag("--cache-type-v", &o.cache_type_v)
          .Alias("-ctv")
          .MissingMessage(cache_type)
          .Help("T", "V cache type, same choices"),
      IntegerFlag("--page-tokens", &o.page_tokens, 1)
          .Error("--page-tokens needs a count > 0")
          .Help("N", "token positions per KV page (default 256)"),
      common::SwitchFlag("--chat", &o.chat)
          .Help("", "wrap the prompt as one user turn of the ChatML template"),
      common::SwitchFlag("--ignore-eos", &o.ignore_eos)
          .Help("", "generate -n tokens even past the end-of-generation token"),
      common::HelpFlag(),
  };
}

// Parses argv; returns an empty string on success, else what is wrong.
std::string Parse(int argc, char** argv, Options& o) {
  if (std::string why = common::ParseFlags(FlagTable(o), argc, argv); !why.empty()) return why;
  if (o.model.empty()) return "-m FILE is required";
  if (o.have_prompt == !o.tokens.empty()) return "give exactly one of -p TEXT and --tokens IDS";
  if (!o.dump_logits.empty() && o.tokens.empty()) return "--dump-logits goes with --tokens";
  return "";
}

void ShowProgress(double fraction) {
  std::fprintf(stderr, "\rloading weights: %3.0f%%", fraction * 100.0);
  if (fraction >= 1.0) std::fprintf(stderr, "\n");
}

int DumpLogits(Qwen35Model& model, const Options& o) {
  absl::StatusOr<KvCacheOptions> kv = CacheOptions(o);
  if (!kv.ok()) return Fail(kv.status());
  absl::StatusOr<std::unique_ptr<SequenceState>> seq =
      model.NewSequence(static_cast<int64_t>(o.tokens.size()), *kv);
  if (!seq.ok()) return Fail(seq.status());
  std::vector<float> logits;
  const BatchEntry entry{seq->get(), o.tokens, /*all_logits=*/true};
  if (absl::Status s = model.Forward({&entry, 1}, logits); !s.ok()) return Fail(s);
  std::ofstream out(o.dump_logits, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!out) return Fail(absl::InternalError(absl::StrCat("cannot write ", o.dump_logits)));
  std::cerr << absl::StreamFormat("wrote %d x %d logits to %s\n", o.tokens.size(), model.n_vocab(),
                                  o.dump_logits);
  return 0;
}

int Generate(Qwen35Model& model, const Options& o) {
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok =
      common::Tokenizer::FromGguf(model.file());
  if (!tok.ok()) return Fail(tok.status());
  std::string text = o.prompt;
  if (o.chat) {
    text = absl::StrCat("<|im_start|>user\n", o.prompt, "<|im_end|>\n<|im_start|>assistant\n");
  }
  const std::vector<int32_t> prompt = (*tok)->Encode(text, /*parse_special=*/true);
  if (prompt.empty()) return Fail(absl::InvalidArgumentError("the prompt has no tokens"));
  const int64_t ctx = o.ctx > 0 ? o.ctx : static_cast<int64_t>(prompt.size()) + o.n_predict;
  absl::StatusOr<KvCacheOptions> kv = CacheOptions(o);
  if (!kv.ok()) return Fail(kv.status());
  absl::StatusOr<std::unique_ptr<SequenceState>> seq = model.NewSequence(ctx, *kv);
  if (!seq.ok()) return Fail(seq.status());

  absl::StatusOr<Sampler> sampler = Sampler::Create(o.sampling, (*tok)->vocab_size());
  if (!sampler.ok()) return Fail(sampler.status());
  sampler->AcceptPrompt(prompt);
  common::StreamingDetokenizer detok(**tok);
  std::vector<float> logits;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  BatchEntry entry{seq->get(), prompt, false};
  if (absl::Status s = model.Forward({&entry, 1}, logits); !s.ok()) return Fail(s);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  int decoded = 0;
  const auto t1 = Clock::now();
  for (int i = 0; i < o.n_predict; ++i) {
    const int32_t next = sampler->Sample(logits);
    sampler->Accept(next);
    if (!o.ignore_eos && (*tok)->IsEndOfGeneration(next)) break;
    std::cout << detok.Push(next) << std::flush;
    if (i + 1 == o.n_predict || (*seq)->n_past >= ctx) break;
    const int32_t ids[1] = {next};
    BatchEntry step{seq->get(), ids, false};
    if (absl::Status s = model.Forward({&step, 1}, logits); !s.ok()) return Fail(s);
    ++decoded;
  }
  std::cout << detok.Flush() << std::endl;
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  std::cerr << absl::StreamFormat(
      "timing: prompt_tokens=%d prefill_tok_s=%.2f decode_tokens=%d decode_tok_s=%.2f "
      "peak_rss_mb=%.1f\n",
      prompt.size(), prompt.size() / std::max(prefill_s, 1e-9), decoded,
      decoded / std::max(decode_s, 1e-9), PeakRssMb());
  return 0;
}

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) {
  using namespace deltaserve::worker;
  Options o;
  if (std::string why = Parse(argc, argv, o); !why.empty()) return Usage(why);
  // A DELTASERVE_CPU_ISA the CPU cannot run is refused before anything loads.
  if (absl::StatusOr<deltaserve::kernels::CpuIsa> isa = deltaserve::kernels::ResolveCpuIsaFromEnv();
      !isa.ok()) {
    std::fprintf(stderr, "deltaserve-run: %s\n", std::string(isa.status().message()).c_str());
    return 2;
  }
  std::unique_ptr<deltaserve::kernels::Backend> backend =
      deltaserve::kernels::MakeCpuBackend(o.threads);
  absl::StatusOr<std::unique_ptr<Qwen35Model>> model = Qwen35Model::Load(o.model, *backend);
  if (!model.ok()) return Fail(model.status());
  absl::StatusOr<KvCacheOptions> kv = CacheOptions(o);
  if (!kv.ok()) return Fail(kv.status());
  const ModelMemory mem = (*model)->Memory(*kv);
  std::cerr << absl::StreamFormat(
      "memory plan: weights %.1f MiB (memory-mapped), recurrent state %.2f MiB per sequence, "
      "KV %.1f KiB per token (K %s, V %s)\n",
      mem.weight_bytes / 1048576.0, mem.state_bytes_per_sequence / 1048576.0,
      mem.kv_bytes_per_token / 1024.0, deltaserve::common::Sv(KvCacheTypeName(kv->k_type)),
      deltaserve::common::Sv(KvCacheTypeName(kv->v_type)));
  (*model)->Prefetch(ShowProgress);
  return o.dump_logits.empty() ? Generate(**model, o) : DumpLogits(**model, o);
}
