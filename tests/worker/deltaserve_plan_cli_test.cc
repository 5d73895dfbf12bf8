// deltaserve-plan as a real process: the 9B plan prints every figure and the context table, a GGUF
// is planned from its tensor infos, --ctx checks a configuration, and bad flags or values exit
// non-zero with a message naming them.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

ProcessResult RunPlan(std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath("worker/deltaserve-plan"));
  return RunProcess(args);
}

// Figures from MODEL_SPEC §4 (see memory_plan_test.cc for their derivation).
TEST(DeltaservePlanCli, NineBEightGiBPrintsFiguresAndTable) {
  ProcessResult r = RunPlan(
      {"--preset", "9b", "--vram", "8GiB", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("preset 9b q4_k_m, VRAM budget 8.00 GiB (8,589,934,592 B)"));
  EXPECT_THAT(r.out, ContainsRegex("q8_0 / q8_0 +16,384 +17,408"));
  EXPECT_THAT(r.out, ContainsRegex("q8_0 / q4_0 +12,288 +13,312 .*<- chosen"));
  EXPECT_THAT(r.out, ContainsRegex("q4_0 / q4_0 +8,192 +9,216"));
  EXPECT_THAT(r.out, ContainsRegex("total +52,690,944 B"));
  EXPECT_THAT(r.out, HasSubstr("page: 256 tokens x 13,312 B = 3,407,872 B"));
  EXPECT_THAT(r.out, HasSubstr("max context"));
  for (const char* n : {"1", "2", "4", "8", "16", "32", "64"}) {
    EXPECT_THAT(r.out, ContainsRegex(std::string("\n +") + n + " +-?[0-9.]+ [KMG]iB +[0-9,]+ "))
        << n;
  }
}

TEST(DeltaservePlanCli, SixteenBitConvStateAndGoldenGguf) {
  ProcessResult r = RunPlan({"--preset=9b", "--ram=64G", "--conv-state", "f16", "--type", "q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("total +51,511,296 B"));
  EXPECT_THAT(r.out, HasSubstr("RAM budget 64.00 GiB"));

  // tiny-dense: 2 attention layers x (K + V) x 2 heads x 64 x 2 B = 1,024 B/token at f16.
  r = RunPlan({"-m", GoldenPath("tiny-dense-f32.gguf"), "--ram", "1GiB", "--page-tokens", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("f16 / f16 +1,024 +1,024 .*<- chosen"));
  EXPECT_THAT(r.out, ContainsRegex("f32 +109 +15,8"));
  EXPECT_THAT(r.out, HasSubstr("(trained context)"));
}

TEST(DeltaservePlanCli, CtxCheckPassesOrExplainsTheShortfall) {
  ProcessResult r =
      RunPlan({"--preset", "9b", "--vram", "8GiB", "--ctx", "32768", "--parallel", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("context 32768 x 2 sequences fits"));

  r = RunPlan({"--preset", "9b", "--vram", "8GiB", "--ctx", "262144", "--parallel", "8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("context 262144 x 8 sequences does not fit in VRAM 8.00 GiB"));
  EXPECT_THAT(r.err, HasSubstr("max context"));
}

TEST(DeltaservePlanCli, BadFlagsAndValuesExitNonZeroWithAMessage) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    const char* message;
  };
  const Case cases[] = {
      {{"--preset", "9b"}, 2, "give exactly one of --vram SIZE and --ram SIZE"},
      {{"--preset", "9b", "--vram", "8GiB", "--ram", "8GiB"}, 2, "give exactly one of --vram"},
      {{"--vram", "8GiB"}, 2, "give exactly one of -m FILE.gguf and --preset"},
      {{"--preset", "9b", "--vram", "8GiB", "--frobnicate"}, 2, "unknown argument '--frobnicate'"},
      {{"--preset", "9b", "--vram"}, 2, "--vram needs a value"},
      {{"--preset", "9b", "--vram", "lots"}, 1, "size 'lots'"},
      {{"--preset", "9b", "--vram", "8XB"}, 1, "unknown unit 'XB'"},
      {{"--preset", "9b", "--vram", "0"}, 1, "the budget must be above 0"},
      {{"--preset", "9b", "--vram", "8GiB", "--cache-type-k", "q4_k"},
       1,
       "unknown cache type 'q4_k' (one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0)"},
      {{"--preset", "9b", "--vram", "8GiB", "--conv-state", "q8_0"},
       1,
       "unknown conv state type 'q8_0'"},
      {{"--preset", "9b", "--vram", "8GiB", "--page-tokens", "0"},
       2,
       "--page-tokens '0' is not a whole number in 1..65536"},
      {{"--preset", "9b", "--vram", "8GiB", "--threads", "x"}, 2, "--threads 'x'"},
      {{"--preset", "7b", "--vram", "8GiB"}, 1, "unknown preset '7b'"},
      {{"--preset", "9b", "--type", "q3_k", "--vram", "8GiB"}, 1, "unknown weight type 'q3_k'"},
      {{"-m", "/nonexistent/model.gguf", "--vram", "8GiB"}, 1, "/nonexistent/model.gguf"},
      {{"-m", "x.gguf", "--type", "q8_0", "--vram", "8GiB"}, 2, "--type applies to --preset only"},
      {{"--preset", "9b", "--vram", "8GiB", "--parallel", "4"}, 2, "--parallel needs --ctx"},
  };
  for (const Case& c : cases) {
    ProcessResult r = RunPlan(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, HasSubstr("deltaserve-plan: "));
  }
}

TEST(DeltaservePlanCli, HelpListsEveryFlag) {
  ProcessResult r = RunPlan({"--help"});
  ASSERT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--preset", "--type", "--vram", "--ram", "--cache-type-k", "--cache-type-v",
        "--page-tokens", "--conv-state", "--batch-tokens", "--threads", "35b-a3b"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace deltaserve::testing
