#pragma once
// Seeds of the router's fuzz targets, written by fuzz_seed_corpus:
//   request_parser-seeds/   OpenAI request bodies (first byte: 0 chat, 1 completions) — valid
//                           ones using every field, and a few near misses;
//   router_config-seeds/    router YAML configs (first byte 0) and API-keys files (first byte 1);
//   tokenizer_proto-seeds/  the serialized deltaserve.v1.Tokenizer of the tiny golden model.

#include <filesystem>

namespace deltaserve::testing {

// Each returns the number of seeds written into `dir`, or -1 (with a message on stderr).
int WriteRequestSeeds(const std::filesystem::path& dir);
int WriteRouterConfigSeeds(const std::filesystem::path& dir);
int WriteTokenizerProtoSeeds(const std::filesystem::path& golden,
                             const std::filesystem::path& dir);

}  // namespace deltaserve::testing
