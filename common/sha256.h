// SHA-256 (FIPS 180-4), for content keys of session snapshots and model fingerprints
// (common/snapshot_key.h). Our own small implementation rather than OpenSSL's: the first call
// into libcrypto initialises its provider tables, ~2.3 MB of resident memory a worker's memory
// plan would otherwise have to carry (measured: VmRSS 2.8 -> 5.1 MB around one SHA256() call).
// Speed is not critical here: a key hashes at most a key and 64 tokens, a fingerprint a GGUF
// header once.
//
//   std::array<uint8_t, 32> d = Sha256(bytes);            // one shot
//   Sha256Hasher h; h.Update(a); h.Update(b); d = h.Finish();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace deltaserve::common {

// Streaming SHA-256; Finish() may be called once.
class Sha256Hasher {
 public:
  Sha256Hasher();
  void Update(absl::Span<const uint8_t> bytes);
  void Update(const void* data, size_t n) {
    Update(absl::Span<const uint8_t>(static_cast<const uint8_t*>(data), n));
  }
  std::array<uint8_t, 32> Finish();

 private:
  void Block(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes
};

// SHA-256 of `bytes`.
std::array<uint8_t, 32> Sha256(absl::Span<const uint8_t> bytes);

}  // namespace deltaserve::common
