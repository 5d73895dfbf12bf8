#include "router/config/api_keys_file.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/str_util.h"
#include "router/config/router_config_validation.h"

namespace deltaserve::router {

using common::Sv;

absl::StatusOr<std::vector<ApiKeyConfig>> ParseApiKeysFile(std::string_view text,
                                                           std::string_view source,
                                                           std::vector<int>* lines) {
  std::vector<ApiKeyConfig> keys;
  if (lines != nullptr) lines->clear();
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(Sv(text), '\n')) {
    ++line_no;
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r\f\v"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto error = [&](absl::string_view message) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(source), ":", line_no, ": ", message));
    };
    if (fields.size() < 2 || fields.size() > 3) {
      return error(absl::StrCat("expected 'name sha256hex [model,model]', got ", fields.size(),
                                " field", fields.size() == 1 ? "" : "s"));
    }
    ApiKeyConfig key;
    key.name = std::string(fields[0]);
    if (!internal::IsSha256Hex(std::string_view(fields[1].data(), fields[1].size()))) {
      return error(absl::StrCat("key '", key.name,
                                "': the hash must be 64 hex digits (printf %s \"$KEY\" | "
                                "sha256sum)"));
    }
    key.sha256_hex = absl::AsciiStrToLower(fields[1]);
    if (fields.size() == 3) {
      for (absl::string_view model : absl::StrSplit(fields[2], ',')) {
        if (model.empty()) {
          return error(absl::StrCat("key '", key.name, "': empty model name in '", fields[2], "'"));
        }
        key.models.emplace_back(model);
      }
    }
    keys.push_back(std::move(key));
    if (lines != nullptr) lines->push_back(line_no);
  }
  return keys;
}

}  // namespace deltaserve::router
