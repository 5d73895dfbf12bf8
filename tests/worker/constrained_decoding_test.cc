// Grammar-constrained decoding in the scheduler (worker/sampling/constrained_decoding.h) on the
// F32 golden model with its own 2,048-token Qwen vocabulary: sampled outputs (temperature 1,
// several seeds, batched) are JSON documents that nlohmann::json parses and that satisfy the
// schema's rules as written out here (not the grammar), and end with "stop" at the closing brace;
// speculation gives the same tokens as decoding without it (and did draft); a prompt that opened
// <think> keeps the reasoning free until the budget's closing tokens and the JSON follows them;
// max_tokens cuts with "length"; the Sampler masks exactly the disallowed tokens; GrammarCache
// compiles once per distinct constraint.
#include "worker/sampling/constrained_decoding.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/grammar/output_constraint.h"
#include "common/tokenizer.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/support/collecting_sink.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/token_mask.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::worker {
namespace {

using common::grammar::CompiledGrammar;
using common::grammar::OutputConstraintSpec;
using ::deltaserve::testing::CollectingSink;
using ::deltaserve::testing::GoldenPath;

// answer: enum; n: integer 0..9; ok: boolean; note: string of at most 4 code points. All
// required, nothing else allowed.
constexpr char kSchema[] = R"({"type":"object","properties":{
  "answer":{"type":"string","enum":["yes","no"]},
  "n":{"type":"integer","minimum":0,"maximum":9},
  "ok":{"type":"boolean"},
  "note":{"type":"string","maxLength":4}},
  "required":["answer","n","ok","note"],"additionalProperties":false})";

// The schema's rules, checked on the parsed document.
void ExpectValid(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << text;
  ASSERT_EQ(doc.size(), 4u) << text;
  EXPECT_TRUE(doc["answer"] == "yes" || doc["answer"] == "no") << text;
  ASSERT_TRUE(doc["n"].is_number_integer()) << text;
  EXPECT_GE(doc["n"].get<int>(), 0) << text;
  EXPECT_LE(doc["n"].get<int>(), 9) << text;
  EXPECT_TRUE(doc["ok"].is_boolean()) << text;
  ASSERT_TRUE(doc["note"].is_string()) << text;
  const std::string note = doc["note"].get<std::string>();
  EXPECT_LE(std::count_if(note.begin(), note.end(),
                          [](char c) { return (static_cast<uint8_t>(c) & 0xc0) != 0x80; }),
            4)
      << text;
}

class ConstrainedDecodingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = kernels::MakeCpuBackend(2).release();
    auto m = Qwen35Model::Load(GoldenPath("tiny-dense-f32.gguf"), *backend_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
    auto tok = common::Tokenizer::FromGguf(model_->file());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
    trie_ = new std::shared_ptr<const TokenTrie>(TokenTrie::Build(*tokenizer_));
  }

  std::unique_ptr<Scheduler> MakeScheduler(bool speculation) {
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = 16;
    auto c = PagedKvCache::Create(*backend_, model_->kv_shape(), kv, 512);
    EXPECT_TRUE(c.ok());
    auto slots = RecurrentStateSlots::Create(*backend_, model_->state_layout(), 8);
    EXPECT_TRUE(slots.ok());
    SchedulerOptions o;
    o.max_sequences = 4;
    o.max_context = 1024;
    o.speculation = speculation;
    std::vector<int32_t> eos;
    for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
      if (tokenizer_->IsEndOfGeneration(id)) eos.push_back(id);
    }
    auto s = Scheduler::Create(*model_, std::shared_ptr<PagedKvCache>(std::move(*c)), *slots, o,
                               eos, tokenizer_->vocab_size());
    EXPECT_TRUE(s.ok()) << s.status();
    (*s)->SetConstrainedDecoding(tokenizer_, size_t{8} << 20);
    return std::move(*s);
  }

  static std::shared_ptr<CompiledGrammar> Grammar(const std::string& schema) {
    OutputConstraintSpec spec;
    spec.kind = OutputConstraintSpec::Kind::kJsonSchema;
    spec.schema_json = schema;
    auto g = cache_.Get(spec);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : nullptr;
  }

  GenerationRequest Request(std::vector<int32_t> prompt, uint64_t seed, float temperature) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.max_tokens = 600;
    r.grammar = Grammar(kSchema);
    r.trie = *trie_;
    return r;
  }

  static void RunAll(Scheduler& s) {
    for (int guard = 0; s.busy() && guard < 100000; ++guard) s.Step();
  }

  std::string Text(const std::vector<int32_t>& tokens) { return tokenizer_->Decode(tokens); }

  std::vector<int32_t> Encode(const std::string& text) {
    return tokenizer_->Encode(text, /*parse_special=*/true);
  }

  static kernels::Backend* backend_;
  static Qwen35Model* model_;
  static common::Tokenizer* tokenizer_;
  static std::shared_ptr<const TokenTrie>* trie_;
  static GrammarCache cache_;
};

kernels::Backend* ConstrainedDecodingTest::backend_ = nullptr;
Qwen35Model* ConstrainedDecodingTest::model_ = nullptr;
common::Tokenizer* ConstrainedDecodingTest::tokenizer_ = nullptr;
std::shared_ptr<const TokenTrie>* ConstrainedDecodingTest::trie_ = nullptr;
GrammarCache ConstrainedDecodingTest::cache_;

TEST_F(ConstrainedDecodingTest, SampledOutputsAreValidDocumentsEndingWithStop) {
  auto sched = MakeScheduler(/*speculation=*/false);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (uint64_t seed = 0; seed < 8; ++seed) {  // 8 at a time, 4 per batch
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(sched->Submit(Request(Encode("Answer:"), seed, 1.0f), sinks.back()).ok());
  }
  RunAll(*sched);
  for (const auto& sink : sinks) {
    ASSERT_TRUE(sink->result.has_value());
    EXPECT_EQ(sink->result->reason, EndReason::kStop) << Text(sink->tokens);
    const std::string text = Text(sink->tokens);
    ExpectValid(text);
    EXPECT_EQ(text.back(), '}') << "ends where the grammar completes: " << text;
  }
  // The metrics' figures: 8 constrained sequences, masks computed once per state and reused.
  const SchedulerStats st = sched->stats();
  EXPECT_EQ(st.constrained_sequences, 8);
  EXPECT_GT(st.grammar_mask_misses, 0);
  EXPECT_GT(st.grammar_mask_hits, 0);
  EXPECT_EQ(st.constraint_failures, 0);
}

TEST_F(ConstrainedDecodingTest, SpeculationGivesTheSameConstrainedTokens) {
  // A prompt that repeats a valid document, so that n-gram drafts come up.
  const std::string doc = R"({"answer": "no", "n": 3, "ok": true, "note": "ab"})";
  const std::vector<int32_t> prompt = Encode(doc + "\n" + doc + "\n" + doc + "\n");
  std::vector<std::vector<int32_t>> outputs;
  int64_t drafted = 0;
  for (bool speculation : {false, true}) {
    auto sched = MakeScheduler(speculation);
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (uint64_t seed = 0; seed < 4; ++seed) {
      sinks.push_back(std::make_shared<CollectingSink>());
      ASSERT_TRUE(sched->Submit(Request(prompt, seed, seed == 0 ? 0.0f : 1.0f), sinks.back()).ok());
    }
    RunAll(*sched);
    for (const auto& sink : sinks) {
      ASSERT_TRUE(sink->result.has_value());
      ExpectValid(Text(sink->tokens));
      outputs.push_back(sink->tokens);
      if (speculation) drafted += sink->result->drafted_tokens;
    }
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(outputs[i], outputs[i + 4]) << "seed " << i;
  EXPECT_GT(drafted, 0) << "speculation never drafted: the comparison proves nothing";
}

TEST_F(ConstrainedDecodingTest, ReasoningStaysFreeAndTheDocumentFollowsIt) {
  const int32_t think = tokenizer_->Find("<think>"), close = tokenizer_->Find("</think>");
  ASSERT_GE(think, 0);
  ASSERT_GE(close, 0);
  const int32_t newline = tokenizer_->Find("\xC4\x8A");  // "\n" in the byte-level alphabet
  ASSERT_GE(newline, 0);
  auto sched = MakeScheduler(false);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    std::vector<int32_t> prompt = Encode("Think first.\n");
    prompt.push_back(think);
    GenerationRequest r = Request(prompt, seed, 1.0f);
    r.reasoning_budget = 5;
    r.reasoning_open = true;
    r.reasoning_start_token = think;
    r.reasoning_end_tokens = {close, newline, newline};
    r.grammar_after_reasoning = true;
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(sched->Submit(std::move(r), sinks.back()).ok());
  }
  RunAll(*sched);
  for (const auto& sink : sinks) {
    ASSERT_TRUE(sink->result.has_value());
    EXPECT_EQ(sink->result->reason, EndReason::kStop);
    auto at = std::find(sink->tokens.begin(), sink->tokens.end(), close);
    ASSERT_NE(at, sink->tokens.end()) << Text(sink->tokens);
    // At most the budget's 5 tokens of reasoning, then the document after the closing tokens.
    EXPECT_LE(at - sink->tokens.begin(), 5);
    const std::string answer = Text(std::vector<int32_t>(at + 1, sink->tokens.end()));
    const size_t brace = answer.find('{');
    ASSERT_NE(brace, std::string::npos) << answer;
    EXPECT_EQ(answer.find_first_not_of(" \t\r\n"), brace) << "only whitespace before: " << answer;
    ExpectValid(answer.substr(brace));
  }
}

// Qwen3's templates leave opening <think> to the model: with reasoning_may_open the first token
// may be <think> (here forced by a logit bias the grammar alone would defeat), the block stays
// free until the budget closes it, and the document follows; without it <think> is masked out.
TEST_F(ConstrainedDecodingTest, AModelOpenedBlockIsFreeOnlyWhenAllowed) {
  const int32_t think = tokenizer_->Find("<think>"), close = tokenizer_->Find("</think>");
  const int32_t newline = tokenizer_->Find("\xC4\x8A");
  ASSERT_GE(think, 0);
  ASSERT_GE(close, 0);
  auto sched = MakeScheduler(false);
  auto opened = std::make_shared<CollectingSink>(), masked = std::make_shared<CollectingSink>();
  for (bool may_open : {true, false}) {
    GenerationRequest r = Request(Encode("Answer:"), 2, 1.0f);
    r.sampling.logit_bias[think] = 100.0f;
    r.reasoning_budget = 3;
    r.reasoning_start_token = think;
    r.reasoning_end_tokens = {close, newline, newline};
    r.grammar_after_reasoning = true;
    r.grammar_reasoning_may_open = may_open;
    ASSERT_TRUE(sched->Submit(std::move(r), may_open ? opened : masked).ok());
  }
  RunAll(*sched);
  ASSERT_TRUE(opened->result.has_value() && masked->result.has_value());
  EXPECT_EQ(opened->result->reason, EndReason::kStop);
  ASSERT_FALSE(opened->tokens.empty());
  EXPECT_EQ(opened->tokens[0], think);
  auto at = std::find(opened->tokens.begin(), opened->tokens.end(), close);
  ASSERT_NE(at, opened->tokens.end()) << Text(opened->tokens);
  const std::string answer = Text(std::vector<int32_t>(at + 1, opened->tokens.end()));
  ASSERT_NE(answer.find('{'), std::string::npos) << answer;
  ExpectValid(answer.substr(answer.find('{')));

  EXPECT_EQ(masked->result->reason, EndReason::kStop);
  EXPECT_EQ(std::count(masked->tokens.begin(), masked->tokens.end(), think), 0);
  const std::string text = Text(masked->tokens);
  ExpectValid(text.substr(text.find('{')));
}

TEST_F(ConstrainedDecodingTest, MaxTokensCutsWithLength) {
  auto sched = MakeScheduler(false);
  auto sink = std::make_shared<CollectingSink>();
  GenerationRequest r = Request(Encode("Answer:"), 1, 1.0f);
  r.sampling.max_tokens = 3;
  ASSERT_TRUE(sched->Submit(std::move(r), sink).ok());
  RunAll(*sched);
  ASSERT_TRUE(sink->result.has_value());
  EXPECT_EQ(sink->result->reason, EndReason::kLength);
  EXPECT_EQ(sink->tokens.size(), 3u);
}

TEST_F(ConstrainedDecodingTest, CancelEndsAConstrainedSequence) {
  auto sched = MakeScheduler(false);
  auto sink = std::make_shared<CollectingSink>();
  absl::StatusOr<uint64_t> handle = sched->Submit(Request(Encode("Answer:"), 4, 1.0f), sink);
  ASSERT_TRUE(handle.ok());
  for (int i = 0; i < 3; ++i) sched->Step();
  sched->Cancel(*handle);
  RunAll(*sched);
  ASSERT_TRUE(sink->result.has_value());
  EXPECT_EQ(sink->result->reason, EndReason::kCancelled);
  EXPECT_EQ(sched->stats().running, 0);
}

TEST(SamplerMaskTest, OnlyAllowedTokensAreSampledAndLogprobsAreOverThem) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 3;
  p.top_logprobs = 3;  // more than are allowed: the masked ones are no alternatives
  auto sampler = Sampler::Create(p, 200);
  ASSERT_TRUE(sampler.ok());
  std::vector<float> logits(200, 0.0f);
  logits[5] = 10.0f;  // the best token overall, not allowed
  TokenMask allowed(200);
  allowed.Set(70);
  allowed.Set(130);
  for (int i = 0; i < 200; ++i) {
    TokenLogprobs lp;
    const int32_t t = sampler->Sample(logits, &lp, &allowed);
    EXPECT_TRUE(t == 70 || t == 130) << t;
    // Two equally likely tokens: log(1/2) each.
    EXPECT_NEAR(lp.logprob, std::log(0.5f), 1e-5);
    ASSERT_EQ(lp.top.size(), 2u);
    for (const auto& alt : lp.top) {
      EXPECT_TRUE(alt.token == 70 || alt.token == 130) << alt.token;
      EXPECT_NEAR(alt.logprob, std::log(0.5f), 1e-5);
    }
  }
  // Ids past the mask's size are disallowed too; greedy takes the best allowed.
  p.temperature = 0.0f;
  auto greedy = Sampler::Create(p, 200);
  ASSERT_TRUE(greedy.ok());
  TokenMask small(100);
  small.Set(7);
  small.Set(9);
  logits[9] = 1.0f;
  logits[150] = 50.0f;
  EXPECT_EQ(greedy->Sample(logits, nullptr, &small), 9);
  EXPECT_EQ(greedy->Sample(logits), 150);  // unmasked: unchanged
}

TEST(GrammarCacheTest, CompilesOncePerDistinctConstraintAndStaysBounded) {
  GrammarCache cache(2);
  OutputConstraintSpec a;
  a.kind = OutputConstraintSpec::Kind::kJsonSchema;
  a.schema_json = R"({"type":"boolean"})";
  OutputConstraintSpec b = a;
  b.strict = true;
  OutputConstraintSpec c;
  c.kind = OutputConstraintSpec::Kind::kJsonObject;
  auto a1 = cache.Get(a), a2 = cache.Get(a), b1 = cache.Get(b);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok());
  EXPECT_EQ(*a1, *a2);
  EXPECT_NE(*a1, *b1);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 2u);
  ASSERT_TRUE(cache.Get(c).ok());  // a, the least recently used, is dropped
  ASSERT_TRUE(cache.Get(a).ok());
  EXPECT_EQ(cache.misses(), 4u);
  OutputConstraintSpec bad = a;
  bad.schema_json = "{\"type\": 7}";
  EXPECT_EQ(cache.Get(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.refused(), 1u);
}

TEST(GrammarCacheTest, DropsGrammarsPastItsByteBudget) {
  // A long maxLength string: walking it adds a state per character, so the table grows past
  // the budget as the scheduler thread would grow it; the next compile drops it (the newest
  // grammar always stays), says so in its counter, and the gauge counts what is left.
  OutputConstraintSpec a;
  a.kind = OutputConstraintSpec::Kind::kJsonSchema;
  a.schema_json = R"({"type":"string","maxLength":4000})";
  OutputConstraintSpec b = a;
  b.schema_json = R"({"type":"boolean"})";
  auto fresh = std::make_shared<CompiledGrammar>(
      *common::grammar::CompileOutputConstraint(a));
  const size_t fresh_bytes = fresh->published_memory_bytes();
  ASSERT_GT(fresh_bytes, 0u);
  EXPECT_EQ(fresh_bytes, fresh->memory_bytes());

  GrammarCache cache(64, /*budget_bytes=*/4 * fresh_bytes);
  auto ga = cache.Get(a);
  ASSERT_TRUE(ga.ok());
  common::grammar::GrammarMatcher m(*ga);
  ASSERT_TRUE(m.AcceptBytes("\"" + std::string(3000, 'x')));
  EXPECT_EQ((*ga)->published_memory_bytes(), (*ga)->memory_bytes());
  ASSERT_GT((*ga)->published_memory_bytes(), 4 * fresh_bytes);
  EXPECT_EQ(cache.cached_bytes(), (*ga)->published_memory_bytes());

  ASSERT_TRUE(cache.Get(b).ok());
  EXPECT_EQ(cache.evicted_for_memory(), 1u);
  EXPECT_LT(cache.cached_bytes(), 4 * fresh_bytes);
  ASSERT_TRUE(cache.Get(a).ok());  // compiled again: it was dropped
  EXPECT_EQ(cache.misses(), 3u);
  EXPECT_EQ(cache.hits(), 0u);
  // The sequence that held the dropped grammar still walks it.
  EXPECT_TRUE(m.AcceptBytes("xyz\""));
  EXPECT_TRUE(m.IsAccepting());
}

}  // namespace
}  // namespace deltaserve::worker
