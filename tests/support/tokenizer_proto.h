#pragma once
// Test support: the deltaserve.v1.Tokenizer message of a GGUF file, built from its
// tokenizer.ggml.* metadata alone (tokens, token types, merges, model, pre-tokenizer, special
// ids) — independent of the worker's own code that fills it — for the router's
// TokenizerFromProto tests and the tokenizer_proto fuzz target's seeds.

#include <string>

#include "absl/status/statusor.h"
#include "common/gguf_file.h"
#include "deltaserve/v1/worker.pb.h"

namespace deltaserve::testing {

// InvalidArgument naming the key when a tokenizer.ggml.* entry is missing or mistyped.
absl::StatusOr<deltaserve::v1::Tokenizer> TokenizerProtoFromGguf(const common::GgufFile& file);
// The same for the GGUF file at `path` (opened here; its error when it does not open).
absl::StatusOr<deltaserve::v1::Tokenizer> TokenizerProtoFromGgufPath(const std::string& path);

}  // namespace deltaserve::testing
