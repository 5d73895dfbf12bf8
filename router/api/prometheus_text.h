#pragma once
// The router's name for the Prometheus text writer, which lives in common/ so the worker uses
// the same one (common/prometheus_text.h).

#include "common/prometheus_text.h"

namespace deltaserve::router::api {

using common::BucketHistogram;
using common::kPrometheusContentType;
using common::MetricLabels;
using common::PrometheusText;

}  // namespace deltaserve::router::api
