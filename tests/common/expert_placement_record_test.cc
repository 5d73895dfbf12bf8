// The Redis record of a model's expert placement (common/expert_placement_record.h): round trip,
// the key, and every refusal of a blob that is not a record we wrote.
#include "common/expert_placement_record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common {
namespace {

ExpertPlacementRecord Sample() {
  ExpertPlacementRecord r;
  r.model_fingerprint = "0123456789abcdef";
  r.n_layer = 3;
  r.n_expert = 4;
  r.half_life_seconds = 300;
  r.updated_unix_ms = 1795000000123;
  r.heat = {{0, 1.5, 1e-7, 12345.678901234567}, {3, 0, 0, 7}, {0.1, 0.2, 0.30000000000000004, 9}};
  r.device = ExpertPlacement::Empty(3, 4);
  r.device.device = {{3}, {0, 3}, {}};
  return r;
}

// Sample()'s JSON with `edit` applied.
std::string Edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json doc = nlohmann::json::parse(SerializeExpertPlacementRecord(Sample()));
  edit(doc);
  return doc.dump();
}

std::string Refusal(std::string_view bytes) {
  absl::StatusOr<ExpertPlacementRecord> r = ParseExpertPlacementRecord(bytes);
  EXPECT_FALSE(r.ok()) << bytes.substr(0, 200);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(ExpertPlacementRecordTest, RoundTripsExactly) {
  const ExpertPlacementRecord r = Sample();
  ASSERT_TRUE(ValidateExpertPlacementRecord(r).ok());
  const std::string blob = SerializeExpertPlacementRecord(r);
  absl::StatusOr<ExpertPlacementRecord> back = ParseExpertPlacementRecord(blob);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(SerializeExpertPlacementRecord(*back), blob);
}

TEST(ExpertPlacementRecordTest, WritesTheDocumentedFields) {
  nlohmann::json doc = nlohmann::json::parse(SerializeExpertPlacementRecord(Sample()));
  EXPECT_EQ(doc["format"], "deltaserve-expert-placement");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["model_fingerprint"], "0123456789abcdef");
  EXPECT_EQ(doc["n_layer"], 3);
  EXPECT_EQ(doc["n_expert"], 4);
  EXPECT_EQ(doc["half_life_seconds"], 300.0);
  EXPECT_EQ(doc["updated_unix_ms"], 1795000000123);
  EXPECT_EQ(doc["heat"][1], nlohmann::json({3.0, 0.0, 0.0, 7.0}));
  EXPECT_EQ(doc["device"], nlohmann::json({{3}, {0, 3}, nlohmann::json::array()}));
}

TEST(ExpertPlacementRecordTest, Key) {
  EXPECT_EQ(ExpertPlacementRecordKey("00ff"), "deltaserve:placement:v1:00ff");
}

TEST(ExpertPlacementRecordTest, UnknownKeysAreIgnored) {
  absl::StatusOr<ExpertPlacementRecord> r = ParseExpertPlacementRecord(
      Edited([](nlohmann::json& d) { d["written_by"] = "a later router"; }));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Sample());
}

TEST(ExpertPlacementRecordTest, RefusesWhatIsNotARecord) {
  EXPECT_NE(Refusal("").find("expert placement record: "), std::string::npos);
  EXPECT_NE(Refusal("[1,2]").find("expected a JSON object, got an array"), std::string::npos);
  EXPECT_NE(Refusal("{\"format\":\"x\"}").find("\"format\" must be"), std::string::npos);
  EXPECT_NE(Refusal(Edited([](nlohmann::json& d) {
              d["version"] = 2;
            })).find("version 2 is not supported (this build reads 1)"),
            std::string::npos);
  EXPECT_NE(Refusal(Edited([](nlohmann::json& d) { d.erase("heat"); })).find("\"heat\" is missing"),
            std::string::npos);
  EXPECT_NE(Refusal(SerializeExpertPlacementRecord(Sample()) + "x").find("expert placement record"),
            std::string::npos);
}

TEST(ExpertPlacementRecordTest, RefusesBadFields) {
  const struct {
    std::function<void(nlohmann::json&)> edit;
    std::string message;
  } cases[] = {
      {[](auto& d) { d["model_fingerprint"] = ""; }, "model_fingerprint must be 1 to 128"},
      {[](auto& d) { d["model_fingerprint"] = "ABCD"; }, "lowercase hex"},
      {[](auto& d) { d["model_fingerprint"] = "../../x"; }, "lowercase hex"},
      {[](auto& d) { d["model_fingerprint"] = std::string(129, 'a'); }, "1 to 128"},
      {[](auto& d) { d["model_fingerprint"] = 7; }, "must be a string, got a number"},
      {[](auto& d) { d["n_layer"] = 0; }, "n_layer is 0, not in [1, 1024]"},
      {[](auto& d) { d["n_layer"] = 1.5; }, "n_layer must be a whole number, got a fraction"},
      {[](auto& d) { d["n_layer"] = "3"; }, "n_layer must be a whole number, got a string"},
      {[](auto& d) { d["n_expert"] = 4097; }, "n_expert is 4097, not in [1, 4096]"},
      {[](auto& d) { d["n_expert"] = ~uint64_t{0}; }, "n_expert is out of range"},
      {[](auto& d) { d["half_life_seconds"] = 0; }, "half_life_seconds must be a positive"},
      {[](auto& d) { d["half_life_seconds"] = -3; }, "half_life_seconds must be a positive"},
      {[](auto& d) { d["updated_unix_ms"] = -1; }, "updated_unix_ms is -1"},
      {[](auto& d) { d["heat"] = 5; }, "heat must be an array, got a number"},
      {[](auto& d) { d["heat"].erase(0); }, "heat has 2 entries, expected 3"},
      {[](auto& d) { d["heat"][1].push_back(1); }, "heat[1] has 5 entries, expected 4"},
      {[](auto& d) { d["heat"][2][1] = -0.5; }, "heat[2][1] is negative (-0.5)"},
      {[](auto& d) { d["heat"][2][1] = nullptr; }, "heat[2][1] must be a number, got null"},
      {[](auto& d) { d["heat"][0][0] = "1"; }, "heat[0][0] must be a number, got a string"},
      {[](auto& d) { d["device"][0] = {4}; }, "device[0][0] is 4, not in [0, 3]"},
      {[](auto& d) { d["device"][0] = {-1}; }, "device[0][0] is -1, not in [0, 3]"},
      {[](auto& d) {
         d["device"][1] = {3, 0};
       },
       "device: layer 1: expert 0 is out of ascending"},
      {[](auto& d) {
         d["device"][1] = {3, 3};
       },
       "device: layer 1: expert 3 is listed twice"},
      {[](auto& d) {
         d["device"][1] = {0, 1, 2, 3, 3};
       },
       "device[1] lists 5 experts"},
      {[](auto& d) { d["device"].push_back(nlohmann::json::array()); },
       "device has 4 entries, expected 3"},
      {[](auto& d) { d["device"][2] = {true}; }, "device[2][0] must be a whole number, got a bool"},
  };
  for (const auto& c : cases) {
    const std::string message = Refusal(Edited(c.edit));
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "expected \"" << c.message << "\" in \"" << message << "\"";
  }
}

TEST(ExpertPlacementRecordTest, NumbersBeyondDoubleAreRefused) {
  // JSON cannot spell NaN or infinity; a number beyond double's range is the closest a blob gets.
  std::string blob = SerializeExpertPlacementRecord(Sample());
  blob = absl::StrReplaceAll(blob, {{"12345.678901234567", "1e999"}});
  EXPECT_NE(Refusal(blob).find("expert placement record"), std::string::npos);
}

TEST(ExpertPlacementRecordTest, SizesOverTheBoundsAreRefusedBeforeBuildingThem) {
  // 300 layers x 4000 experts: both under their own bound, the product over the cell bound.
  EXPECT_NE(Refusal(Edited([](auto& d) {
              d["n_layer"] = 300;
              d["n_expert"] = 4000;
            })).find("300 layers x 4000 experts exceeds 1048576"),
            std::string::npos);
  // An array longer than any row may be fails while reading.
  std::string long_row = "[";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&long_row, i == 0 ? "" : ",", "0");
  long_row += "]";
  EXPECT_NE(Refusal(absl::StrCat("{\"heat\":[", long_row, "]}")).find("max_array_elements"),
            std::string::npos);
  // Deeper nesting than a record has.
  EXPECT_NE(Refusal("{\"heat\":[[[1]]]}").find("max_json_depth"), std::string::npos);
  // More bytes than a record may have: refused before reading them.
  EXPECT_NE(Refusal(std::string(kMaxPlacementRecordBytes + 1, ' ')).find("more than the"),
            std::string::npos);
}

TEST(ExpertPlacementRecordTest, ValidateNamesTheBadField) {
  ExpertPlacementRecord r = Sample();
  r.heat[1][2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ValidateExpertPlacementRecord(r).message(),
            "expert placement record: heat[1][2] is not finite");
  r = Sample();
  r.device = ExpertPlacement::Empty(3, 5);
  EXPECT_EQ(ValidateExpertPlacementRecord(r).message(),
            "expert placement record: device is shaped 3 x 5, the record 3 x 4");
  r = Sample();
  r.heat.pop_back();
  EXPECT_EQ(ValidateExpertPlacementRecord(r).message(),
            "expert placement record: heat has 2 entries, expected 3");
  r = Sample();
  r.half_life_seconds = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ValidateExpertPlacementRecord(r).ok());
}

}  // namespace
}  // namespace deltaserve::common
