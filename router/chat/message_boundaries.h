// Where the messages of a rendered ChatML prompt end, in tokens: the positions the router sends
// as GenerateRequest.message_boundaries so that a worker snapshots the sequence where the next
// turn of the conversation branches off (docs/router.md, "Message boundaries"; issue 11). The
// rule needs no template: a ChatML-family template ends every message with the end-of-turn
// token and one newline, and the generation prompt (`<|im_start|>assistant\n`) has neither.
//
//   TurnEndTokens t = FindTurnEndTokens(tokenizer, model.tokenizer.get());
//   std::vector<int32_t> b = MessageBoundaries(prompt_ids, t.eot_id, t.newline_id);
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/tokenizer.h"
#include "deltaserve/v1/worker.pb.h"

namespace deltaserve::router::chat {

// The tokens a ChatML template writes after a message: the end of turn and a newline.
struct TurnEndTokens {
  int32_t eot_id = -1;      // `<|im_end|>`; -1 when the vocabulary has none
  int32_t newline_id = -1;  // the token whose text is exactly "\n"; -1 when none
};

// `proto`'s SpecialTokens.eot_id when it is set and inside the vocabulary, else the id of
// `<|im_end|>` (workers need not fill eot_id; every ChatML vocabulary has that token). `proto`
// may be null.
TurnEndTokens FindTurnEndTokens(const common::Tokenizer& tokenizer,
                                const deltaserve::v1::Tokenizer* proto);

// For each i with ids[i] == eot_id: i + 2 when ids[i + 1] == newline_id, else i + 1. Ascending,
// unique, each in [1, ids.size()]. Empty when eot_id < 0.
std::vector<int32_t> MessageBoundaries(absl::Span<const int32_t> ids, int32_t eot_id,
                                       int32_t newline_id);

}  // namespace deltaserve::router::chat
