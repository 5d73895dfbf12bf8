#pragma once
// Typed reads of optional JSON fields with range checks, each failing with an
// InvalidRequestError that names the field by its JSON path. Private to router/api.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/json_reader.h"

// Returns a failed absl::Status from the enclosing function (the parsers' one control-flow
// macro; absl has none in Debian 12's version).
#ifndef DS_RETURN_IF_ERROR
#define DS_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    if (absl::Status _st = (expr); !_st.ok()) return _st; \
  } while (0)
#endif

namespace deltaserve::router::api::internal {

// The code of every 400 for a request limit (docs/router.md, "Request limits").
inline constexpr char kLimitExceededCode[] = "request_limit_exceeded";

// The body as a JSON object, read in linear time (common/json_reader.h): 400 "invalid_json"
// (with the parser's position) for malformed JSON or invalid UTF-8, "invalid_type" for a
// non-object, and a LimitError where `limits` are passed (param: the path where).
absl::StatusOr<nlohmann::ordered_json> ParseJsonObject(std::string_view body,
                                                       const common::JsonReadLimits& limits);

// A 400 for a request limit: code kLimitExceededCode, param `path`, a message saying `what`
// and naming `limit` (a name from docs/router.md, "Request limits", such as "max_tools").
absl::Status LimitError(std::string_view path, std::string_view limit, std::string_view what);

// The member `name` of `obj`, or nullptr when absent or null.
const nlohmann::ordered_json* Member(const nlohmann::ordered_json& obj, const char* name);

// JSON type names for messages ("string", "number", "object", ...).
std::string_view TypeName(const nlohmann::ordered_json& v);

absl::Status TypeError(std::string_view path, std::string_view expected,
                       const nlohmann::ordered_json& got);

// Each reads obj[name] (path names it in errors); absent/null leaves *out unchanged.
absl::Status ReadString(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                        std::optional<std::string>* out);
absl::Status ReadBool(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                      std::optional<bool>* out);
// A number in [lo, hi]; `lo_open` makes the lower bound exclusive.
absl::Status ReadNumber(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                        double lo, double hi, bool lo_open, std::optional<double>* out);
// The same check of a value in hand (null leaves *out unchanged).
absl::Status CheckNumber(const nlohmann::ordered_json& v, std::string_view path, double lo,
                         double hi, bool lo_open, std::optional<double>* out);
// An integer in [lo, hi] (an integral float such as 5.0 is accepted).
absl::Status ReadInt(const nlohmann::ordered_json& obj, const char* name, std::string_view path,
                     int64_t lo, int64_t hi, std::optional<int64_t>* out);

// 400 "missing_required_parameter": "'<path>' is required".
absl::Status Missing(std::string_view path);
// 400 "unsupported_value" with `message`.
absl::Status Unsupported(std::string_view path, std::string_view message);
// obj[name] as a string; Missing(path) when absent or null.
absl::Status RequiredString(const nlohmann::ordered_json& obj, const char* name,
                            std::string_view path, std::string* out);
// Compact JSON text of `v` (invalid UTF-8 in strings replaced, so it never throws).
std::string Dump(const nlohmann::ordered_json& v);

// `v` as an integer, or nullopt when it is not an integral number within int64.
std::optional<int64_t> AsInt(const nlohmann::ordered_json& v);

}  // namespace deltaserve::router::api::internal
