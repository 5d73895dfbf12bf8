// Unit tests of common/json_reader: the linear reader gives the same document as nlohmann's
// ordered_json parse (key order, values, duplicate keys: last value at the first position),
// refuses what nlohmann refuses (syntax, invalid UTF-8, 1e400, trailing bytes), and stops at
// each limit with the limit's name and the JSON path where it was passed. Speed is not
// asserted here (no timed tests): bench/request_parse_bench.cc measures it.

#include "common/json_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltaserve::common {
namespace {

using json = nlohmann::ordered_json;

constexpr JsonReadLimits kNoLimits = kNoJsonReadLimits;

TEST(JsonReaderTest, SameDocumentAsNlohmannsParse) {
  const std::vector<std::string> docs = {
      R"({"z":1,"a":[true,false,null],"m":{"y":"s\u00e9\n","b":-2.5e3,"k":18446744073709551615}})",
      R"([1,-1,0.5,"",{},[],[[]],{"":{"":0}}])",
      R"("just a string")",
      "  42  ",
      R"({"tools":[{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}]})",
  };
  for (const std::string& text : docs) {
    absl::StatusOr<json> got = ReadOrderedJson(text, kNoLimits);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(got->dump(), json::parse(text).dump()) << text;
  }
}

TEST(JsonReaderTest, DuplicateKeysLastValueWinsAtTheFirstPosition) {
  // Few keys (a scan finds the duplicate) and many (the hash index does), as Python's json does.
  absl::StatusOr<json> small = ReadOrderedJson(R"({"a":1,"b":2,"a":3})", kNoLimits);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->dump(), R"({"a":3,"b":2})");
  EXPECT_EQ(small->dump(), json::parse(R"({"a":1,"b":2,"a":3})").dump());

  std::string wide = "{";
  for (int i = 0; i < 100; ++i) absl::StrAppend(&wide, "\"k", i, "\":", i, ",");
  wide += R"("k7":"again","k99":"last"})";
  absl::StatusOr<json> got = ReadOrderedJson(wide, kNoLimits);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 100u);
  EXPECT_EQ((*got)["k7"], "again");
  EXPECT_EQ((*got)["k99"], "last");
  EXPECT_EQ(got->begin().key(), "k0");
  EXPECT_EQ(got->dump(), json::parse(wide).dump());
}

TEST(JsonReaderTest, RefusesWhatIsNotJson) {
  const std::vector<std::string> bad = {"",      "{",        "[1,]",   R"({"a" 1})",
                                        "{} x",  "\"\xff\"", "1e400",  R"({"a":-1e999})",
                                        "[1 2]", "nul",      "{'a':1}"};
  for (const std::string& text : bad) {
    JsonReadFault fault;
    absl::StatusOr<json> got = ReadOrderedJson(text, kNoLimits, &fault);
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_FALSE(got.status().message().empty()) << text;
    EXPECT_EQ(fault.kind, JsonReadFault::Kind::kSyntax) << text;
  }
}

TEST(JsonReaderTest, EachLimitNamesItselfAndWhere) {
  struct Case {
    std::string text;
    JsonReadLimits limits;
    std::string limit;
    std::string path;
  };
  const std::vector<Case> cases = {
      {R"({"a":{"b":[[1]]}})", {.max_depth = 3}, "max_json_depth", "a.b[0]"},
      {"[[[]]]", {.max_depth = 2}, "max_json_depth", "[0][0]"},
      {R"({"m":{"x":1,"y":2,"z":3}})", {.max_object_keys = 2}, "max_object_keys", "m"},
      {R"({"a":1,"b":2,"c":3})", {.max_object_keys = 2}, "max_object_keys", ""},
      {R"({"p":[0,{"q":[1,2,3]}]})", {.max_array_elements = 2}, "max_array_elements", "p[1].q"},
      {R"({"a":[],"b":[{},[]]})", {.max_containers = 4}, "max_json_containers", "b[1]"},
  };
  for (const Case& c : cases) {
    JsonReadFault fault;
    absl::StatusOr<json> got = ReadOrderedJson(c.text, c.limits, &fault);
    ASSERT_FALSE(got.ok()) << c.text;
    EXPECT_EQ(fault.kind, JsonReadFault::Kind::kLimit) << c.text;
    EXPECT_EQ(fault.limit, c.limit) << c.text;
    EXPECT_EQ(fault.path, c.path) << c.text;
    EXPECT_NE(got.status().message().find(c.limit), absl::string_view::npos) << got.status();
  }
  // A duplicate key adds no key, so an object at its limit may repeat one.
  EXPECT_TRUE(ReadOrderedJson(R"({"a":1,"b":2,"a":3})", {.max_object_keys = 2}).ok());
  // At the limit exactly is fine.
  EXPECT_TRUE(ReadOrderedJson("[[1,2]]", {.max_depth = 2, .max_array_elements = 2}).ok());
}

TEST(JsonReaderTest, ReadsTwoHundredThousandKeysInOrder) {
  // Issue 17's shape: nlohmann's ordered_json parse took 33.7 s on it. Only the result is
  // checked here; the time per MB is in docs/benchmarks.md.
  std::string text = "{";
  for (int i = 0; i < 200'000; ++i) absl::StrAppend(&text, i ? "," : "", "\"k", i, "\":", i);
  text += "}";
  absl::StatusOr<json> got = ReadOrderedJson(text, kNoLimits);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 200'000u);
  int expected = 0;
  for (auto it = got->begin(); it != got->end(); ++it, ++expected) {
    ASSERT_EQ(it.key(), absl::StrCat("k", expected));
    ASSERT_EQ(it.value(), expected);
  }
  JsonReadFault fault;
  EXPECT_FALSE(ReadOrderedJson(text, JsonReadLimits{}, &fault).ok());
  EXPECT_EQ(fault.limit, "max_object_keys");
}

TEST(JsonReaderTest, ManySmallContainersAndDeepNestingWithinLimits) {
  std::string tiny = "[";
  for (int i = 0; i < 100'000; ++i) tiny += i ? ",[],{}" : "[],{}";
  tiny += "]";
  absl::StatusOr<json> got = ReadOrderedJson(tiny, JsonReadLimits{});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 200'000u);

  const std::string deep = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(ReadOrderedJson(deep, JsonReadLimits{}).ok());
  const std::string deeper = std::string(65, '[') + std::string(65, ']');
  EXPECT_FALSE(ReadOrderedJson(deeper, JsonReadLimits{}).ok());
}

TEST(OrderedObjectBuilderTest, SetReplacesInPlaceAndTakeEmpties) {
  OrderedObjectBuilder b;
  for (int i = 0; i < 40; ++i) b.Set(absl::StrCat("k", 39 - i), i);
  b.Set("k39", "first");
  EXPECT_TRUE(b.Contains("k0"));
  EXPECT_FALSE(b.Contains("k40"));
  json out = b.Take();
  EXPECT_EQ(out.size(), 40u);
  EXPECT_EQ(out.begin().key(), "k39");
  EXPECT_EQ(out["k39"], "first");
  EXPECT_EQ(b.size(), 0u);
  b.Set("x", 1);
  EXPECT_EQ(b.Take().dump(), R"({"x":1})");
}

}  // namespace
}  // namespace deltaserve::common
