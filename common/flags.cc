#include "common/flags.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

// `message` with {flag} and {value} replaced, in one pass (a value holding "{flag}" stays as is).
std::string Expand(std::string_view message, std::string_view flag, std::string_view value) {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    if (message.substr(i, 6) == "{flag}") {
      absl::StrAppend(&out, Sv(flag));
      i += 6;
    } else if (message.substr(i, 7) == "{value}") {
      absl::StrAppend(&out, Sv(value));
      i += 7;
    } else {
      out += message[i++];
    }
  }
  return out;
}

const Flag* Find(absl::Span<const Flag> flags, std::string_view spelling) {
  for (const Flag& f : flags) {
    if (f.name() == spelling) return &f;
    for (const std::string& a : f.aliases()) {
      if (a == spelling) return &f;
    }
  }
  return nullptr;
}

// Stores `value` for `flag` (given as `spelling`); "" or what is wrong.
std::string Store(const Flag& flag, std::string_view spelling, std::string_view value) {
  auto say = [&](const std::string& message, std::string fallback) {
    return Expand(message.empty() ? fallback : message, spelling, value);
  };
  const std::string& invalid = flag.invalid_message();
  const std::string& range = flag.range_message().empty() ? invalid : flag.range_message();
  const Flag::Target& target = flag.target();
  if (auto* out = std::get_if<std::string*>(&target)) {
    **out = std::string(value);
  } else if (auto* list = std::get_if<std::vector<std::string>*>(&target)) {
    (*list)->emplace_back(value);
  } else if (auto* integer = std::get_if<Flag::Integer>(&target)) {
    int64_t n = 0;
    const std::string bounds = absl::StrCat("{flag} '{value}' is not a whole number in ",
                                            integer->min, "..", integer->max);
    if (!absl::SimpleAtoi(Sv(value), &n)) return say(invalid, bounds);
    if (n < integer->min || n > integer->max) return say(range, bounds);
    integer->store(n);
  } else if (auto* size = std::get_if<Flag::ByteSize>(&target)) {
    absl::StatusOr<uint64_t> bytes = size->parse(value);
    if (!bytes.ok()) {
      // The parser's message quotes the value: appended, not expanded.
      if (invalid.empty()) return absl::StrCat(Sv(spelling), ": ", bytes.status().message());
      return say(invalid, "");
    }
    if (*bytes < size->min) {
      return say(range, absl::StrCat("{flag} '{value}' is less than ", size->min, " bytes"));
    }
    *size->out = *bytes;
  } else if (auto* choice = std::get_if<Flag::Choice>(&target)) {
    const auto it = std::find(choice->words.begin(), choice->words.end(), value);
    if (it == choice->words.end()) {
      return say(invalid, absl::StrCat("{flag} '{value}' is not one of ",
                                       absl::StrJoin(choice->words, ", ")));
    }
    choice->store(static_cast<size_t>(it - choice->words.begin()));
  } else if (auto* custom = std::get_if<Flag::Custom>(&target)) {
    return custom->store(value);
  }
  return "";
}

}  // namespace

Flag& Flag::Alias(std::string spelling) {
  aliases_.push_back(std::move(spelling));
  return *this;
}

Flag& Flag::Help(std::string value_name, std::string text) {
  value_name_ = std::move(value_name);
  help_ = std::move(text);
  return *this;
}

Flag& Flag::MissingMessage(std::string message) {
  missing_message_ = std::move(message);
  return *this;
}

Flag& Flag::InvalidMessage(std::string message) {
  invalid_message_ = std::move(message);
  return *this;
}

Flag& Flag::RangeMessage(std::string message) {
  range_message_ = std::move(message);
  return *this;
}

Flag& Flag::Error(std::string message) {
  missing_message_ = invalid_message_ = range_message_ = std::move(message);
  return *this;
}

Flag& Flag::NonEmpty() {
  non_empty_ = true;
  return *this;
}

Flag& Flag::StopsParsing() {
  stops_parsing_ = true;
  return *this;
}

FlagKind Flag::kind() const {
  // The variant's alternatives are in FlagKind's order.
  return static_cast<FlagKind>(target_.index());
}

Flag StringFlag(std::string name, std::string* out) { return Flag(std::move(name), out); }

Flag IntegerFlag(std::string name, std::function<void(int64_t)> store, int64_t min, int64_t max) {
  return Flag(std::move(name), Flag::Integer{std::move(store), min, max});
}

Flag ByteSizeFlag(std::string name, uint64_t* out, ByteSizeParser parse, uint64_t min) {
  return Flag(std::move(name), Flag::ByteSize{out, parse, min});
}

Flag SwitchFlag(std::string name, bool* out) {
  return Flag(std::move(name), Flag::Switch{[out] {
                *out = true;
                return std::string();
              }});
}

Flag ActionFlag(std::string name, std::function<std::string()> action) {
  return Flag(std::move(name), Flag::Switch{std::move(action)});
}

Flag RepeatedFlag(std::string name, std::vector<std::string>* out) {
  return Flag(std::move(name), out);
}

Flag CustomFlag(std::string name, std::function<std::string(std::string_view value)> store) {
  return Flag(std::move(name), Flag::Custom{std::move(store)});
}

Flag HelpFlag() {
  return ActionFlag("--help", [] { return std::string(kHelpRequested); })
      .Alias("-h")
      .Help("", "this listing");
}

int UsageExit(std::string_view program, std::string_view why, std::string_view usage,
              std::string_view details) {
  return UsageExit(program, why, usage, details, std::cout, std::cerr);
}

int UsageExit(std::string_view program, std::string_view why, std::string_view usage,
              std::string_view details, std::ostream& out, std::ostream& err) {
  if (why == kHelpRequested) {
    out << usage;
    if (!details.empty()) out << "\n" << details;
    out.flush();
    return 0;
  }
  err << program << ": " << why << "\n" << usage;
  if (!details.empty()) err << "(" << program << " --help says more)\n";
  err.flush();
  return kExitUsage;
}

std::string ParseFlags(absl::Span<const Flag> flags, const std::vector<std::string>& args,
                       const FlagParseOptions& options) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view spelling = args[i];
    if ((spelling.empty() || spelling[0] != '-' || spelling == "-") && options.positional) {
      if (std::string why = options.positional(spelling); !why.empty()) return why;
      continue;
    }
    std::string_view inline_value;
    bool has_inline = false;
    if (const size_t eq = spelling.find('=');
        spelling.substr(0, 2) == "--" && eq != std::string_view::npos) {
      inline_value = spelling.substr(eq + 1);
      spelling = spelling.substr(0, eq);
      has_inline = true;
    }
    const Flag* flag = Find(flags, spelling);
    if (flag == nullptr) return Expand(options.unknown_message, spelling, "");
    if (const auto* sw = std::get_if<Flag::Switch>(&flag->target())) {
      if (std::string why = sw->action(); !why.empty()) return why;
      if (has_inline) return Expand("{flag} takes no value", spelling, inline_value);
    } else {
      const bool present = has_inline || i + 1 < args.size();
      std::string_view value = inline_value;  // a view of args, never of a temporary
      if (!has_inline && present) value = args[++i];
      if (!present || (value.empty() && flag->non_empty())) {
        return Expand(
            flag->missing_message().empty() ? "{flag} needs a value" : flag->missing_message(),
            spelling, "");
      }
      if (std::string why = Store(*flag, spelling, value); !why.empty()) return why;
    }
    if (flag->stops_parsing()) return "";
  }
  return "";
}

std::string ParseFlags(absl::Span<const Flag> flags, int argc, const char* const* argv,
                       const FlagParseOptions& options, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return ParseFlags(flags, args, options);
}

std::string FlagHelp(absl::Span<const Flag> flags) {
  // The text column: past the longest left side up to this width; longer ones wrap.
  constexpr size_t kMaxColumn = 26;
  std::vector<std::pair<std::string, const Flag*>> rows;
  size_t column = 0;
  for (const Flag& f : flags) {
    if (f.help().empty()) continue;
    std::string left = "  ";
    for (const std::string& a : f.aliases()) absl::StrAppend(&left, a, ", ");
    absl::StrAppend(&left, f.name());
    if (!f.value_name().empty()) absl::StrAppend(&left, " ", f.value_name());
    if (left.size() + 2 <= kMaxColumn) column = std::max(column, left.size() + 2);
    rows.emplace_back(std::move(left), &f);
  }
  std::string out;
  const std::string indent(column, ' ');
  for (const auto& [left, f] : rows) {
    out += left;
    if (left.size() + 2 <= column) {
      out += std::string(column - left.size(), ' ');
    } else {
      absl::StrAppend(&out, "\n", indent);
    }
    bool first = true;
    for (absl::string_view line : absl::StrSplit(f->help(), '\n')) {
      if (!first) absl::StrAppend(&out, indent);
      absl::StrAppend(&out, line, "\n");
      first = false;
    }
  }
  return out;
}

}  // namespace deltaserve::common
