#pragma once
// The one log line a process writes per request (router: per HTTP exchange; worker: per
// Generate call), as text (the default: `request id=... model=... code=200`, easy to read and
// grep) or as one JSON object a line (`--log-format json`, for log shippers such as Vector,
// Fluent Bit or Loki's promtail). Fields keep the order they were added in; docs/metrics.md
// ("Logs") lists them.
//
//   RequestLogLine line("request");
//   line.Str("id", request_id).Str("model", model).Int("code", 200).Num("ttft_ms", 35.2);
//   WriteLogLine(line.Render(LogFormat::kJson));   // {"ts":"...","msg":"request","id":...}

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace deltaserve::common {

enum class LogFormat { kText, kJson };

// "text" or "json"; anything else is InvalidArgument naming it.
absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name);
// The --log-format row of a program's flag table (common/flags.h), read with ParseLogFormat.
Flag LogFormatFlag(LogFormat* out);

class RequestLogLine {
 public:
  explicit RequestLogLine(std::string message) : message_(std::move(message)) {}

  RequestLogLine& Str(std::string key, std::string_view value);
  RequestLogLine& Int(std::string key, int64_t value);
  RequestLogLine& Num(std::string key, double value);  // written with one decimal in text
  RequestLogLine& Bool(std::string key, bool value);

  // Text: `message key=value ...`, a value with spaces, quotes, '=' or control characters
  // quoted and escaped as JSON strings, an empty one as "". JSON: {"ts": RFC 3339 UTC with
  // milliseconds, "level":"info", "msg": message, then the fields}; strings that are not valid
  // UTF-8 have their bad bytes replaced (U+FFFD). No trailing newline.
  std::string Render(LogFormat format) const;

 private:
  using Value = std::variant<std::string, int64_t, double, bool>;
  std::string message_;
  std::vector<std::pair<std::string, Value>> fields_;
};

// The format of this process's request lines, set once from its --log-format flag at start
// (default text).
void SetRequestLogFormat(LogFormat format);
LogFormat RequestLogFormat();

// Writes `line` and a newline to stderr in one write, so lines of concurrent requests never
// interleave.
void WriteLogLine(std::string_view line);

}  // namespace deltaserve::common
