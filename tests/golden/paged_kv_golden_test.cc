// The engine on a shared, paged KV cache with small pages (16 positions) against the same tokens
// run on the default private f32 cache (Qwen35Model::NewSequence(max_tokens), one page up to 256
// positions), on the F32 golden models: prompts of page-1, page, page+1 and many pages, decoding
// across page boundaries, chunked prefill, sequences whose pages interleave in the pool, and
// forked sequences (pages shared copy-on-write, recurrent state copied) that must continue like
// their parent. The private-cache run is itself held to llama.cpp by engine_golden_test.
// Tolerance 1e-4, the one engine_golden_test uses for decode vs prefill: attention over keys in
// other pages is the same f32 math, but prefill and decode split the work differently
// (chunked vs per-token delta rule), so rows differ in f32 rounding only.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;

constexpr int64_t kPage = 16;
constexpr double kTol = 1e-4;

// The len300 token ids of the golden manifest: fixed pseudo-random ids (numpy seed 7).
std::vector<int32_t> GoldenTokens(const std::string& model) {
  std::ifstream in(GoldenPath(model + ".json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  return doc.at("sequences").back().at("tokens").get<std::vector<int32_t>>();
}

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

class PagedKvGoldenTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    backend_ = kernels::MakeCpuBackend(2);
    auto model = Qwen35Model::Load(GoldenPath(std::string(GetParam()) + ".gguf"), *backend_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    tokens_ = GoldenTokens(GetParam());
    ASSERT_EQ(tokens_.size(), 300u);
    nv_ = model_->n_vocab();
    auto cache = PagedKvCache::Create(*backend_, model_->kv_shape(),
                                      {kernels::WeightType::kF32, kernels::WeightType::kF32, kPage},
                                      /*n_pages=*/96);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
    auto slots = RecurrentStateSlots::Create(*backend_, model_->state_layout(), 6);
    ASSERT_TRUE(slots.ok()) << slots.status();
    slots_ = *slots;
  }

  // Logits of every token of `tokens`, one-shot prefill on a private f32 cache.
  std::vector<float> Reference(const std::vector<int32_t>& tokens) {
    auto seq = model_->NewSequence(static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(seq.ok()) << seq.status();
    std::vector<float> logits;
    const BatchEntry e{seq->get(), tokens, true};
    EXPECT_TRUE(model_->Forward({&e, 1}, logits).ok());
    return logits;
  }

  std::unique_ptr<SequenceState> Shared(int64_t capacity = 400) {
    auto seq = model_->NewSequence(cache_, slots_, capacity);
    EXPECT_TRUE(seq.ok()) << seq.status();
    return seq.ok() ? std::move(*seq) : nullptr;
  }

  // Feeds tokens[first, first + n) to `seq` and appends one logits row per token.
  void Feed(SequenceState& seq, const std::vector<int32_t>& tokens, size_t first, size_t n,
            std::vector<float>& out) {
    std::vector<float> logits;
    const BatchEntry e{&seq, absl::Span<const int32_t>(tokens.data() + first, n), true};
    const absl::Status s = model_->Forward({&e, 1}, logits);
    ASSERT_TRUE(s.ok()) << s;
    out.insert(out.end(), logits.begin(), logits.end());
  }

  // Max |diff| of rows [first, first + rows) of `got` (starting at its row 0) against `want`.
  double RowsDiff(const std::vector<float>& got, const std::vector<float>& want, size_t first,
                  size_t rows) {
    EXPECT_GE(got.size(), rows * nv_);
    EXPECT_GE(want.size(), (first + rows) * nv_);
    return MaxAbsDiff(got.data(), want.data() + first * nv_, rows * nv_);
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Qwen35Model> model_;
  std::vector<int32_t> tokens_;
  int64_t nv_ = 0;
  std::shared_ptr<PagedKvCache> cache_;
  std::shared_ptr<RecurrentStateSlots> slots_;
};

TEST_P(PagedKvGoldenTest, PromptsAroundPageBoundariesThenDecodeMatchPrivateCache) {
  const std::vector<float> want = Reference(tokens_);
  // Prompt lengths page-1, page, page+1, many pages (not a multiple); each then decodes 20
  // tokens one at a time, crossing at least one more boundary.
  for (size_t prompt :
       {size_t{kPage - 1}, size_t{kPage}, size_t{kPage + 1}, size_t{7 * kPage + 5}, size_t{1}}) {
    std::unique_ptr<SequenceState> seq = Shared();
    ASSERT_NE(seq, nullptr);
    std::vector<float> got;
    Feed(*seq, tokens_, 0, prompt, got);
    for (size_t t = prompt; t < prompt + 20; ++t) Feed(*seq, tokens_, t, 1, got);
    EXPECT_EQ(seq->n_past, static_cast<int64_t>(prompt + 20));
    EXPECT_EQ(seq->kv->pages().size(), (prompt + 20 + kPage - 1) / kPage);
    EXPECT_LE(RowsDiff(got, want, 0, prompt + 20), kTol) << "prompt " << prompt;
  }
  EXPECT_EQ(cache_->free_pages(), cache_->total_pages()) << "sequences gave their pages back";
  EXPECT_EQ(slots_->free_slots(), slots_->total_slots());
}

TEST_P(PagedKvGoldenTest, ChunkedPrefillOverSmallPagesMatchesPrivateCache) {
  const std::vector<float> want = Reference(tokens_);
  // Chunks that start and end inside pages, exactly on them, and span several at once.
  for (size_t chunk : {size_t{5}, size_t{16}, size_t{17}, size_t{300}}) {
    std::unique_ptr<SequenceState> seq = Shared();
    ASSERT_NE(seq, nullptr);
    std::vector<float> got;
    for (size_t i = 0; i < tokens_.size(); i += chunk) {
      Feed(*seq, tokens_, i, std::min(chunk, tokens_.size() - i), got);
    }
    EXPECT_LE(RowsDiff(got, want, 0, tokens_.size()), kTol) << "chunk " << chunk;
  }
}

TEST_P(PagedKvGoldenTest, BatchedSequencesWithInterleavedPagesMatchEachAlone) {
  // Two sequences in one batch take pages alternately, so neither's pages are contiguous.
  const std::vector<int32_t> a(tokens_.begin(), tokens_.begin() + 150);
  const std::vector<int32_t> b(tokens_.begin() + 100, tokens_.end());
  const std::vector<float> want_a = Reference(a), want_b = Reference(b);
  std::unique_ptr<SequenceState> sa = Shared(), sb = Shared();
  ASSERT_TRUE(sa && sb);
  std::vector<float> got_a, got_b, logits;
  for (size_t i = 0; i < 150; i += 8) {
    const size_t n = std::min<size_t>(8, 150 - i);
    const BatchEntry both[2] = {{sa.get(), absl::Span<const int32_t>(a.data() + i, n), true},
                                {sb.get(), absl::Span<const int32_t>(b.data() + i, n), true}};
    ASSERT_TRUE(model_->Forward(both, logits).ok());
    got_a.insert(got_a.end(), logits.begin(), logits.begin() + n * nv_);
    got_b.insert(got_b.end(), logits.begin() + n * nv_, logits.end());
  }
  for (size_t i = 150; i < b.size(); ++i) Feed(*sb, b, i, 1, got_b);
  const auto pa = sa->kv->pages();
  ASSERT_GE(pa.size(), 2u);
  EXPECT_NE(pa[1], pa[0] + 1) << "pages of the two sequences should interleave";
  EXPECT_LE(RowsDiff(got_a, want_a, 0, a.size()), kTol);
  EXPECT_LE(RowsDiff(got_b, want_b, 0, b.size()), kTol);
}

// A sequence forked from `parent` after its n_past tokens: the same pages (copy-on-write) and a
// copy of its recurrent state in a new slot.
std::unique_ptr<SequenceState> ForkSequence(const SequenceState& parent,
                                            std::shared_ptr<RecurrentStateSlots> slots) {
  auto slot = RecurrentSlot::Acquire(std::move(slots));
  EXPECT_TRUE(slot.ok()) << slot.status();
  if (!slot.ok()) return nullptr;
  const auto* parent_slot = dynamic_cast<const RecurrentSlot*>(parent.state.get());
  const auto* parent_kv = dynamic_cast<const PagedSequenceKv*>(parent.kv.get());
  EXPECT_TRUE(parent_slot != nullptr && parent_kv != nullptr);
  if (parent_slot == nullptr || parent_kv == nullptr) return nullptr;
  EXPECT_TRUE((*slot)->CopyFrom(*parent_slot).ok());
  auto fork = std::make_unique<SequenceState>();
  fork->n_past = parent.n_past;
  fork->state = std::move(*slot);
  fork->kv = parent_kv->Fork(parent.n_past);
  return fork;
}

TEST_P(PagedKvGoldenTest, ForkedSequencesContinueLikeTheirParent) {
  // Fork inside a page (40 = 2.5 pages: the child's first write copies page 2) and on a page
  // boundary (48: nothing to copy).
  for (size_t prompt : {size_t{40}, size_t{48}}) {
    std::unique_ptr<SequenceState> parent = Shared();
    ASSERT_NE(parent, nullptr);
    std::vector<float> prefix;
    Feed(*parent, tokens_, 0, prompt, prefix);
    std::unique_ptr<SequenceState> same = ForkSequence(*parent, slots_);
    std::unique_ptr<SequenceState> other = ForkSequence(*parent, slots_);
    ASSERT_TRUE(same && other);
    EXPECT_EQ(cache_->RefCount(parent->kv->pages()[0]), 3);

    // `same` continues with the parent's tokens, `other` with different ones (the len300 tokens
    // from position 200), all three token by token for 24 steps, then 30 more in one chunk.
    std::vector<int32_t> other_tokens(tokens_.begin(), tokens_.begin() + prompt);
    other_tokens.insert(other_tokens.end(), tokens_.begin() + 200, tokens_.begin() + 254);
    std::vector<float> got_parent, got_same, got_other;
    for (size_t t = prompt; t < prompt + 24; ++t) {
      Feed(*other, other_tokens, t, 1, got_other);  // writes first into the shared page
      Feed(*same, tokens_, t, 1, got_same);
      Feed(*parent, tokens_, t, 1, got_parent);
    }
    Feed(*parent, tokens_, prompt + 24, 30, got_parent);
    Feed(*same, tokens_, prompt + 24, 30, got_same);
    Feed(*other, other_tokens, prompt + 24, 30, got_other);

    const std::vector<int32_t> parent_tokens(tokens_.begin(), tokens_.begin() + prompt + 54);
    const std::vector<float> want = Reference(parent_tokens);
    const std::vector<float> want_other = Reference(other_tokens);
    EXPECT_LE(RowsDiff(got_parent, want, prompt, 54), kTol) << "parent, fork at " << prompt;
    EXPECT_LE(RowsDiff(got_same, want, prompt, 54), kTol) << "fork at " << prompt;
    EXPECT_LE(RowsDiff(got_other, want_other, prompt, 54), kTol) << "other fork at " << prompt;
    // Parent and its same-token fork ran the same ops on the same values.
    EXPECT_EQ(MaxAbsDiff(got_parent.data(), got_same.data(), got_parent.size()), 0.0)
        << "fork at " << prompt;

    // Pages below the fork point that nobody wrote after the fork stay shared by all three.
    const size_t full_pages = prompt / kPage;
    for (size_t p = 0; p < full_pages; ++p) {
      EXPECT_EQ(parent->kv->pages()[p], same->kv->pages()[p]);
      EXPECT_EQ(parent->kv->pages()[p], other->kv->pages()[p]);
      EXPECT_EQ(cache_->RefCount(parent->kv->pages()[p]), 3);
    }
    if (prompt % kPage != 0) {
      EXPECT_NE(parent->kv->pages()[full_pages], same->kv->pages()[full_pages]);
      EXPECT_NE(parent->kv->pages()[full_pages], other->kv->pages()[full_pages]);
    }
  }
  EXPECT_EQ(cache_->free_pages(), cache_->total_pages());
}

INSTANTIATE_TEST_SUITE_P(F32Models, PagedKvGoldenTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"), [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace deltaserve::worker
