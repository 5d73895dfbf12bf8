#include "router/api/internal/json_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/str_util.h"
#include "router/api/api_error.h"

namespace deltaserve::router::api::internal {
namespace {

using common::Sv;

// Rejects nesting deeper than max_depth before nlohmann builds (and later destroys) the
// value, so a body of a million '[' costs a linear scan and a 400.
absl::Status CheckDepth(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidRequestError(
            "", "invalid_json",
            absl::StrCat("JSON nests deeper than ", max_depth, " levels (at byte ", i, ")"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

std::string FormatNumber(double v) { return absl::StrFormat("%g", v); }

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseJsonObject(std::string_view body, int max_depth) {
  if (absl::Status st = CheckDepth(body, max_depth); !st.ok()) return st;
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(body.begin(), body.end());
  } catch (const nlohmann::ordered_json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ...", or
    // out_of_range.406 for a number such as 1e400.
    std::string what = e.what();
    size_t pos = what.find("] ");
    return InvalidRequestError(
        "", "invalid_json",
        absl::StrCat("the request body is not valid JSON: ",
                     pos == std::string::npos ? what : what.substr(pos + 2)));
  }
  if (!doc.is_object()) {
    return InvalidRequestError(
        "", "invalid_type",
        absl::StrCat("the request body must be a JSON object, got ", Sv(TypeName(doc))));
  }
  return doc;
}

const nlohmann::ordered_json* Member(const nlohmann::ordered_json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string_view TypeName(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null:
      return "null";
    case nlohmann::ordered_json::value_t::object:
      return "object";
    case nlohmann::ordered_json::value_t::array:
      return "array";
    case nlohmann::ordered_json::value_t::string:
      return "string";
    case nlohmann::ordered_json::value_t::boolean:
      return "boolean";
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return "integer";
    case nlohmann::ordered_json::value_t::number_float:
      return "number";
    default:
      return "value";
  }
}

absl::Status TypeError(std::string_view path, std::string_view expected,
                       const nlohmann::ordered_json& got) {
  return InvalidRequestError(
      path, "invalid_type",
      absl::StrCat("'", Sv(path), "' must be ", Sv(expected), ", got ", Sv(TypeName(got))));
}

absl::Status ReadString(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                        std::optional<std::string>* out) {
  const nlohmann::ordered_json* v = Member(obj, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return TypeError(path, "a string", *v);
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                      std::optional<bool>* out) {
  const nlohmann::ordered_json* v = Member(obj, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(path, "a boolean", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadNumber(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                        double lo, double hi, bool lo_open, std::optional<double>* out) {
  const nlohmann::ordered_json* v = Member(obj, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(path, "a number", *v);
  double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    return InvalidRequestError(
        path, "invalid_value",
        absl::StrCat("'", Sv(path), "' must be ", lo_open ? "greater than " : "at least ",
                     FormatNumber(lo), " and at most ", FormatNumber(hi), ", got ",
                     FormatNumber(x)));
  }
  *out = x;
  return absl::OkStatus();
}

std::optional<int64_t> AsInt(const nlohmann::ordered_json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^53: beyond it a double no longer holds every integer.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

absl::Status ReadInt(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                     int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const nlohmann::ordered_json* v = Member(obj, name);
  if (v == nullptr) return absl::OkStatus();
  std::optional<int64_t> x = AsInt(*v);
  if (!x) {
    if (v->is_number()) {
      return InvalidRequestError(path, "invalid_value",
                                 absl::StrCat("'", Sv(path), "' must be an integer between ", lo,
                                              " and ", hi, ", got ", v->dump()));
    }
    return TypeError(path, "an integer", *v);
  }
  if (*x < lo || *x > hi) {
    return InvalidRequestError(
        path, "invalid_value",
        absl::StrCat("'", Sv(path), "' must be between ", lo, " and ", hi, ", got ", *x));
  }
  *out = *x;
  return absl::OkStatus();
}

}  // namespace deltaserve::router::api::internal
