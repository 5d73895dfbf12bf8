// RunProcess (tests/support/subprocess.h): exit status and both outputs, and its deadline: a
// child that outlives it, one that closes its output but keeps running, and a process it started
// that holds the output open are all killed, and the result says it timed out.
#include "tests/support/subprocess.h"

#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(RunProcessTest, ExitStatusAndBothOutputs) {
  ProcessResult r = RunProcess({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_FALSE(r.timed_out);
  // No input: a child reading stdin sees its end at once.
  r = RunProcess({"/bin/sh", "-c", "cat; echo done"});
  EXPECT_EQ(r.out, "done\n");
  EXPECT_FALSE(r.timed_out);
  r = RunProcess({"/nonexistent/program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/program"));
}

// Each child would run 300 s (ctest's limit would end the test first) without the deadline.
TEST(RunProcessTest, AChildPastItsTimeoutIsKilled) {
  ProcessResult r =
      RunProcess({"/bin/sh", "-c", "echo started; exec sleep 300"}, milliseconds(300));
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r.out, "started\n");  // what it wrote before is kept
  EXPECT_THAT(r.err, HasSubstr("[RunProcess: /bin/sh killed after 300 ms: it, or a process it "
                               "started, was still running]"));
}

TEST(RunProcessTest, AChildThatClosedItsOutputIsStillWaitedForWithTheDeadline) {
  ProcessResult r =
      RunProcess({"/bin/sh", "-c", "exec >/dev/null 2>&1; exec sleep 300"}, milliseconds(300));
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
}

TEST(RunProcessTest, WhatTheChildStartedIsKilledToo) {
  // The shell exits at once; the sleep it left behind holds stdout and stderr open.
  ProcessResult r = RunProcess({"/bin/sh", "-c", "sleep 300 & echo $!"}, milliseconds(300));
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);  // the shell itself had exited
  const std::string pid = r.out.substr(0, r.out.find('\n'));
  ASSERT_FALSE(pid.empty()) << r.out;
  // The sleep is gone (or a zombie waiting for its reaper) soon after the kill was sent.
  auto alive = [&pid] {
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (alive() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE(alive()) << "the sleep " << pid << " the child started still runs";
}

}  // namespace
}  // namespace deltaserve::testing
