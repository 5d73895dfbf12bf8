#include "tests/support/tokenizer_proto.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::testing {

namespace pb = deltaserve::v1;

absl::StatusOr<pb::Tokenizer> TokenizerProtoFromGguf(const common::GgufFile& file) {
  pb::Tokenizer t;
  auto missing = [](std::string_view key) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF has no usable ", common::Sv(key)));
  };
  auto model = file.GetString("tokenizer.ggml.model");
  auto pre = file.GetString("tokenizer.ggml.pre");
  if (!model.ok()) return missing("tokenizer.ggml.model");
  if (!pre.ok()) return missing("tokenizer.ggml.pre");
  t.set_model(std::string(*model));
  t.set_pre(std::string(*pre));
  auto tokens = file.GetArray("tokenizer.ggml.tokens");
  auto types = file.GetArray("tokenizer.ggml.token_type");
  auto merges = file.GetArray("tokenizer.ggml.merges");
  if (!tokens.ok()) return missing("tokenizer.ggml.tokens");
  if (!types.ok()) return missing("tokenizer.ggml.token_type");
  if (!merges.ok()) return missing("tokenizer.ggml.merges");
  for (uint64_t i = 0; i < (*tokens)->ArraySize(); ++i) {
    auto s = (*tokens)->ArrayString(i);
    if (!s) return missing("tokenizer.ggml.tokens string");
    t.add_tokens(std::string(*s));
  }
  for (uint64_t i = 0; i < (*types)->ArraySize(); ++i) {
    auto v = (*types)->ArrayInt(i);
    if (!v) return missing("tokenizer.ggml.token_type integer");
    t.add_token_types(static_cast<pb::TokenType>(*v));
  }
  for (uint64_t i = 0; i < (*merges)->ArraySize(); ++i) {
    auto s = (*merges)->ArrayString(i);
    if (!s) return missing("tokenizer.ggml.merges string");
    t.add_merges(std::string(*s));
  }
  pb::SpecialTokens* sp = t.mutable_special();
  if (auto v = file.GetInt("tokenizer.ggml.bos_token_id"); v.ok())
    sp->set_bos_id(static_cast<int32_t>(*v));
  if (auto v = file.GetInt("tokenizer.ggml.eos_token_id"); v.ok())
    sp->set_eos_id(static_cast<int32_t>(*v));
  if (auto v = file.GetInt("tokenizer.ggml.padding_token_id"); v.ok())
    sp->set_pad_id(static_cast<int32_t>(*v));
  if (auto v = file.GetBool("tokenizer.ggml.add_bos_token"); v.ok()) sp->set_add_bos(*v);
  return t;
}

absl::StatusOr<pb::Tokenizer> TokenizerProtoFromGgufPath(const std::string& path) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return TokenizerProtoFromGguf(**file);
}

}  // namespace deltaserve::testing
