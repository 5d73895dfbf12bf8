// ApiKeyAuthority: Bearer parsing and key lookup by SHA-256 (401), per-key model lists (403),
// the requests/tokens-per-minute buckets (429 with a retry-after hint) on a fake clock, and the
// requests in flight per key (max_concurrent_requests).
// Expected digests are the FIPS 180-2 SHA-256 test vectors; expected waits follow from the
// bucket arithmetic (capacity per minute, refilled at capacity/60 per second).

#include "router/auth/api_key_authority.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::router::auth {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class FakeClock {
 public:
  SteadyClock AsClock() {
    return [this] {
      return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns_.load()));
    };
  }
  void Advance(std::chrono::milliseconds d) {
    ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }

 private:
  std::atomic<int64_t> ns_{int64_t{1} << 40};
};

ApiKeyConfig Key(std::string name, std::string_view secret, std::vector<std::string> models = {},
                 int64_t rpm = 0, int64_t tpm = 0) {
  ApiKeyConfig k;
  k.name = std::move(name);
  k.sha256_hex = Sha256Hex(secret);
  k.models = std::move(models);
  k.limit.requests_per_minute = rpm;
  k.limit.tokens_per_minute = tpm;
  return k;
}

RouterConfig WithKeys(std::vector<ApiKeyConfig> keys) {
  RouterConfig c;
  c.api_keys = std::move(keys);
  return c;
}

TEST(ApiKeyAuthorityTest, Sha256HexMatchesFipsVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ApiKeyAuthorityTest, NoKeysConfiguredAllowsEverything) {
  ApiKeyAuthority authority(RouterConfig{});
  EXPECT_TRUE(authority.open());
  for (const char* header : {"", "Bearer whatever", "garbage"}) {
    absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate(header);
    ASSERT_TRUE(who.ok()) << who.status();
    EXPECT_EQ(who->key_index, -1);
    EXPECT_TRUE(authority.Authorize(*who, "any-model").ok());
    EXPECT_TRUE(authority.Admit(*who, 1 << 30).ok());
  }
}

TEST(ApiKeyAuthorityTest, AuthenticatesEachKeyByItsSecret) {
  ApiKeyAuthority authority(
      WithKeys({Key("alice", "sk-alice"), Key("bob", "sk-bob"), Key("carol", "sk-carol")}));
  EXPECT_FALSE(authority.open());
  struct Case {
    const char* header;
    const char* name;
  };
  for (const Case& c : {Case{"Bearer sk-alice", "alice"}, Case{"Bearer sk-bob", "bob"},
                        Case{"bearer sk-carol", "carol"}, Case{"  BEARER \t sk-bob  ", "bob"}}) {
    absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate(c.header);
    ASSERT_TRUE(who.ok()) << c.header << ": " << who.status();
    EXPECT_EQ(who->name, c.name) << c.header;
  }
}

TEST(ApiKeyAuthorityTest, MissingMalformedAndUnknownKeysAreUnauthenticated) {
  ApiKeyAuthority authority(WithKeys({Key("alice", "sk-alice")}));
  struct Case {
    const char* header;
    const char* message;
  };
  for (const Case& c :
       {Case{"", "missing API key"}, Case{"   ", "missing API key"}, Case{"sk-alice", "malformed"},
        Case{"Basic c2stYWxpY2U=", "malformed"}, Case{"Bearer", "malformed"},
        Case{"Bearer ", "malformed"}, Case{"Bearersk-alice", "malformed"},
        Case{"Bearer sk alice", "malformed"}, Case{"Bearer sk-alice\x01", "malformed"},
        Case{"Bearer sk-alicf", "invalid API key"}, Case{"Bearer SK-ALICE", "invalid API key"}}) {
    absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate(c.header);
    ASSERT_FALSE(who.ok()) << c.header;
    EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated) << c.header;
    EXPECT_THAT(who.status().message(), HasSubstr(c.message)) << c.header;
    EXPECT_THAT(who.status().message(), Not(HasSubstr("sk-"))) << "echoes the key";
  }
}

TEST(ApiKeyAuthorityTest, AuthorizeFollowsTheKeysModelList) {
  ApiKeyAuthority authority(
      WithKeys({Key("limited", "k1", {"fast", "qwen3.5-4b"}), Key("all", "k2")}));
  const ApiKeyIdentity limited = *authority.Authenticate("Bearer k1");
  const ApiKeyIdentity all = *authority.Authenticate("Bearer k2");
  EXPECT_TRUE(authority.Authorize(limited, "fast").ok());
  EXPECT_TRUE(authority.Authorize(limited, "qwen3.5-4b").ok());
  const absl::Status denied = authority.Authorize(limited, "qwen3.5-27b");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("'limited'"));
  EXPECT_THAT(denied.message(), HasSubstr("'qwen3.5-27b'"));
  EXPECT_TRUE(authority.Authorize(all, "qwen3.5-27b").ok());
  // An identity the authority did not issue.
  EXPECT_EQ(authority.Authorize(ApiKeyIdentity{"mallory", 0}, "fast").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authority.Admit(ApiKeyIdentity{"x", 7}, 1).code(), absl::StatusCode::kUnauthenticated);
}

TEST(ApiKeyAuthorityTest, RequestsPerMinuteRefillContinuously) {
  FakeClock clock;
  ApiKeyAuthority authority(WithKeys({Key("k", "s", {}, /*rpm=*/2)}), nullptr, clock.AsClock());
  const ApiKeyIdentity who = *authority.Authenticate("Bearer s");
  EXPECT_TRUE(authority.Admit(who, 100).ok());
  EXPECT_TRUE(authority.Admit(who, 100).ok());
  absl::Status s = authority.Admit(who, 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("2 requests per minute"));
  EXPECT_EQ(RetryAfterSeconds(s), 30);  // one request per 30 s
  clock.Advance(std::chrono::seconds(20));
  EXPECT_EQ(RetryAfterSeconds(authority.Admit(who, 100)), 10);
  clock.Advance(std::chrono::seconds(10));
  EXPECT_TRUE(authority.Admit(who, 100).ok());
  EXPECT_EQ(authority.Admit(who, 0).code(), absl::StatusCode::kResourceExhausted);
}

TEST(ApiKeyAuthorityTest, TokensPerMinuteWithRetryAfterAndOversizedRequests) {
  FakeClock clock;
  ApiKeyAuthority authority(WithKeys({Key("k", "s", {}, 0, /*tpm=*/600)}), nullptr,
                            clock.AsClock());
  const ApiKeyIdentity who = *authority.Authenticate("Bearer s");
  EXPECT_TRUE(authority.Admit(who, 500).ok());
  absl::Status s = authority.Admit(who, 200);  // 100 left, 10 tokens/s: 10 s to reach 200
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("600 tokens per minute"));
  EXPECT_EQ(RetryAfterSeconds(s), 10);
  clock.Advance(std::chrono::milliseconds(9500));
  EXPECT_EQ(RetryAfterSeconds(authority.Admit(who, 200)), 1);  // rounded up
  clock.Advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(authority.Admit(who, 200).ok());

  // More than a minute's allowance can never pass: refused without a hint.
  clock.Advance(std::chrono::minutes(5));
  s = authority.Admit(who, 601);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryAfterSeconds(s), std::nullopt);
  EXPECT_THAT(s.message(), HasSubstr("needs 601 tokens"));
  EXPECT_TRUE(authority.Admit(who, 600).ok());  // the bucket was full, capped at 600
}

TEST(ApiKeyAuthorityTest, RefusedRequestChargesNothingAndRefundReturnsTokens) {
  FakeClock clock;
  ApiKeyAuthority authority(WithKeys({Key("k", "s", {}, /*rpm=*/3, /*tpm=*/100)}), nullptr,
                            clock.AsClock());
  const ApiKeyIdentity who = *authority.Authenticate("Bearer s");
  EXPECT_TRUE(authority.Admit(who, 90).ok());
  EXPECT_FALSE(authority.Admit(who, 50).ok());  // tokens short: the request is not charged
  authority.Refund(who, 60);                    // 90 charged, 30 used
  EXPECT_TRUE(authority.Admit(who, 50).ok());   // 70 left
  EXPECT_TRUE(authority.Admit(who, 0).ok());    // third request of three
  EXPECT_EQ(authority.Admit(who, 0).code(), absl::StatusCode::kResourceExhausted);
  authority.Refund(who, 1000);              // capped at capacity
  clock.Advance(std::chrono::seconds(20));  // one request back
  EXPECT_TRUE(authority.Admit(who, 100).ok());
}

TEST(ApiKeyAuthorityTest, ReloadKeepsBucketsOfUnchangedKeys) {
  FakeClock clock;
  const RouterConfig config = WithKeys({Key("k", "s", {}, /*rpm=*/1), Key("j", "t", {}, 1)});
  ApiKeyAuthority first(config, nullptr, clock.AsClock());
  ASSERT_TRUE(first.Admit(*first.Authenticate("Bearer s"), 0).ok());

  ApiKeyAuthority reloaded(config, &first, clock.AsClock());
  EXPECT_EQ(reloaded.Admit(*reloaded.Authenticate("Bearer s"), 0).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(reloaded.Admit(*reloaded.Authenticate("Bearer t"), 0).ok());

  // A key whose secret changed starts afresh.
  ApiKeyAuthority rotated(WithKeys({Key("k", "s2", {}, 1)}), &reloaded, clock.AsClock());
  EXPECT_TRUE(rotated.Admit(*rotated.Authenticate("Bearer s2"), 0).ok());
}

TEST(ApiKeyAuthorityTest, ConcurrentAdmitsNeverOverspend) {
  FakeClock clock;  // frozen: no refill during the test
  ApiKeyAuthority authority(WithKeys({Key("k", "s", {}, 0, /*tpm=*/4000)}), nullptr,
                            clock.AsClock());
  const ApiKeyIdentity who = *authority.Authenticate("Bearer s");
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (authority.Admit(who, 1).ok()) ++admitted;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 4000);
}

ApiKeyConfig ConcurrencyKey(int64_t max_concurrent, int64_t rpm = 0) {
  ApiKeyConfig k = Key("agent", "sk-agent", {}, rpm);
  k.limit.max_concurrent_requests = max_concurrent;
  return k;
}

TEST(ApiKeyAuthorityTest, MaxConcurrentRequestsRefusesWithARetryHintAndReleaseFreesAPlace) {
  ApiKeyAuthority authority(WithKeys({ConcurrencyKey(2)}));
  absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate("Bearer sk-agent");
  ASSERT_TRUE(who.ok());
  EXPECT_TRUE(authority.Admit(*who, 10).ok());
  EXPECT_TRUE(authority.Admit(*who, 10).ok());
  EXPECT_EQ(authority.InFlight(*who), 2);
  const absl::Status third = authority.Admit(*who, 10);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.message(), HasSubstr("2 requests in flight"));
  EXPECT_EQ(RetryAfterSeconds(third), 1);
  EXPECT_EQ(authority.InFlight(*who), 2);  // a refusal takes no place
  authority.Release(*who);
  EXPECT_EQ(authority.InFlight(*who), 1);
  EXPECT_TRUE(authority.Admit(*who, 10).ok());
}

// A refusal for concurrency charges nothing to the per-minute buckets.
TEST(ApiKeyAuthorityTest, ConcurrencyRefusalChargesNoBucket) {
  FakeClock clock;
  ApiKeyAuthority authority(WithKeys({ConcurrencyKey(1, /*rpm=*/2)}), nullptr, clock.AsClock());
  absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate("Bearer sk-agent");
  ASSERT_TRUE(who.ok());
  ASSERT_TRUE(authority.Admit(*who, 1).ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(authority.Admit(*who, 1).message(), HasSubstr("concurrency limit"));
  }
  authority.Release(*who);
  EXPECT_TRUE(authority.Admit(*who, 1).ok());  // the second of 2 per minute, still there
  authority.Release(*who);
  EXPECT_THAT(authority.Admit(*who, 1).message(), HasSubstr("requests per minute"));
}

// Requests admitted before a reload hold their places in the new authority, and releasing them
// through the old one (their observers keep it) frees those places.
TEST(ApiKeyAuthorityTest, ReloadKeepsRequestsInFlight) {
  auto old_authority = std::make_unique<ApiKeyAuthority>(WithKeys({ConcurrencyKey(2)}));
  absl::StatusOr<ApiKeyIdentity> who = old_authority->Authenticate("Bearer sk-agent");
  ASSERT_TRUE(who.ok());
  ASSERT_TRUE(old_authority->Admit(*who, 1).ok());
  ASSERT_TRUE(old_authority->Admit(*who, 1).ok());
  ApiKeyAuthority reloaded(WithKeys({ConcurrencyKey(2)}), old_authority.get());
  absl::StatusOr<ApiKeyIdentity> again = reloaded.Authenticate("Bearer sk-agent");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(reloaded.InFlight(*again), 2);
  EXPECT_EQ(reloaded.Admit(*again, 1).code(), absl::StatusCode::kResourceExhausted);
  old_authority->Release(*who);
  old_authority.reset();
  EXPECT_TRUE(reloaded.Admit(*again, 1).ok());
}

// Many threads admitting and releasing: the count never exceeds the limit and ends at zero.
TEST(ApiKeyAuthorityTest, ConcurrentAdmitsNeverExceedMaxConcurrent) {
  ApiKeyAuthority authority(WithKeys({ConcurrencyKey(3)}));
  absl::StatusOr<ApiKeyIdentity> who = authority.Authenticate("Bearer sk-agent");
  ASSERT_TRUE(who.ok());
  std::atomic<int64_t> holding{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (!authority.Admit(*who, 1).ok()) continue;
        const int64_t now = ++holding;
        int64_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        --holding;
        authority.Release(*who);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_GE(most.load(), 1);
  EXPECT_EQ(authority.InFlight(*who), 0);
}

}  // namespace
}  // namespace deltaserve::router::auth
