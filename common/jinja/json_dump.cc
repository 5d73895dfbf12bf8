// json.dumps as transformers' tojson filter calls it (ensure_ascii=False by default): Python's
// escapes only, floats as repr, NaN/Infinity as Python writes them, separators and indent as
// json.dumps lays them out, keys converted the way json.dumps converts them.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/jinja/value.h"

namespace deltaserve::common::jinja {
namespace {

void JsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  if (!ensure_ascii) {
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
    }
  } else {
    for (char32_t c : DecodeCodepoints(s)) {
      char buf[16];
      switch (c) {
        case '"':
          out += "\\\"";
          continue;
        case '\\':
          out += "\\\\";
          continue;
        case '\n':
          out += "\\n";
          continue;
        case '\r':
          out += "\\r";
          continue;
        case '\t':
          out += "\\t";
          continue;
        case '\b':
          out += "\\b";
          continue;
        case '\f':
          out += "\\f";
          continue;
        default:
          break;
      }
      if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else if (c <= 0xffff) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (v >> 10)),
                      static_cast<unsigned>(0xdc00 + (v & 0x3ff)));
        out += buf;
      }
    }
  }
  out += '"';
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FloatRepr(d);
}

absl::StatusOr<std::string> JsonKey(const Value& key) {
  switch (key.type()) {
    case Value::Type::kString:
      return key.as_string();
    case Value::Type::kInt:
      return std::to_string(key.as_int());
    case Value::Type::kFloat:
      return JsonFloat(key.as_double());
    case Value::Type::kBool:
      return std::string(key.as_bool() ? "true" : "false");
    case Value::Type::kNone:
      return std::string("null");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("keys must be str, int, float, bool or None, not ", key.TypeName()));
  }
}

absl::Status JsonDump(const Value& v, const JsonDumpOptions& opt, int level, std::string& out) {
  if (level > kMaxJsonDepth) return absl::InvalidArgumentError("tojson: nesting too deep");
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return absl::OkStatus();
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return absl::OkStatus();
    case Value::Type::kFloat:
      out += JsonFloat(v.as_double());
      return absl::OkStatus();
    case Value::Type::kString:
      JsonString(v.as_string(), opt.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Type::kList:
    case Value::Type::kDict: {
      if (v.is_generator()) {
        return absl::InvalidArgumentError("Object of type generator is not JSON serializable");
      }
      const bool is_list = v.is_list();
      const size_t n = is_list ? v.as_list().items.size() : v.as_dict().items.size();
      if (n == 0) {
        out += is_list ? "[]" : "{}";
        return absl::OkStatus();
      }
      out += is_list ? '[' : '{';
      std::string inner_indent;
      if (opt.pretty) {
        for (int i = 0; i <= level; ++i) inner_indent += opt.indent;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      if (!is_list) {
        for (const auto& [k, val] : v.as_dict().items) {
          DS_JINJA_ASSIGN_OR_RETURN(std::string key, JsonKey(k));
          entries.emplace_back(std::move(key), &val);
        }
        if (opt.sort_keys) {
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
      }
      for (size_t i = 0; i < n; ++i) {
        if (i > 0) out += opt.item_separator;
        if (opt.pretty) {
          out += '\n';
          out += inner_indent;
        }
        if (is_list) {
          DS_JINJA_RETURN_IF_ERROR(JsonDump(v.as_list().items[i], opt, level + 1, out));
        } else {
          JsonString(entries[i].first, opt.ensure_ascii, out);
          out += opt.key_separator;
          DS_JINJA_RETURN_IF_ERROR(JsonDump(*entries[i].second, opt, level + 1, out));
        }
      }
      if (opt.pretty) {
        out += '\n';
        for (int i = 0; i < level; ++i) out += opt.indent;
      }
      out += is_list ? ']' : '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  DS_JINJA_RETURN_IF_ERROR(JsonDump(value, options, 0, out));
  return out;
}

}  // namespace deltaserve::common::jinja
