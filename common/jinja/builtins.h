// The engine's built-in vocabulary, shared by the parser (which refuses unknown names at load
// time) and the interpreter: filters (filters.cc), tests (tests.cc), the methods and attributes
// of strings, dicts and lists (methods.cc), and the Python operators (operators.cc).
//
// Failures are InvalidArgument whose message starts with the Python exception class jinja2 would
// raise ("TypeError: …", "UndefinedError: …"); the interpreter adds the template line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/jinja/value.h"

namespace deltaserve::common::jinja {

// The global functions every render starts with (globals.cc).
std::vector<std::pair<std::string, Value>> Globals();

bool HasFilter(std::string_view name);
bool HasTest(std::string_view name);

// Filters on strings and numbers (filters_text.cc), registered in filters.cc.
std::string TitleFilter(const std::string& s);
std::string HtmlEscape(const std::string& s);
absl::StatusOr<Value> ToJsonFilter(Interpreter& interp, const Value& value, CallArgs& args);
absl::StatusOr<Value> Indent(Interpreter& interp, const Value& value, CallArgs& args);
absl::StatusOr<Value> ToInt(Interpreter& interp, const Value& value, CallArgs& args);
absl::StatusOr<Value> ToFloat(Interpreter& interp, const Value& value, CallArgs& args);
absl::StatusOr<Value> Round(Interpreter& interp, const Value& value, CallArgs& args);

// value | name(args).
absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& value,
                                  CallArgs& args);
// value is name(args).
absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& value,
                               CallArgs& args);

// obj.name as jinja2's sandbox resolves it: methods of str/dict/list first (bound to obj), then
// dict keys and namespace attributes; missing → undefined; obj undefined → UndefinedError.
absl::StatusOr<Value> GetAttribute(const Value& obj, const std::string& name);
// obj[key]: indexes and keys first, then attributes; missing → undefined.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] on lists, tuples and strings (null parts absent).
absl::StatusOr<Value> GetSlice(const Value& obj, const Value* start, const Value* stop,
                               const Value* step);

// Python's binary operators: + - * / // % ** (op is the operator's text).
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
// Python's comparisons == != < <= > >= and `in` / `not in` (op "in" / "notin").
absl::StatusOr<bool> Compare(std::string_view op, const Value& a, const Value& b);
// Python's < for sorting: numbers, strings, sequences; other pairs are a TypeError.
absl::StatusOr<bool> LessThan(const Value& a, const Value& b);
// The items of iterating `v` (list/tuple items, dict keys, string characters; undefined: none).
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// len(v); undefined is 0.
absl::StatusOr<int64_t> Length(const Value& v);
// The "UndefinedError: …" of using an undefined value.
absl::Status UndefinedError(const Value& undefined);

// Strings by code point (Python indexes str by code point, not byte).
int64_t CodepointCount(std::string_view s);

// Python's str methods (string_methods.cc): whether `name` is one, and calling it on `self`.
bool IsStrMethod(const std::string& name);
absl::StatusOr<Value> CallStrMethod(const Value& self, const std::string& name, CallArgs& args);
// Helpers filters share with them. `chars` null: Unicode whitespace.
std::string PyStrip(std::string_view s, const std::u32string* chars, bool left, bool right);
// str(v) stripped as PyStrip does, keeping a string's context marks on the bytes that remain
// (the trim filter, str.strip/lstrip/rstrip): a template's `(header ~ content) | trim` keeps the
// header's special tokens. Call it inside the built-in's DerivedFromContextScope.
Value StripValue(const Value& v, const std::u32string* chars, bool left, bool right);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::vector<std::string> PySplitLines(std::string_view s);

}  // namespace deltaserve::common::jinja
