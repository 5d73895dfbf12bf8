#include "tests/support/golden_tokenizer_cases.h"

#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

// A piece is a string, or {"hex": "..."} when its bytes are not valid UTF-8 on their own.
std::string PieceBytes(const nlohmann::json& piece) {
  if (piece.is_string()) return piece.get<std::string>();
  const std::string hex = piece.at("hex").get<std::string>();
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

}  // namespace

std::vector<GoldenTokenizerCase> LoadGoldenTokenizerCases(const std::string& json_name) {
  std::vector<GoldenTokenizerCase> cases;
  std::ifstream in(GoldenPath(json_name));
  if (!in) {
    ADD_FAILURE() << "cannot read " << json_name;
    return cases;
  }
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("cases")) {
    ADD_FAILURE() << json_name << " is not a golden tokenizer file";
    return cases;
  }
  for (const nlohmann::json& c : doc["cases"]) {
    GoldenTokenizerCase gc;
    gc.text = c.at("text").get<std::string>();
    gc.ids = c.at("ids").get<std::vector<int32_t>>();
    gc.ids_plain = c.at("ids_plain").get<std::vector<int32_t>>();
    for (const nlohmann::json& p : c.at("pieces")) gc.pieces.push_back(PieceBytes(p));
    gc.detok = c.at("detok").get<std::string>();
    cases.push_back(std::move(gc));
  }
  return cases;
}

}  // namespace deltaserve::testing
