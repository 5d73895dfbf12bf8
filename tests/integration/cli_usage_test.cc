// Every DeltaServe program behaves like a command-line tool: `--help` and `-h` print the usage on
// stdout and exit 0 (nothing on stderr), and an unknown flag exits 2 with the program's name, the
// problem and the usage on stderr (nothing on stdout). The programs are the ones README.md and
// docs/ tell users to run; each runs as a real process.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Program {
  const char* path;   // in the build tree
  const char* name;   // as it names itself
  const char* usage;  // a piece of its usage line
  // Arguments that come before the flags (a subcommand), for the unknown-flag run.
  std::vector<std::string> before;
};

const std::vector<Program>& Programs() {
  static const std::vector<Program> programs = {
      {"router/deltaserve-router", "deltaserve-router", "--listen HOST:PORT", {}},
      {"worker/deltaserve-worker", "deltaserve-worker", "--model NAME=PATH.gguf", {}},
      {"worker/deltaserve-run", "deltaserve-run", "-m FILE -p TEXT", {}},
      {"common/deltaserve-gguf", "deltaserve-gguf", "deltaserve-gguf tokenize FILE", {"info"}},
      {"worker/deltaserve-synth", "deltaserve-synth", "--preset P", {}},
      {"worker/deltaserve-plan", "deltaserve-plan", "--vram SIZE", {}},
      {"worker/deltaserve-grammar", "deltaserve-grammar", "deltaserve-grammar compile", {"check"}},
      {"worker/deltaserve-peak-rss", "deltaserve-peak-rss", "--parallel P", {}},
      {"router/deltaserve-chat", "deltaserve-chat", "deltaserve-chat render", {"render"}},
      {"router/deltaserve-placement-sim", "deltaserve-placement-sim", "--synthetic-trace", {}},
  };
  return programs;
}

ProcessResult RunProgram(const Program& p, std::vector<std::string> args) {
  args.insert(args.begin(), BinaryPath(p.path));
  return RunProcess(args);
}

TEST(CliUsage, HelpPrintsTheUsageOnStdoutAndExitsZero) {
  for (const Program& p : Programs()) {
    for (const char* flag : {"--help", "-h"}) {
      SCOPED_TRACE(std::string(p.name) + " " + flag);
      const ProcessResult r = RunProgram(p, {flag});
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_THAT(r.out, StartsWith("usage:"));
      EXPECT_THAT(r.out, HasSubstr(p.usage));
      EXPECT_EQ(r.err, "");
    }
  }
}

TEST(CliUsage, HelpAfterOtherArgumentsStillHelps) {
  // `prog sub --help` and `prog --flag value --help`, as people type them.
  for (const Program& p : Programs()) {
    SCOPED_TRACE(p.name);
    std::vector<std::string> args = p.before;
    args.push_back("--help");
    const ProcessResult r = RunProgram(p, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(p.usage));
  }
}

TEST(CliUsage, AnUnknownFlagExitsTwoWithTheUsageOnStderr) {
  for (const Program& p : Programs()) {
    SCOPED_TRACE(p.name);
    std::vector<std::string> args = p.before;
    args.push_back("--no-such-flag");
    const ProcessResult r = RunProgram(p, args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, StartsWith(std::string(p.name) + ": "));
    EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
    EXPECT_THAT(r.err, HasSubstr("usage:"));
    EXPECT_THAT(r.err, HasSubstr(p.usage));
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace deltaserve::testing
