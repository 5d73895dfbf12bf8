#include "router/chat/tokenizer_from_proto.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace deltaserve::router::chat {

absl::StatusOr<std::unique_ptr<common::Tokenizer>> TokenizerFromProto(
    const deltaserve::v1::Tokenizer& proto) {
  if (proto.model() != "gpt2") {
    return absl::UnimplementedError(absl::StrCat("tokenizer.model is '", proto.model(),
                                                 "'; only byte-level BPE ('gpt2') is supported"));
  }
  const int n = proto.tokens_size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer.tokens: empty vocabulary");
  if (proto.token_types_size() != 0 && proto.token_types_size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.token_types: ", proto.token_types_size(), " entries for ", n, " tokens"));
  }
  common::TokenizerVocab vocab;
  vocab.pre = proto.pre();
  vocab.tokens.assign(proto.tokens().begin(), proto.tokens().end());
  vocab.types.reserve(proto.token_types_size());
  for (int i = 0; i < proto.token_types_size(); ++i) {
    const int t = proto.token_types(i);  // proto3 enums are open: any int32 may arrive
    if (t < 0 || t > static_cast<int>(common::TokenType::kByte)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.token_types[", i, "]: ", t, " is not a token type"));
    }
    vocab.types.push_back(static_cast<common::TokenType>(t));
  }
  vocab.merges.assign(proto.merges().begin(), proto.merges().end());

  const deltaserve::v1::SpecialTokens& sp = proto.special();
  auto special = [&](bool has, int32_t id, const char* field,
                     common::TokenId& out) -> absl::Status {
    if (!has) return absl::OkStatus();
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.special.", field, ": ", id, " is not a token id below ", n));
    }
    out = id;
    return absl::OkStatus();
  };
  if (auto s = special(sp.has_bos_id(), sp.bos_id(), "bos_id", vocab.bos_id); !s.ok()) return s;
  if (auto s = special(sp.has_eos_id(), sp.eos_id(), "eos_id", vocab.eos_id); !s.ok()) return s;
  if (auto s = special(sp.has_pad_id(), sp.pad_id(), "pad_id", vocab.pad_id); !s.ok()) return s;
  vocab.add_bos = sp.add_bos();

  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok =
      common::Tokenizer::Create(std::move(vocab));
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat("tokenizer from worker: ", tok.status().message()));
  }
  return tok;
}

}  // namespace deltaserve::router::chat
