// Counts the generated tokens that lie inside the model's reasoning block (`<think>` ...
// `</think>`), for the usage the worker reports (proto Usage.reasoning_tokens; the APIs'
// reasoning_tokens). The block is found at token level with the rule the router's output parser
// applies to the text (../shared/fixtures/toolcalls.md, rule 1), so the count matches the
// reasoning the client is shown:
//   - the prompt left a block open (a generation prompt ending in `<think>\n`): reasoning starts
//     at the first generated token;
//   - a `<think>` token opens the block only while nothing but whitespace has been generated
//     (a later `<think>` is answer text); when the prompt opened the block, a `<think>` the model
//     writes again before any text is skipped, as the router skips it;
//   - a `</think>` with no opener before it makes every token before it reasoning;
//   - the block ends at its `</think>`; one never closed runs to the end of the output.
// The markers themselves are not counted, and only the first block is (a second one would be
// answer text to the router). The stop token is not fed (it is not output).
//
//   ReasoningCounter c(rt.start, rt.end.front(), PromptOpensReasoning(prompt, ...));
//   for (token : output) c.Feed(token, IsBlank(tokenizer.Piece(token)));
//   usage.set_reasoning_tokens(c.count());
#pragma once

#include <cstdint>
#include <string_view>

namespace deltaserve::worker {

class ReasoningCounter {
 public:
  // `start` < 0: the model has no reasoning markup and nothing is counted.
  ReasoningCounter(int32_t start, int32_t end, bool prompt_opened);

  // One generated token, in order; `blank`: its text is empty or only whitespace.
  void Feed(int32_t token, bool blank);

  // Tokens inside the reasoning block so far.
  int64_t count() const { return count_; }

 private:
  enum class State {
    kBefore,    // nothing but whitespace so far, no block: `<think>` may still open one
    kNoOpener,  // text came first: only an orphan `</think>` can make it reasoning
    kInside,    // inside the block
    kDone,      // the block closed (or there is no markup): nothing more is counted
  };
  int32_t start_;
  int32_t end_;
  State state_;
  bool reopen_skippable_;  // the prompt opened the block and no text has come yet
  int64_t before_ = 0;     // kBefore / kNoOpener: tokens generated so far
  int64_t count_ = 0;
};

// True when `text` is empty or only ASCII whitespace (space, \t, \n, \r, \f, \v).
bool IsBlankText(std::string_view text);

}  // namespace deltaserve::worker
