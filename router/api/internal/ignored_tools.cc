#include "router/api/internal/ignored_tools.h"

#include <algorithm>

namespace deltaserve::router::api::internal {

std::string HeaderSafeToolType(std::string_view type) {
  std::string safe;
  for (char ch : type) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
    if (ok && safe.size() < kMaxIgnoredToolTypeChars) safe.push_back(ch);
  }
  return safe.empty() ? std::string("unnamed") : safe;
}

void NoteIgnoredToolType(std::string_view type, std::vector<std::string>* types) {
  std::string safe = HeaderSafeToolType(type);
  if (std::find(types->begin(), types->end(), safe) == types->end()) {
    types->push_back(std::move(safe));
  }
}

}  // namespace deltaserve::router::api::internal
