// common/request_log and common/prometheus_text: the request line in both formats (the JSON read
// back with nlohmann::json, an independent parser), and the histogram helpers.

#include "common/request_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/prometheus_text.h"

namespace deltaserve::common {
namespace {

RequestLogLine Sample() {
  RequestLogLine line("request");
  line.Str("id", "req-1").Str("model", "qwen 3.5").Int("code", 200).Num("ttft_ms", 35.25);
  line.Bool("stream", true).Str("empty", "").Str("quote", "a\"b=c");
  return line;
}

TEST(RequestLogTest, TextQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(Sample().Render(LogFormat::kText),
            "request id=req-1 model=\"qwen 3.5\" code=200 ttft_ms=35.2 stream=true empty=\"\" "
            "quote=\"a\\\"b=c\"");
}

TEST(RequestLogTest, JsonIsOneObjectWithFieldsInOrder) {
  const std::string text = Sample().Render(LogFormat::kJson);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ts", "level", "msg", "id", "model", "code", "ttft_ms",
                                            "stream", "empty", "quote"}));
  EXPECT_EQ(j["msg"], "request");
  EXPECT_EQ(j["model"], "qwen 3.5");
  EXPECT_EQ(j["code"], 200);
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 35.25);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["quote"], "a\"b=c");
  // RFC 3339, UTC, milliseconds: 2026-11-25T11:33:59.335Z
  const std::string ts = j["ts"];
  ASSERT_EQ(ts.size(), 24u) << ts;
  EXPECT_EQ(ts[10], 'T');
  EXPECT_EQ(ts.back(), 'Z');
}

TEST(RequestLogTest, BadUtf8AndControlBytesStayOneValidLine) {
  RequestLogLine line("request");
  line.Str("id", std::string("a\xff\nb", 4));
  const std::string json = line.Render(LogFormat::kJson);
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(json)["id"], "a\xef\xbf\xbd\nb");  // U+FFFD
  const std::string text = line.Render(LogFormat::kText);
  EXPECT_EQ(text.find('\n'), std::string::npos);
}

TEST(RequestLogTest, ParseLogFormat) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("JSON").ok());
  EXPECT_FALSE(ParseLogFormat("").ok());
}

TEST(PrometheusTextTest, ObserveNAndSummary) {
  BucketHistogram h({0.1, 1});
  h.ObserveN(0.05, 3);  // first bucket
  h.Observe(0.1);       // upper bounds are inclusive (le)
  h.Observe(5);         // +Inf
  EXPECT_EQ(h.counts, (std::vector<uint64_t>{4, 0, 1}));
  EXPECT_DOUBLE_EQ(h.sum, 0.05 * 3 + 0.1 + 5);
  PrometheusText out;
  out.Histogram("x_seconds", "X.", {{"model", "a\"b"}}, h);
  out.Summary("y_seconds", "Y.", {}, 1.5, 2);
  EXPECT_EQ(out.text(),
            "# HELP x_seconds X.\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{model=\"a\\\"b\",le=\"0.1\"} 4\n"
            "x_seconds_bucket{model=\"a\\\"b\",le=\"1\"} 4\n"
            "x_seconds_bucket{model=\"a\\\"b\",le=\"+Inf\"} 5\n"
            "x_seconds_sum{model=\"a\\\"b\"} 5.25\n"
            "x_seconds_count{model=\"a\\\"b\"} 5\n"
            "# HELP y_seconds Y.\n# TYPE y_seconds summary\n"
            "y_seconds_sum 1.5\ny_seconds_count 2\n");
}

}  // namespace
}  // namespace deltaserve::common
