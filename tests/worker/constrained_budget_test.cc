// Constrained JSON that a model cannot stall in (worker/sampling/constrained_decoding.h, the
// generation whitespace of common/grammar/json_schema_compiler.h): the F32 golden model, whose
// logits are random, samples documents for a fixed sample of tests/data/json_schema_corpus (the
// same four parts the corpus check samples, every part's rows at evenly spaced indices) through
// the worker's GrammarCache, with max_tokens kTokenBudget. The stated budget:
// - whitespace between JSON tokens is nothing or one space (after at most kLeadingWhitespace
//   bytes before the document), so a complete document is at most its compact form
//   (nlohmann's dump) plus kLeadingWhitespace plus two bytes per structural character
//   ({ } [ ] , :, one gap on each side);
// - a document that ends is complete JSON; one the budget cuts is cut while writing a string
//   or a number (a model with random logits rarely closes a string: that is content, not a
//   stall), never between tokens;
// - most documents of the sample end within the budget.
// Before generation had its own whitespace, the checking grammar's 32 bytes of any whitespace
// per gap let such a model spend most of its tokens on spaces, tabs and newlines and be cut
// by max_tokens between two tokens.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/grammar/output_constraint.h"
#include "common/tokenizer.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/support/collecting_sink.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/constrained_decoding.h"
#include "worker/sampling/token_mask.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::worker {
namespace {

using common::grammar::OutputConstraintSpec;
using ::deltaserve::testing::CollectingSink;
using ::deltaserve::testing::GoldenPath;

// The stated budget: a document of the sample, written by a model with random logits, in at
// most this many tokens (Structured outputs' small schemas need tens; strings are the rest).
constexpr int kTokenBudget = 512;
constexpr int kRowsPerPart = 4;
constexpr uint64_t kSeeds = 2;

// The schemas of the sample: kRowsPerPart rows of each part at evenly spaced indices.
std::vector<std::pair<std::string, std::string>> CorpusSample() {
  std::vector<std::pair<std::string, std::string>> out;  // (id, schema JSON)
  for (const char* part : {"glaive", "kubernetes", "schemastore", "snowplow"}) {
    std::ifstream in(std::string(DELTASERVE_JSON_SCHEMA_CORPUS) + "/" + part + ".jsonl");
    EXPECT_TRUE(in.good()) << part;
    std::vector<std::string> rows;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) rows.push_back(line);
    }
    for (int i = 0; i < kRowsPerPart && !rows.empty(); ++i) {
      const nlohmann::json row = nlohmann::json::parse(rows[i * rows.size() / kRowsPerPart]);
      out.emplace_back(row["id"].get<std::string>(), row["schema"].dump());
    }
  }
  return out;
}

// What a document's text says about its whitespace and where it ended.
struct TextShape {
  bool single_spaces = true;  // outside strings, after the leading whitespace
  int structural = 0;         // { } [ ] , : outside strings
  bool ends_in_string = false;
  bool ends_in_number = false;
};

TextShape ShapeOf(const std::string& text) {
  TextShape shape;
  size_t i = 0;
  while (i < text.size() && i < static_cast<size_t>(common::grammar::kLeadingWhitespace) &&
         (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) {
    ++i;
  }
  bool in_string = false;
  bool escaped = false;
  char prev = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '\n' || c == '\t' || c == '\r' || (c == ' ' && prev == ' ')) {
      shape.single_spaces = false;
    } else if (std::string_view("{}[],:").find(c) != std::string_view::npos) {
      ++shape.structural;
    }
    prev = c;
  }
  shape.ends_in_string = in_string;
  const char last = text.empty() ? 0 : text.back();
  shape.ends_in_number = !in_string && ((last >= '0' && last <= '9') || last == '.' ||
                                        last == '-' || last == '+' || last == 'e' || last == 'E');
  return shape;
}

TEST(ConstrainedBudgetTest, CorpusDocumentsCompleteWithinTheBudget) {
  std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend(2);
  auto model = Qwen35Model::Load(GoldenPath("tiny-dense-f32.gguf"), *backend);
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = common::Tokenizer::FromGguf((*model)->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::shared_ptr<const TokenTrie> trie = TokenTrie::Build(**tokenizer);

  KvCacheOptions kv = F32KvCache();
  kv.page_tokens = 16;
  auto cache = PagedKvCache::Create(*backend, (*model)->kv_shape(), kv, 512);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto slots = RecurrentStateSlots::Create(*backend, (*model)->state_layout(), 8);
  ASSERT_TRUE(slots.ok()) << slots.status();
  SchedulerOptions o;
  o.max_sequences = 4;
  o.max_context = 1024;
  std::vector<int32_t> eos;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    if ((*tokenizer)->IsEndOfGeneration(id)) eos.push_back(id);
  }
  auto sched = Scheduler::Create(**model, std::shared_ptr<PagedKvCache>(std::move(*cache)),
                                 *slots, o, eos, (*tokenizer)->vocab_size());
  ASSERT_TRUE(sched.ok()) << sched.status();
  (*sched)->SetConstrainedDecoding(tokenizer->get(), size_t{64} << 20);

  GrammarCache grammars;
  const std::vector<int32_t> prompt = (*tokenizer)->Encode("Answer:", /*parse_special=*/true);
  struct Run {
    std::string id;
    std::shared_ptr<CollectingSink> sink;
  };
  std::vector<Run> runs;
  int refused = 0;
  for (const auto& [id, schema] : CorpusSample()) {
    OutputConstraintSpec spec;
    spec.kind = OutputConstraintSpec::Kind::kJsonSchema;
    spec.schema_json = schema;
    auto grammar = grammars.Get(spec);
    if (!grammar.ok()) {  // refused keywords are the corpus check's business
      ++refused;
      continue;
    }
    for (uint64_t seed = 0; seed < kSeeds; ++seed) {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = seed;
      r.sampling.max_tokens = kTokenBudget;
      r.grammar = *grammar;
      r.trie = trie;
      runs.push_back({id, std::make_shared<CollectingSink>()});
      ASSERT_TRUE((*sched)->Submit(std::move(r), runs.back().sink).ok()) << id;
    }
  }
  for (int guard = 0; (*sched)->busy() && guard < 1'000'000; ++guard) (*sched)->Step();

  EXPECT_GE(runs.size(), 2u * 10) << "most of the sample compiles (" << refused << " refused)";
  size_t longest = 0;
  int complete = 0;
  for (const Run& run : runs) {
    ASSERT_TRUE(run.sink->result.has_value()) << run.id;
    const std::string text = (*tokenizer)->Decode(run.sink->tokens);
    const TextShape shape = ShapeOf(text);
    EXPECT_TRUE(shape.single_spaces) << run.id << ": " << text;
    if (run.sink->result->reason == EndReason::kStop) {
      ++complete;
      longest = std::max(longest, run.sink->tokens.size());
      EXPECT_FALSE(shape.ends_in_string) << run.id;
      // JSON text; a number beyond double's range (46E3746840) is JSON all the same, which
      // nlohmann reports as out_of_range (406) rather than a syntax error.
      std::optional<nlohmann::json> doc;
      try {
        doc = nlohmann::json::parse(text);
      } catch (const nlohmann::json::out_of_range&) {
      } catch (const nlohmann::json::parse_error& e) {
        ADD_FAILURE() << run.id << ": not JSON (" << e.what() << "): " << text;
      }
      // Each gap around a structural character holds at most one space.
      if (doc) {
        EXPECT_LE(text.size(), doc->dump().size() + common::grammar::kLeadingWhitespace +
                                   2 * static_cast<size_t>(shape.structural))
            << run.id << ": more whitespace than one space per gap: " << text;
      }
    } else {
      EXPECT_TRUE(shape.ends_in_string || shape.ends_in_number)
          << run.id << " cut by the budget between two tokens: " << text;
    }
  }
  EXPECT_GE(complete * 2, static_cast<int>(runs.size()))
      << "fewer than half the documents ended within " << kTokenBudget << " tokens";
  std::printf("%zu documents, %d complete (longest %zu tokens), %d schemas refused\n",
              runs.size(), complete, longest, refused);
}

}  // namespace
}  // namespace deltaserve::worker
