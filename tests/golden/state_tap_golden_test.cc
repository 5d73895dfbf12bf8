// State taps (BatchEntry::taps, worker/engine/qwen35.h): the recurrent state copied at a position
// inside a forward pass, which session snapshots take instead of ending a prefill chunk at every
// message boundary. On the F32 golden models, against an independent reference: a fresh
// sequence whose pass ends exactly at the tapped position.
// - Every tap equals the reference's state within 1e-4 of the state's scale: the conv and the
//   delta rule run the same pieces; only the projections are summed over a pass of another
//   length (f32 rounding of the blocking, as in the chunked-prefill consistency test). A tap
//   one position off differs by far more, so the comparison can tell.
// - A pass with taps gives the same logits and final state as one without (within 1e-4: the
//   delta rule's chunks split at the taps).
// - Taps at 0, at the entry's end, out of order or without a buffer are refused before anything
//   runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/golden_logits.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::LoadGolden;
using ::deltaserve::testing::MaxAbsDiff;

// A sequence's recurrent state in the tap layout: [DeltaNet layer][conv | delta] f32 (the CPU
// backend's state lives in host memory).
std::vector<float> StateOf(const Qwen35Model& model, const SequenceState& seq) {
  const RecurrentStateLayout layout = model.state_layout();
  std::vector<float> out;
  for (int i = 0; i < layout.n_layers; ++i) {
    const float* conv = seq.state->conv(i);
    const float* delta = seq.state->delta(i);
    out.insert(out.end(), conv, conv + layout.conv_floats);
    out.insert(out.end(), delta, delta + layout.delta_floats);
  }
  return out;
}

std::vector<float> AsFloats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double{x}));
  return m;
}

// The state after the first `n` tokens, from a pass that ends there.
std::vector<float> ReferenceState(Qwen35Model& model, const std::vector<int32_t>& tokens,
                                  size_t n) {
  auto seq = model.NewSequence(static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(seq.ok()) << seq.status();
  std::vector<float> logits;
  BatchEntry e{seq->get(), absl::Span<const int32_t>(tokens.data(), n)};
  EXPECT_TRUE(model.Forward({&e, 1}, logits).ok());
  return StateOf(model, **seq);
}

class StateTapTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    backend_ = kernels::MakeCpuBackend(2);
    auto m = Qwen35Model::Load(GoldenPath(std::string(GetParam()) + ".gguf"), *backend_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    const testing::GoldenModel golden = LoadGolden(GetParam());
    short_ = golden.sequences[1].tokens;  // len17
    long_ = golden.sequences.back().tokens;  // len300
    ASSERT_EQ(long_.size(), 300u);
  }
  std::vector<uint8_t> Buffer() const { return std::vector<uint8_t>(model_->state_layout().bytes()); }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Qwen35Model> model_;
  std::vector<int32_t> short_, long_;
};

TEST_P(StateTapTest, EveryTapEqualsThePassEndingThere) {
  // Two entries in one pass (the second's rows start after the first's), taps on both: at the
  // first token, inside and at the edges of the delta rule's 64-token chunks, and one short of
  // the end.
  const std::vector<int64_t> long_at = {1, 7, 63, 64, 65, 150, 299};
  const std::vector<int64_t> short_at = {5, 16};
  std::vector<std::vector<uint8_t>> long_bufs(long_at.size(), Buffer());
  std::vector<std::vector<uint8_t>> short_bufs(short_at.size(), Buffer());
  std::vector<StateTap> long_taps, short_taps;
  for (size_t i = 0; i < long_at.size(); ++i) long_taps.push_back({long_at[i], long_bufs[i].data()});
  for (size_t i = 0; i < short_at.size(); ++i) {
    short_taps.push_back({short_at[i], short_bufs[i].data()});
  }
  auto a = model_->NewSequence(64);
  auto b = model_->NewSequence(400);
  ASSERT_TRUE(a.ok() && b.ok());
  BatchEntry entries[2] = {{a->get(), short_}, {b->get(), long_}};
  entries[0].taps = short_taps;
  entries[1].taps = long_taps;
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(entries, logits).ok());
  EXPECT_EQ((*b)->n_past, 300);

  for (size_t i = 0; i < long_at.size(); ++i) {
    const std::vector<float> want = ReferenceState(*model_, long_, long_at[i]);
    const double tol = 1e-4 * std::max(1.0, MaxAbs(want));
    const std::vector<float> got = AsFloats(long_bufs[i]);
    EXPECT_LE(MaxAbsDiff(got, want), tol) << "tap after " << long_at[i];
    // The tap is of its own position: the state one token later is far from it.
    const std::vector<float> next = ReferenceState(*model_, long_, long_at[i] + 1);
    EXPECT_GT(MaxAbsDiff(got, next), 100 * tol) << "tap after " << long_at[i];
  }
  for (size_t i = 0; i < short_at.size(); ++i) {
    const std::vector<float> want = ReferenceState(*model_, short_, short_at[i]);
    EXPECT_LE(MaxAbsDiff(AsFloats(short_bufs[i]), want), 1e-4 * std::max(1.0, MaxAbs(want)))
        << "short tap after " << short_at[i];
  }
}

TEST_P(StateTapTest, TapsChangeNeitherLogitsNorTheFinalState) {
  std::vector<std::vector<uint8_t>> bufs = {Buffer(), Buffer(), Buffer()};
  const StateTap taps[] = {{20, bufs[0].data()}, {128, bufs[1].data()}, {250, bufs[2].data()}};
  auto tapped = model_->NewSequence(300);
  auto plain = model_->NewSequence(300);
  ASSERT_TRUE(tapped.ok() && plain.ok());
  BatchEntry with{tapped->get(), long_, /*all_logits=*/true};
  with.taps = taps;
  BatchEntry without{plain->get(), long_, /*all_logits=*/true};
  std::vector<float> logits_with, logits_without;
  ASSERT_TRUE(model_->Forward({&with, 1}, logits_with).ok());
  ASSERT_TRUE(model_->Forward({&without, 1}, logits_without).ok());
  EXPECT_LE(MaxAbsDiff(logits_with, logits_without), 1e-4);
  const std::vector<float> state_without = StateOf(*model_, **plain);
  EXPECT_LE(MaxAbsDiff(StateOf(*model_, **tapped), state_without),
            1e-4 * std::max(1.0, MaxAbs(state_without)));
}

TEST_P(StateTapTest, BadTapsAreRefusedBeforeAnythingRuns) {
  std::vector<uint8_t> buf = Buffer(), buf2 = Buffer();
  const std::vector<std::vector<StateTap>> bad = {
      {{0, buf.data()}},                        // before the first token: no position
      {{17, buf.data()}},                       // at the entry's end: the state after the pass
      {{9, buf.data()}, {4, buf2.data()}},      // out of order
      {{5, buf.data()}, {5, buf2.data()}},      // twice
      {{5, nullptr}},                           // nowhere to copy to
      {{-3, buf.data()}},
  };
  for (const std::vector<StateTap>& taps : bad) {
    auto seq = model_->NewSequence(64);
    ASSERT_TRUE(seq.ok());
    BatchEntry e{seq->get(), short_};
    e.taps = taps;
    std::vector<float> logits;
    const absl::Status st = model_->Forward({&e, 1}, logits);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ((*seq)->n_past, 0);
    EXPECT_EQ(MaxAbs(StateOf(*model_, **seq)), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, StateTapTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace deltaserve::worker
