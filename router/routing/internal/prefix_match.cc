#include "router/routing/internal/prefix_match.h"

#include <algorithm>

namespace deltaserve::router::internal {

std::vector<int64_t> PrefixPositions(absl::Span<const int32_t> boundaries, size_t n_tokens) {
  std::vector<int64_t> positions;
  for (int32_t b : boundaries) {
    if (b < 1 || static_cast<size_t>(b) > n_tokens) continue;
    if (!positions.empty() && b <= positions.back()) continue;
    positions.push_back(b);
  }
  if (positions.size() > kMaxPrefixBoundaries) {
    positions.erase(positions.begin(),
                    positions.end() - static_cast<ptrdiff_t>(kMaxPrefixBoundaries));
  }
  return positions;
}

int64_t LongestHeldPosition(absl::Span<const int64_t> positions,
                            absl::Span<const uint64_t> key_prefixes,
                            absl::Span<const uint64_t> held_sorted) {
  const size_t n = std::min(positions.size(), key_prefixes.size());
  for (size_t i = n; i-- > 0;) {
    if (std::binary_search(held_sorted.begin(), held_sorted.end(), key_prefixes[i])) {
      return positions[i];
    }
  }
  return 0;
}

PromptPrefixMatcher::PromptPrefixMatcher(absl::Span<const int32_t> tokens,
                                         absl::Span<const int32_t> boundaries)
    : positions_(PrefixPositions(boundaries, tokens.size())) {}

int64_t PromptPrefixMatcher::HeldPrefixTokens(absl::Span<const int32_t> tokens,
                                              const common::SnapshotKey& root,
                                              absl::Span<const uint64_t> held_sorted) {
  if (positions_.empty() || held_sorted.empty()) return 0;
  auto it = prefixes_by_root_.find(root);
  if (it == prefixes_by_root_.end()) {
    std::vector<uint64_t> prefixes;
    // Fails only for `tokens` other than the constructor's prompt: then nothing matches.
    absl::StatusOr<std::vector<common::SnapshotKey>> keys =
        common::SnapshotKeysAt(root, tokens, positions_);
    if (keys.ok()) {
      prefixes.reserve(keys->size());
      for (const common::SnapshotKey& k : *keys) prefixes.push_back(k.Prefix64());
    }
    it = prefixes_by_root_.emplace(root, std::move(prefixes)).first;
  }
  return LongestHeldPosition(positions_, it->second, held_sorted);
}

}  // namespace deltaserve::router::internal
