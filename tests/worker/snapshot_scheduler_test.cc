// Session snapshots in the scheduler (worker/cache/snapshot_cache.h, docs/snapshots.md) on the
// F32 golden models, against an independent reference: every prompt run cold and alone through
// the engine (Qwen35Model::Forward on a private f32 cache) with a plain greedy loop. What is
// checked:
// - a 10-turn conversation whose replies go back verbatim: every turn's tokens equal the cold
//   run's and every chosen token's logprob agrees within 1e-4 (a resumed prompt is summed in
//   other chunks than a cold one; f32 summation order only), and from turn 2 on the whole
//   previous turn, reply included, is restored (cached_prompt_tokens);
// - the same turns on a second scheduler with its own caches, given the first one's snapshot as
//   an image (what the Redis tier hands over): same tokens, restored from the image;
// - snapshots give their KV pages back when a request needs them; the RAM budget holds over many
//   conversations; --snapshot-ram 0 runs everything cold.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/snapshot_key.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/test_paths.h"
#include "worker/cache/snapshot_cache.h"
#include "worker/engine/qwen35.h"
#include "worker/sched/scheduler.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

// Stand-ins for ChatML's framing tokens (any ids of the vocabulary do).
const std::vector<int32_t> kTurnEnd = {7, 8};     // <|im_end|> "\n"
const std::vector<int32_t> kAssistant = {9, 10};  // <|im_start|>assistant "\n"

class CollectingSink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) {
      this->tokens.push_back(t.token);
      logprobs.push_back(t.logprobs ? t.logprobs->logprob : NAN);
    }
  }
  void OnFinish(const GenerationResult& r) override { result = r; }
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<GenerationResult> result;
};

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
};

// Greedy generation of `n` tokens for `prompt`, cold and alone, with each choice's logprob.
Reference GreedyAlone(Qwen35Model& model, const std::vector<int32_t>& prompt, int n) {
  Reference ref;
  auto seq = model.NewSequence(static_cast<int64_t>(prompt.size()) + n);
  EXPECT_TRUE(seq.ok()) << seq.status();
  std::vector<float> logits;
  std::vector<int32_t> feed = prompt;
  const int64_t nv = model.n_vocab();
  for (int i = 0; i < n; ++i) {
    BatchEntry e{seq->get(), feed, false};
    EXPECT_TRUE(model.Forward({&e, 1}, logits).ok());
    const int32_t t = Argmax(logits, static_cast<int32_t>(nv));
    double mx = logits[0], sum = 0.0;
    for (int64_t j = 0; j < nv; ++j) mx = std::max<double>(mx, logits[j]);
    for (int64_t j = 0; j < nv; ++j) sum += std::exp(double{logits[j]} - mx);
    ref.tokens.push_back(t);
    ref.logprobs.push_back(double{logits[t]} - mx - std::log(sum));
    feed = {t};
  }
  return ref;
}

// A scheduler on the golden model with a paged f32 cache and a RAM snapshot tier.
struct Harness {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Qwen35Model> model;
  std::shared_ptr<PagedKvCache> cache;
  std::shared_ptr<SnapshotCache> snapshots;
  std::unique_ptr<Scheduler> sched;
  std::vector<std::shared_ptr<const LocalSnapshot>> published;

  Harness(const std::string& name, int64_t pages, uint64_t snapshot_ram, int max_sequences = 2,
          int64_t step_tokens = 64, bool capture_inside_chunks = true,
          uint64_t max_step_tap_bytes = 512ull << 20) {
    backend = kernels::MakeCpuBackend(2);
    auto m = Qwen35Model::Load(GoldenPath(name + ".gguf"), *backend);
    EXPECT_TRUE(m.ok()) << m.status();
    model = std::move(*m);
    KvCacheOptions kv = F32KvCache();
    kv.page_tokens = 16;  // small pages: partial pages and copy-on-write at every boundary
    auto c = PagedKvCache::Create(*backend, model->kv_shape(), kv, pages);
    EXPECT_TRUE(c.ok()) << c.status();
    cache = std::move(*c);
    auto slots = RecurrentStateSlots::Create(*backend, model->state_layout(), max_sequences);
    EXPECT_TRUE(slots.ok());
    common::SnapshotDomain domain;
    domain.model_fingerprint = common::ModelFingerprint(model->file());
    domain.k_type = domain.v_type = "f32";
    domain.page_tokens = kv.page_tokens;
    snapshots = std::make_shared<SnapshotCache>(cache, *slots, domain, snapshot_ram);
    SchedulerOptions o;
    o.max_sequences = max_sequences;
    o.step_tokens = step_tokens;
    o.capture_inside_chunks = capture_inside_chunks;
    o.max_step_tap_bytes = max_step_tap_bytes;
    o.max_context = 2048;
    o.snapshot_interval = 128;
    auto s = Scheduler::Create(*model, cache, *slots, o, /*eos_token_ids=*/{},
                               static_cast<int32_t>(model->n_vocab()), snapshots);
    EXPECT_TRUE(s.ok()) << s.status();
    sched = std::move(*s);
    sched->SetSnapshotPublisher([this](std::vector<std::shared_ptr<const LocalSnapshot>> s,
                                       int64_t /*prompt_tokens*/) {
      published.insert(published.end(), s.begin(), s.end());
    });
  }

  std::shared_ptr<CollectingSink> Run(const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& boundaries, int max_tokens,
                                      std::shared_ptr<const SnapshotImage> image = nullptr) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.logprobs = true;
    r.message_boundaries = boundaries;
    r.turn_end_tokens = kTurnEnd;
    r.remote_snapshot = std::move(image);
    auto sink = std::make_shared<CollectingSink>();
    auto h = sched->Submit(std::move(r), sink);
    EXPECT_TRUE(h.ok()) << h.status();
    for (int guard = 0; sched->busy() && guard < 100000; ++guard) sched->Step();
    EXPECT_FALSE(sched->busy());
    return sink;
  }
};

// A conversation: user messages of random tokens, replies appended verbatim.
struct Conversation {
  std::vector<int32_t> history;     // every message so far, each ending in kTurnEnd
  std::vector<int32_t> boundaries;  // where each message of `history` ends
  std::mt19937 rng;
  explicit Conversation(uint32_t seed) : rng(seed) {}

  void AddMessage(const std::vector<int32_t>& body) {
    history.insert(history.end(), body.begin(), body.end());
    history.insert(history.end(), kTurnEnd.begin(), kTurnEnd.end());
    boundaries.push_back(static_cast<int32_t>(history.size()));
  }
  std::vector<int32_t> RandomUserMessage(int n) {
    std::uniform_int_distribution<int32_t> id(11, 2000);
    std::vector<int32_t> body;
    for (int i = 0; i < n; ++i) body.push_back(id(rng));
    return body;
  }
  // The prompt of the next turn: the history and the generation prompt.
  std::vector<int32_t> Prompt() const {
    std::vector<int32_t> p = history;
    p.insert(p.end(), kAssistant.begin(), kAssistant.end());
    return p;
  }
  void AddReply(const std::vector<int32_t>& reply) {
    std::vector<int32_t> body = kAssistant;
    body.insert(body.end(), reply.begin(), reply.end());
    AddMessage(body);
  }
};

void ExpectEqualsCold(Qwen35Model& model, const std::vector<int32_t>& prompt, int n,
                      const CollectingSink& sink, const std::string& what) {
  const Reference ref = GreedyAlone(model, prompt, n);
  ASSERT_TRUE(sink.result.has_value()) << what;
  EXPECT_EQ(sink.tokens, ref.tokens) << what;
  ASSERT_EQ(sink.logprobs.size(), ref.logprobs.size()) << what;
  for (size_t i = 0; i < ref.logprobs.size(); ++i) {
    EXPECT_NEAR(sink.logprobs[i], ref.logprobs[i], 1e-4) << what << " token " << i;
  }
}

// The image another worker would fetch from Redis for `snap`.
std::shared_ptr<const SnapshotImage> ImageOf(const SnapshotCache& cache,
                                             const LocalSnapshot& snap) {
  auto kv = std::make_shared<std::vector<uint8_t>>();
  auto state = std::make_shared<std::vector<uint8_t>>(snap.state().begin(), snap.state().end());
  absl::StatusOr<std::vector<uint8_t>> bytes = cache.CopyKv(snap);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  *kv = std::move(*bytes);
  auto image = std::make_shared<SnapshotImage>();
  image->key = snap.key();
  image->tokens.assign(snap.tokens().begin(), snap.tokens().end());
  image->state = *state;
  image->kv = *kv;
  image->owner = std::make_shared<std::pair<decltype(kv), decltype(state)>>(kv, state);
  return image;
}

class SnapshotSchedulerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotSchedulerTest, TenTurnConversationEqualsColdRunsAndRestoresThePreviousTurn) {
  Harness h(GetParam(), /*pages=*/256, /*snapshot_ram=*/256ull << 20);
  Conversation conv(1234);
  constexpr int kReply = 6;
  int64_t previous_end = 0;  // tokens of the previous turn with its reply and turn end
  for (int turn = 1; turn <= 10; ++turn) {
    conv.AddMessage(conv.RandomUserMessage(20 + 7 * turn));
    const std::vector<int32_t> prompt = conv.Prompt();
    auto sink = h.Run(prompt, conv.boundaries, kReply);
    const std::string what = GetParam() + " turn " + std::to_string(turn);
    ExpectEqualsCold(*h.model, prompt, kReply, *sink, what);
    ASSERT_TRUE(sink->result.has_value());
    if (turn >= 2) {
      // The end-of-output snapshot of the previous turn sits exactly at the end of its reply's
      // message, which is a message boundary of this prompt.
      EXPECT_EQ(sink->result->cached_prompt_tokens, previous_end) << what;
      EXPECT_EQ(sink->result->cached_from, SnapshotSource::kRam) << what;
      // Restoring took time and is a part of the prefill the log line reports.
      EXPECT_GT(sink->result->restore_ms, 0.0) << what;
    } else {
      EXPECT_EQ(sink->result->cached_prompt_tokens, 0) << what;
    }
    EXPECT_LE(sink->result->restore_ms, sink->result->prefill_ms) << what;
    conv.AddReply(sink->tokens);
    previous_end = static_cast<int64_t>(conv.history.size());
  }
  const SchedulerStats s = h.sched->stats();
  EXPECT_EQ(s.snapshot_lookups, 10);
  EXPECT_EQ(s.snapshot_hits_ram, 9);
  EXPECT_EQ(s.snapshot_misses, 1);
  // Chunks of 64 tokens: most message boundaries fall inside a chunk and are tapped.
  EXPECT_GT(s.snapshot_tapped_captures, 0);
  const SnapshotCacheStats c = h.snapshots->stats();
  EXPECT_GT(c.captures, 10);
  std::printf("%s: %lld snapshots of %llu state bytes, %.1f us each; %lld restores, %.1f us each\n",
              GetParam().c_str(), static_cast<long long>(c.captures),
              static_cast<unsigned long long>(h.model->state_layout().bytes()),
              c.capture_us / c.captures, static_cast<long long>(c.restores),
              c.restores > 0 ? c.restore_us / c.restores : 0.0);
}

// A prompt of five messages runs as one chunk: its boundaries are snapshotted from state taps
// (mid-page with 16-token pages, the pages already holding later positions). Requests that
// branch off at each boundary resume from those snapshots, in RAM and, on another scheduler, as
// Redis images, and equal cold runs. The same with taps off costs a chunk per message; with one
// tap's bytes per step, a chunk per two messages.
TEST_P(SnapshotSchedulerTest, SnapshotsTakenInsideAChunkResumeBranchesExactly) {
  enum Mode { kTaps, kOff, kOneTapPerStep };
  for (Mode m : {kTaps, kOff, kOneTapPerStep}) {
    const bool taps = m != kOff;
    const std::string mode = m == kTaps  ? " (taps)"
                             : m == kOff ? " (chunks end at boundaries)"
                                         : " (one tap per step)";
    const uint64_t tap_bytes = m == kOneTapPerStep ? 1 : 512ull << 20;
    Harness h(GetParam(), 256, 256ull << 20, 2, /*step_tokens=*/512, taps, tap_bytes);
    Harness other(GetParam(), 256, 256ull << 20, 2, 512, taps, tap_bytes);
    Conversation conv(4242);
    for (int m = 0; m < 5; ++m) conv.AddMessage(conv.RandomUserMessage(13 + 5 * m));
    const std::vector<int32_t> prompt = conv.Prompt();
    const uint64_t passes_before = h.model->counters().passes();
    constexpr int kReply = 3;
    auto first = h.Run(prompt, conv.boundaries, kReply);
    // One prompt pass, a pass per later token, the turn-end pass; with taps off, a pass per
    // message boundary more; with one tap per step, the chunks [0, b1) [b1, b3) [b3, end), the
    // taps at b0, b2 and b4.
    const uint64_t passes = h.model->counters().passes() - passes_before;
    ExpectEqualsCold(*h.model, prompt, kReply, *first, GetParam() + mode);
    ASSERT_EQ(conv.boundaries.size(), 5u);
    const uint64_t extra_passes = m == kTaps ? 0 : m == kOff ? 5 : 2;
    EXPECT_EQ(passes, kReply + 1u + extra_passes) << mode;
    EXPECT_EQ(h.sched->stats().snapshot_tapped_captures, m == kTaps ? 5 : m == kOff ? 0 : 3)
        << mode;
    for (size_t at = 0; at + 1 < conv.boundaries.size(); ++at) {
      // The history up to boundary `at`, then another user message.
      Conversation branch(77 + static_cast<uint32_t>(at));
      branch.history.assign(prompt.begin(), prompt.begin() + conv.boundaries[at]);
      branch.boundaries.assign(conv.boundaries.begin(), conv.boundaries.begin() + at + 1);
      branch.AddMessage(branch.RandomUserMessage(9));
      const std::vector<int32_t> p = branch.Prompt();
      const std::string what = GetParam() + mode + " branch at " + std::to_string(at);
      auto local = h.Run(p, branch.boundaries, kReply);
      ExpectEqualsCold(*h.model, p, kReply, *local, what);
      EXPECT_EQ(local->result->cached_from, SnapshotSource::kRam) << what;
      EXPECT_EQ(local->result->cached_prompt_tokens, conv.boundaries[at]) << what;
      // The same snapshot as another worker fetches it.
      std::shared_ptr<const LocalSnapshot> snap;
      for (const auto& s : h.published) {
        if (s->n_tokens() == conv.boundaries[at]) snap = s;
      }
      ASSERT_NE(snap, nullptr) << what;
      auto remote = other.Run(p, branch.boundaries, kReply, ImageOf(*h.snapshots, *snap));
      ExpectEqualsCold(*other.model, p, kReply, *remote, what + " from the image");
      EXPECT_EQ(remote->result->cached_from, SnapshotSource::kRemote) << what;
    }
  }
}

TEST_P(SnapshotSchedulerTest, AnotherSchedulerResumesFromTheImage) {
  Harness a(GetParam(), 256, 256ull << 20);
  Harness b(GetParam(), 256, 256ull << 20);
  Conversation conv(99);
  constexpr int kReply = 5;
  for (int turn = 1; turn <= 4; ++turn) {
    conv.AddMessage(conv.RandomUserMessage(40));
    const std::vector<int32_t> prompt = conv.Prompt();
    // Odd turns on `a`, even turns on `b`, each given the other's end-of-output snapshot.
    Harness& here = turn % 2 == 1 ? a : b;
    Harness& there = turn % 2 == 1 ? b : a;
    std::shared_ptr<const SnapshotImage> image;
    if (!there.published.empty()) image = ImageOf(*there.snapshots, *there.published.back());
    auto sink = here.Run(prompt, conv.boundaries, kReply, image);
    const std::string what = GetParam() + " turn " + std::to_string(turn);
    ExpectEqualsCold(*here.model, prompt, kReply, *sink, what);
    if (turn >= 2) {
      EXPECT_EQ(sink->result->cached_from, SnapshotSource::kRemote) << what;
      EXPECT_EQ(sink->result->cached_prompt_tokens, static_cast<int64_t>(image->tokens.size()))
          << what;
    }
    conv.AddReply(sink->tokens);
  }
  EXPECT_EQ(b.sched->stats().snapshot_hits_remote, 2);
}

TEST_P(SnapshotSchedulerTest, AForeignImageIsIgnoredAndTheRunIsCold) {
  Harness h(GetParam(), 256, 256ull << 20);
  Conversation conv(5);
  conv.AddMessage(conv.RandomUserMessage(50));
  const std::vector<int32_t> prompt = conv.Prompt();
  // An image whose tokens are not this prompt's prefix (another conversation).
  auto image = std::make_shared<SnapshotImage>();
  image->tokens.assign(prompt.begin(), prompt.begin() + 20);
  image->tokens[3] ^= 1;
  auto sink = h.Run(prompt, conv.boundaries, 4, image);
  ExpectEqualsCold(*h.model, prompt, 4, *sink, "foreign image");
  EXPECT_EQ(sink->result->cached_prompt_tokens, 0);
  EXPECT_EQ(sink->result->cached_from, SnapshotSource::kNone);
}

TEST_P(SnapshotSchedulerTest, SnapshotsGiveTheirPagesBackWhenARequestNeedsThem) {
  // 40 pages of 16 tokens: the snapshots of a few conversations pin pages; a request needing
  // nearly the whole pool still runs, and runs right.
  Harness h(GetParam(), /*pages=*/40, 256ull << 20, /*max_sequences=*/1);
  for (uint32_t c = 0; c < 3; ++c) {
    Conversation conv(100 + c);
    conv.AddMessage(conv.RandomUserMessage(150));
    h.Run(conv.Prompt(), conv.boundaries, 4);
    h.published.clear();  // as a Redis writer does once a snapshot is written
  }
  EXPECT_GT(h.snapshots->stats().pinned_pages, 0);
  // Pages held only by snapshots are reported free (the router's load picture): all of them.
  EXPECT_LT(h.cache->free_pages(), h.cache->total_pages());
  EXPECT_EQ(h.sched->stats().free_pages, h.cache->total_pages());
  Conversation big(7);
  big.AddMessage(big.RandomUserMessage(600));
  const std::vector<int32_t> prompt = big.Prompt();
  auto sink = h.Run(prompt, big.boundaries, 4);
  ExpectEqualsCold(*h.model, prompt, 4, *sink, "big request");
  EXPECT_EQ(sink->result->reason, EndReason::kLength);
  EXPECT_GT(h.snapshots->stats().evictions, 0);
}

TEST_P(SnapshotSchedulerTest, TheRamBudgetHoldsOverManyConversations) {
  Harness probe(GetParam(), 64, 1);
  const uint64_t state_bytes = probe.model->state_layout().bytes();
  // Room for three state copies (and their token ids).
  const uint64_t budget = 3 * state_bytes + 3 * 4096;
  Harness h(GetParam(), 256, budget);
  for (uint32_t c = 0; c < 30; ++c) {
    Conversation conv(1000 + c);
    conv.AddMessage(conv.RandomUserMessage(30));
    h.Run(conv.Prompt(), conv.boundaries, 3);
    const SnapshotCacheStats s = h.snapshots->stats();
    ASSERT_LE(s.ram_bytes, budget) << "conversation " << c;
    ASSERT_LE(s.entries, 3) << "conversation " << c;
  }
  EXPECT_GT(h.snapshots->stats().evictions, 0);
}

TEST_P(SnapshotSchedulerTest, ALongPromptSnapshotsOnlyItsLastMessages) {
  Harness h(GetParam(), 256, 256ull << 20);
  Conversation conv(11);
  for (int m = 0; m < 20; ++m) conv.AddMessage(conv.RandomUserMessage(10));
  const std::vector<int32_t> prompt = conv.Prompt();
  auto sink = h.Run(prompt, conv.boundaries, 3);
  ExpectEqualsCold(*h.model, prompt, 3, *sink, "20 messages");
  // The last 8 message boundaries (SchedulerOptions::max_snapshots_per_sequence) and the end of
  // the output.
  ASSERT_EQ(h.published.size(), 9u);
  EXPECT_EQ(h.published[0]->n_tokens(), conv.boundaries[12]);
  EXPECT_EQ(h.published[7]->n_tokens(), conv.boundaries[19]);
  EXPECT_EQ(h.published[8]->n_tokens(),
            static_cast<int64_t>(prompt.size() + 3 + kTurnEnd.size()));
}

TEST_P(SnapshotSchedulerTest, ZeroRamRunsEverythingCold) {
  Harness h(GetParam(), 256, /*snapshot_ram=*/0);
  Conversation conv(3);
  for (int turn = 1; turn <= 3; ++turn) {
    conv.AddMessage(conv.RandomUserMessage(30));
    auto sink = h.Run(conv.Prompt(), conv.boundaries, 4);
    ExpectEqualsCold(*h.model, conv.Prompt(), 4, *sink, "turn " + std::to_string(turn));
    EXPECT_EQ(sink->result->cached_prompt_tokens, 0);
    conv.AddReply(sink->tokens);
  }
  EXPECT_EQ(h.snapshots->stats().captures, 0);
  EXPECT_EQ(h.sched->stats().snapshot_lookups, 0);
}

INSTANTIATE_TEST_SUITE_P(Golden, SnapshotSchedulerTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"));

}  // namespace
}  // namespace deltaserve::worker
