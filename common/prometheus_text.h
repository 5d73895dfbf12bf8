#pragma once
// A writer of the Prometheus text exposition format (version 0.0.4), by hand because
// prometheus-cpp is not packaged in Debian 12; the router's and the worker's /metrics both use
// it (docs/metrics.md). Samples of one family must be written together; # HELP and # TYPE are
// written before a family's first sample.
//
//   PrometheusText out;
//   out.Counter("deltaserve_http_requests_total", "HTTP requests.", {{"code", "200"}}, 12);
//   std::string body = out.Take();  // served as text/plain; version=0.0.4

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltaserve::common {

// A fixed-bucket histogram's state (not thread-safe: its owner locks around it). Observations
// are counted in the first bucket whose upper bound is >= the value; the last count is +Inf.
struct BucketHistogram {
  explicit BucketHistogram(std::vector<double> bounds)
      : upper_bounds(std::move(bounds)), counts(upper_bounds.size() + 1, 0) {}
  void Observe(double v) { ObserveN(v, 1); }
  // `n` observations of `v` (the per-token gap of a delta that carried n tokens).
  void ObserveN(double v, uint64_t n);
  std::vector<double> upper_bounds;
  std::vector<uint64_t> counts;  // per bucket, not cumulative; last is +Inf
  double sum = 0;
};

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

class PrometheusText {
 public:
  void Counter(std::string_view name, std::string_view help, const MetricLabels& labels,
               double value);
  void Gauge(std::string_view name, std::string_view help, const MetricLabels& labels,
             double value);
  // `upper_bounds` ascending (seconds, tokens, ...); `counts[i]` observations <= bound i, not
  // cumulative; `counts` has one more entry than `upper_bounds` for +Inf.
  void Histogram(std::string_view name, std::string_view help, const MetricLabels& labels,
                 const std::vector<double>& upper_bounds, const std::vector<uint64_t>& counts,
                 double sum);
  // A summary without quantiles: its _sum and _count.
  void Summary(std::string_view name, std::string_view help, const MetricLabels& labels, double sum,
               uint64_t count);
  void Histogram(std::string_view name, std::string_view help, const MetricLabels& labels,
                 const BucketHistogram& h) {
    Histogram(name, help, labels, h.upper_bounds, h.counts, h.sum);
  }

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

  // Label values escape \, " and newline; HELP text escapes \ and newline.
  static std::string EscapeLabelValue(std::string_view v);
  // Go-style float formatting: integers without exponent, NaN, +Inf, -Inf.
  static std::string FormatValue(double v);

 private:
  void Family(std::string_view name, std::string_view help, std::string_view type);
  void Sample(std::string_view name, const MetricLabels& labels, std::string_view extra_label,
              std::string_view extra_value, double value);

  std::string out_;
  std::string family_;
};

}  // namespace deltaserve::common
