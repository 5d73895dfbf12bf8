// Tokenizer throughput benchmark: how many bytes of mixed text per second
// `common::Tokenizer::Encode` turns into token ids, for comparison with llama.cpp (see
// bench/tokenizer_bench.sh, which runs both on the same corpus and checks the token counts agree).
//
//   deltaserve-bench-tokenizer --model vocab.gguf --corpus corpus.txt [--reps N]
//                              [--no-cache-warmup]
//
// The corpus is cut into paragraphs (ParagraphChunks below) and each paragraph is encoded with
// one Encode(..., /*parse_special=*/true) call, like one request prompt at a time; the
// llama.cpp side of the benchmark cuts it identically. Only the Encode calls are timed. The
// result is the best of N repetitions, printed on stdout as one line:
//   tokenizer: bytes=N tokens=M seconds=S mb_s=X          (MB = 10^6 bytes)

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "common/tokenizer.h"

namespace deltaserve::bench {
namespace {

using common::GgufFile;
using common::TokenId;
using common::Tokenizer;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: deltaserve-bench-tokenizer --model FILE.gguf --corpus FILE.txt [--reps N] "
    "[--no-cache-warmup]\n"
    "  --model FILE.gguf   GGUF file with a tokenizer.ggml.* vocabulary (gpt2 / byte-level BPE)\n"
    "  --corpus FILE.txt   UTF-8 text to tokenize (bench/make_corpus.py builds one)\n"
    "  --reps N            timed repetitions, best one reported (default 5)\n"
    "  --no-cache-warmup   every repetition starts from a freshly built tokenizer, i.e. an\n"
    "                      empty word cache (default: one untimed warm-up pass fills it)\n";

struct Options {
  std::string model_path;
  std::string corpus_path;
  int reps = 5;
  bool cache_warmup = true;
};

// Parses argv; on error prints the reason and the usage to stderr and returns nullopt.
std::optional<Options> ParseArgs(int argc, char** argv) {
  Options options;
  auto fail = [](std::string_view message) -> std::optional<Options> {
    std::fprintf(stderr, "deltaserve-bench-tokenizer: %.*s\n%s", static_cast<int>(message.size()),
                 message.data(), kUsage);
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--model" || arg == "--corpus" || arg == "--reps") {
      if (!has_value) return fail(std::string(arg) + " needs a value");
      const std::string_view value = argv[++i];
      if (arg == "--model") {
        options.model_path = value;
      } else if (arg == "--corpus") {
        options.corpus_path = value;
      } else {
        int reps = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), reps);
        if (ec != std::errc() || end != value.data() + value.size() || reps < 1) {
          return fail("--reps wants a positive integer, got '" + std::string(value) + "'");
        }
        options.reps = reps;
      }
    } else if (arg == "--no-cache-warmup") {
      options.cache_warmup = false;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      return fail("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (options.model_path.empty()) return fail("--model is required");
  if (options.corpus_path.empty()) return fail("--corpus is required");
  return options;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open corpus file '" + path + "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError("error reading corpus file '" + path + "'");
  return std::move(contents).str();
}

// Cuts `text` into paragraphs: a chunk ends right after each "\n\n" (the scan resumes after
// the pair, so "\n\n\n" gives "...\n\n" and a chunk starting with "\n"). The chunks concatenate
// back to `text`. tokenizer_bench.sh's llama.cpp side implements the same rule on bytes; keep
// them in step or the token counts will differ.
std::vector<std::string_view> ParagraphChunks(std::string_view text) {
  std::vector<std::string_view> chunks;
  size_t start = 0;
  while (start < text.size()) {
    const size_t pair = text.find("\n\n", start);
    const size_t end = pair == std::string_view::npos ? text.size() : pair + 2;
    chunks.push_back(text.substr(start, end - start));
    start = end;
  }
  return chunks;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Encodes every chunk once; returns the total number of tokens.
int64_t EncodeAll(const Tokenizer& tokenizer, const std::vector<std::string_view>& chunks) {
  int64_t tokens = 0;
  for (std::string_view chunk : chunks) {
    const std::vector<TokenId> ids = tokenizer.Encode(chunk, /*parse_special=*/true);
    tokens += static_cast<int64_t>(ids.size());
  }
  return tokens;
}

int Run(const Options& options) {
  const Clock::time_point load_start = Clock::now();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(options.model_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "deltaserve-bench-tokenizer: loading '%s': %s\n",
                 options.model_path.c_str(), tokenizer.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "loaded %s: %d vocabulary entries in %.3f s\n", options.model_path.c_str(),
               (*tokenizer)->vocab_size(), Seconds(Clock::now() - load_start));

  absl::StatusOr<std::string> corpus = ReadFile(options.corpus_path);
  if (!corpus.ok()) {
    std::fprintf(stderr, "deltaserve-bench-tokenizer: %s\n", corpus.status().ToString().c_str());
    return 1;
  }
  if (corpus->empty()) {
    std::fprintf(stderr, "deltaserve-bench-tokenizer: corpus '%s' is empty\n",
                 options.corpus_path.c_str());
    return 1;
  }
  const std::vector<std::string_view> chunks = ParagraphChunks(*corpus);
  const int64_t bytes = static_cast<int64_t>(corpus->size());
  std::fprintf(stderr, "corpus %s: %lld bytes, %zu paragraphs\n", options.corpus_path.c_str(),
               static_cast<long long>(bytes), chunks.size());

  int64_t tokens = -1;
  if (options.cache_warmup) {
    const Clock::time_point start = Clock::now();
    tokens = EncodeAll(**tokenizer, chunks);
    const double seconds = Seconds(Clock::now() - start);
    std::fprintf(stderr, "warm-up, untimed (cold word cache): %lld tokens, %.3f s, %.2f MB/s\n",
                 static_cast<long long>(tokens), seconds,
                 static_cast<double>(bytes) / 1e6 / seconds);
  }

  double best_seconds = std::numeric_limits<double>::infinity();
  for (int rep = 1; rep <= options.reps; ++rep) {
    if (!options.cache_warmup && rep > 1) {
      // A fresh tokenizer, so this repetition also sees an empty word cache; not timed.
      tokenizer = LoadTokenizer(options.model_path);
      if (!tokenizer.ok()) {
        std::fprintf(stderr, "deltaserve-bench-tokenizer: reloading '%s': %s\n",
                     options.model_path.c_str(), tokenizer.status().ToString().c_str());
        return 1;
      }
    }
    const Clock::time_point start = Clock::now();
    const int64_t rep_tokens = EncodeAll(**tokenizer, chunks);
    const double seconds = Seconds(Clock::now() - start);
    if (tokens >= 0 && rep_tokens != tokens) {
      std::fprintf(stderr,
                   "deltaserve-bench-tokenizer: repetition %d gave %lld tokens, earlier %lld: "
                   "tokenization is not deterministic\n",
                   rep, static_cast<long long>(rep_tokens), static_cast<long long>(tokens));
      return 1;
    }
    tokens = rep_tokens;
    best_seconds = std::min(best_seconds, seconds);
    std::fprintf(stderr, "rep %d/%d: %.3f s, %.2f MB/s\n", rep, options.reps, seconds,
                 static_cast<double>(bytes) / 1e6 / seconds);
  }

  std::printf("tokenizer: bytes=%lld tokens=%lld seconds=%.6f mb_s=%.3f\n",
              static_cast<long long>(bytes), static_cast<long long>(tokens), best_seconds,
              static_cast<double>(bytes) / 1e6 / best_seconds);
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) {
  const std::optional<deltaserve::bench::Options> options =
      deltaserve::bench::ParseArgs(argc, argv);
  if (!options.has_value()) return 2;
  return deltaserve::bench::Run(*options);
}
