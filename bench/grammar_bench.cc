// deltaserve-bench-grammar: the grammar engine's costs on a corpus of JSON Schemas (issue 13):
// schema compile time and the per-token time of the allowed-token mask over a real vocabulary.
//
//   deltaserve-bench-grammar --model MODEL.gguf [--corpus PATH] [--generate N] [--max-tokens N]
//                            [--reps N] [--uncached-every N] [--cpu-clock] [--verbose] [--json]
//
// The corpus is JSON lines {"id", "schema", "instances"?: [...]} (a file, or every *.jsonl of a
// directory, as tests/data/json_schema_corpus holds them; schemas and instances are re-serialized
// by nlohmann::json, which sorts object keys, so instances match the grammar's property order
// whatever order they were written in); without --corpus a few built-in
// schemas with hand-written instances are used. Each instance is tokenized as the model would
// produce it (Encode, parse_special off) and walked token by token. A schema without instances
// gets --generate N (3) walks of up to --max-tokens (48) random allowed tokens, as a random-weight
// model samples (see the loop below), recorded and replayed by the later passes. The time of the
// mask at each step is recorded:
//   cold      the first visit of each state of a freshly compiled grammar: DFA steps and trie
//             walk (one TokenMaskCache for the whole run, as a worker thread keeps one: the
//             loop indexes it builds once serve every schema, the masks are per grammar)
//   warm      the same sequences again (cache hits: the steady state of a server)
//   computed  every step's mask computed as a cache miss computes it (loop indexes built),
//             nothing looked up or kept: the cost of one computed mask, DFA already built
//   plain     ComputeTokenMask, the trie walk without loop indexes (the reference the cache is
//             tested against), at every --uncached-every'th (10th) step
// Compile time is CompileJsonSchema plus building the CompiledGrammar (its initial state), the
// median of --reps runs per schema. Percentiles are over all steps (masks) or schemas (compile).
#include <algorithm>
#include <bit>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/gguf_file.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/tokenizer.h"
#include "nlohmann/json.hpp"
#include "worker/sampling/token_mask.h"

namespace deltaserve::bench {
namespace {

using common::grammar::CompiledGrammar;
using common::grammar::GrammarMatcher;
using Clock = std::chrono::steady_clock;

// This thread's CPU time: on a shared machine (other builds running) wall-clock time counts the
// time-slices given to others; --cpu-clock times with this instead (a syscall, ~0.2 us).
struct ThreadCpuClock {
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<ThreadCpuClock, duration>;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return time_point(duration(int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec));
  }
};
bool g_cpu_clock = false;
bool g_verbose = false;
int64_t NowNs() {
  return g_cpu_clock ? ThreadCpuClock::now().time_since_epoch().count()
                     : std::chrono::duration_cast<std::chrono::nanoseconds>(
                           Clock::now().time_since_epoch())
                           .count();
}

struct Case {
  std::string name;
  std::string schema;
  std::vector<std::string> instances;
};

std::vector<Case> BuiltinCorpus() {
  return {
      {"person",
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer",
           "minimum":0},"email":{"type":"string","format":"email"},"tags":{"type":"array",
           "items":{"type":"string"}}},"required":["name","age"]})",
       {R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "poetry"]})",
        R"({"name":"Grace Hopper","age":85,"tags":[]})",
        R"({"name": "Zoë Ünïcødé 世界", "age": 0})"}},
      {"enum_array",
       R"({"type":"array","items":{"enum":["red","green","blue"]},"minItems":1,"maxItems":8})",
       {R"(["red", "green", "blue", "red"])", R"(["blue"])"}},
      {"bounded_strings",
       R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
           "note":{"type":"string","maxLength":40},"id":{"type":"string","format":"uuid"}},
           "required":["code","note","id"],"additionalProperties":false})",
       {R"({"code": "ABC-1234", "note": "short note here", "id": "123e4567-e89b-12d3-a456-426614174000"})",
        R"({"code":"XYZ-0000","note":"","id":"00000000-0000-0000-0000-000000000000"})"}},
      {"tree",
       R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"number"},
           "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"]}},
           "$ref":"#/$defs/node"})",
       {R"({"value": 1.5, "children": [{"value": -2, "children": []}, {"value": 3e10}]})",
        R"({"value":0,"children":[{"value":1,"children":[{"value":2}]}]})"}},
      {"tool_args",
       R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius",
           "fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},"detailed":
           {"type":"boolean"},"when":{"type":"string","format":"date-time"}},
           "required":["city","unit"]})",
       {R"({"city": "San Francisco", "unit": "celsius", "days": 7, "detailed": true, "when": "2026-11-25T08:00:00Z"})",
        R"({"city":"東京","unit":"fahrenheit"})"}},
  };
}

// Corpus files: JSON lines {"id", "schema", "instances"?: [...]} (tests/data/json_schema_corpus);
// a directory means every *.jsonl in it.
std::vector<Case> LoadCorpus(const std::string& path) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      if (e.path().extension() == ".jsonl") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<Case> out;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("schema")) continue;
      Case c{f.stem().string() + "/" + j.value("id", std::string("?")), j["schema"].dump(), {}};
      if (j.contains("instances") && j["instances"].is_array()) {
        for (const auto& inst : j["instances"]) c.instances.push_back(inst.dump());
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

struct Stats {
  std::vector<double> us;
  void AddNs(int64_t ns) { us.push_back(ns / 1000.0); }
  double Pct(double p) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(p / 100.0 * us.size()))];
  }
  double Mean() const {
    double s = 0;
    for (double v : us) s += v;
    return us.empty() ? 0 : s / us.size();
  }
  double Max() const { return us.empty() ? 0 : *std::max_element(us.begin(), us.end()); }
};

// A field of /proc/self/status in KiB (VmRSS: resident now, VmHWM: the peak), 0 if unreadable.
size_t ProcStatusKb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      size_t kb = 0;
      std::istringstream(line.substr(key.size() + 1)) >> kb;
      return kb;
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::string model, corpus;
  int reps = 5;
  int generated_per_schema = 3;
  size_t max_tokens = 48;
  size_t uncached_every = 10;
  std::mt19937 rng(13);
  std::vector<int32_t> allowed, structural;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--corpus" && i + 1 < argc) {
      corpus = argv[++i];
    } else if (a == "--reps" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &reps)) {
      ++i;
    } else if (a == "--generate" && i + 1 < argc &&
               absl::SimpleAtoi(argv[i + 1], &generated_per_schema)) {
      ++i;
    } else if (a == "--max-tokens" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &max_tokens)) {
      ++i;
    } else if (a == "--uncached-every" && i + 1 < argc &&
               absl::SimpleAtoi(argv[i + 1], &uncached_every) && uncached_every > 0) {
      ++i;
    } else if (a == "--verbose") {
      g_verbose = true;
    } else if (a == "--cpu-clock") {
      g_cpu_clock = true;
    } else if (a == "--json") {
      json = true;
    } else {
      std::cerr << "usage: deltaserve-bench-grammar --model MODEL.gguf [--corpus PATH] "
                   "[--generate N] [--max-tokens N] [--reps N] [--uncached-every N] "
                   "[--cpu-clock] [--verbose] [--json]\n";
      return 2;
    }
  }
  if (model.empty()) {
    std::cerr << "deltaserve-bench-grammar: --model is required\n";
    return 2;
  }
  auto file = common::GgufFile::Open(model);
  if (!file.ok()) {
    std::cerr << file.status() << "\n";
    return 1;
  }
  auto tok = common::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  const common::Tokenizer& tokenizer = **tok;
  const size_t rss_tokenizer_kb = ProcStatusKb("VmRSS");
  const auto t_trie = Clock::now();
  auto trie = worker::TokenTrie::Build(tokenizer);
  const double trie_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t_trie).count();
  // The trie's own arrays (what every request shares), and the process's growth while building.
  const size_t trie_bytes = trie->nodes().size() * sizeof(worker::TokenTrie::Node) +
                            trie->end_tokens().size() * sizeof(int32_t) +
                            trie->duplicates().size() * sizeof(std::pair<int32_t, int32_t>);
  const size_t rss_trie_kb = ProcStatusKb("VmRSS");

  std::vector<Case> cases = corpus.empty() ? BuiltinCorpus() : LoadCorpus(corpus);
  Stats compile, cold, warm, uncached, plain;
  worker::TokenMaskCache cache(trie, size_t{512} << 20);
  worker::TokenMask scratch;
  int refused = 0, instances = 0, rejected = 0, incomplete = 0;
  size_t states = 0;
  for (const Case& c : cases) {
    std::vector<double> runs;
    absl::StatusOr<common::grammar::Grammar> grammar;
    for (int r = 0; r < std::max(reps, 1); ++r) {
      const int64_t t0 = NowNs();
      grammar = common::grammar::CompileJsonSchema(c.schema);
      if (!grammar.ok()) break;
      CompiledGrammar g(*grammar);
      runs.push_back((NowNs() - t0) / 1000.0);
    }
    if (!grammar.ok()) {
      ++refused;
      if (g_verbose) std::fprintf(stderr, "refused %s: %s\n", c.name.c_str(),
                              std::string(grammar.status().message()).c_str());
      continue;
    }
    std::sort(runs.begin(), runs.end());
    compile.us.push_back(runs[runs.size() / 2]);

    auto compiled = std::make_shared<CompiledGrammar>(*std::move(grammar));
    // The token sequences: the instances tokenized, or walks generated in the cold pass.
    std::vector<std::vector<common::TokenId>> sequences;
    for (const std::string& text : c.instances) sequences.push_back(tokenizer.Encode(text, false));
    const bool generate = sequences.empty();
    if (generate) sequences.resize(generated_per_schema);
    for (int pass = 0; pass < 4; ++pass) {
      for (std::vector<common::TokenId>& ids : sequences) {
        GrammarMatcher m(compiled);
        bool ok = true;
        for (size_t k = 0; generate && pass == 0 ? k < max_tokens : k < ids.size(); ++k) {
          const auto kinds0 = cache.miss_kinds();
          const size_t states0 = compiled->state_count();
          const int64_t t0 = NowNs();
          const worker::TokenMask* mask;
          if (pass == 3 && k % uncached_every != 0) {
            if (!m.AcceptBytes(tokenizer.Piece(ids[k]))) break;
            continue;
          }
          if (pass == 2) {
            cache.ComputeUncached(m, scratch);
            mask = &scratch;
          } else if (pass == 3) {
            worker::ComputeTokenMask(*trie, m, scratch);
            mask = &scratch;
          } else {
            mask = &cache.Get(m);
          }
          const int64_t ns = NowNs() - t0;
          (pass == 0 ? cold : pass == 1 ? warm : pass == 2 ? uncached : plain).AddNs(ns);
          if (g_verbose && pass == 0 && ns > 200000) {
            const auto& kinds = cache.miss_kinds();
            std::fprintf(stderr,
                         "slow cold mask %.0f us: %s at token %zu (state %u; %zu new states; "
                         "loop %zu chain %zu by-first-byte %zu; %zu indexes built; %d allowed)\n",
                         ns / 1000.0, c.name.c_str(), k, m.state(),
                         compiled->state_count() - states0, kinds.loop - kinds0.loop,
                         kinds.chain - kinds0.chain, kinds.by_first_byte - kinds0.by_first_byte,
                         kinds.indexes_built - kinds0.indexes_built, mask->Count());
          }
          if (generate && pass == 0) {
            // A random allowed token, as a random-weight model samples: uniform, or (one step in
            // three) one with a structural byte so that strings and containers close; stop at an
            // accepting state half the time.
            if (m.IsAccepting() && rng() % 2 == 0) break;
            allowed.clear();
            structural.clear();
            for (size_t w = 0; w < mask->words().size(); ++w) {
              for (uint64_t bits = mask->words()[w]; bits != 0; bits &= bits - 1) {
                const int32_t t = static_cast<int32_t>(w * 64 + std::countr_zero(bits));
                if (tokenizer.IsEndOfGeneration(t)) continue;
                allowed.push_back(t);
                if (tokenizer.Piece(t).find_first_of("\",:}]") != std::string_view::npos) {
                  structural.push_back(t);
                }
              }
            }
            if (allowed.empty()) break;
            const auto& pool = !structural.empty() && rng() % 3 == 0 ? structural : allowed;
            ids.push_back(pool[rng() % pool.size()]);
          }
          if (!mask->Has(ids[k]) || !m.AcceptBytes(tokenizer.Piece(ids[k]))) {
            ok = false;
            break;
          }
        }
        if (pass == 0) {
          ++instances;
          rejected += !ok;
          incomplete += ok && !m.IsAccepting();
        }
      }
    }
    states += compiled->state_count();
  }

  const int compiled_n = static_cast<int>(cases.size()) - refused;
  if (json) {
    std::printf(
        "{\"vocab\": %d, \"trie_nodes\": %zu, \"trie_build_ms\": %.1f, \"trie_bytes\": %zu, "
        "\"rss_tokenizer_kb\": %zu, \"rss_after_trie_kb\": %zu, \"peak_rss_kb\": %zu, \"schemas\": %zu, \"refused\": %d, "
        "\"instances\": %d, \"rejected\": %d, \"incomplete\": %d, \"steps\": %zu, "
        "\"compile_us\": {\"p50\": %.1f, \"p99\": %.1f, \"mean\": %.1f}, "
        "\"mask_cold_us\": {\"p50\": %.2f, \"p99\": %.1f, \"mean\": %.1f, \"max\": %.0f}, "
        "\"mask_warm_us\": {\"p50\": %.2f, \"p99\": %.2f, \"mean\": %.2f}, "
        "\"mask_uncached_us\": {\"p50\": %.1f, \"p99\": %.1f, \"mean\": %.1f, \"max\": %.0f}, "
        "\"mask_plain_walk_us\": {\"p50\": %.1f, \"p99\": %.1f, \"mean\": %.1f, \"max\": %.0f}}\n",
        tokenizer.vocab_size(), trie->nodes().size(), trie_ms, trie_bytes, rss_tokenizer_kb,
        rss_trie_kb, ProcStatusKb("VmHWM"), cases.size(), refused, instances, rejected,
        incomplete, cold.us.size(), compile.Pct(50), compile.Pct(99), compile.Mean(),
        cold.Pct(50), cold.Pct(99), cold.Mean(), cold.Max(), warm.Pct(50), warm.Pct(99),
        warm.Mean(), uncached.Pct(50), uncached.Pct(99), uncached.Mean(), uncached.Max(),
        plain.Pct(50), plain.Pct(99), plain.Mean(), plain.Max());
    return 0;
  }
  std::printf("vocabulary: %d tokens, trie %zu nodes, %.1f MiB (built in %.0f ms); RSS: %.1f MiB "
              "with the tokenizer, %.1f MiB after the trie, peak %.1f MiB\n",
              tokenizer.vocab_size(), trie->nodes().size(), trie_bytes / 1048576.0, trie_ms,
              rss_tokenizer_kb / 1024.0, rss_trie_kb / 1024.0, ProcStatusKb("VmHWM") / 1024.0);
  std::printf("schemas: %zu (%d compiled, %d refused); instances %d (%d rejected, %d incomplete); "
              "%zu mask steps; %zu DFA states\n",
              cases.size(), compiled_n, refused, instances, rejected, incomplete, cold.us.size(),
              states);
  std::printf("%-22s %10s %10s %10s %10s\n", "", "p50 us", "p99 us", "mean us", "max us");
  auto row = [](const char* name, Stats& s) {
    std::printf("%-22s %10.2f %10.2f %10.2f %10.1f\n", name, s.Pct(50), s.Pct(99), s.Mean(),
                s.Max());
  };
  row("compile (per schema)", compile);
  row("mask, cold", cold);
  row("mask, warm", warm);
  row("mask, computed", uncached);
  row("mask, plain walk", plain);
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) { return deltaserve::bench::Main(argc, argv); }
