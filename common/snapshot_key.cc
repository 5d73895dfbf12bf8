#include "common/snapshot_key.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace deltaserve::common {
namespace {

// Gathers the pieces of one key and hashes them with one-shot SHA-256 (a piece list is at most a
// tag, a key and 64 tokens, 281 bytes).
class KeyHasher {
 public:
  void Bytes(const void* data, size_t n) { buf_.append(static_cast<const char*>(data), n); }
  // Separates the kinds of hash input (the file comment of snapshot_key.h says why).
  void Tag(char kind) { buf_.push_back(kind); }
  void Key(const SnapshotKey& k) { Bytes(k.bytes.data(), k.bytes.size()); }
  void U64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    Bytes(b, 8);
  }
  void String(std::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  void Tokens(absl::Span<const int32_t> t) {
    // int32 little-endian; x86-64 and aarch64 are little-endian, checked at compile time.
    static_assert(std::endian::native == std::endian::little);
    Bytes(t.data(), t.size() * sizeof(int32_t));
  }
  SnapshotKey Finish() const {
    const std::array<uint8_t, 32> digest =
        Sha256(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(buf_.data()), buf_.size()));
    SnapshotKey k;
    std::memcpy(k.bytes.data(), digest.data(), k.bytes.size());
    return k;
  }

 private:
  std::string buf_;
};

}  // namespace

std::string SnapshotKey::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

uint64_t SnapshotKey::Prefix64() const {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | bytes[i];
  return v;
}

absl::StatusOr<SnapshotKey> SnapshotKeyFromBytes(std::string_view bytes) {
  SnapshotKey k;
  if (bytes.size() != k.bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a snapshot key has 16 bytes, got ", bytes.size()));
  }
  std::memcpy(k.bytes.data(), bytes.data(), k.bytes.size());
  return k;
}

std::array<uint8_t, 32> ModelFingerprint(const GgufFile& file) {
  return Sha256(file.header_bytes());
}

SnapshotKey SnapshotRootKey(const SnapshotDomain& domain) {
  KeyHasher h;
  h.String("deltaserve-snapshot-v1");
  h.Bytes(domain.model_fingerprint.data(), domain.model_fingerprint.size());
  h.String(domain.k_type);
  h.String(domain.v_type);
  h.String(domain.state_type);
  h.U64(static_cast<uint64_t>(domain.page_tokens));
  return h.Finish();
}

absl::StatusOr<std::vector<SnapshotKey>> SnapshotKeysAt(const SnapshotKey& root,
                                                        absl::Span<const int32_t> tokens,
                                                        absl::Span<const int64_t> positions) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 1 || positions[i] > n || (i > 0 && positions[i] <= positions[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "snapshot position ", positions[i], " (index ", i, ") is out of range [1, ", n,
          "] or not ascending"));
    }
  }
  std::vector<SnapshotKey> out;
  out.reserve(positions.size());
  constexpr int64_t B = kSnapshotBlockTokens;
  SnapshotKey block = root;
  int64_t block_end = 0;  // tokens [0, block_end) are in `block`
  for (int64_t p : positions) {
    while (block_end + B <= p) {
      KeyHasher h;
      h.Tag('B');
      h.Key(block);
      h.Tokens(tokens.subspan(block_end, B));
      block = h.Finish();
      block_end += B;
    }
    if (block_end == p) {
      out.push_back(block);
      continue;
    }
    KeyHasher h;
    h.Tag('T');
    h.Key(block);
    h.Tokens(tokens.subspan(block_end, p - block_end));
    h.U64(static_cast<uint64_t>(p));
    out.push_back(h.Finish());
  }
  return out;
}

std::vector<int64_t> SnapshotPositions(absl::Span<const int32_t> message_boundaries,
                                       int64_t n_tokens, int64_t interval) {
  std::vector<int64_t> starts = {0};
  for (int32_t b : message_boundaries) {
    if (b >= 1 && b <= n_tokens && b > starts.back()) starts.push_back(b);
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t begin = starts[i];
    const int64_t end = i + 1 < starts.size() ? starts[i + 1] : n_tokens;
    if (interval > 0) {
      // Written as a distance so that a huge interval cannot overflow begin + interval.
      for (int64_t p = begin; end - p > interval;) {
        p += interval;
        out.push_back(p);
      }
    }
    if (i + 1 < starts.size()) out.push_back(end);
  }
  return out;
}

}  // namespace deltaserve::common
