// Command-line flags from a table, for the DeltaServe programs (deltaserve-worker, -router and the
// tools): each flag is one row (Flag) saying its spellings, what value it takes, where the value
// goes and what to say when it is wrong; ParseFlags walks argv against the rows and returns the
// first problem as one message naming the flag, FlagHelp prints the rows as a help listing.
//
//   int ctx = 4096;
//   bool speculation = false;
//   const std::vector<common::Flag> flags = {
//       common::IntegerFlag("--ctx", &ctx, 1).Alias("-c").Help("N", "context in tokens"),
//       common::SwitchFlag("--speculation", &speculation).Help("", "n-gram drafts")};
//   if (std::string why = common::ParseFlags(flags, argc, argv); !why.empty()) return Usage(why);
//
// A value follows its flag as the next argument (`--ctx 4096`, taken whatever it looks like) or
// after `=` in a long flag (`--ctx=4096`). Messages may hold {flag} (the spelling given, so `-c`
// or `--ctx`) and {value} (the value given). Nothing throws: every problem is a returned message.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace deltaserve::common {

// The value a flag takes.
enum class FlagKind {
  kString,    // any text, stored as given
  kInteger,   // a whole number within inclusive bounds
  kByteSize,  // "8GiB", "512MiB" ... through the program's size parser, with a lower bound
  kChoice,    // one of a fixed list of words
  kSwitch,    // no value: the flag's presence (or an action run when it is seen)
  kRepeated,  // any text, appended to a list each time the flag is given
  kCustom,    // any text, handed to a callback that stores it or says what is wrong
};

// Parses a byte size (worker/cache/memory_plan.h's ParseByteSize lives outside common/).
using ByteSizeParser = absl::StatusOr<uint64_t> (*)(std::string_view text);

// One row of a flag table. Made by the functions below, refined with the chained setters.
class Flag {
 public:
  // Another spelling ("-m", "-ctk"); messages use {flag}, the one given.
  Flag& Alias(std::string spelling);
  // For FlagHelp: the value's placeholder ("N", "SIZE"; "" for a switch) and one line or more of
  // text. A row without help text is left out of the listing.
  Flag& Help(std::string value_name, std::string text);
  // The message when the value is missing (or empty, with NonEmpty). Default "{flag} needs a
  // value".
  Flag& MissingMessage(std::string message);
  // The message when the value does not parse (not a number, not a size, not a choice). Defaults
  // name the flag, the value and what was expected.
  Flag& InvalidMessage(std::string message);
  // The message when a number or size parses but lies outside its bounds; default: the invalid
  // message when one is set, else one that names the bounds.
  Flag& RangeMessage(std::string message);
  // One message for every problem with the value: missing, invalid, out of range.
  Flag& Error(std::string message);
  // An empty value ("" or `--flag=`) counts as missing.
  Flag& NonEmpty();
  // Once this flag is seen, the arguments after it are not looked at (--help).
  Flag& StopsParsing();

  const std::string& name() const { return name_; }
  const std::vector<std::string>& aliases() const { return aliases_; }
  FlagKind kind() const;
  bool takes_value() const { return kind() != FlagKind::kSwitch; }
  const std::string& value_name() const { return value_name_; }
  const std::string& help() const { return help_; }

  // The row's storage; built by the functions below, read by ParseFlags.
  struct Integer {
    std::function<void(int64_t)> store;
    int64_t min, max;
  };
  struct ByteSize {
    uint64_t* out;
    ByteSizeParser parse;
    uint64_t min;
  };
  struct Choice {
    std::vector<std::string> words;
    std::function<void(size_t)> store;  // the index of the word given
  };
  struct Switch {
    std::function<std::string()> action;  // "" or what is wrong
  };
  struct Custom {
    std::function<std::string(std::string_view)> store;  // "" or what is wrong
  };
  using Target = std::variant<std::string*, Integer, ByteSize, Choice, Switch,
                              std::vector<std::string>*, Custom>;

  Flag(std::string name, Target target) : name_(std::move(name)), target_(std::move(target)) {}

  const Target& target() const { return target_; }
  const std::string& missing_message() const { return missing_message_; }
  const std::string& invalid_message() const { return invalid_message_; }
  const std::string& range_message() const { return range_message_; }
  bool non_empty() const { return non_empty_; }
  bool stops_parsing() const { return stops_parsing_; }

 private:
  std::string name_;
  std::vector<std::string> aliases_;
  Target target_;
  std::string value_name_, help_;
  std::string missing_message_, invalid_message_, range_message_;
  bool non_empty_ = false;
  bool stops_parsing_ = false;
};

// Text, stored as given.
Flag StringFlag(std::string name, std::string* out);

// A whole number in min..max (inclusive), stored in an integer of any width; max defaults to the
// largest the target holds.
template <typename T>
Flag IntegerFlag(std::string name, T* out, int64_t min,
                 int64_t max = static_cast<int64_t>(std::numeric_limits<T>::max())) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) <= sizeof(int64_t));
  return Flag(std::move(name),
              Flag::Integer{[out](int64_t v) { *out = static_cast<T>(v); }, min, max});
}

// A whole number in min..max (inclusive) handed to `store`, for values kept in another unit
// (milliseconds as an absl::Duration).
Flag IntegerFlag(std::string name, std::function<void(int64_t)> store, int64_t min, int64_t max);

// A byte size read by `parse`, at least `min` bytes. Parse failures read "{flag}: " and the
// parser's message unless InvalidMessage says otherwise.
Flag ByteSizeFlag(std::string name, uint64_t* out, ByteSizeParser parse, uint64_t min = 0);

// One of `choices`' words; the matching value is stored.
template <typename T>
Flag ChoiceFlag(std::string name, T* out, std::vector<std::pair<std::string, T>> choices) {
  std::vector<std::string> words;
  std::vector<T> values;
  for (auto& [word, value] : choices) {
    words.push_back(std::move(word));
    values.push_back(std::move(value));
  }
  return Flag(std::move(name),
              Flag::Choice{std::move(words), [out, values](size_t i) { *out = values[i]; }});
}

// No value: sets *out to true.
Flag SwitchFlag(std::string name, bool* out);

// No value: runs `action`, whose non-empty return is the parse's error (as given, no {flag}).
Flag ActionFlag(std::string name, std::function<std::string()> action);

// Text, appended to *out each time the flag is given.
Flag RepeatedFlag(std::string name, std::vector<std::string>* out);

// Text, handed to `store`, whose non-empty return is the parse's error (as given, no {flag}).
Flag CustomFlag(std::string name, std::function<std::string(std::string_view value)> store);

// What ParseFlags returns when HelpFlag's row is given: the program prints its usage.
inline constexpr std::string_view kHelpRequested = "help";
// `-h` / `--help`: ParseFlags stops there and returns kHelpRequested, which UsageExit answers.
Flag HelpFlag();

// The exit status of a refused command line (as getopt tools and Python's argparse use).
inline constexpr int kExitUsage = 2;

// How every DeltaServe program ends when it will not run its command line. Asked for help (`why`
// is kHelpRequested), it writes `usage` and then `details` (what the program does, its flag
// listing) to `out` and returns 0: help was given, nothing failed, and `prog --help | less`
// works. Otherwise it writes "<program>: <why>", then `usage` to `err` (and, when there are
// details, where to find them) and returns kExitUsage. main returns what it returns.
int UsageExit(std::string_view program, std::string_view why, std::string_view usage,
              std::string_view details = "");
int UsageExit(std::string_view program, std::string_view why, std::string_view usage,
              std::string_view details, std::ostream& out, std::ostream& err);

// How ParseFlags treats what is not in the table.
struct FlagParseOptions {
  // An argument that is no flag of the table; {flag} is the argument (up to '=' in a long one).
  std::string unknown_message = "unknown argument '{flag}'";
  // Arguments that do not start with '-' (a lone "-" included); unset: they are unknown
  // arguments. Returns "" or what is wrong.
  std::function<std::string(std::string_view)> positional;
};

// Walks `args` (the program's arguments without its name) in order, storing each flag's value;
// returns "" when all are fine, else the first problem's message. Values already stored stay.
std::string ParseFlags(absl::Span<const Flag> flags, const std::vector<std::string>& args,
                       const FlagParseOptions& options = {});
// The same over argv[first..argc).
std::string ParseFlags(absl::Span<const Flag> flags, int argc, const char* const* argv,
                       const FlagParseOptions& options = {}, int first = 1);

// The table as a help listing, one flag a paragraph in table order:
//   "  -c, --ctx N          context in tokens\n"
// The help text starts at a common column (a longer left side puts it on the next line), its
// further lines indented to the same column.
std::string FlagHelp(absl::Span<const Flag> flags);

}  // namespace deltaserve::common
