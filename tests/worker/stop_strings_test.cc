// StopStringMatcher: text released up to the first stop string and never part of one, however
// the text is split into deltas. Expected outputs are written out by hand from the inputs.
#include "worker/service/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deltaserve::worker {
namespace {

// Feeds `deltas`, then flushes; returns everything released.
std::string PushAll(StopStringMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const std::string& d : deltas) out += m.Push(d);
  return out + m.Flush();
}

TEST(StopStringMatcherTest, StopsBeforeTheStopStringAcrossDeltas) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(PushAll(m, {"hello E", "N", "D world"}), "hello ");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_string(), "END");
}

TEST(StopStringMatcherTest, HoldsBackOnlyWhatCouldStartAStopString) {
  StopStringMatcher m({"###"});
  EXPECT_EQ(m.Push("ab#"), "ab");  // "#" might start "###"
  EXPECT_EQ(m.Push("#c"), "##c");  // "##c" cannot
  EXPECT_EQ(m.Push("d"), "d");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, FlushReleasesAnUnfinishedPrefix) {
  StopStringMatcher m({"</s>"});
  EXPECT_EQ(m.Push("text</"), "text");
  EXPECT_EQ(m.Flush(), "</");
}

TEST(StopStringMatcherTest, EarliestOfSeveralStopStringsWins) {
  StopStringMatcher m({"world", "lo w"});
  EXPECT_EQ(PushAll(m, {"hello world"}), "hel");
  EXPECT_EQ(m.matched_string(), "lo w");
}

TEST(StopStringMatcherTest, NothingAfterAMatchAndEmptyStopsIgnored) {
  StopStringMatcher m({"", "x"});
  EXPECT_EQ(m.Push("abxcd"), "ab");
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
  StopStringMatcher none({});
  EXPECT_EQ(PushAll(none, {"a", "b"}), "ab");
}

TEST(StopStringMatcherTest, MultiByteTextIsNotSplit) {
  StopStringMatcher m({"é!"});
  EXPECT_EQ(m.Push("café"), "caf");  // "é" could start "é!"
  EXPECT_EQ(m.Push("?"), "é?");
}

}  // namespace
}  // namespace deltaserve::worker
