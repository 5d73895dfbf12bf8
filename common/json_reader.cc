#include "common/json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

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

// Reads JSON text (RFC 8259, strict: what nlohmann::json::parse accepts, a leading UTF-8 BOM
// included) and builds the ordered_json as it goes, in one pass without recursion.
//
// Why not nlohmann's own SAX lexer (which this reader used before): it keeps every byte of the
// token in a vector and counts lines and columns as it goes, about 17 ms per MB of a body of
// tiny nested arrays, a third of the whole cost of the worst shape (issue 17's target is 50 ms
// per MB). Lines and columns are computed here only for an error message.
//
// One builder frame per open container, reused across siblings so that a million tiny arrays
// cost no per-array frame allocation.
class LinearJsonReader {
 public:
  LinearJsonReader(std::string_view text, const JsonReadLimits& limits, JsonReadFault* fault)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        limits_(limits),
        fault_(fault) {}

  bool Read();
  json TakeRoot() { return std::move(root_); }
  const std::string& message() const { return message_; }

 private:
  struct Frame {
    bool is_object = false;
    OrderedObjectBuilder object;  // is_object
    json array;                   // !is_object: the array being filled
    std::string key;              // is_object: the key whose value comes next
  };

  // --- lexing ---
  void SkipWhitespace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool ReadValue();  // one scalar, or the opening of a container
  bool ReadString(std::string& out);
  bool ReadEscape(std::string& out);
  bool ReadHex4(uint32_t& out);
  bool ReadNumber();
  bool ReadLiteral(std::string_view word, json value);
  bool Syntax(std::string_view what);

  // --- building ---
  bool Push(bool is_object);
  bool Add(json v);
  bool EndObject();
  bool EndArray();
  bool Key(std::string& k);
  std::string PathOfOpen(size_t n) const;
  bool Fail(JsonReadFault::Kind kind, std::string_view limit, std::string path,
            std::string_view what);

  const char* const begin_;
  const char* p_;
  const char* const end_;
  const JsonReadLimits limits_;
  JsonReadFault* const fault_;
  std::vector<Frame> frames_;  // frames_[0, depth_) are open
  size_t depth_ = 0;
  size_t containers_ = 0;  // arrays and objects opened so far
  json root_;
  std::string message_;
  std::string scratch_;  // a number's text, for strtod / strtoll
};

// The document is a state machine over the frame stack: after each value, close what ends,
// then expect the next value (after ',' in an array, or '"key":' in an object).
bool LinearJsonReader::Read() {
  if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;
  for (;;) {
    SkipWhitespace();
    const size_t depth_before = depth_;
    if (!ReadValue()) return false;
    if (depth_ > depth_before) {
      // A container opened: its first member, or its immediate end.
      SkipWhitespace();
      const Frame& f = frames_[depth_ - 1];
      if (p_ != end_ && *p_ == (f.is_object ? '}' : ']')) {
        ++p_;
        if (!(f.is_object ? EndObject() : EndArray())) return false;
      } else if (!f.is_object) {
        continue;  // the array's first element
      } else {
        goto object_key;
      }
    }
    // A value is complete: close the containers that end here, until one goes on.
    for (;;) {
      if (depth_ == 0) {
        SkipWhitespace();
        if (p_ != end_) return Syntax("unexpected content after the JSON value");
        return true;
      }
      SkipWhitespace();
      const bool in_object = frames_[depth_ - 1].is_object;
      if (p_ == end_) {
        return Syntax(in_object ? "unexpected end of input; expected ',' or '}'"
                                : "unexpected end of input; expected ',' or ']'");
      }
      if (*p_ == ',') {
        ++p_;
        if (in_object) goto object_key;
        break;  // the array's next element
      }
      if (*p_ == (in_object ? '}' : ']')) {
        ++p_;
        if (!(in_object ? EndObject() : EndArray())) return false;
        continue;
      }
      return Syntax(in_object ? "expected ',' or '}' after an object member"
                              : "expected ',' or ']' after an array element");
    }
    continue;

  object_key:
    SkipWhitespace();
    if (p_ == end_ || *p_ != '"') return Syntax("expected a string as the object key");
    {
      std::string key;
      if (!ReadString(key) || !Key(key)) return false;
    }
    SkipWhitespace();
    if (p_ == end_ || *p_ != ':') return Syntax("expected ':' after the object key");
    ++p_;
  }
}

bool LinearJsonReader::ReadValue() {
  if (p_ == end_) return Syntax("unexpected end of input; expected a value");
  switch (*p_) {
    case '{':
      ++p_;
      return Push(/*is_object=*/true);
    case '[':
      ++p_;
      return Push(/*is_object=*/false);
    case '"': {
      std::string s;
      return ReadString(s) && Add(json(std::move(s)));
    }
    case 't':
      return ReadLiteral("true", json(true));
    case 'f':
      return ReadLiteral("false", json(false));
    case 'n':
      return ReadLiteral("null", json(nullptr));
    default:
      if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) return ReadNumber();
      return Syntax("expected a value");
  }
}

bool LinearJsonReader::ReadLiteral(std::string_view word, json value) {
  if (static_cast<size_t>(end_ - p_) < word.size() ||
      std::memcmp(p_, word.data(), word.size()) != 0) {
    return Syntax("invalid literal");
  }
  p_ += word.size();
  return Add(std::move(value));
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, then as nlohmann reads it: an integer that
// fits int64 (negative) or uint64 (otherwise) stays an integer, anything else is a double.
bool LinearJsonReader::ReadNumber() {
  const char* start = p_;
  auto digits = [&] {
    const char* from = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ != from;
  };
  const bool negative = *p_ == '-';
  if (negative) ++p_;
  if (p_ != end_ && *p_ == '0') {
    ++p_;
  } else if (!digits()) {
    return Syntax("invalid number; expected a digit");
  }
  bool integer = true;
  if (p_ != end_ && *p_ == '.') {
    ++p_;
    integer = false;
    if (!digits()) return Syntax("invalid number; expected a digit after '.'");
  }
  if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
    ++p_;
    integer = false;
    if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    if (!digits()) return Syntax("invalid number; expected a digit in the exponent");
  }
  scratch_.assign(start, p_);
  if (integer) {
    errno = 0;
    char* stop = nullptr;
    if (negative) {
      const long long v = std::strtoll(scratch_.c_str(), &stop, 10);
      if (errno == 0 && stop == scratch_.c_str() + scratch_.size()) {
        return Add(json(static_cast<json::number_integer_t>(v)));
      }
    } else {
      const unsigned long long v = std::strtoull(scratch_.c_str(), &stop, 10);
      if (errno == 0 && stop == scratch_.c_str() + scratch_.size()) {
        return Add(json(static_cast<json::number_unsigned_t>(v)));
      }
    }
  }
  const double v = std::strtod(scratch_.c_str(), nullptr);
  // nlohmann's DOM parser throws out_of_range.406 here; a non-finite double is no JSON value.
  if (!std::isfinite(v)) {
    return Fail(JsonReadFault::Kind::kSyntax, "", "",
                absl::StrCat("number overflow parsing '", Clip(scratch_), "'"));
  }
  return Add(json(v));
}

bool LinearJsonReader::ReadHex4(uint32_t& out) {
  if (end_ - p_ < 4) return Syntax("invalid string: '\\u' must be followed by 4 hex digits");
  out = 0;
  for (int i = 0; i < 4; ++i, ++p_) {
    const char c = *p_;
    uint32_t d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return Syntax("invalid string: '\\u' must be followed by 4 hex digits");
    }
    out = out << 4 | d;
  }
  return true;
}

// After the backslash.
bool LinearJsonReader::ReadEscape(std::string& out) {
  if (p_ == end_) return Syntax("invalid string: unfinished escape");
  const char c = *p_++;
  switch (c) {
    case '"':
      out += '"';
      return true;
    case '\\':
      out += '\\';
      return true;
    case '/':
      out += '/';
      return true;
    case 'b':
      out += '\b';
      return true;
    case 'f':
      out += '\f';
      return true;
    case 'n':
      out += '\n';
      return true;
    case 'r':
      out += '\r';
      return true;
    case 't':
      out += '\t';
      return true;
    case 'u':
      break;
    default:
      return Syntax("invalid string: forbidden character after backslash");
  }
  uint32_t cp;
  if (!ReadHex4(cp)) return false;
  if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return Syntax("invalid string: a low surrogate must follow a high surrogate");
  }
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    uint32_t low;
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
      return Syntax("invalid string: a high surrogate must be followed by a low one");
    }
    p_ += 2;
    if (!ReadHex4(low)) return false;
    if (low < 0xDC00 || low > 0xDFFF) {
      return Syntax("invalid string: a high surrogate must be followed by a low one");
    }
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
  }
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return true;
}

// At the opening quote. Plain runs are appended in one piece; UTF-8 is checked as RFC 3629
// defines it (no overlong forms, no surrogates, nothing above U+10FFFF), as nlohmann does.
bool LinearJsonReader::ReadString(std::string& out) {
  ++p_;
  for (;;) {
    const char* run = p_;
    while (p_ != end_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++p_;
    }
    out.append(run, p_);
    if (p_ == end_) return Syntax("invalid string: missing closing quote");
    const unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      ++p_;
      return true;
    }
    if (c == '\\') {
      ++p_;
      if (!ReadEscape(out)) return false;
      continue;
    }
    if (c < 0x20) return Syntax("invalid string: control characters must be escaped");
    // A multi-byte sequence: the lead byte fixes the length and the second byte's range.
    int more;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return Syntax("invalid string: ill-formed UTF-8 byte");
    }
    if (end_ - p_ <= more) return Syntax("invalid string: ill-formed UTF-8 byte");
    for (int i = 1; i <= more; ++i) {
      const unsigned char b = static_cast<unsigned char>(p_[i]);
      if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) {
        return Syntax("invalid string: ill-formed UTF-8 byte");
      }
    }
    out.append(p_, p_ + more + 1);
    p_ += more + 1;
  }
}

bool LinearJsonReader::Syntax(std::string_view what) {
  // 1-based line and column (in bytes) of the offending byte, as editors count them.
  size_t line = 1;
  const char* line_start = begin_;
  for (const char* q = begin_; q < p_; ++q) {
    if (*q == '\n') {
      ++line;
      line_start = q + 1;
    }
  }
  return Fail(JsonReadFault::Kind::kSyntax, "", "",
              absl::StrCat("syntax error at line ", line, ", column ", p_ - line_start + 1,
                           " (byte ", p_ - begin_, "): ", Sv(what)));
}

bool LinearJsonReader::Key(std::string& k) {
  Frame& f = frames_[depth_ - 1];
  if (limits_.max_object_keys > 0 && f.object.size() >= limits_.max_object_keys &&
      !f.object.Contains(k)) {
    return Fail(JsonReadFault::Kind::kLimit, "max_object_keys", PathOfOpen(depth_),
                absl::StrCat("has more than ", limits_.max_object_keys, " keys"));
  }
  f.key = std::move(k);
  return true;
}

bool LinearJsonReader::EndObject() {
  json v = frames_[depth_ - 1].object.Take();
  --depth_;
  return Add(std::move(v));
}

bool LinearJsonReader::EndArray() {
  json v = std::move(frames_[depth_ - 1].array);
  --depth_;
  return Add(std::move(v));
}

bool LinearJsonReader::Push(bool is_object) {
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

bool LinearJsonReader::Add(json v) {
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
std::string LinearJsonReader::PathOfOpen(size_t n) const {
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

bool LinearJsonReader::Fail(JsonReadFault::Kind kind, std::string_view limit, std::string path,
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

}  // namespace

absl::StatusOr<json> ReadOrderedJson(std::string_view text, const JsonReadLimits& limits,
                                     JsonReadFault* fault) {
  if (fault != nullptr) *fault = JsonReadFault{};
  LinearJsonReader reader(text, limits, fault);
  bool ok = false;
  try {
    ok = reader.Read();
  } catch (const std::exception& e) {
    // bad_alloc from a document too large for memory; everything else fails by return value.
    return absl::InvalidArgumentError(absl::StrCat("cannot read the JSON: ", e.what()));
  }
  if (!ok) {
    return absl::InvalidArgumentError(reader.message().empty() ? "invalid JSON" : reader.message());
  }
  return reader.TakeRoot();
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
