#include "router/chat/message_boundaries.h"

namespace deltaserve::router::chat {

TurnEndTokens FindTurnEndTokens(const common::Tokenizer& tokenizer,
                                const deltaserve::v1::Tokenizer* proto) {
  TurnEndTokens t;
  if (proto != nullptr && proto->special().has_eot_id() && proto->special().eot_id() >= 0 &&
      proto->special().eot_id() < tokenizer.vocab_size()) {
    t.eot_id = proto->special().eot_id();
  } else {
    t.eot_id = tokenizer.Find("<|im_end|>");
  }
  // Looked up by its decoded text: the vocabulary spells "\n" in the byte-level alphabet.
  const std::vector<common::TokenId> nl = tokenizer.Encode("\n", /*parse_special=*/false);
  if (nl.size() == 1 && tokenizer.Piece(nl[0]) == "\n") t.newline_id = nl[0];
  return t;
}

std::vector<int32_t> MessageBoundaries(absl::Span<const int32_t> ids, int32_t eot_id,
                                       int32_t newline_id) {
  std::vector<int32_t> out;
  if (eot_id < 0) return out;
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] != eot_id) continue;
    const size_t end = i + 1 < n && newline_id >= 0 && ids[i + 1] == newline_id ? i + 2 : i + 1;
    // Ends rise with i unless newline_id == eot_id (a malformed vocabulary): keep them unique.
    if (out.empty() || static_cast<int32_t>(end) > out.back()) {
      out.push_back(static_cast<int32_t>(end));
    }
  }
  return out;
}

}  // namespace deltaserve::router::chat
