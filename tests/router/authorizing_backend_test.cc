// AuthorizingBackend's rate-limit refusals in /metrics, and KeyedModelListGate: GET /v1/models
// under API keys — open without keys, 401 without a valid key, and only the names a key may use
// (its `models`, or all when the list is empty). The authority is a real ApiKeyAuthority built
// from a RouterConfig; a reload (a new authority returned by the getter) applies to the next
// listing.

#include "router/auth/authorizing_backend.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/auth/api_key_authority.h"

namespace deltaserve::router::auth {
namespace {

ApiKeyConfig Key(std::string name, std::string_view secret, std::vector<std::string> models) {
  ApiKeyConfig k;
  k.name = std::move(name);
  k.sha256_hex = Sha256Hex(secret);
  k.models = std::move(models);
  return k;
}

std::shared_ptr<ApiKeyAuthority> Authority(std::vector<ApiKeyConfig> keys) {
  RouterConfig c;
  c.api_keys = std::move(keys);
  return std::make_shared<ApiKeyAuthority>(c);
}

TEST(KeyedModelListGateTest, WithoutKeysEveryModelIsListedToAnyone) {
  std::shared_ptr<ApiKeyAuthority> authority = Authority({});
  KeyedModelListGate gate([&] { return authority; });
  auto visible = gate.Visible("");
  ASSERT_TRUE(visible.ok()) << visible.status();
  EXPECT_TRUE((*visible)("anything"));
}

TEST(KeyedModelListGateTest, WithKeysTheListNeedsAValidKeyAndShowsItsModelsOnly) {
  std::shared_ptr<ApiKeyAuthority> authority =
      Authority({Key("limited", "sk-limited", {"fast", "qwen3.5-4b"}), Key("all", "sk-all", {})});
  KeyedModelListGate gate([&] { return authority; });

  for (const char* header : {"", "Bearer", "Bearer wrong", "Basic sk-limited", "sk-limited"}) {
    auto refused = gate.Visible(header);
    ASSERT_FALSE(refused.ok()) << header;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << header;
    EXPECT_EQ(std::string(refused.status().message()).find("sk-limited"), std::string::npos)
        << "the key must never be echoed: " << refused.status();
  }

  auto limited = gate.Visible("Bearer sk-limited");
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_TRUE((*limited)("fast"));
  EXPECT_TRUE((*limited)("qwen3.5-4b"));
  EXPECT_FALSE((*limited)("qwen3.5-27b"));

  auto all = gate.Visible("Bearer sk-all");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE((*all)("qwen3.5-27b"));

  // A reload that drops the limited key: the next listing refuses it.
  authority = Authority({Key("all", "sk-all", {})});
  EXPECT_EQ(gate.Visible("Bearer sk-limited").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(gate.Visible("Bearer sk-all").ok());
}

// A backend that answers every request at once, and an observer that keeps the error.
class AnswerAtOnce : public api::CompletionBackend {
 public:
  std::unique_ptr<api::GenerationHandle> Generate(
      const api::CompletionRequest&, std::shared_ptr<api::GenerationObserver> observer) override {
    observer->OnStart({"m"});
    observer->OnEnd({});
    return std::make_unique<Noop>();
  }
  struct Noop : api::GenerationHandle {
    void Cancel() override {}
  };
};
struct ErrorKeeper : api::GenerationObserver {
  void OnStart(const api::GenerationStart&) override {}
  void OnDelta(api::GenerationDelta) override {}
  void OnEnd(const api::GenerationEnd&) override {}
  void OnError(const absl::Status& s) override { error = s; }
  absl::Status error;
};

// Requests a key's limit refuses (429) count in deltaserve_router_rate_limited_total{key}; other
// refusals (401) do not.
TEST(AuthorizingBackendTest, RateLimitRefusalsAreCountedByKey) {
  ApiKeyConfig k = Key("ci", "sk-ci", {});
  k.limit.requests_per_minute = 1;
  std::shared_ptr<ApiKeyAuthority> authority = Authority({k});
  AnswerAtOnce inner;
  api::ApiMetrics metrics;
  AuthorizingBackend backend(
      inner, [&] { return authority; }, &metrics);
  api::CompletionRequest req;
  req.model = "m";
  req.max_tokens = 1;
  req.authorization = "Bearer sk-ci";
  std::vector<absl::StatusCode> codes;
  for (int i = 0; i < 3; ++i) {
    auto observer = std::make_shared<ErrorKeeper>();
    backend.Generate(req, observer);
    codes.push_back(observer->error.code());
  }
  req.authorization = "Bearer wrong";
  auto unauthenticated = std::make_shared<ErrorKeeper>();
  backend.Generate(req, unauthenticated);
  EXPECT_EQ(unauthenticated->error.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(codes, (std::vector<absl::StatusCode>{absl::StatusCode::kOk,
                                                  absl::StatusCode::kResourceExhausted,
                                                  absl::StatusCode::kResourceExhausted}));
  api::PrometheusText out;
  metrics.Write(out);
  EXPECT_NE(out.text().find("\ndeltaserve_router_rate_limited_total{key=\"ci\"} 2\n"),
            std::string::npos)
      << out.text();
}

}  // namespace
}  // namespace deltaserve::router::auth
