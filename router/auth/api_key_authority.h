#pragma once
// API keys for the router: who is calling (Authenticate, 401), may they use this model or alias
// (Authorize, 403), and is their rate or concurrency left (Admit, 429; Release when it ends). Built
// from a RouterConfig; on a config reload a new authority is built and takes over the rate-limit
// state of the keys it shares with the old one. With no keys configured every request is let
// through as the anonymous caller.
//
//   absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate(request.Header("authorization"));
//   if (who.ok()) status = authority.Authorize(*who, request.model);
//   if (status.ok()) status = authority.Admit(*who, prompt_tokens + max_tokens);
//   ...  // when the request ends, however it ends:
//   authority.Release(*who);
//
// Keys are stored only as SHA-256 digests. The presented key is hashed and compared with every
// stored digest in constant time (CRYPTO_memcmp, no early exit), so timing reveals neither the
// digest nor which key matched. Thread-safe: Authenticate / Authorize are read-only, Admit and
// Refund lock one key's buckets.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "router/api/api_error.h"
#include "router/config/router_config.h"

namespace deltaserve::router::auth {

// The caller as Authenticate found it. Only meaningful to the authority that made it.
struct ApiKeyIdentity {
  std::string name;        // the key's configured name (logs, metrics); "" when anonymous
  int32_t key_index = -1;  // the key's position in the authority; -1: anonymous (no keys)
};

// A monotonic clock; tests substitute their own.
using SteadyClock = std::function<std::chrono::steady_clock::time_point()>;

// Lowercase hex SHA-256 of `key` (what `sha256` in the config holds).
std::string Sha256Hex(std::string_view key);

// The retry-after hint (whole seconds, >= 1) that Admit attached to a ResourceExhausted status,
// for the HTTP `Retry-After` header; nullopt when there is none (or another status).
using api::RetryAfterSeconds;

// See the file comment.
class ApiKeyAuthority {
 public:
  // `config` must have passed ValidateRouterConfig (64-hex hashes, unique names and hashes).
  // `previous`, when given, hands over the buckets of keys with the same name and hash.
  explicit ApiKeyAuthority(const RouterConfig& config, const ApiKeyAuthority* previous = nullptr,
                           SteadyClock clock = nullptr);
  ~ApiKeyAuthority();

  ApiKeyAuthority(const ApiKeyAuthority&) = delete;
  ApiKeyAuthority& operator=(const ApiKeyAuthority&) = delete;

  // True when no keys are configured: every request is allowed, anonymously.
  bool open() const { return keys_.empty(); }
  size_t key_count() const { return keys_.size(); }

  // `authorization_header` is the Authorization header's value ("" when absent). Unauthenticated
  // when it is missing, not "Bearer <key>", or names no configured key. Never echoes the key.
  absl::StatusOr<ApiKeyIdentity> Authenticate(std::string_view authorization_header) const;

  // PermissionDenied unless the key's `models` list is empty or contains `model_or_alias` (the
  // name the client asked for, before alias resolution).
  absl::Status Authorize(const ApiKeyIdentity& who, std::string_view model_or_alias) const;

  // The admin endpoints (GET /admin/placement): OK for a key with `admin: true`, or for anyone
  // when no keys are configured; PermissionDenied for another key.
  absl::Status AuthorizeAdmin(const ApiKeyIdentity& who) const;

  // Charges one request and `tokens` (prompt + max tokens) against the key's token buckets and
  // counts it in flight, or refuses with ResourceExhausted and a retry-after hint
  // (RetryAfterSeconds) when either bucket lacks them or the key already has
  // max_concurrent_requests in flight; nothing is charged then. A request larger than
  // tokens_per_minute can never pass and is refused without a hint. Buckets hold one minute's
  // allowance and refill continuously. Every admitted request must be Released exactly once.
  absl::Status Admit(const ApiKeyIdentity& who, int64_t tokens);

  // Ends an admitted request's place among the key's requests in flight.
  void Release(const ApiKeyIdentity& who);

  // Requests of the key admitted and not yet released (0 for an unknown identity).
  int64_t InFlight(const ApiKeyIdentity& who) const;

  // Returns `tokens` charged by Admit but not used (max tokens not generated), up to the
  // bucket's capacity.
  void Refund(const ApiKeyIdentity& who, int64_t tokens);

 private:
  // A token bucket of `capacity` (per minute), refilled at capacity / 60 per second.
  struct Bucket {
    double capacity = 0;  // 0: unlimited
    double level = 0;
  };
  struct KeyState {
    absl::Mutex mu;
    Bucket requests ABSL_GUARDED_BY(mu);
    Bucket tokens ABSL_GUARDED_BY(mu);
    std::chrono::steady_clock::time_point refilled ABSL_GUARDED_BY(mu);
    int64_t max_concurrent = 0;  // 0: unlimited
    // Shared with the authorities before and after a reload: a request admitted by the old one
    // is released through it (its observer holds it) and must free the new one's place too.
    std::shared_ptr<std::atomic<int64_t>> in_flight;
  };
  struct Key {
    std::string name;
    std::array<uint8_t, 32> digest;
    absl::flat_hash_set<std::string> models;  // empty: all
    bool admin = false;
    std::unique_ptr<KeyState> state;
  };

  const Key* Find(const ApiKeyIdentity& who) const;
  // Adds what the buckets earned since the last refill. Needs `state.mu`.
  static void Refill(KeyState& state, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu);

  SteadyClock clock_;
  std::vector<Key> keys_;
};

}  // namespace deltaserve::router::auth
