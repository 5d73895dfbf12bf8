// Bridges std::string_view to Abseil's string functions. Debian 12's Abseil is built with its own
// absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW is 0), so a std::string_view does not
// convert to absl::AlphaNum: wrap it in Sv() inside absl::StrCat / StrAppend / StrFormat.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace deltaserve::common {

// The same bytes as an absl::string_view (no copy).
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace deltaserve::common
