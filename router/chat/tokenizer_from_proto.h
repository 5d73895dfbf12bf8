#pragma once
// The router's tokenizer for a model, rebuilt from what the worker sent in ModelInfo
// (deltaserve.v1.Tokenizer: the GGUF tokenizer.ggml.* data), so prompts are tokenized in the
// router exactly as the worker's own common::Tokenizer would.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<common::Tokenizer> tok,
//                    TokenizerFromProto(model_info.tokenizer()));

#include <memory>

#include "absl/status/statusor.h"
#include "common/tokenizer.h"
#include "deltaserve/v1/worker.pb.h"

namespace deltaserve::router::chat {

// InvalidArgument / Unimplemented naming the field when the family is not "gpt2", the
// pre-tokenizer is unknown, token_types and tokens differ in length, a token type or special id
// is out of range, or a merge is malformed.
absl::StatusOr<std::unique_ptr<common::Tokenizer>> TokenizerFromProto(
    const deltaserve::v1::Tokenizer& proto);

}  // namespace deltaserve::router::chat
