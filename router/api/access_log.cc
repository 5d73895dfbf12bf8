#include "router/api/access_log.h"

#include "absl/strings/numbers.h"

namespace deltaserve::router::api {
namespace {

bool QuietRoute(const http::ExchangeRecord& r) {
  return r.route_matched && r.method == "GET" && r.status >= 200 && r.status < 300 &&
         (r.path == "/health" || r.path == "/ready" || r.path == "/metrics");
}

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

std::string ExchangeLogLine(const http::ExchangeRecord& r, common::LogFormat format) {
  if (QuietRoute(r)) return "";
  common::RequestLogLine line("request");
  line.Str("id", r.request_id)
      .Str("method", r.method)
      .Str("path", r.path)
      .Int("code", r.status)
      .Num("ms", r.seconds * 1e3)
      .Bool("stream", r.streamed)
      .Int("bytes_in", static_cast<int64_t>(r.body_bytes_in))
      .Int("bytes_out", static_cast<int64_t>(r.bytes_out))
      .Str("peer", r.peer);
  if (r.client_gone) line.Bool("client_gone", true);
  for (const http::HeaderField& f : r.notes) {
    // Counts and milliseconds are numbers in JSON; the rest (model, finish, error) strings.
    int64_t i = 0;
    double d = 0;
    if (EndsWith(f.name, "_tokens") && absl::SimpleAtoi(f.value, &i)) {
      line.Int(f.name, i);
    } else if (EndsWith(f.name, "_ms") && absl::SimpleAtod(f.value, &d)) {
      line.Num(f.name, d);
    } else {
      line.Str(f.name, f.value);
    }
  }
  return line.Render(format);
}

void LogExchange(const http::ExchangeRecord& record, common::LogFormat format) {
  const std::string line = ExchangeLogLine(record, format);
  if (!line.empty()) common::WriteLogLine(line);
}

}  // namespace deltaserve::router::api
