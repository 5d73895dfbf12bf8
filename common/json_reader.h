#pragma once
// Reads untrusted JSON (HTTP request bodies, and the request-derived JSON the router re-reads)
// into an nlohmann::ordered_json in time linear in its size, keeping the writer's key order.
// nlohmann's own ordered_json parse inserts each key by searching the keys so far, so one object
// of 200,000 keys cost 33.7 s (issue 17); this reader has its own lexer (accepting exactly what
// nlohmann::json::parse accepts: tests/common/json_reader_differential_test.cc and
// tests/fuzz/json_reader_fuzz.cc check that) and appends to each object's storage, finding
// duplicate keys through a hash index. No recursion: nesting costs no stack. Limits on nesting,
// keys per object and elements per array are enforced while reading, before a large DOM is
// built. Syntax errors name the line, column and byte offset.
//
//   JsonReadFault fault;
//   absl::StatusOr<nlohmann::ordered_json> doc = ReadOrderedJson(body, JsonReadLimits{}, &fault);
//   if (!doc.ok() && fault.kind == JsonReadFault::Kind::kLimit) { /* fault.limit, fault.path */ }
//
// Duplicate keys: the last value wins and keeps the first key's position — what Python's
// json.loads (and so OpenAI's API) and nlohmann's own parser do.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common {

// What one document may hold; 0 (or less, for depth) means no limit of that kind.
struct JsonReadLimits {
  int max_depth = 64;                   // nested arrays/objects; the top-level value is depth 1
  size_t max_object_keys = 10'000;      // distinct keys in one object
  size_t max_array_elements = 1 << 20;  // elements of one array
  // Arrays and objects in the whole document: each costs a heap allocation or two (about 70
  // bytes of DOM for 2 bytes of "[]"), so this bounds the document's memory.
  size_t max_containers = 1 << 20;
};

// For JSON already checked under limits (the router re-reading request JSON it has validated).
inline constexpr JsonReadLimits kNoJsonReadLimits{
    .max_depth = 0, .max_object_keys = 0, .max_array_elements = 0, .max_containers = 0};

// Why a read failed (besides the status' message).
struct JsonReadFault {
  enum class Kind { kNone, kSyntax, kLimit };
  Kind kind = Kind::kNone;
  // kLimit: "max_json_depth", "max_object_keys", "max_array_elements" or "max_json_containers".
  std::string limit;
  // Where, as a JSON path ("messages[2].content", "logit_bias"); empty: the top level, or
  // unknown (a syntax error gives its byte position in the message instead).
  std::string path;
  // kLimit: the status' message without the "(limit ...)" that names `limit`.
  std::string what;
};

// `text` as JSON under `limits`. InvalidArgument with a message naming the fault (a syntax
// error with its position, invalid UTF-8, a number beyond double's range, trailing bytes, a
// limit with the path where it was passed); `fault`, when given, receives the details.
absl::StatusOr<nlohmann::ordered_json> ReadOrderedJson(std::string_view text,
                                                       const JsonReadLimits& limits,
                                                       JsonReadFault* fault = nullptr);

// Builds one ordered_json object from key/value pairs in linear time: Set() of a key seen
// before replaces its value in place (last wins, first position), else appends.
class OrderedObjectBuilder {
 public:
  size_t size() const { return members_.size(); }
  // True when `key` was set before.
  bool Contains(std::string_view key) const { return Find(key) != kNotFound; }
  void Set(std::string key, nlohmann::ordered_json value);
  // The object, members in first-set order; leaves the builder empty for reuse.
  nlohmann::ordered_json Take();
  void Clear();

 private:
  static constexpr size_t kNotFound = static_cast<size_t>(-1);
  // Below this many members a scan is cheaper than keeping the hash index.
  static constexpr size_t kIndexFrom = 16;
  size_t Find(std::string_view key) const;

  std::vector<std::pair<std::string, nlohmann::ordered_json>> members_;
  // key -> position in members_; built once members_ reaches kIndexFrom.
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace deltaserve::common
