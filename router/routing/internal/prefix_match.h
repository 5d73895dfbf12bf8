// Which prefix of a prompt a worker holds a snapshot of: the router computes the prompt's
// snapshot keys at its message boundaries (common/snapshot_key.h; the same keys the worker
// computes, from the same tokens and the worker's chain root) and looks their first 8 bytes up
// in the worker's ModelLoad.snapshot_key_prefixes. Keys are computed once per distinct root
// per prompt; only the last kMaxPrefixBoundaries boundaries are checked. Private to
// RouterBackend (one per prepared prompt; not thread-safe, as a Run's steps are serial).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/snapshot_key.h"

namespace deltaserve::router::internal {

// A long agent conversation has hundreds of messages, but the one that pays is the newest
// prefix a worker holds: the last 32 boundaries keep hashing to the tail of the prompt
// (SnapshotKeysAt still reads the tokens up to the last boundary once per root).
inline constexpr size_t kMaxPrefixBoundaries = 32;

// The positions checked: the last kMaxPrefixBoundaries of `boundaries` after dropping those
// outside [1, n_tokens] and those not above their predecessor.
std::vector<int64_t> PrefixPositions(absl::Span<const int32_t> boundaries, size_t n_tokens);

// The largest of `positions` whose key prefix (`key_prefixes[i]` for `positions[i]`) is in
// `held_sorted` (ascending); 0 when none.
int64_t LongestHeldPosition(absl::Span<const int64_t> positions,
                            absl::Span<const uint64_t> key_prefixes,
                            absl::Span<const uint64_t> held_sorted);

// The cache of one prompt's key prefixes per chain root.
class PromptPrefixMatcher {
 public:
  // `tokens` and `boundaries` are the prompt's; the matcher keeps only what it derives.
  PromptPrefixMatcher(absl::Span<const int32_t> tokens, absl::Span<const int32_t> boundaries);

  // Tokens of the longest prompt prefix, at a checked boundary, that a worker whose chain
  // starts at `root` and which reports `held_sorted` holds; 0 when none. `tokens` must be the
  // constructor's.
  int64_t HeldPrefixTokens(absl::Span<const int32_t> tokens, const common::SnapshotKey& root,
                           absl::Span<const uint64_t> held_sorted);

 private:
  std::vector<int64_t> positions_;
  absl::flat_hash_map<common::SnapshotKey, std::vector<uint64_t>> prefixes_by_root_;
};

}  // namespace deltaserve::router::internal
