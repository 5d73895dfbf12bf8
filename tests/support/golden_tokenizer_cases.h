// The tokenization cases of ../shared/golden/tokenizer-*.json (llama.cpp's output for a
// 46-string corpus), decoded into plain structs for tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltaserve::testing {

// One corpus string and what llama.cpp made of it.
struct GoldenTokenizerCase {
  std::string text;
  std::vector<int32_t> ids;        // add_special=false, parse_special=true
  std::vector<int32_t> ids_plain;  // parse_special=false
  std::vector<std::string> pieces;  // bytes of llama_token_to_piece(special=true) per id
  std::string detok;               // llama_detokenize(ids, unparse_special=true)
};

// Reads golden file `json_name` (e.g. "tokenizer-tiny-vocab2048.json"); the calling test fails
// when it is missing or malformed.
std::vector<GoldenTokenizerCase> LoadGoldenTokenizerCases(const std::string& json_name);

}  // namespace deltaserve::testing
