// Unit tests of common/flags: each value kind stored from `--flag value` and `--flag=value`, each
// problem (missing, invalid, out of range, unknown, a value to a switch) with its default and its
// own message, aliases in messages, positional arguments, and the help listing. The expected
// messages are the ones the CLIs print (deltaserve-plan's defaults, the worker's own per flag).
#include "common/flags.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using Args = std::vector<std::string>;

// Bytes as digits, or digits and "KiB": a stand-in for worker/cache's ParseByteSize.
absl::StatusOr<uint64_t> ParseTestSize(std::string_view text) {
  uint64_t scale = 1;
  if (text.size() > 3 && text.substr(text.size() - 3) == "KiB") {
    scale = 1024;
    text.remove_suffix(3);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(Sv(text), &n)) {
    return absl::InvalidArgumentError(absl::StrCat("size '", Sv(text), "' is not a size"));
  }
  return n * scale;
}

TEST(FlagsTest, StringTakesTheNextArgumentOrTheTextAfterEquals) {
  std::string listen = "default";
  const std::vector<Flag> flags = {StringFlag("--listen", &listen)};
  EXPECT_EQ(ParseFlags(flags, Args{}), "");
  EXPECT_EQ(listen, "default");
  EXPECT_EQ(ParseFlags(flags, Args{"--listen", "127.0.0.1:1"}), "");
  EXPECT_EQ(listen, "127.0.0.1:1");
  EXPECT_EQ(ParseFlags(flags, Args{"--listen=0.0.0.0:2"}), "");
  EXPECT_EQ(listen, "0.0.0.0:2");
  // Only the first '=' splits; an empty value is a value unless the row says NonEmpty.
  EXPECT_EQ(ParseFlags(flags, Args{"--listen=a=b"}), "");
  EXPECT_EQ(listen, "a=b");
  EXPECT_EQ(ParseFlags(flags, Args{"--listen="}), "");
  EXPECT_EQ(listen, "");
  // The next argument is the value whatever it looks like (as the hand-written parsers did).
  EXPECT_EQ(ParseFlags(flags, Args{"--listen", "--listen"}), "");
  EXPECT_EQ(listen, "--listen");
  // The last one given wins.
  EXPECT_EQ(ParseFlags(flags, Args{"--listen", "a", "--listen", "b"}), "");
  EXPECT_EQ(listen, "b");
}

TEST(FlagsTest, MissingValueNamesTheSpellingGiven) {
  std::string model;
  const std::vector<Flag> flags = {StringFlag("--model", &model).Alias("-m")};
  EXPECT_EQ(ParseFlags(flags, Args{"--model"}), "--model needs a value");
  EXPECT_EQ(ParseFlags(flags, Args{"-m"}), "-m needs a value");
  const std::vector<Flag> own = {
      StringFlag("--model", &model).Alias("-m").MissingMessage("--model needs NAME=PATH")};
  EXPECT_EQ(ParseFlags(own, Args{"-m"}), "--model needs NAME=PATH");
  const std::vector<Flag> typed = {
      StringFlag("--cache-type-k", &model).Alias("-ctk").Error("{flag} needs a type")};
  EXPECT_EQ(ParseFlags(typed, Args{"-ctk"}), "-ctk needs a type");
  EXPECT_EQ(ParseFlags(typed, Args{"--cache-type-k"}), "--cache-type-k needs a type");
}

TEST(FlagsTest, NonEmptyRefusesAnEmptyValueAsMissing) {
  std::string host = "127.0.0.1";
  const std::vector<Flag> flags = {
      StringFlag("--metrics-host", &host).NonEmpty().MissingMessage("{flag} needs an address")};
  EXPECT_EQ(ParseFlags(flags, Args{"--metrics-host", ""}), "--metrics-host needs an address");
  EXPECT_EQ(ParseFlags(flags, Args{"--metrics-host="}), "--metrics-host needs an address");
  EXPECT_EQ(ParseFlags(flags, Args{"--metrics-host"}), "--metrics-host needs an address");
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(ParseFlags(flags, Args{"--metrics-host", "0.0.0.0"}), "");
  EXPECT_EQ(host, "0.0.0.0");
}

TEST(FlagsTest, IntegerInInclusiveBounds) {
  int64_t page_tokens = 256;
  const std::vector<Flag> flags = {IntegerFlag("--page-tokens", &page_tokens, 1, 65536)};
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", "1"}), "");
  EXPECT_EQ(page_tokens, 1);
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens=65536"}), "");
  EXPECT_EQ(page_tokens, 65536);
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", "-3"}),
            "--page-tokens '-3' is not a whole number in 1..65536");
  // deltaserve-plan's message (tests/worker/deltaserve_plan_cli_test.cc expects it).
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", "0"}),
            "--page-tokens '0' is not a whole number in 1..65536");
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", "65537"}),
            "--page-tokens '65537' is not a whole number in 1..65536");
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", "x"}),
            "--page-tokens 'x' is not a whole number in 1..65536");
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", "1.5"}),
            "--page-tokens '1.5' is not a whole number in 1..65536");
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens", ""}),
            "--page-tokens '' is not a whole number in 1..65536");
  EXPECT_EQ(ParseFlags(flags, Args{"--page-tokens"}), "--page-tokens needs a value");
  EXPECT_EQ(page_tokens, 65536);  // untouched by the refused values
}

TEST(FlagsTest, IntegerUpperBoundDefaultsToTheTargetsRange) {
  int ctx = 4096;
  const std::vector<Flag> flags = {
      IntegerFlag("--ctx", &ctx, 1).Alias("-c").Error("--ctx needs a token count >= 1")};
  EXPECT_EQ(ParseFlags(flags, Args{"-c", "2147483647"}), "");
  EXPECT_EQ(ctx, 2147483647);
  // Beyond an int: refused, not wrapped.
  EXPECT_EQ(ParseFlags(flags, Args{"-c", "2147483648"}), "--ctx needs a token count >= 1");
  EXPECT_EQ(ParseFlags(flags, Args{"--ctx", "0"}), "--ctx needs a token count >= 1");
  EXPECT_EQ(ParseFlags(flags, Args{"--ctx"}), "--ctx needs a token count >= 1");
  EXPECT_EQ(ctx, 2147483647);
  int64_t big = 0;
  const std::vector<Flag> wide = {IntegerFlag("--n", &big, -5)};
  EXPECT_EQ(ParseFlags(wide, Args{"--n", "9223372036854775807"}), "");
  EXPECT_EQ(big, INT64_MAX);
  EXPECT_EQ(ParseFlags(wide, Args{"--n", "-5"}), "");
  EXPECT_EQ(big, -5);
  EXPECT_EQ(ParseFlags(wide, Args{"--n", "9223372036854775808"}),
            "--n '9223372036854775808' is not a whole number in -5..9223372036854775807");
}

TEST(FlagsTest, IntegerThroughACallbackInAnotherUnit) {
  int64_t timeout_us = 50000;
  const std::vector<Flag> flags = {
      IntegerFlag(
          "--redis-timeout", [&timeout_us](int64_t ms) { timeout_us = ms * 1000; }, 1, 60000)
          .Error("--redis-timeout needs milliseconds in 1..60000")};
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-timeout", "60000"}), "");
  EXPECT_EQ(timeout_us, 60000000);
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-timeout", "0"}),
            "--redis-timeout needs milliseconds in 1..60000");
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-timeout", "abc"}),
            "--redis-timeout needs milliseconds in 1..60000");
  EXPECT_EQ(timeout_us, 60000000);
}

TEST(FlagsTest, IntegerRangeMessageApartFromTheInvalidOne) {
  int threads = 2;
  const std::vector<Flag> flags = {IntegerFlag("--threads", &threads, 1, 256)
                                       .InvalidMessage("{flag} '{value}' is not a number")
                                       .RangeMessage("{flag} '{value}' is not in 1..256")};
  EXPECT_EQ(ParseFlags(flags, Args{"--threads", "many"}), "--threads 'many' is not a number");
  EXPECT_EQ(ParseFlags(flags, Args{"--threads", "300"}), "--threads '300' is not in 1..256");
  EXPECT_EQ(ParseFlags(flags, Args{"--threads"}), "--threads needs a value");
  // The invalid message stands in for an unset range message.
  const std::vector<Flag> one = {
      IntegerFlag("--threads", &threads, 1, 256).InvalidMessage("{flag}: bad '{value}'")};
  EXPECT_EQ(ParseFlags(one, Args{"--threads", "300"}), "--threads: bad '300'");
}

TEST(FlagsTest, ByteSizeThroughTheProgramsParserWithALowerBound) {
  uint64_t bytes = 0;
  const std::vector<Flag> flags = {ByteSizeFlag("--redis-max-bytes", &bytes, ParseTestSize, 4096)
                                       .MissingMessage("--redis-max-bytes needs a size (512MiB)")
                                       .RangeMessage("--redis-max-bytes must be at least 4KiB")};
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-max-bytes", "8KiB"}), "");
  EXPECT_EQ(bytes, 8192u);
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-max-bytes=4096"}), "");
  EXPECT_EQ(bytes, 4096u);
  // The parser's message after the flag (the worker's wording; tests/worker expects the prefix).
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-max-bytes", "12XB"}),
            "--redis-max-bytes: size '12XB' is not a size");
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-max-bytes", "100"}),
            "--redis-max-bytes must be at least 4KiB");
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-max-bytes"}),
            "--redis-max-bytes needs a size (512MiB)");
  EXPECT_EQ(bytes, 4096u);
  // Defaults: a value quoting "{flag}" is not expanded again.
  const std::vector<Flag> plain = {ByteSizeFlag("--ram", &bytes, ParseTestSize, 10)};
  EXPECT_EQ(ParseFlags(plain, Args{"--ram", "{flag}"}), "--ram: size '{flag}' is not a size");
  EXPECT_EQ(ParseFlags(plain, Args{"--ram", "9"}), "--ram '9' is less than 10 bytes");
}

TEST(FlagsTest, ChoiceStoresTheWordsValue) {
  enum class Compression { kNone, kZstd };
  Compression c = Compression::kNone;
  bool graphs = true;
  const std::vector<Flag> flags = {
      ChoiceFlag("--redis-compression", &c,
                 {{"none", Compression::kNone}, {"zstd", Compression::kZstd}}),
      ChoiceFlag("--cuda-graphs", &graphs, {{"on", true}, {"off", false}})
          .Error("--cuda-graphs needs on or off")};
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-compression", "zstd", "--cuda-graphs=off"}), "");
  EXPECT_EQ(c, Compression::kZstd);
  EXPECT_FALSE(graphs);
  EXPECT_EQ(ParseFlags(flags, Args{"--redis-compression", "lz4"}),
            "--redis-compression 'lz4' is not one of none, zstd");
  EXPECT_EQ(ParseFlags(flags, Args{"--cuda-graphs", "maybe"}), "--cuda-graphs needs on or off");
  EXPECT_EQ(ParseFlags(flags, Args{"--cuda-graphs"}), "--cuda-graphs needs on or off");
  EXPECT_EQ(ParseFlags(flags, Args{"--cuda-graphs", "ON"}), "--cuda-graphs needs on or off");
  EXPECT_EQ(ParseFlags(flags, Args{"--cuda-graphs", "on"}), "");
  EXPECT_TRUE(graphs);
}

TEST(FlagsTest, SwitchTakesNoValue) {
  bool speculation = false;
  std::string model;
  const std::vector<Flag> flags = {SwitchFlag("--speculation", &speculation),
                                   StringFlag("--model", &model)};
  // The next argument is not consumed: it is read as a flag of its own.
  EXPECT_EQ(ParseFlags(flags, Args{"--speculation", "--model", "m"}), "");
  EXPECT_TRUE(speculation);
  EXPECT_EQ(model, "m");
  EXPECT_EQ(ParseFlags(flags, Args{"--speculation=yes"}), "--speculation takes no value");
  EXPECT_EQ(ParseFlags(flags, Args{"--speculation", "yes"}), "unknown argument 'yes'");
}

TEST(FlagsTest, ActionsRunInOrderAndMayRefuse) {
  std::vector<std::string> seen;
  std::string listen;
  const std::vector<Flag> flags = {
      ActionFlag("--auth-secret",
                 [] { return std::string("--auth-secret is not accepted: use a file"); }),
      ActionFlag("--mark",
                 [&seen] {
                   seen.push_back("mark");
                   return std::string();
                 }),
      StringFlag("--listen", &listen)};
  EXPECT_EQ(ParseFlags(flags, Args{"--mark", "--mark"}), "");
  EXPECT_EQ(seen.size(), 2u);
  // Refused when seen: what follows (the secret itself) is never read.
  EXPECT_EQ(ParseFlags(flags, Args{"--listen", "a", "--auth-secret", "hunter2", "--what"}),
            "--auth-secret is not accepted: use a file");
  EXPECT_EQ(listen, "a");
  // The action's own refusal wins over "takes no value" (the secret is not echoed).
  EXPECT_EQ(ParseFlags(flags, Args{"--auth-secret=hunter2"}),
            "--auth-secret is not accepted: use a file");
}

TEST(FlagsTest, RepeatedValuesAreAppended) {
  std::vector<std::string> workers = {"from-config"};
  const std::vector<Flag> flags = {RepeatedFlag("--worker", &workers).Alias("-w")};
  EXPECT_EQ(ParseFlags(flags, Args{"--worker", "a:1", "-w", "b:2", "--worker=dns:///c:3"}), "");
  EXPECT_THAT(workers, ::testing::ElementsAre("from-config", "a:1", "b:2", "dns:///c:3"));
  EXPECT_EQ(ParseFlags(flags, Args{"--worker"}), "--worker needs a value");
}

TEST(FlagsTest, CustomCallbackStoresOrSaysWhatIsWrong) {
  std::vector<std::pair<std::string, std::string>> models;
  const std::vector<Flag> flags = {CustomFlag("--model",
                                              [&models](std::string_view v) {
                                                const size_t eq = v.find('=');
                                                if (eq == std::string_view::npos || eq == 0) {
                                                  return absl::StrCat("bad --model '", Sv(v), "'");
                                                }
                                                models.emplace_back(v.substr(0, eq),
                                                                    v.substr(eq + 1));
                                                return std::string();
                                              })
                                       .Alias("-m")
                                       .MissingMessage("--model needs NAME=PATH")};
  EXPECT_EQ(ParseFlags(flags, Args{"-m", "a=x.gguf", "--model=b=y.gguf"}), "");
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[1], std::make_pair(std::string("b"), std::string("y.gguf")));
  // The callback's message is returned as it is: no {flag} expansion of text it quotes.
  EXPECT_EQ(ParseFlags(flags, Args{"--model", "{flag}"}), "bad --model '{flag}'");
  EXPECT_EQ(ParseFlags(flags, Args{"-m"}), "--model needs NAME=PATH");
}

TEST(FlagsTest, UnknownArguments) {
  int ctx = 0;
  const std::vector<Flag> flags = {IntegerFlag("--ctx", &ctx, 1).Alias("-c")};
  EXPECT_EQ(ParseFlags(flags, Args{"--wat"}), "unknown argument '--wat'");
  // Named without the value: a mistyped `--secret=...` does not echo it.
  EXPECT_EQ(ParseFlags(flags, Args{"--wat=secret"}), "unknown argument '--wat'");
  // Only long flags take `=`.
  EXPECT_EQ(ParseFlags(flags, Args{"-c=5"}), "unknown argument '-c=5'");
  EXPECT_EQ(ParseFlags(flags, Args{"file.json"}), "unknown argument 'file.json'");
  EXPECT_EQ(ParseFlags(flags, Args{""}), "unknown argument ''");
  FlagParseOptions quoted;
  quoted.unknown_message = "unknown argument \"{flag}\"";
  EXPECT_EQ(ParseFlags(flags, Args{"--ctx", "3", "--wat"}, quoted), "unknown argument \"--wat\"");
  EXPECT_EQ(ctx, 3);
}

TEST(FlagsTest, PositionalArgumentsGoToTheirCallback) {
  std::vector<std::string> files;
  bool json = false;
  const std::vector<Flag> flags = {SwitchFlag("--json", &json)};
  FlagParseOptions options;
  options.positional = [&files](std::string_view a) {
    if (files.size() == 2) return absl::StrCat("unexpected argument '", Sv(a), "'");
    files.emplace_back(a);
    return std::string();
  };
  EXPECT_EQ(ParseFlags(flags, Args{"a.gguf", "--json", "-"}, options), "");
  EXPECT_THAT(files, ::testing::ElementsAre("a.gguf", "-"));
  EXPECT_TRUE(json);
  EXPECT_EQ(ParseFlags(flags, Args{"c"}, options), "unexpected argument 'c'");
  EXPECT_EQ(ParseFlags(flags, Args{"--nope"}, options), "unknown argument '--nope'");
}

TEST(FlagsTest, StopsParsingIgnoresWhatFollows) {
  bool help = false;
  int n = 0;
  const std::vector<Flag> flags = {SwitchFlag("--help", &help).Alias("-h").StopsParsing(),
                                   IntegerFlag("--n", &n, 1)};
  EXPECT_EQ(ParseFlags(flags, Args{"--n", "2", "-h", "--bogus", "--n", "0"}), "");
  EXPECT_TRUE(help);
  EXPECT_EQ(n, 2);
}

TEST(FlagsTest, ArgvFromAnIndex) {
  std::string schema;
  const std::vector<Flag> flags = {StringFlag("--schema", &schema)};
  const char* argv[] = {"deltaserve-grammar", "compile", "--schema", "s.json"};
  EXPECT_EQ(ParseFlags(flags, 4, argv, {}, /*first=*/2), "");
  EXPECT_EQ(schema, "s.json");
  EXPECT_EQ(ParseFlags(flags, 4, argv), "unknown argument 'compile'");
}

TEST(FlagsTest, KindsOfTheRows) {
  std::string s;
  int i = 0;
  uint64_t u = 0;
  bool b = false;
  std::vector<std::string> v;
  EXPECT_EQ(StringFlag("--s", &s).kind(), FlagKind::kString);
  EXPECT_EQ(IntegerFlag("--i", &i, 0).kind(), FlagKind::kInteger);
  EXPECT_EQ(ByteSizeFlag("--u", &u, ParseTestSize).kind(), FlagKind::kByteSize);
  EXPECT_EQ(ChoiceFlag("--c", &b, {{"on", true}}).kind(), FlagKind::kChoice);
  EXPECT_EQ(SwitchFlag("--b", &b).kind(), FlagKind::kSwitch);
  EXPECT_FALSE(SwitchFlag("--b", &b).takes_value());
  EXPECT_EQ(RepeatedFlag("--v", &v).kind(), FlagKind::kRepeated);
  EXPECT_EQ(CustomFlag("--x", [](std::string_view) { return std::string(); }).kind(),
            FlagKind::kCustom);
  EXPECT_TRUE(CustomFlag("--x", [](std::string_view) { return std::string(); }).takes_value());
}

TEST(FlagsTest, HelpListsTheRowsInTableOrder) {
  std::string model;
  int ctx = 0;
  bool speculation = false;
  const std::vector<Flag> flags = {
      StringFlag("--model", &model).Alias("-m").Help("NAME=PATH", "a GGUF file (repeatable)"),
      IntegerFlag("--ctx", &ctx, 1).Help("N", "context in tokens\n(default 4096)"),
      SwitchFlag("--speculation", &speculation).Help("", "n-gram drafts"),
      ActionFlag("--auth-secret", [] { return std::string("no"); }),  // no help: not listed
      StringFlag("--a-very-long-flag-name", &model).Help("VALUE", "wraps")};
  EXPECT_EQ(FlagHelp(flags),
            "  -m, --model NAME=PATH  a GGUF file (repeatable)\n"
            "  --ctx N                context in tokens\n"
            "                         (default 4096)\n"
            "  --speculation          n-gram drafts\n"
            "  --a-very-long-flag-name VALUE\n"
            "                         wraps\n");
}

TEST(FlagsTest, HelpGoesToStdoutWithExitZero) {
  bool unused = false;
  const std::vector<Flag> flags = {HelpFlag(), SwitchFlag("--x", &unused)};
  const std::string why = ParseFlags(flags, Args{"--help", "--bogus"});
  ASSERT_EQ(why, kHelpRequested);
  EXPECT_EQ(ParseFlags(flags, Args{"-h"}), kHelpRequested);
  std::ostringstream out, err;
  EXPECT_EQ(UsageExit("prog", why, "usage: prog [--x]\n", "flags:\n  --x  x\n", out, err), 0);
  EXPECT_EQ(out.str(), "usage: prog [--x]\n\nflags:\n  --x  x\n");
  EXPECT_EQ(err.str(), "");
}

TEST(FlagsTest, AProblemGoesToStderrWithTheUsageAndExitTwo) {
  bool unused = false;
  const std::vector<Flag> flags = {HelpFlag(), SwitchFlag("--x", &unused)};
  const std::string why = ParseFlags(flags, Args{"--bogus", "--help"});
  ASSERT_EQ(why, "unknown argument '--bogus'");
  std::ostringstream out, err;
  EXPECT_EQ(UsageExit("prog", why, "usage: prog [--x]\n", "flags:\n", out, err), kExitUsage);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(),
            "prog: unknown argument '--bogus'\nusage: prog [--x]\n(prog --help says more)\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(UsageExit("prog", "no model", "usage: prog\n", "", out2, err2), 2);
  EXPECT_EQ(err2.str(), "prog: no model\nusage: prog\n");
}

}  // namespace
}  // namespace deltaserve::common
