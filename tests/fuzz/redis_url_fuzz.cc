// libFuzzer target for the untrusted inputs of common/redis_url and common/redis_client: the
// --redis URL (config) and the bytes a Redis server sends back. Each input is
//   1. parsed as a URL; when it parses, RedactedUrl() must parse again to the same options with
//      the password "***", and must not depend on the password;
//   2. fed, in chunks whose sizes come from the input itself, to the reply reader with a 4 KiB
//      cap; every decoded reply must fit the cap, and the reader must end in a reply, "need more
//      bytes", or a Status, never a crash or an allocation beyond the cap.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/internal/redis_protocol.h"
#include "common/redis_url.h"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::common {
namespace {

constexpr const char* kTarget = "redis_url_fuzz";
constexpr int64_t kCap = 4096;

void CheckUrl(std::string_view text) {
  absl::StatusOr<RedisOptions> o = ParseRedisUrl(text);
  if (!o.ok()) return;
  const std::string redacted = o->RedactedUrl();
  absl::StatusOr<RedisOptions> again = ParseRedisUrl(redacted);
  fuzz::Check(again.ok(), kTarget, "RedactedUrl() parses");
  fuzz::Check(again->host == o->host && again->port == o->port && again->db == o->db &&
                  again->user == o->user && again->tls == o->tls &&
                  again->tls_ca_cert == o->tls_ca_cert && again->tls_insecure == o->tls_insecure &&
                  again->tls_cert == o->tls_cert && again->tls_key == o->tls_key,
              kTarget, "RedactedUrl() round-trips every field but the password");
  fuzz::Check(again->password == (o->password.empty() ? "" : "***"), kTarget,
              "RedactedUrl() replaces the password with ***");
  if (!o->password.empty()) {
    RedisOptions other = *o;
    other.password = "not " + o->password;
    fuzz::Check(other.RedactedUrl() == redacted, kTarget,
                "RedactedUrl() does not depend on the password");
  }
}

int64_t DecodedSize(const RedisReply& r) {
  int64_t n = static_cast<int64_t>(r.str.size() + r.elements.size() * sizeof(RedisReply));
  for (const RedisReply& e : r.elements) n += DecodedSize(e);
  return n;
}

void CheckReplies(std::string_view bytes) {
  // Strings of 16 bytes and more take the reader's direct path (1 MiB and more in the client).
  internal::RespReplyReader reader(kCap, /*direct_bulk_bytes=*/16);
  size_t at = 0;
  while (at < bytes.size()) {
    // Chunk size from the next byte (1..256): exercises every split point over the corpus.
    const size_t chunk = std::min<size_t>(bytes.size() - at, static_cast<uint8_t>(bytes[at]) + 1);
    if (!reader.Feed(bytes.substr(at, chunk)).ok()) return;
    at += chunk;
    for (;;) {
      absl::StatusOr<std::optional<RedisReply>> r = reader.Next();
      if (!r.ok()) return;
      if (!r->has_value()) break;
      fuzz::Check(DecodedSize(**r) <= kCap, kTarget, "a decoded reply fits max_reply_bytes");
    }
    fuzz::Check(static_cast<int64_t>(reader.buffered_bytes()) <= kCap + 64 + 256, kTarget,
                "buffered bytes stay near the cap");
  }
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  deltaserve::common::CheckUrl(bytes);
  deltaserve::common::CheckReplies(bytes);
  return 0;
}
