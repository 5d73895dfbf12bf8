#include "tests/support/strict_device_backend.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltaserve::testing {

std::string StrictDeviceBackend::Report() const {
  const std::vector<std::string> v = violations();
  std::string out = absl::StrCat(violation_count(), " violation(s)");
  for (size_t i = 0; i < std::min<size_t>(v.size(), 20); ++i) absl::StrAppend(&out, "\n  ", v[i]);
  return out;
}

}  // namespace deltaserve::testing
