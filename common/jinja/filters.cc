// jinja2's built-in filters as jinja2 3.1 defines them, plus transformers' tojson
// (json.dumps with ensure_ascii=False by default). Filters that stringify take str(value), so an
// undefined value reads as ''.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"
#include "common/jinja/interpreter.h"
#include "common/unicode.h"

namespace deltaserve::common::jinja {
namespace {

using FilterFn = absl::StatusOr<Value> (*)(Interpreter&, const Value&, CallArgs&);

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: ", absl::string_view(message.data(), message.size())));
}

// Argument i (positional after the value) or keyword `name`; null when absent.
const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  if (i < args.positional.size()) return &args.positional[i];
  return args.Keyword(name);
}

bool BoolArg(const CallArgs& args, size_t i, std::string_view name, bool fallback) {
  const Value* v = Arg(args, i, name);
  return v == nullptr ? fallback : v->Truthy();
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
absl::StatusOr<Value> AttrGet(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(item, attribute);
  Value v = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) {
      DS_JINJA_ASSIGN_OR_RETURN(v,
                                GetItem(v, Value(static_cast<int64_t>(std::atoll(part.c_str())))));
    } else {
      DS_JINJA_ASSIGN_OR_RETURN(v, GetItem(v, Value(part)));
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Sort key for sort/unique/dictsort/min/max: lower-cased strings unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(PyLower(v.as_string()));
  return v;
}

absl::Status SortValues(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (!error.ok()) return false;
    auto less = reverse ? LessThan(b.first, a.first) : LessThan(a.first, b.first);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  return error;
}

absl::StatusOr<Value> Select(Interpreter& interp, const Value& value, CallArgs& args, bool by_attr,
                             bool keep) {
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) return TypeError("selectattr/rejectattr need an attribute");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return TypeError("the test name must be a string");
    test = args.positional[next++].as_string();
    if (!HasTest(test))
      return absl::InvalidArgumentError(absl::StrCat("No test named '", test, "'."));
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                              args.positional.end());
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      DS_JINJA_ASSIGN_OR_RETURN(subject, AttrGet(item, attribute));
    }
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      CallArgs a = test_args;
      DS_JINJA_ASSIGN_OR_RETURN(pass, ApplyTest(interp, test, subject, a));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> MapFilter(Interpreter& interp, const Value& value, CallArgs& args) {
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> out;
  if (const Value* attribute = args.Keyword("attribute"); attribute != nullptr) {
    const Value* def = args.Keyword("default");
    for (const Value& item : items) {
      DS_JINJA_ASSIGN_OR_RETURN(Value v, AttrGet(item, *attribute));
      if (v.is_undefined() && def != nullptr) v = *def;
      out.push_back(std::move(v));
    }
    return Value::Generator(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return TypeError("map needs a filter name or attribute=");
  }
  const std::string name = args.positional[0].as_string();
  if (!HasFilter(name))
    return absl::InvalidArgumentError(absl::StrCat("No filter named '", name, "'."));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    CallArgs a = rest;
    DS_JINJA_ASSIGN_OR_RETURN(Value v, ApplyFilter(interp, name, item, a));
    out.push_back(std::move(v));
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> SortFilter(Interpreter&, const Value& value, CallArgs& args) {
  const bool reverse = BoolArg(args, 0, "reverse", false);
  const bool case_sensitive = BoolArg(args, 1, "case_sensitive", false);
  const Value* attribute = Arg(args, 2, "attribute");
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = SortKey(item, case_sensitive);
    if (attribute != nullptr && !attribute->is_none()) {
      // jinja2 sorts by a list of attribute values; equal (even undefined) keys never compare.
      DS_JINJA_ASSIGN_OR_RETURN(key, AttrGet(item, *attribute));
      key = Value::List({SortKey(key, case_sensitive)}, /*is_tuple=*/true);
    }
    keyed.emplace_back(std::move(key), item);
  }
  DS_JINJA_RETURN_IF_ERROR(SortValues(keyed, reverse));
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& value, CallArgs& args, bool want_max) {
  const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  const Value* attribute = Arg(args, 1, "attribute");
  DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (attribute != nullptr && !attribute->is_none()) {
      DS_JINJA_ASSIGN_OR_RETURN(key, AttrGet(items[i], *attribute));
    }
    key = SortKey(key, case_sensitive);
    if (i == 0) {
      best_key = key;
      continue;
    }
    DS_JINJA_ASSIGN_OR_RETURN(bool better,
                              want_max ? LessThan(best_key, key) : LessThan(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

const absl::flat_hash_map<std::string, FilterFn>& Filters() {
  static const auto*
      filters =
          new absl::flat_hash_map<std::string, FilterFn>{
              {"tojson", ToJsonFilter},
              {"indent", Indent},
              {"int", ToInt},
              {"float", ToFloat},
              {"round", Round},
              {"map", MapFilter},
              {"sort", SortFilter},
              {"string",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return v.is_string() ? v : Value(v.Str());
               }},
              {"safe",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return v.is_string() ? v : Value(v.Str());
               }},
              {"e",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(HtmlEscape(v.Str()));
               }},
              {"escape",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(HtmlEscape(v.Str()));
               }},
              {"forceescape",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(HtmlEscape(v.Str()));
               }},
              {"upper",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(PyUpper(v.Str()));
               }},
              {"lower",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(PyLower(v.Str()));
               }},
              {"title",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(TitleFilter(v.Str()));
               }},
              {"capitalize",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 return Value(PyCapitalize(v.Str()));
               }},
              {"trim",
               [](Interpreter&, const Value& v, CallArgs& args) -> absl::StatusOr<Value> {
                 const Value* chars = Arg(args, 0, "chars");
                 if (chars == nullptr || chars->is_none())
                   return StripValue(v, nullptr, true, true);
                 const std::u32string set = DecodeCodepoints(chars->Str());
                 return StripValue(v, &set, true, true);
               }},
              {"length",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 DS_JINJA_ASSIGN_OR_RETURN(int64_t n, Length(v));
                 return Value(n);
               }},
              {"count",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 DS_JINJA_ASSIGN_OR_RETURN(int64_t n, Length(v));
                 return Value(n);
               }},
              {"wordcount",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 int64_t words = 0;
                 bool in_word = false;
                 for (char32_t c : DecodeCodepoints(v.Str())) {
                   const bool w = c == '_' || (CodepointClass(static_cast<uint32_t>(c)) &
                                               (kClassLetter | kClassNumber)) != 0;
                   if (w && !in_word) ++words;
                   in_word = w;
                 }
                 return Value(words);
               }},
              {"default",
               [](Interpreter&, const Value& v, CallArgs& args) -> absl::StatusOr<Value> {
                 const Value* def = Arg(args, 0, "default_value");
                 const bool boolean = BoolArg(args, 1, "boolean", false);
                 if (v.is_undefined() || (boolean && !v.Truthy()))
                   return def != nullptr ? *def : Value(std::string());
                 return v;
               }},
              {"d", nullptr},  // alias of default, filled below
              {"items",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 if (v.is_undefined()) return Value::Generator({});
                 if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
                 std::vector<Value> items;
                 for (const auto& [k, val] : v.as_dict().items)
                   items.push_back(Value::List({k, val}, true));
                 return Value::Generator(std::move(items));
               }},
              {"join",
               [](Interpreter&, const Value& v, CallArgs& args) -> absl::StatusOr<Value> {
                 const Value* sep = Arg(args, 0, "d");
                 const Value* attribute = Arg(args, 1, "attribute");
                 DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
                 // Concatenation: each piece keeps its own marks.
                 MarkedText out;
                 for (size_t i = 0; i < items.size(); ++i) {
                   Value item = items[i];
                   if (attribute != nullptr && !attribute->is_none()) {
                     DS_JINJA_ASSIGN_OR_RETURN(item, AttrGet(item, *attribute));
                   }
                   if (i > 0 && sep != nullptr) sep->AppendTo(out);
                   item.AppendTo(out);
                   DS_JINJA_RETURN_IF_ERROR(Interpreter::CheckStringSize(out.text.size()));
                 }
                 return Value::Marked(std::move(out));
               }},
              {"list",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
                 return Value::List(std::move(items));
               }},
              {"first",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
                 if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
                 return items.front();
               }},
              {"last",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
                 if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
                 return items.back();
               }},
              {"reverse",
               [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
                 if (v.is_string()) {
                   std::u32string u = DecodeCodepoints(v.as_string());
                   std::reverse(u.begin(), u.end());
                   return Value(EncodeCodepoints(u));
                 }
                 DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
                 std::reverse(items.begin(), items.end());
                 return Value::Generator(std::move(items));  // a reverse iterator
               }},
              {"replace",
               [](Interpreter& interp, const Value& v, CallArgs& args) -> absl::StatusOr<Value> {
                 DS_JINJA_ASSIGN_OR_RETURN(Value method, GetAttribute(Value(v.Str()), "replace"));
                 return interp.Call(method, args);
               }},
              {"abs",
               [](Interpreter&, const Value& v, CallArgs&)
                   -> absl::
                       StatusOr<Value> {
                         if (v.is_float()) return Value(std::fabs(v.as_double()));
                         if (v.is_int() || v.is_bool()) {
                           if (v.as_int() == INT64_MIN)
                             return absl::InvalidArgumentError("OverflowError: integer overflow");
                           return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
                         }
                         return TypeError(
                             absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
                       }},
              {"attr",
               [](Interpreter&, const Value& v,
                  CallArgs& args) -> absl::
                                      StatusOr<Value> {
                                        const Value* name = Arg(args, 0, "name");
                                        if (name == nullptr || !name->is_string())
                                          return TypeError("attr needs a name");
                                        if (v.is_dict()) {
                                          const std::string& n = name->as_string();
                                          if (n != "items" && n != "keys" && n != "values" &&
                                              n != "get" && n != "copy") {
                                            return Value::Undefined(absl::StrCat(
                                                "'dict object' has no attribute '", n, "'"));
                                          }
                                        }
                                        return GetAttribute(v, name->as_string());
                                      }},
              {"select", [](Interpreter& i, const Value& v,
                            CallArgs& a) { return Select(i, v, a, false, true); }},
              {"reject", [](Interpreter& i, const Value& v,
                            CallArgs& a) { return Select(i, v, a, false, false); }},
              {"selectattr", [](Interpreter& i, const Value& v,
                                CallArgs& a) { return Select(i, v, a, true, true); }},
              {"rejectattr", [](Interpreter& i, const Value& v,
                                CallArgs& a) { return Select(i, v, a, true, false); }},
              {"unique",
               [](Interpreter&, const Value& v, CallArgs& args)
                   -> absl::
                       StatusOr<Value> {
                         const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
                         const Value* attribute = Arg(args, 1, "attribute");
                         DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
                         std::vector<Value> seen;
                         std::vector<Value> out;
                         for (const Value& item : items) {
                           Value key = item;
                           if (attribute != nullptr && !attribute->is_none()) {
                             DS_JINJA_ASSIGN_OR_RETURN(key, AttrGet(item, *attribute));
                           }
                           key = SortKey(key, case_sensitive);
                           if (std::none_of(seen.begin(), seen.end(),
                                            [&](const Value& s) { return ValuesEqual(s, key); })) {
                             seen.push_back(key);
                             out.push_back(item);
                           }
                         }
                         return Value::Generator(std::move(out));
                       }},
              {"dictsort",
               [](Interpreter&, const Value& v, CallArgs& args) -> absl::StatusOr<Value> {
                 if (!v.is_dict())
                   return absl::InvalidArgumentError(
                       "FilterArgumentError: dictsort needs a mapping");
                 const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
                 const Value* by = Arg(args, 1, "by");
                 const bool by_value = by != nullptr && by->Str() == "value";
                 const bool reverse = BoolArg(args, 2, "reverse", false);
                 std::vector<std::pair<Value, Value>> keyed;
                 for (const auto& [k, val] : v.as_dict().items) {
                   keyed.emplace_back(SortKey(by_value ? val : k, case_sensitive),
                                      Value::List({k, val}, true));
                 }
                 DS_JINJA_RETURN_IF_ERROR(SortValues(keyed, reverse));
                 std::vector<Value> out;
                 for (auto& [key, pair] : keyed) out.push_back(std::move(pair));
                 return Value::List(std::move(out));
               }},
              {"min",
               [](Interpreter&, const Value& v, CallArgs& a) { return MinMax(v, a, false); }},
              {"max", [](Interpreter&, const Value& v, CallArgs& a) { return MinMax(v, a, true); }},
              {"sum",
               [](Interpreter&, const Value& v,
                  CallArgs& args) -> absl::
                                      StatusOr<Value> {
                                        const Value* attribute = Arg(args, 0, "attribute");
                                        const Value* start = Arg(args, 1, "start");
                                        Value total = start != nullptr ? *start : Value(int64_t{0});
                                        DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items,
                                                                  Iterate(v));
                                        for (const Value& item : items) {
                                          Value x = item;
                                          if (attribute != nullptr && !attribute->is_none()) {
                                            DS_JINJA_ASSIGN_OR_RETURN(x, AttrGet(item, *attribute));
                                          }
                                          DS_JINJA_ASSIGN_OR_RETURN(total, BinaryOp("+", total, x));
                                        }
                                        return total;
                                      }},
              {"center",
               [](Interpreter&, const Value& v, CallArgs& args)
                   -> absl::
                       StatusOr<Value> {
                         const Value* w = Arg(args, 0, "width");
                         const int64_t width = w != nullptr && w->is_int()
                                                   ? std::min<int64_t>(w->as_int(), 1 << 20)
                                                   : 80;
                         const std::string s = v.Str();
                         const int64_t len = CodepointCount(s);
                         if (width <= len) return Value(s);
                         const int64_t marg = width - len;
                         const int64_t left = marg / 2 + (marg & width & 1);
                         return Value(std::string(static_cast<size_t>(left), ' ') + s +
                                      std::string(static_cast<size_t>(marg - left), ' '));
                       }},
              {"batch",
               [](Interpreter&, const Value& v,
                  CallArgs& args) -> absl::
                                      StatusOr<Value> {
                                        const Value* n = Arg(args, 0, "linecount");
                                        if (n == nullptr || !n->is_int() || n->as_int() <= 0)
                                          return TypeError("batch needs a positive count");
                                        const Value* fill = Arg(args, 1, "fill_with");
                                        DS_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items,
                                                                  Iterate(v));
                                        std::vector<Value> out;
                                        std::vector<Value> cur;
                                        for (const Value& item : items) {
                                          cur.push_back(item);
                                          if (static_cast<int64_t>(cur.size()) == n->as_int()) {
                                            out.push_back(Value::List(std::move(cur)));
                                            cur.clear();
                                          }
                                        }
                                        if (!cur.empty()) {
                                          if (fill != nullptr && !fill->is_none()) {
                                            while (static_cast<int64_t>(cur.size()) < n->as_int())
                                              cur.push_back(*fill);
                                          }
                                          out.push_back(Value::List(std::move(cur)));
                                        }
                                        return Value::Generator(std::move(out));
                                      }},
          };
  return *filters;
}

}  // namespace

bool HasFilter(std::string_view name) {
  return Filters().contains(absl::string_view(name.data(), name.size()));
}

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& value,
                                  CallArgs& args) {
  if (name == "d") name = "default";
  auto it = Filters().find(absl::string_view(name.data(), name.size()));
  if (it == Filters().end() || it->second == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("No filter named '", absl::string_view(name.data(), name.size()), "'."));
  }
  return it->second(interp, value, args);
}

}  // namespace deltaserve::common::jinja
