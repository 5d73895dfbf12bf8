#include "common/json_reader.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

using json = nlohmann::ordered_json;

// Keys and number texts quoted in messages are cut here: a message must stay small whatever
// the input holds.
std::string Clip(std::string_view s) {
  constexpr size_t kMax = 64;
  return s.size() <= kMax ? std::string(s) : absl::StrCat(Sv(s.substr(0, kMax)), "...");
}

// nlohmann's SAX interface (json_sax in nlohmann/json.hpp), building the document as it goes.
// One frame per open container, reused across siblings so that a million tiny arrays cost no
// per-array frame allocation.
class LinearJsonSax {
 public:
  LinearJsonSax(const JsonReadLimits& limits, JsonReadFault* fault)
      : limits_(limits), fault_(fault) {}

  bool null() { return Add(json(nullptr)); }
  bool boolean(bool v) { return Add(json(v)); }
  bool number_integer(json::number_integer_t v) { return Add(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Add(json(v)); }
  bool number_float(json::number_float_t v, const std::string& text) {
    // nlohmann's DOM parser throws out_of_range.406 here; a non-finite double is no JSON value.
    if (!std::isfinite(v)) {
      return Fail(JsonReadFault::Kind::kSyntax, "", "",
                  absl::StrCat("number overflow parsing '", Clip(text), "'"));
    }
    return Add(json(v));
  }
  bool string(std::string& v) { return Add(json(std::move(v))); }
  bool binary(json::binary_t&) {
    return Fail(JsonReadFault::Kind::kSyntax, "", "", "binary values are not JSON text");
  }

  bool start_object(size_t) { return Push(/*is_object=*/true); }
  bool key(std::string& k) {
    Frame& f = frames_[depth_ - 1];
    if (limits_.max_object_keys > 0 && f.object.size() >= limits_.max_object_keys &&
        !f.object.Contains(k)) {
      return Fail(JsonReadFault::Kind::kLimit, "max_object_keys", PathOfOpen(depth_),
                  absl::StrCat("has more than ", limits_.max_object_keys, " keys"));
    }
    f.key = std::move(k);
    return true;
  }
  bool end_object() {
    json v = frames_[depth_ - 1].object.Take();
    --depth_;
    return Add(std::move(v));
  }

  bool start_array(size_t) { return Push(/*is_object=*/false); }
  bool end_array() {
    json v = std::move(frames_[depth_ - 1].array);
    --depth_;
    return Add(std::move(v));
  }

  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..." without the tag.
    std::string_view what = e.what();
    size_t tag_end = what.find("] ");
    if (tag_end != std::string_view::npos) what.remove_prefix(tag_end + 2);
    return Fail(JsonReadFault::Kind::kSyntax, "", "", what);
  }

  json TakeRoot() { return std::move(root_); }
  const std::string& message() const { return message_; }

 private:
  struct Frame {
    bool is_object = false;
    OrderedObjectBuilder object;  // is_object
    json array;                   // !is_object: the array being filled
    std::string key;              // is_object: the key whose value comes next
  };

  bool Push(bool is_object) {
    if (limits_.max_depth > 0 && depth_ >= static_cast<size_t>(limits_.max_depth)) {
      return Fail(JsonReadFault::Kind::kLimit, "max_json_depth", PathOfOpen(depth_ + 1),
                  absl::StrCat("nests deeper than ", limits_.max_depth, " levels"));
    }
    if (limits_.max_containers > 0 && ++containers_ > limits_.max_containers) {
      return Fail(JsonReadFault::Kind::kLimit, "max_json_containers", PathOfOpen(depth_ + 1),
                  absl::StrCat("is one array or object more than the ", limits_.max_containers,
                               " a document may hold"));
    }
    if (frames_.size() == depth_) frames_.emplace_back();
    Frame& f = frames_[depth_++];
    f.is_object = is_object;
    if (is_object) {
      f.object.Clear();
    } else {
      f.array = json::array();
    }
    return true;
  }

  bool Add(json v) {
    if (depth_ == 0) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = frames_[depth_ - 1];
    if (f.is_object) {
      f.object.Set(std::move(f.key), std::move(v));
      return true;
    }
    json::array_t& items = f.array.get_ref<json::array_t&>();
    if (limits_.max_array_elements > 0 && items.size() >= limits_.max_array_elements) {
      return Fail(JsonReadFault::Kind::kLimit, "max_array_elements", PathOfOpen(depth_),
                  absl::StrCat("has more than ", limits_.max_array_elements, " elements"));
    }
    items.push_back(std::move(v));
    return true;
  }

  // The JSON path of the container opened at depth `n` (1: the top-level value, path "").
  // Built only for an error message, so its cost does not matter.
  std::string PathOfOpen(size_t n) const {
    std::string path;
    for (size_t i = 0; i + 1 < n && i < depth_; ++i) {
      const Frame& f = frames_[i];
      if (f.is_object) {
        absl::StrAppend(&path, path.empty() ? "" : ".", Clip(f.key));
      } else {
        absl::StrAppend(&path, "[", f.array.size(), "]");
      }
    }
    return path;
  }

  bool Fail(JsonReadFault::Kind kind, std::string_view limit, std::string path,
            std::string_view what) {
    if (kind == JsonReadFault::Kind::kLimit) {
      const std::string where =
          path.empty() ? std::string("the top-level value") : absl::StrCat("'", path, "'");
      const std::string plain = absl::StrCat(where, " ", Sv(what));
      message_ = absl::StrCat(plain, " (limit ", Sv(limit), ")");
      if (fault_ != nullptr) fault_->what = plain;
    } else {
      message_ = std::string(what);
    }
    if (fault_ != nullptr) {
      fault_->kind = kind;
      fault_->limit = std::string(limit);
      fault_->path = std::move(path);
    }
    return false;
  }

  const JsonReadLimits limits_;
  JsonReadFault* const fault_;
  std::vector<Frame> frames_;  // frames_[0, depth_) are open
  size_t depth_ = 0;
  size_t containers_ = 0;  // arrays and objects opened so far
  json root_;
  std::string message_;
};

}  // namespace

absl::StatusOr<json> ReadOrderedJson(std::string_view text, const JsonReadLimits& limits,
                                     JsonReadFault* fault) {
  if (fault != nullptr) *fault = JsonReadFault{};
  LinearJsonSax sax(limits, fault);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const std::exception& e) {
    // bad_alloc from a document too large for memory; the lexer itself reports by callback.
    return absl::InvalidArgumentError(absl::StrCat("cannot read the JSON: ", e.what()));
  }
  if (!ok) {
    return absl::InvalidArgumentError(sax.message().empty() ? "invalid JSON" : sax.message());
  }
  return sax.TakeRoot();
}

size_t OrderedObjectBuilder::Find(std::string_view key) const {
  if (members_.size() < kIndexFrom) {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].first == key) return i;
    }
    return kNotFound;
  }
  auto it = index_.find(Sv(key));
  return it == index_.end() ? kNotFound : it->second;
}

void OrderedObjectBuilder::Set(std::string key, json value) {
  const size_t at = Find(key);
  if (at != kNotFound) {
    members_[at].second = std::move(value);
    return;
  }
  if (members_.size() + 1 == kIndexFrom) {
    for (size_t i = 0; i < members_.size(); ++i) index_.emplace(members_[i].first, i);
  }
  if (members_.size() + 1 >= kIndexFrom) index_.emplace(key, members_.size());
  members_.emplace_back(std::move(key), std::move(value));
}

json OrderedObjectBuilder::Take() {
  json out(json::value_t::object);
  // ordered_map is a vector of pairs; appending to it directly skips its emplace()'s search of
  // the keys so far (the quadratic step this reader exists to avoid). Keys are unique here.
  json::object_t::Container& storage = out.get_ref<json::object_t&>();
  storage.reserve(members_.size());
  for (auto& [key, value] : members_) storage.emplace_back(std::move(key), std::move(value));
  Clear();
  return out;
}

void OrderedObjectBuilder::Clear() {
  members_.clear();
  // clear() of a large table frees it; of an empty one it is skipped, so a frame reused for a
  // million small objects after one wide object costs nothing per object.
  if (!index_.empty()) index_.clear();
}

}  // namespace deltaserve::common
