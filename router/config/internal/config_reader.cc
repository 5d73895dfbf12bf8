#include "router/config/internal/config_reader.h"

#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::router::internal {
namespace {

std::string JoinNames(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

using common::Sv;

std::string ConfigReader::Locate(std::string_view path) const {
  std::string p(path);
  while (!p.empty()) {
    if (auto it = locations_.find(p); it != locations_.end()) return it->second;
    const size_t cut = p.find_last_of(".[");
    if (cut == std::string::npos) break;
    p.resize(cut);
  }
  return "";
}

absl::Status ConfigReader::Error(const std::string& path, const YAML::Node& node,
                                 std::string_view message) {
  Remember(path, node);
  return absl::InvalidArgumentError(absl::StrCat(path, Locate(path), ": ", Sv(message)));
}

void ConfigReader::Remember(const std::string& path, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.line >= 0) {
    locations_[path] = absl::StrCat(" (line ", m.line + 1, ", column ", m.column + 1, ")");
  }
}

absl::Status ConfigReader::ForEachField(const YAML::Node& node, const std::string& path,
                                        std::initializer_list<std::string_view> known,
                                        const FieldFn& fn) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return Error(path.empty() ? "(document)" : path, node,
                 absl::StrCat("must be a mapping of ", JoinNames(known)));
  }
  absl::flat_hash_set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node k = it->first;
    const YAML::Node v = it->second;
    if (!k.IsScalar()) return Error(path, k, "has a key that is not a string");
    const std::string& key = k.Scalar();
    const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
    bool is_known = false;
    for (std::string_view name : known) is_known = is_known || name == key;
    if (!is_known) {
      return Error(child, k,
                   absl::StrCat("unknown key '", absl::CHexEscape(key), "'",
                                path.empty() ? "" : absl::StrCat(" in ", path),
                                " (known: ", JoinNames(known), ")"));
    }
    if (!seen.insert(key).second) return Error(child, k, "is given twice");
    Remember(child, v.IsNull() ? k : v);
    if (v.IsNull()) continue;
    if (auto s = fn(key, v, child); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::ForEachItem(
    const YAML::Node& node, const std::string& path,
    const std::function<absl::Status(size_t, const YAML::Node&, const std::string&)>& fn) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsSequence()) return Error(path, node, "must be a list");
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string child = absl::StrCat(path, "[", i, "]");
    Remember(child, node[i]);
    if (auto s = fn(i, node[i], child); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::String(const YAML::Node& node, const std::string& path,
                                  std::string& out) {
  if (!node.IsScalar()) return Error(path, node, "must be a string");
  out = node.Scalar();
  return absl::OkStatus();
}

absl::Status ConfigReader::StringList(const YAML::Node& node, const std::string& path,
                                      std::vector<std::string>& out) {
  out.clear();
  return ForEachItem(node, path, [&](size_t, const YAML::Node& item, const std::string& p) {
    std::string s;
    if (auto st = String(item, p, s); !st.ok()) return st;
    out.push_back(std::move(s));
    return absl::OkStatus();
  });
}

absl::Status ConfigReader::Number(const YAML::Node& node, const std::string& path,
                                  std::optional<double>& out) {
  double v = 0;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &v) || !std::isfinite(v)) {
    return Error(path, node,
                 absl::StrCat("must be a number, got '", absl::CHexEscape(node.Scalar()), "'"));
  }
  out = v;
  return absl::OkStatus();
}

absl::Status ConfigReader::Bool(const YAML::Node& node, const std::string& path,
                                std::optional<bool>& out) {
  const std::string s = node.IsScalar() ? node.Scalar() : "";
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
  } else {
    return Error(path, node,
                 absl::StrCat("must be true or false, got '", absl::CHexEscape(s), "'"));
  }
  return absl::OkStatus();
}

}  // namespace deltaserve::router::internal
