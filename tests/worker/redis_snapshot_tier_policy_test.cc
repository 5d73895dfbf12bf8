// The Redis tier's two policies as pure functions (worker/cache/redis_snapshot_tier.h), row by
// row against docs/snapshots.md ("Redis tier"): which snapshots of a finished sequence are
// published, and which existing keys a lookup GETs and in what order; and the key naming.
#include <cstdint>
#include <vector>

#include "common/snapshot_key.h"
#include "gtest/gtest.h"
#include "worker/cache/redis_snapshot_tier.h"

namespace deltaserve::worker {
namespace {

TEST(SnapshotsToPublishTest, LongestBeyondThePromptThenLongestInIt) {
  struct Row {
    std::vector<int64_t> n_tokens;
    int64_t prompt_tokens;
    std::vector<size_t> want;
  };
  const Row rows[] = {
      // Boundaries 40 and 90 of a 100-token prompt, the end of the output at 108: the end of the
      // output first.
      {{40, 90, 108}, 100, {2, 1}},
      // A snapshot exactly at the prompt's length counts as in the prompt.
      {{40, 100, 108}, 100, {2, 1}},
      // No end-of-output snapshot (no turn-end tokens, or the context was full).
      {{40, 90}, 100, {1}},
      // Only beyond the prompt (the prompt's snapshots were all restored, none taken).
      {{108}, 100, {0}},
      // Several beyond (interval snapshots of a long output): the longest only.
      {{40, 1124, 2148, 2150}, 100, {3, 0}},
      // Not in position order: still by length.
      {{90, 40, 108, 104}, 100, {2, 0}},
      {{}, 100, {}},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(SnapshotsToPublish(r.n_tokens, r.prompt_tokens), r.want)
        << ::testing::PrintToString(r.n_tokens) << " prompt " << r.prompt_tokens;
  }
}

TEST(RedisFetchOrderTest, ExistingKeysLongestFirstAtMostMaxGets) {
  struct Row {
    std::vector<int64_t> lengths;  // STRLEN per candidate, candidates in ascending position
    size_t max_gets;
    std::vector<size_t> want;
  };
  const Row rows[] = {
      {{0, 0, 0}, 2, {}},             // a miss: nothing is fetched
      {{10, 0, 30}, 2, {2, 0}},       // the longest, then the next shorter that exists
      {{10, 20, 30, 40}, 2, {3, 2}},  // two GETs at most
      {{10, 20, 30, 40}, 1, {3}},
      {{0, 0, 5}, 2, {2}},
      {{}, 2, {}},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(RedisFetchOrder(r.lengths, r.max_gets), r.want)
        << ::testing::PrintToString(r.lengths);
  }
}

TEST(RedisSnapshotKeyTest, PrefixAndHexKey) {
  common::SnapshotKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(RedisSnapshotKey(k), "ds:snap:v1:00112233445566778899aabbccddeeff");
}

}  // namespace
}  // namespace deltaserve::worker
