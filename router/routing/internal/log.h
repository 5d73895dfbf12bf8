#pragma once
// The routing layer's log lines (stderr, one line each, prefixed "routing: "); degraded modes
// log on their transitions, not per request.

#include <cstdio>
#include <string>

namespace deltaserve::router::internal {

inline void LogRouting(const std::string& line) {
  std::fprintf(stderr, "routing: %s\n", line.c_str());
}

}  // namespace deltaserve::router::internal
