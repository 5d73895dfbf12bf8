// Engine throughput benchmark: prefill and decode tokens per second of the Qwen3.5 forward pass
// on the CPU backend, for comparison with llama.cpp on the same GGUF file (bench/engine_bench.sh
// runs both; bench/llama_cpp_engine_throughput.py is the llama.cpp side, measuring the same way).
//
//   deltaserve-bench-engine -m FILE --threads N --scenario {prefill,decode} --prompt N
//                           [--decode N] [--batch 512] [--reps R] [--seed S] [--json]
//
// The prompt is N pseudo-random token ids below min(2000, n_vocab) drawn with splitmix64 from
// --seed (PromptIds below; the Python side draws the identical ids, and both print their FNV-1a
// hash so the script can check).
//   prefill: a fresh sequence per repetition; the prompt is fed in chunks of --batch tokens, each
//            chunk one Forward call that computes only the logits of its last token (what a
//            server does); tok/s = N / time of those calls. With --depth D, D tokens go in first,
//            untimed: the rate of a turn's new tokens on top of a resumed conversation.
//   decode:  every repetition prefills the prompt ("depth", may be 0) into a fresh sequence,
//            untimed, then times --decode single-token Forward calls, each token the greedy
//            argmax of the previous logits (at depth 0 the first one is the first id the seed
//            draws); tok/s = decode tokens / time of those calls. (Re-prefilling rather than
//            snapshotting keeps peak RSS at one sequence, and llama.cpp cannot roll a
//            recurrent state back.)
// Only Forward calls are timed (not the argmax, not restoring state). One untimed warm-up pass
// (one chunk) first touches the memory-mapped weights.
//
// stdout: one JSON object per repetition, then a summary with the median:
//   {"engine":"deltaserve","scenario":"prefill","prompt":512,"rep":1,"tokens":512,
//    "seconds":1.23,"tok_s":416.2}
//   summary: engine=deltaserve scenario=prefill prompt=512 decode=0 median_tok_s=X ...
// With --json the summary is a JSON object instead (one line, "summary":true) that also has the
// peak RSS (getrusage ru_maxrss), the CPU seconds the process used, the weight bytes one decode
// step reads and the id hash.
// Progress goes to stderr.

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_ids.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::bench {
namespace {

using worker::BatchEntry;
using worker::Qwen35Model;
using worker::SequenceState;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: deltaserve-bench-engine -m FILE --threads N --scenario {prefill,decode} --prompt N\n"
    "                               [--decode N] [--batch 512] [--reps R] [--seed S] [--json]\n"
    "  -m FILE            Qwen3.5 GGUF model (qwen35 / qwen35moe)\n"
    "  --threads N        CPU backend threads (default 0: one per core)\n"
    "  --scenario S       prefill: time feeding --prompt tokens to a fresh sequence;\n"
    "                     decode: prefill --prompt tokens (the depth, may be 0) untimed, then\n"
    "                     time --decode greedy single-token steps\n"
    "  --prompt N         prompt tokens (pseudo-random ids below min(2000, n_vocab))\n"
    "  --decode N         decode steps per repetition (default 64)\n"
    "  --batch N          prefill chunk size in tokens (default 512)\n"
    "  --depth D          prefill: D tokens before the prompt, untimed (default 0)\n"
    "  --reps R           timed repetitions (default 5); the summary gives the median\n"
    "  --seed S           seed of the prompt ids (default 1)\n"
    "  --warmup N         untimed warm-up passes before the first repetition (default 1)\n"
    "  --cache-type-k T   KV cache type of K: f32, f16 (default, as llama.cpp), bf16, q8_0,\n"
    "                     q4_0, q4_1, q5_0\n"
    "  --cache-type-v T   the same for V\n"
    "  --json             print the summary as one JSON object (with peak RSS)\n";

struct Options {
  std::string model;
  int threads = 0;
  std::string scenario;
  int64_t prompt = -1;
  int64_t decode = 64;
  int64_t batch = 512;
  int64_t depth = 0;  // prefill: tokens already in the sequence, untimed
  int reps = 5;
  uint64_t seed = 1;
  int warmup = 1;
  bool json = false;
  std::string cache_type_k = "f16", cache_type_v = "f16";
};

// Parses argv; returns an empty string on success, else what is wrong.
std::string Parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto number = [&](auto& out) -> bool {
      const char* v = value();
      return v != nullptr && absl::SimpleAtoi(v, &out);
    };
    if (a == "-m" || a == "--model") {
      const char* v = value();
      if (v == nullptr) return "-m needs a file";
      o.model = v;
    } else if (a == "--scenario") {
      const char* v = value();
      if (v == nullptr) return "--scenario needs prefill or decode";
      o.scenario = v;
    } else if (a == "--threads" || a == "-t") {
      if (!number(o.threads) || o.threads < 0) return "--threads needs a count >= 0";
    } else if (a == "--prompt") {
      if (!number(o.prompt) || o.prompt < 0) return "--prompt needs a token count >= 0";
    } else if (a == "--decode") {
      if (!number(o.decode) || o.decode < 1) return "--decode needs a count >= 1";
    } else if (a == "--batch") {
      if (!number(o.batch) || o.batch < 1) return "--batch needs a count >= 1";
    } else if (a == "--depth") {
      if (!number(o.depth) || o.depth < 0) return "--depth needs a token count >= 0";
    } else if (a == "--reps") {
      if (!number(o.reps) || o.reps < 1) return "--reps needs a count >= 1";
    } else if (a == "--seed") {
      if (!number(o.seed)) return "--seed needs an unsigned integer";
    } else if (a == "--warmup") {
      if (!number(o.warmup) || o.warmup < 0) return "--warmup needs a count >= 0";
    } else if (a == "--cache-type-k" || a == "--cache-type-v") {
      const char* v = value();
      if (v == nullptr) return std::string(a) + " needs a type";
      (a == "--cache-type-k" ? o.cache_type_k : o.cache_type_v) = v;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-h" || a == "--help") {
      return "help";
    } else {
      return "unknown argument '" + std::string(a) + "'";
    }
  }
  if (o.model.empty()) return "-m FILE is required";
  if (o.scenario != "prefill" && o.scenario != "decode") {
    return "--scenario must be prefill or decode";
  }
  if (o.prompt < 0) return "--prompt N is required";
  if (o.scenario == "prefill" && o.prompt == 0) return "prefill needs --prompt >= 1";
  if (o.scenario != "prefill" && o.depth > 0) return "--depth is for --scenario prefill";
  return "";
}

int32_t Argmax(const std::vector<float>& logits, int64_t n_vocab) {
  const float* row = logits.data() + (logits.size() - static_cast<size_t>(n_vocab));
  return static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
}

// User + system CPU seconds of this process so far (all threads).
double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Weight bytes one decode step reads: every tensor of the main layers (MTP layers are not run;
// for MoE only n_expert_used / n_expert of the expert stacks, on average), the final norm, the
// output head (token_embd when tied) and one embedding row.
double DecodeWeightBytes(const Qwen35Model& model) {
  const auto& hp = model.hparams();
  double bytes = 0;
  for (const common::GgufTensorInfo& t : model.file().tensors()) {
    const std::string_view name = t.name;
    double b = static_cast<double>(t.n_bytes);
    if (name.starts_with("blk.")) {
      int64_t layer = -1;
      const auto [end, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), layer);
      if (ec != std::errc() || end == name.data() + name.size() || *end != '.' ||
          layer >= hp.n_layer) {
        continue;
      }
      if (hp.is_moe && name.find("_exps") != std::string_view::npos && hp.n_expert > 0) {
        b *= static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert);
      }
      bytes += b;
    } else if (name == "output_norm.weight" || name == "output.weight") {
      bytes += b;
    } else if (name == "token_embd.weight") {
      bytes += hp.tied_output ? b : b / static_cast<double>(hp.n_vocab);
    }
  }
  return bytes;
}

// Feeds `ids` to `seq` in chunks of `batch` (last-token logits only); returns the seconds spent
// in Forward.
absl::StatusOr<double> Prefill(Qwen35Model& model, SequenceState& seq,
                               const std::vector<int32_t>& ids, int64_t batch,
                               std::vector<float>& logits) {
  double seconds = 0;
  for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(batch)) {
    const size_t n = std::min(ids.size() - begin, static_cast<size_t>(batch));
    const BatchEntry entry{&seq, absl::MakeConstSpan(ids.data() + begin, n), false};
    const auto t0 = Clock::now();
    if (absl::Status s = model.Forward({&entry, 1}, logits); !s.ok()) return s;
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "deltaserve-bench-engine: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Run(const Options& o) {
  std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend(o.threads);
  absl::StatusOr<std::unique_ptr<Qwen35Model>> loaded = Qwen35Model::Load(o.model, *backend);
  if (!loaded.ok()) return Fail(loaded.status());
  Qwen35Model& model = **loaded;
  const int64_t n_vocab = model.n_vocab();
  // With --depth the first `depth` ids are the untimed history, the rest the timed prompt.
  const std::vector<int32_t> all_ids = PromptIds(o.depth + o.prompt, o.seed, n_vocab);
  const std::vector<int32_t> history(all_ids.begin(), all_ids.begin() + o.depth);
  const std::vector<int32_t> ids(all_ids.begin() + o.depth, all_ids.end());
  worker::KvCacheOptions kv;
  absl::StatusOr<kernels::WeightType> k_type = worker::ParseKvCacheType(o.cache_type_k);
  if (!k_type.ok()) return Fail(k_type.status());
  absl::StatusOr<kernels::WeightType> v_type = worker::ParseKvCacheType(o.cache_type_v);
  if (!v_type.ok()) return Fail(v_type.status());
  kv.k_type = *k_type;
  kv.v_type = *v_type;
  const bool prefill = o.scenario == "prefill";
  const int64_t capacity = o.depth + o.prompt + (prefill ? 0 : o.decode);
  std::fprintf(stderr, "deltaserve-bench-engine: %s, %s prompt=%lld%s, %d threads, %d reps\n",
               o.model.c_str(), o.scenario.c_str(), static_cast<long long>(o.prompt),
               prefill ? "" : absl::StrCat(" decode=", o.decode).c_str(), o.threads, o.reps);

  std::vector<float> logits;
  // Warm-up: the first chunk (prefill) or one token (decode) through a throwaway sequence.
  const std::vector<int32_t> first_id = PromptIds(1, o.seed, n_vocab);
  const std::vector<int32_t> warm =
      prefill ? std::vector<int32_t>(ids.begin(), ids.begin() + std::min(o.prompt, o.batch))
              : first_id;
  for (int w = 0; w < o.warmup; ++w) {
    absl::StatusOr<std::unique_ptr<SequenceState>> seq = model.NewSequence(capacity, kv);
    if (!seq.ok()) return Fail(seq.status());
    if (absl::StatusOr<double> s = Prefill(model, **seq, warm, o.batch, logits); !s.ok()) {
      return Fail(s.status());
    }
  }

  // Decode at depth 0 starts from the first id the seed draws, else from the prompt's argmax.
  int32_t first_token = first_id[0];
  double depth_seconds = 0;

  std::vector<double> rates;
  for (int rep = 1; rep <= o.reps; ++rep) {
    absl::StatusOr<std::unique_ptr<SequenceState>> made = model.NewSequence(capacity, kv);
    if (!made.ok()) return Fail(made.status());
    SequenceState& seq = **made;
    double seconds = 0;
    int64_t tokens = 0;
    if (prefill) {
      if (o.depth > 0) {
        absl::StatusOr<double> h = Prefill(model, seq, history, o.batch, logits);
        if (!h.ok()) return Fail(h.status());
        depth_seconds = *h;
      }
      absl::StatusOr<double> s = Prefill(model, seq, ids, o.batch, logits);
      if (!s.ok()) return Fail(s.status());
      seconds = *s;
      tokens = o.prompt;
    } else {
      if (o.prompt > 0) {
        absl::StatusOr<double> s = Prefill(model, seq, ids, o.batch, logits);
        if (!s.ok()) return Fail(s.status());
        depth_seconds = *s;
        first_token = Argmax(logits, n_vocab);
      }
      int32_t next = first_token;
      for (int64_t step = 0; step < o.decode; ++step) {
        const int32_t one[1] = {next};
        const BatchEntry entry{&seq, one, false};
        const auto t0 = Clock::now();
        if (absl::Status s = model.Forward({&entry, 1}, logits); !s.ok()) return Fail(s);
        seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        next = Argmax(logits, n_vocab);
      }
      tokens = o.decode;
    }
    const double tok_s = static_cast<double>(tokens) / std::max(seconds, 1e-12);
    rates.push_back(tok_s);
    std::printf(
        "{\"engine\":\"deltaserve\",\"scenario\":\"%s\",\"prompt\":%lld,\"decode\":%lld,"
        "\"rep\":%d,\"tokens\":%lld,\"seconds\":%.6f,\"tok_s\":%.3f}\n",
        o.scenario.c_str(), static_cast<long long>(o.prompt),
        static_cast<long long>(prefill ? 0 : o.decode), rep, static_cast<long long>(tokens),
        seconds, tok_s);
    std::fflush(stdout);
    std::fprintf(stderr, "  rep %d/%d: %.2f tok/s\n", rep, o.reps, tok_s);
  }

  const double median = Median(rates);
  const double min = *std::min_element(rates.begin(), rates.end());
  const double max = *std::max_element(rates.begin(), rates.end());
  const double weight_bytes = DecodeWeightBytes(model);
  const worker::ModelMemory mem = model.Memory(kv);
  if (o.json) {
    std::printf(
        "{\"summary\":true,\"engine\":\"deltaserve\",\"scenario\":\"%s\",\"prompt\":%lld,"
        "\"depth\":%lld,\"decode\":%lld,\"batch\":%lld,\"threads\":%d,\"reps\":%d,\"median_tok_s\":%.3f,"
        "\"min_tok_s\":%.3f,\"max_tok_s\":%.3f,\"depth_prefill_seconds\":%.3f,"
        "\"peak_rss_mb\":%.1f,\"weight_bytes\":%llu,\"decode_weight_bytes_per_token\":%.0f,"
        "\"kv_bytes_per_token\":%llu,\"kv_type\":\"%s/%s\",\"cpu_seconds\":%.2f,"
        "\"ids_fnv1a\":\"%016llx\"}\n",
        o.scenario.c_str(), static_cast<long long>(o.prompt), static_cast<long long>(o.depth),
        static_cast<long long>(prefill ? 0 : o.decode), static_cast<long long>(o.batch), o.threads,
        o.reps, median, min, max, depth_seconds, PeakRssMb(),
        static_cast<unsigned long long>(mem.weight_bytes), weight_bytes,
        static_cast<unsigned long long>(mem.kv_bytes_per_token), o.cache_type_k.c_str(),
        o.cache_type_v.c_str(), CpuSeconds(),
        static_cast<unsigned long long>(HashIds(ids)));
  } else {
    std::printf(
        "summary: engine=deltaserve scenario=%s prompt=%lld decode=%lld reps=%d "
        "median_tok_s=%.3f min_tok_s=%.3f max_tok_s=%.3f peak_rss_mb=%.1f\n",
        o.scenario.c_str(), static_cast<long long>(o.prompt),
        static_cast<long long>(prefill ? 0 : o.decode), o.reps, median, min, max, PeakRssMb());
  }
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) {
  deltaserve::bench::Options options;
  if (std::string why = deltaserve::bench::Parse(argc, argv, options); !why.empty()) {
    if (why != "help") std::fprintf(stderr, "deltaserve-bench-engine: %s\n", why.c_str());
    std::fputs(deltaserve::bench::kUsage, stderr);
    return why == "help" ? 0 : 2;
  }
  // A DELTASERVE_CPU_ISA the CPU cannot run is refused before anything loads.
  if (absl::StatusOr<deltaserve::kernels::CpuIsa> isa = deltaserve::kernels::ResolveCpuIsaFromEnv();
      !isa.ok()) {
    std::fprintf(stderr, "deltaserve-bench-engine: %s\n",
                 std::string(isa.status().message()).c_str());
    return 2;
  }
  return deltaserve::bench::Run(options);
}
