#include "common/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace deltaserve::common {

void BucketHistogram::ObserveN(double v, uint64_t n) {
  const size_t i =
      std::lower_bound(upper_bounds.begin(), upper_bounds.end(), v) - upper_bounds.begin();
  counts[i] += n;
  sum += v * static_cast<double>(n);
}

std::string PrometheusText::EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusText::FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  // Shortest of %.15g / %.17g that reads back as the same double.
  std::string s = absl::StrFormat("%.15g", v);
  return std::strtod(s.c_str(), nullptr) == v ? s : absl::StrFormat("%.17g", v);
}

void PrometheusText::Family(std::string_view name, std::string_view help, std::string_view type) {
  if (family_ == name) return;
  family_ = std::string(name);
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  for (char c : help) {
    if (c == '\\') {
      out_ += "\\\\";
    } else if (c == '\n') {
      out_ += "\\n";
    } else {
      out_ += c;
    }
  }
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::Sample(std::string_view name, const MetricLabels& labels,
                            std::string_view extra_label, std::string_view extra_value,
                            double value) {
  out_ += name;
  if (!labels.empty() || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += k;
      out_ += "=\"";
      out_ += EscapeLabelValue(v);
      out_ += '"';
    }
    if (!extra_label.empty()) {
      if (!first) out_ += ',';
      out_ += extra_label;
      out_ += "=\"";
      out_ += extra_value;
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void PrometheusText::Counter(std::string_view name, std::string_view help,
                             const MetricLabels& labels, double value) {
  Family(name, help, "counter");
  Sample(name, labels, "", "", value);
}

void PrometheusText::Gauge(std::string_view name, std::string_view help, const MetricLabels& labels,
                           double value) {
  Family(name, help, "gauge");
  Sample(name, labels, "", "", value);
}

void PrometheusText::Histogram(std::string_view name, std::string_view help,
                               const MetricLabels& labels, const std::vector<double>& upper_bounds,
                               const std::vector<uint64_t>& counts, double sum) {
  Family(name, help, "histogram");
  std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= upper_bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    std::string le = i < upper_bounds.size() ? FormatValue(upper_bounds[i]) : "+Inf";
    Sample(bucket, labels, "le", le, static_cast<double>(cumulative));
  }
  Sample(std::string(name) + "_sum", labels, "", "", sum);
  Sample(std::string(name) + "_count", labels, "", "", static_cast<double>(cumulative));
}

void PrometheusText::Summary(std::string_view name, std::string_view help,
                             const MetricLabels& labels, double sum, uint64_t count) {
  Family(name, help, "summary");
  Sample(std::string(name) + "_sum", labels, "", "", sum);
  Sample(std::string(name) + "_count", labels, "", "", static_cast<double>(count));
}

}  // namespace deltaserve::common
