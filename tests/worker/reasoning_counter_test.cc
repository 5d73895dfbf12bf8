// ReasoningCounter (worker/service/reasoning_counter.h): the reasoning tokens of an output, with
// the block found as the router's output parser finds it (../shared/fixtures/toolcalls.md,
// rule 1). Token ids: 2024 `<think>`, 2025 `</think>` (the golden vocabulary's), 10 a blank
// token ("\n"), other ids text.
#include "worker/service/reasoning_counter.h"

#include <gtest/gtest.h>

#include <vector>

namespace deltaserve::worker {
namespace {

constexpr int32_t kOpen = 2024, kClose = 2025, kBlank = 10;

int64_t Count(const std::vector<int32_t>& tokens, bool prompt_opened, int32_t start = kOpen) {
  ReasoningCounter c(start, kClose, prompt_opened);
  for (int32_t t : tokens) c.Feed(t, t == kBlank);
  return c.count();
}

TEST(ReasoningCounterTest, PromptOpenedBlockEndsAtItsClose) {
  EXPECT_EQ(Count({1, 2, kBlank, 3, kClose, kBlank, 4, 5}, true), 4);
  EXPECT_EQ(Count({kClose, 4}, true), 0);  // an empty block
}

TEST(ReasoningCounterTest, BlockNeverClosedRunsToTheEnd) {
  EXPECT_EQ(Count({1, 2, 3}, true), 3);
  EXPECT_EQ(Count({kOpen, 1, 2}, false), 2);
}

TEST(ReasoningCounterTest, GeneratedOpenerOnlyBeforeAnyText) {
  // Blank tokens before the opener are neither reasoning nor text.
  EXPECT_EQ(Count({kBlank, kOpen, 1, 2, kClose, 3}, false), 2);
  // A `<think>` after text is text; no orphan close follows: no reasoning.
  EXPECT_EQ(Count({1, kOpen, 2, 3}, false), 0);
}

TEST(ReasoningCounterTest, OrphanCloseMakesEverythingBeforeItReasoning) {
  EXPECT_EQ(Count({1, 2, kClose, 3}, false), 2);
  // The late `<think>` is text of that prefix, so it counts with it.
  EXPECT_EQ(Count({1, kOpen, 2, kClose, 3}, false), 3);
}

TEST(ReasoningCounterTest, OpenerWrittenAgainAfterThePromptsIsSkipped) {
  EXPECT_EQ(Count({kOpen, 1, 2, kClose}, true), 2);
  EXPECT_EQ(Count({kBlank, kOpen, 1, kClose}, true), 2);  // the blank is inside the block
  // After text, a `<think>` inside the block is just a token of it.
  EXPECT_EQ(Count({1, kOpen, 2, kClose}, true), 3);
}

TEST(ReasoningCounterTest, OnlyTheFirstBlockCounts) {
  EXPECT_EQ(Count({kOpen, 1, kClose, 2, kOpen, 3, 4, kClose}, false), 1);
  EXPECT_EQ(Count({1, kClose, 2, kClose, 3}, true), 1);
}

TEST(ReasoningCounterTest, NoMarkupCountsNothing) {
  EXPECT_EQ(Count({kOpen, 1, 2, kClose}, false, /*start=*/-1), 0);
  EXPECT_EQ(Count({1, 2}, true, /*start=*/-1), 0);
}

TEST(ReasoningCounterTest, BlankText) {
  EXPECT_TRUE(IsBlankText(""));
  EXPECT_TRUE(IsBlankText(" \n\t\r\f\v"));
  EXPECT_FALSE(IsBlankText(" a"));
  EXPECT_FALSE(IsBlankText("\xc2\xa0"));  // a no-break space is text, as the parser sees it
}

}  // namespace
}  // namespace deltaserve::worker
