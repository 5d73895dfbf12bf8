// deltaserve-placement-sim as a real process: a recorded trace (written with RoutingTraceWriter)
// and a synthetic one give one JSON object with every policy; bad command lines exit 2, traces,
// profiles and models that cannot be read exit 1, each with a message naming the problem.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/routing_trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;

ProcessResult Sim(std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath("router/deltaserve-placement-sim"));
  return RunProcess(args);
}

class PlacementSimCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("placement_sim_cli_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A 4-layer, 16-expert, top-2 trace: 200 decode steps, experts 0..3 hot, and one prefill pass.
  std::string WriteTrace() {
    common::RoutingTraceHeader h{4, 16, 2, {}, "cli-test"};
    auto w = common::RoutingTraceWriter::Create(Path("t.trace"), h);
    EXPECT_TRUE(w.ok()) << w.status();
    std::vector<int32_t> prefill;
    for (int i = 0; i < 4 * 100 * 2; ++i) prefill.push_back(i % 16);
    EXPECT_TRUE((*w)->Append(prefill, 100, 2).ok());
    for (int s = 0; s < 200; ++s) {
      std::vector<int32_t> ids;
      for (int l = 0; l < 4; ++l) {
        ids.push_back(s % 4);
        ids.push_back(4 + s % 12);
      }
      EXPECT_TRUE((*w)->Append(ids, 1, 2).ok());
    }
    EXPECT_TRUE((*w)->Close().ok());
    return Path("t.trace");
  }

  void WriteFile(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary) << text;
  }

  std::filesystem::path dir_;
};

TEST_F(PlacementSimCli, ARecordedTracePrintsEveryPolicy) {
  ProcessResult r = Sim({"--trace", WriteTrace(), "--profile", "rtx4090", "--expert-vram", "4GiB",
                         "--model", "35b-a3b", "--sweep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"all_cpu", "n_cpu_moe", "static", "dynamic", "all_gpu"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_GT(j[key].get<double>(), 0) << key;
    EXPECT_TRUE(j["policies"].contains(key)) << key;
  }
  EXPECT_EQ(j["trace"]["steps"], 201);
  EXPECT_EQ(j["trace"]["decode_steps"], 200);
  EXPECT_EQ(j["trace"]["model_name"], "cli-test");
  // 4 trace layers over 40 model layers, 16 experts over 256: the mapping is stated.
  EXPECT_THAT(j["trace"]["mapping"].get<std::string>(), HasSubstr("trace layer"));
  EXPECT_EQ(j["model"]["n_layer"], 40);
  EXPECT_EQ(j["profile"]["name"], "rtx4090");
  EXPECT_LE(j["policies"]["n_cpu_moe"]["device_expert_bytes"].get<uint64_t>(), 4ull << 30);
  EXPECT_FALSE(j["n_cpu_moe_sweep"].empty());
  // The router's plan is costed for the simulated machine unless told otherwise; the
  // per-expert loop runs beside it.
  EXPECT_EQ(j["policies"]["dynamic"]["plan_profile"], "rtx4090");
  EXPECT_GE(j["policies"]["dynamic"]["whole_layers"].get<int>(), 0);
  EXPECT_GT(j["policies"]["dynamic_per_expert"]["tok_s"].get<double>(), 0);
  ProcessResult h = Sim({"--trace", WriteTrace(), "--profile", "rtx4090", "--expert-vram", "4GiB",
                         "--plan-profile", "h100"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(nlohmann::json::parse(h.out)["policies"]["dynamic"]["plan_profile"], "h100");
}

TEST_F(PlacementSimCli, ASyntheticTraceNeedsNoFileAndReplaysTheSameFromOne) {
  ProcessResult r =
      Sim({"--synthetic-trace", "--skew", "1.0", "--steps", "500", "--profile", "h100", "--model",
           "122b-a10b", "--expert-vram", "20GiB", "--write-trace", Path("synthetic.trace")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trace"]["source"], "synthetic");
  EXPECT_EQ(j["trace"]["n_layer"], 48);
  EXPECT_GE(j["dynamic"].get<double>(), j["all_cpu"].get<double>());
  // The written trace replays to the same figures.
  ProcessResult again = Sim({"--trace", Path("synthetic.trace"), "--profile", "h100", "--model",
                             "122b-a10b", "--expert-vram", "20GiB"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const nlohmann::json k = nlohmann::json::parse(again.out);
  for (const char* key : {"all_cpu", "n_cpu_moe", "static", "dynamic"}) {
    EXPECT_DOUBLE_EQ(k[key].get<double>(), j[key].get<double>()) << key;
  }
}

TEST_F(PlacementSimCli, BadCommandLinesExit2) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const std::string trace = WriteTrace();
  const Case cases[] = {
      {{"--profile", "rtx4090", "--expert-vram", "1GiB"}, "exactly one of --trace"},
      {{"--trace", trace, "--synthetic-trace", "--profile", "rtx4090", "--expert-vram", "1G"},
       "exactly one of --trace"},
      {{"--trace", trace, "--expert-vram", "1GiB"}, "--profile is required"},
      {{"--trace", trace, "--profile", "rtx4090"}, "--expert-vram SIZE is required"},
      {{"--trace", trace, "--profile", "rtx4090", "--expert-vram", "lots"}, "size 'lots'"},
      {{"--synthetic-trace", "--skew", "-1", "--profile", "h100", "--expert-vram", "1G"},
       "--skew '-1'"},
      {{"--trace", trace, "--profile", "rtx4090", "--expert-vram", "1G", "--bogus"},
       "unknown argument '--bogus'"},
  };
  for (const Case& c : cases) {
    ProcessResult r = Sim(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_TRUE(r.out.empty());
  }
}

TEST_F(PlacementSimCli, UnreadableInputsExit1NamingThem) {
  WriteFile("garbage.trace", std::string(200, 'x'));
  const std::string full = WriteTrace();
  std::string bytes;
  {
    std::ifstream in(full, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  WriteFile("cut.trace", bytes.substr(0, bytes.size() - 3));
  WriteFile("bad-profile.json", R"({"base": "rtx4090", "cpu_bandwidth_gbs": -4})");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"--trace", Path("absent.trace")}, "cannot open routing trace"},
      {{"--trace", Path("garbage.trace")}, "no DSROUTE magic"},
      {{"--trace", Path("cut.trace")}, "the file ends mid-record"},
      {{"--trace", full, "--profile", "a100"}, "unknown profile 'a100' (one of rtx4090, h100"},
      {{"--trace", full, "--profile", Path("bad-profile.json")}, "\"cpu_bandwidth_gbs\""},
      {{"--trace", full, "--profile", Path("absent.json")}, "cannot open profile file"},
      {{"--trace", full, "--model", "27b"}, "unknown model '27b'"},
      {{"--trace", full, "--plan-profile", "a100"}, "unknown profile 'a100'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    for (const char* a : {"--expert-vram", "1GiB"}) args.push_back(a);
    if (std::find(args.begin(), args.end(), "--profile") == args.end()) {
      args.push_back("--profile");
      args.push_back("rtx4090");
    }
    ProcessResult r = Sim(args);
    EXPECT_EQ(r.exit_code, 1) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_TRUE(r.out.empty());
  }
  // A cut last record is accepted on request: the complete records are simulated.
  ProcessResult r = Sim({"--trace", Path("cut.trace"), "--allow-truncated", "--profile", "rtx4090",
                         "--expert-vram", "1GiB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trace"]["steps"], 200);
  EXPECT_GT(j["trace"]["truncated_tail_bytes"].get<int>(), 0);
}

}  // namespace
}  // namespace deltaserve::testing
