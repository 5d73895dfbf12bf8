// ApiMetrics and GenerationTimer (router/api/api_metrics.h): per-model series, the label a
// request refused before any worker gets, and what each event observes, read back from the
// Prometheus text.

#include "router/api/api_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace deltaserve::router::api {
namespace {

std::string Text(const ApiMetrics& m) {
  PrometheusText out;
  m.Write(out);
  return out.Take();
}

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ApiMetricsTest, StreamedGenerationObservesEachSeries) {
  ApiMetrics m;
  GenerationTimer t(m, "chat_completions", "alias-of-qwen");
  t.Started("qwen");  // the model that answered names the series
  t.Tokens(1);        // time to first token
  t.Tokens(3);        // three inter-token gaps
  Usage u;
  u.prompt_tokens = 10;
  u.completion_tokens = 4;
  t.Finished(u, FinishReason::kStop);
  const std::string text = Text(m);
  EXPECT_TRUE(Has(
      text,
      R"(deltaserve_router_requests_total{endpoint="chat_completions",model="qwen",code="200"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(deltaserve_router_time_to_first_token_seconds_count{model="qwen"} 1)"));
  EXPECT_TRUE(Has(text, R"(deltaserve_router_inter_token_latency_seconds_count{model="qwen"} 3)"));
  EXPECT_TRUE(Has(text, R"(deltaserve_router_e2e_request_latency_seconds_count{model="qwen"} 1)"));
  EXPECT_TRUE(Has(text, R"(deltaserve_router_routing_seconds_count{model="qwen"} 1)"));
  EXPECT_TRUE(Has(text, R"(deltaserve_router_prompt_tokens_total{model="qwen"} 10)"));
  EXPECT_TRUE(Has(text, R"(deltaserve_router_completion_tokens_total{model="qwen"} 4)"));
  EXPECT_TRUE(Has(text, R"(deltaserve_router_rate_limited_total 0)"));
}

TEST(ApiMetricsTest, ClientChosenNamesDoNotBecomeLabels) {
  ApiMetrics m;
  {
    GenerationTimer t(m, "completions", "no-such-model-1");
    t.Failed(404);
  }
  {
    GenerationTimer ok(m, "completions", "qwen");
    ok.Started("");
    ok.Finished(Usage{}, FinishReason::kLength);
  }
  {
    GenerationTimer t(m, "completions", "qwen");  // a known model refused later (429)
    t.Failed(429);
  }
  m.RecordRateLimited("ci");
  const std::string text = Text(m);
  EXPECT_EQ(text.find("no-such-model"), std::string::npos) << text;
  EXPECT_TRUE(
      Has(text,
          R"(deltaserve_router_requests_total{endpoint="completions",model="other",code="404"} 1)"))
      << text;
  EXPECT_TRUE(
      Has(text,
          R"(deltaserve_router_requests_total{endpoint="completions",model="qwen",code="429"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(deltaserve_router_rate_limited_total{key="ci"} 1)")) << text;
}

}  // namespace
}  // namespace deltaserve::router::api
