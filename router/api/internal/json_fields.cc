#include "router/api/internal/json_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/str_util.h"
#include "router/api/api_error.h"

namespace deltaserve::router::api::internal {
namespace {

using common::Sv;

std::string FormatNumber(double v) { return absl::StrFormat("%g", v); }

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseJsonObject(std::string_view body,
                                                       const common::JsonReadLimits& limits) {
  common::JsonReadFault fault;
  absl::StatusOr<nlohmann::ordered_json> doc = common::ReadOrderedJson(body, limits, &fault);
  if (!doc.ok()) {
    const std::string_view what(doc.status().message().data(), doc.status().message().size());
    if (fault.kind == common::JsonReadFault::Kind::kLimit) {
      return LimitError(fault.path, fault.limit, fault.what);
    }
    return InvalidRequestError("", "invalid_json",
                               absl::StrCat("the request body is not valid JSON: ", Sv(what)));
  }
  if (!doc->is_object()) {
    return InvalidRequestError(
        "", "invalid_type",
        absl::StrCat("the request body must be a JSON object, got ", Sv(TypeName(*doc))));
  }
  return doc;
}

absl::Status LimitError(std::string_view path, std::string_view limit, std::string_view what) {
  return InvalidRequestError(
      path, kLimitExceededCode,
      absl::StrCat(Sv(what), " (limit ", Sv(limit), ": docs/router.md, 'Request limits')"));
}

absl::Status Missing(std::string_view path) {
  return InvalidRequestError(path, "missing_required_parameter",
                             absl::StrCat("'", Sv(path), "' is required"));
}

absl::Status Unsupported(std::string_view path, std::string_view message) {
  return InvalidRequestError(path, "unsupported_value", message);
}

absl::Status RequiredString(const nlohmann::ordered_json& obj, const char* name,
                            std::string_view path, std::string* out) {
  std::optional<std::string> s;
  DS_RETURN_IF_ERROR(ReadString(obj, name, path, &s));
  if (!s) return Missing(path);
  *out = std::move(*s);
  return absl::OkStatus();
}

std::string Dump(const nlohmann::ordered_json& v) {
  return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
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
  return CheckNumber(*v, path, lo, hi, lo_open, out);
}

absl::Status CheckNumber(const nlohmann::ordered_json& v, std::string_view path, double lo,
                         double hi, bool lo_open, std::optional<double>* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_number()) return TypeError(path, "a number", v);
  double x = v.get<double>();
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
  // Unsigned first: nlohmann's is_number_integer() is true for unsigned values too, and
  // get<int64_t>() wraps those above INT64_MAX to negatives (a seed of 2^64 - 1 was read as -1;
  // found by the schemathesis run, docs/testing.md).
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
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
