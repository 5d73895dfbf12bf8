#include "common/request_log.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

using json = nlohmann::json;

bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

std::string JsonString(std::string_view v) {
  return json(std::string(v)).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("log format '", Sv(name), "' is not one of text, json"));
}

Flag LogFormatFlag(LogFormat* out) {
  return CustomFlag("--log-format",
                    [out](std::string_view v) -> std::string {
                      absl::StatusOr<LogFormat> format = ParseLogFormat(v);
                      if (!format.ok()) return "--log-format needs text or json";
                      *out = *format;
                      return "";
                    })
      .MissingMessage("--log-format needs text or json")
      .Help("text|json", "the per-request lines on stderr (default text)");
}

RequestLogLine& RequestLogLine::Str(std::string key, std::string_view value) {
  fields_.emplace_back(std::move(key), std::string(value));
  return *this;
}
RequestLogLine& RequestLogLine::Int(std::string key, int64_t value) {
  fields_.emplace_back(std::move(key), value);
  return *this;
}
RequestLogLine& RequestLogLine::Num(std::string key, double value) {
  fields_.emplace_back(std::move(key), value);
  return *this;
}
RequestLogLine& RequestLogLine::Bool(std::string key, bool value) {
  fields_.emplace_back(std::move(key), value);
  return *this;
}

std::string RequestLogLine::Render(LogFormat format) const {
  if (format == LogFormat::kText) {
    std::string out = message_;
    for (const auto& [key, value] : fields_) {
      absl::StrAppend(&out, " ", key, "=");
      if (const auto* s = std::get_if<std::string>(&value)) {
        out += NeedsQuotes(*s) ? JsonString(*s) : *s;
      } else if (const auto* i = std::get_if<int64_t>(&value)) {
        absl::StrAppend(&out, *i);
      } else if (const auto* d = std::get_if<double>(&value)) {
        absl::StrAppend(&out, std::isfinite(*d) ? absl::StrFormat("%.1f", *d) : "null");
      } else {
        out += std::get<bool>(value) ? "true" : "false";
      }
    }
    return out;
  }
  // Built by hand so the fields keep their order (nlohmann's object sorts keys).
  std::string out = absl::StrCat(
      "{\"ts\":\"", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      "\",\"level\":\"info\",\"msg\":", JsonString(message_));
  for (const auto& [key, value] : fields_) {
    absl::StrAppend(&out, ",", JsonString(key), ":");
    if (const auto* s = std::get_if<std::string>(&value)) {
      out += JsonString(*s);
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      absl::StrAppend(&out, *i);
    } else if (const auto* d = std::get_if<double>(&value)) {
      // Milliseconds to the microsecond; JSON has no NaN.
      absl::StrAppend(&out, std::isfinite(*d) ? absl::StrFormat("%.3f", *d) : "null");
    } else {
      out += std::get<bool>(value) ? "true" : "false";
    }
  }
  out += '}';
  return out;
}

namespace {
std::atomic<LogFormat> g_format{LogFormat::kText};
}  // namespace

void SetRequestLogFormat(LogFormat format) { g_format.store(format); }
LogFormat RequestLogFormat() { return g_format.load(); }

void WriteLogLine(std::string_view line) {
  std::string buf = absl::StrCat(Sv(line), "\n");
  // stderr is unbuffered: one write(2) per line keeps concurrent lines whole.
  size_t off = 0;
  while (off < buf.size()) {
    const ssize_t n = ::write(STDERR_FILENO, buf.data() + off, buf.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace deltaserve::common
