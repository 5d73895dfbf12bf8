#include "router/auth/api_key_authority.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"

namespace deltaserve::router::auth {
namespace {

using common::Sv;
using Clock = std::chrono::steady_clock;

std::array<uint8_t, 32> Sha256(std::string_view data) {
  std::array<uint8_t, 32> digest{};
  unsigned int size = 0;
  // EVP_Digest with SHA-256 only fails on allocation failure inside OpenSSL.
  if (EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != digest.size()) {
    std::abort();
  }
  return digest;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes 64 hex digits; false on anything else (ValidateRouterConfig refuses such configs, so
// a key that fails here is left out rather than matching an all-zero digest).
bool DecodeDigest(std::string_view hex, std::array<uint8_t, 32>& out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

bool IsOws(char c) { return c == ' ' || c == '\t'; }

absl::Status Unauthenticated(absl::string_view message) {
  return absl::UnauthenticatedError(message);
}

}  // namespace

std::string Sha256Hex(std::string_view key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::array<uint8_t, 32> digest = Sha256(key);
  std::string hex;
  hex.reserve(64);
  for (uint8_t b : digest) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

ApiKeyAuthority::ApiKeyAuthority(const RouterConfig& config, const ApiKeyAuthority* previous,
                                 SteadyClock clock)
    : clock_(clock ? std::move(clock) : SteadyClock([] { return Clock::now(); })) {
  const Clock::time_point now = clock_();
  keys_.reserve(config.api_keys.size());
  for (const ApiKeyConfig& k : config.api_keys) {
    Key key;
    if (!DecodeDigest(k.sha256_hex, key.digest)) continue;
    key.name = k.name;
    key.models.insert(k.models.begin(), k.models.end());
    key.admin = k.admin;
    key.state = std::make_unique<KeyState>();
    KeyState& s = *key.state;
    absl::MutexLock lock(&s.mu);
    s.requests.capacity = static_cast<double>(k.limit.requests_per_minute);
    s.tokens.capacity = static_cast<double>(k.limit.tokens_per_minute);
    s.requests.level = s.requests.capacity;  // a new key starts with a full minute
    s.tokens.level = s.tokens.capacity;
    s.refilled = now;
    s.max_concurrent = k.limit.max_concurrent_requests;
    s.in_flight = std::make_shared<std::atomic<int64_t>>(0);
    if (previous != nullptr) {
      for (const Key& old : previous->keys_) {
        if (old.name != key.name || old.digest != key.digest) continue;
        KeyState& o = *old.state;
        absl::MutexLock old_lock(&o.mu);
        Refill(o, now);
        // The level carries over, clamped to the (possibly changed) new capacity.
        s.requests.level = std::min(s.requests.capacity, o.requests.level);
        s.tokens.level = std::min(s.tokens.capacity, o.tokens.level);
        s.in_flight = o.in_flight;
      }
    }
    keys_.push_back(std::move(key));
  }
}

ApiKeyAuthority::~ApiKeyAuthority() = default;

absl::StatusOr<ApiKeyIdentity> ApiKeyAuthority::Authenticate(
    std::string_view authorization_header) const {
  if (open()) return ApiKeyIdentity{};
  std::string_view h = authorization_header;
  while (!h.empty() && IsOws(h.front())) h.remove_prefix(1);
  while (!h.empty() && IsOws(h.back())) h.remove_suffix(1);
  if (h.empty()) {
    return Unauthenticated("missing API key: send it as 'Authorization: Bearer <key>'");
  }
  constexpr std::string_view kScheme = "bearer";
  if (h.size() <= kScheme.size() || !IsOws(h[kScheme.size()]) ||
      !absl::EqualsIgnoreCase(Sv(h.substr(0, kScheme.size())), Sv(kScheme))) {
    return Unauthenticated("malformed Authorization header: expected 'Bearer <key>'");
  }
  std::string_view presented = h.substr(kScheme.size());
  while (!presented.empty() && IsOws(presented.front())) presented.remove_prefix(1);
  for (unsigned char c : presented) {
    if (c <= 0x20 || c >= 0x7F) {
      return Unauthenticated(
          "malformed Authorization header: the key must be printable ASCII without spaces");
    }
  }
  const std::array<uint8_t, 32> digest = Sha256(presented);
  // Every stored digest is compared, and the match is folded in with masks rather than a
  // branch, so the time taken does not depend on which key (if any) matched.
  size_t found = 0;
  size_t index = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    const size_t equal =
        static_cast<size_t>(CRYPTO_memcmp(digest.data(), keys_[i].digest.data(), 32) == 0);
    const size_t mask = ~(equal - 1);  // all ones when equal
    index = (index & ~mask) | (i & mask);
    found |= equal;
  }
  if (found == 0) return Unauthenticated("invalid API key");
  return ApiKeyIdentity{keys_[index].name, static_cast<int32_t>(index)};
}

const ApiKeyAuthority::Key* ApiKeyAuthority::Find(const ApiKeyIdentity& who) const {
  if (who.key_index < 0 || static_cast<size_t>(who.key_index) >= keys_.size()) return nullptr;
  const Key& key = keys_[static_cast<size_t>(who.key_index)];
  return key.name == who.name ? &key : nullptr;
}

absl::Status ApiKeyAuthority::Authorize(const ApiKeyIdentity& who,
                                        std::string_view model_or_alias) const {
  if (open()) return absl::OkStatus();
  const Key* key = Find(who);
  if (key == nullptr) return Unauthenticated("invalid API key");
  if (key->models.empty() || key->models.contains(Sv(model_or_alias))) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "API key '", key->name, "' is not allowed to use model '", Sv(model_or_alias), "'"));
}

absl::Status ApiKeyAuthority::AuthorizeAdmin(const ApiKeyIdentity& who) const {
  if (open()) return absl::OkStatus();
  const Key* key = Find(who);
  if (key == nullptr) return Unauthenticated("invalid API key");
  if (key->admin) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("API key '", key->name, "' is not an admin key (admin: true in api_keys)"));
}

void ApiKeyAuthority::Refill(KeyState& s, Clock::time_point now) {
  const double elapsed_s = std::chrono::duration<double>(now - s.refilled).count();
  if (elapsed_s <= 0) return;
  s.refilled = now;
  for (Bucket* b : {&s.requests, &s.tokens}) {
    b->level = std::min(b->capacity, b->level + elapsed_s * b->capacity / 60.0);
  }
}

absl::Status ApiKeyAuthority::Admit(const ApiKeyIdentity& who, int64_t tokens) {
  if (open()) return absl::OkStatus();
  const Key* key = Find(who);
  if (key == nullptr) return Unauthenticated("invalid API key");
  const double need_tokens = static_cast<double>(std::max<int64_t>(tokens, 0));
  KeyState& s = *key->state;
  absl::MutexLock lock(&s.mu);
  if (s.tokens.capacity > 0 && need_tokens > s.tokens.capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rate limit: the request needs ", tokens, " tokens (prompt + max_tokens) but API key '",
        key->name, "' allows ", static_cast<int64_t>(s.tokens.capacity),
        " tokens per minute; lower max_tokens or shorten the prompt"));
  }
  Refill(s, clock_());
  // Seconds until a bucket holds `need`, 0 when it already does.
  auto wait_s = [](const Bucket& b, double need) {
    // The epsilon absorbs float residue of the continuous refill (0.99999999 of 1 request).
    if (b.capacity <= 0 || b.level + 1e-9 >= need) return 0.0;
    return (need - b.level) * 60.0 / b.capacity;
  };
  const double request_wait = wait_s(s.requests, 1);
  const double token_wait = wait_s(s.tokens, need_tokens);
  if (request_wait > 0 || token_wait > 0) {
    // Whole seconds, rounded up; the epsilon keeps float residue (10.000000001) from adding one.
    const int64_t retry_after = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(std::max(request_wait, token_wait) - 1e-6)));
    absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
        "rate limit exceeded for API key '", key->name, "' (",
        request_wait > 0
            ? absl::StrCat(static_cast<int64_t>(s.requests.capacity), " requests per minute")
            : absl::StrCat(static_cast<int64_t>(s.tokens.capacity), " tokens per minute"),
        "); retry after ", retry_after, " s"));
    return api::WithRetryAfter(std::move(status), retry_after);
  }
  // The place in flight is taken last, so a refusal by the buckets leaves it untouched; the
  // counter is shared with a reloaded authority, hence a compare-and-swap rather than the lock.
  int64_t running = s.in_flight->load(std::memory_order_relaxed);
  do {
    if (s.max_concurrent > 0 && running >= s.max_concurrent) {
      absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
          "concurrency limit exceeded for API key '", key->name, "' (", s.max_concurrent,
          " requests in flight at once); retry when one of them has finished"));
      return api::WithRetryAfter(std::move(status), 1);
    }
  } while (!s.in_flight->compare_exchange_weak(running, running + 1, std::memory_order_relaxed));
  if (s.requests.capacity > 0) s.requests.level -= 1;
  if (s.tokens.capacity > 0) s.tokens.level -= need_tokens;
  return absl::OkStatus();
}

void ApiKeyAuthority::Release(const ApiKeyIdentity& who) {
  if (open()) return;
  const Key* key = Find(who);
  if (key == nullptr) return;
  const int64_t before = key->state->in_flight->fetch_sub(1, std::memory_order_relaxed);
  assert(before > 0 && "Release without Admit");
  (void)before;
}

int64_t ApiKeyAuthority::InFlight(const ApiKeyIdentity& who) const {
  const Key* key = open() ? nullptr : Find(who);
  return key == nullptr ? 0 : key->state->in_flight->load(std::memory_order_relaxed);
}

void ApiKeyAuthority::Refund(const ApiKeyIdentity& who, int64_t tokens) {
  if (open() || tokens <= 0) return;
  const Key* key = Find(who);
  if (key == nullptr) return;
  KeyState& s = *key->state;
  absl::MutexLock lock(&s.mu);
  if (s.tokens.capacity <= 0) return;
  Refill(s, clock_());
  s.tokens.level = std::min(s.tokens.capacity, s.tokens.level + static_cast<double>(tokens));
}

}  // namespace deltaserve::router::auth
