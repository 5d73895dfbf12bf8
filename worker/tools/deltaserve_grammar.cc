// deltaserve-grammar: check documents against a structured-output constraint the way the worker
// enforces it (issue 13), and print the grammar a constraint compiles to.
//
//   deltaserve-grammar check CONSTRAINT --model MODEL.gguf < instances.jsonl
//   deltaserve-grammar compile CONSTRAINT
//   CONSTRAINT: --schema SCHEMA.json | --regex PATTERN | --json-object
//
// check: each input line is one document. It is tokenized as the model would produce it
// (Encode with parse_special=false) and walked token by token through the token masks the
// sampler uses (TokenMaskCache over the model's TokenTrie), and one JSON line is printed:
//   {"accepted": true|false, "rejected_at_token": N|null, "complete": true|false}
// accepted: no token was masked out; rejected_at_token: the index of the first that was;
// complete: the grammar is in an accepting state after the last token (so the end-of-generation
// token is allowed there). A constraint that is refused prints {"error": "..."} once (the 400
// message) and exits 0. compile prints the grammar (Grammar::ToString) or that error line.
// Exit status: 0, or 2 for bad usage and 1 for an unreadable schema, model or input.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/gguf_file.h"
#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/regex.h"
#include "common/tokenizer.h"
#include "nlohmann/json.hpp"
#include "worker/sampling/token_mask.h"

namespace deltaserve::worker {
namespace {

using common::grammar::CompiledGrammar;
using common::grammar::Grammar;
using common::grammar::GrammarMatcher;

constexpr int kExitError = 1;
constexpr size_t kMaskCacheBytes = 256 << 20;

int Usage(const std::string& why) {
  return common::UsageExit(
      "deltaserve-grammar", why,
      "usage:\n"
      "  deltaserve-grammar check CONSTRAINT --model MODEL.gguf < instances.jsonl\n"
      "  deltaserve-grammar compile CONSTRAINT\n"
      "  CONSTRAINT: --schema SCHEMA.json | --regex PATTERN | --json-object\n",
      "check: walks each input line, tokenized as the model would produce it, through the\n"
      "  token masks the worker's sampler uses, and prints one line per document:\n"
      "  {\"accepted\": true|false, \"rejected_at_token\": N|null, \"complete\": true|false}\n"
      "compile: prints the grammar the constraint compiles to.\n"
      "A constraint the worker refuses prints {\"error\": \"...\"} (its 400 message).\n");
}

struct Options {
  std::string command;
  std::string schema_path, regex, model_path;
  bool has_regex = false, json_object = false;
};

// Parses argv into `opts`; an empty string when fine, else what is wrong.
std::string ParseArgs(int argc, char** argv, Options& opts) {
  if (argc < 2) return "no command";
  opts.command = argv[1];
  if (opts.command == "--help" || opts.command == "-h") return std::string(common::kHelpRequested);
  if (opts.command != "check" && opts.command != "compile") {
    return absl::StrCat(opts.command.rfind('-', 0) == 0 ? "unknown argument" : "unknown command",
                        " \"", opts.command, "\"");
  }
  const std::vector<common::Flag> flags = {
      common::StringFlag("--schema", &opts.schema_path).MissingMessage("--schema needs a file"),
      common::CustomFlag("--regex",
                         [&opts](std::string_view v) {
                           opts.regex = std::string(v);
                           opts.has_regex = true;
                           return std::string();
                         })
          .MissingMessage("--regex needs a pattern"),
      common::SwitchFlag("--json-object", &opts.json_object),
      common::StringFlag("--model", &opts.model_path)
          .Alias("-m")
          .MissingMessage("--model needs a file"),
      common::HelpFlag(),
  };
  common::FlagParseOptions options;
  options.unknown_message = "unknown argument \"{flag}\"";
  if (std::string why = common::ParseFlags(flags, argc, argv, options, /*first=*/2); !why.empty()) {
    return why;
  }
  const int constraints = !opts.schema_path.empty() + opts.has_regex + opts.json_object;
  if (constraints != 1) return "give exactly one of --schema, --regex, --json-object";
  if (opts.command == "check" && opts.model_path.empty()) return "check needs --model";
  return "";
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return text.str();
}

std::string ErrorLine(const absl::Status& status) {
  return nlohmann::json{{"error", std::string(status.message())}}.dump();
}

// {"accepted": ..., "rejected_at_token": ..., "complete": ...} in the key order.
std::string ResultLine(bool accepted, int64_t rejected_at, bool complete) {
  return absl::StrCat("{\"accepted\": ", accepted ? "true" : "false", ", \"rejected_at_token\": ",
                      rejected_at < 0 ? std::string("null") : absl::StrCat(rejected_at),
                      ", \"complete\": ", complete ? "true" : "false", "}");
}

int Run(const Options& opts) {
  // The constraint: the schema text first (unreadable is an error, refused is an output line).
  absl::StatusOr<Grammar> grammar = absl::UnknownError("no constraint");
  if (!opts.schema_path.empty()) {
    absl::StatusOr<std::string> schema = ReadFile(opts.schema_path);
    if (!schema.ok()) {
      std::cerr << "deltaserve-grammar: " << schema.status().message() << "\n";
      return kExitError;
    }
    grammar = common::grammar::CompileJsonSchema(*schema);
  } else if (opts.has_regex) {
    grammar = common::grammar::CompileRegex(opts.regex);
  } else {
    grammar = common::grammar::JsonObjectGrammar();
  }

  std::unique_ptr<common::GgufFile> file;
  std::unique_ptr<common::Tokenizer> tokenizer;
  if (opts.command == "check") {
    auto f = common::GgufFile::Open(opts.model_path);
    if (!f.ok()) {
      std::cerr << "deltaserve-grammar: " << f.status().message() << "\n";
      return kExitError;
    }
    file = *std::move(f);
    auto tok = common::Tokenizer::FromGguf(*file);
    if (!tok.ok()) {
      std::cerr << "deltaserve-grammar: " << opts.model_path << ": " << tok.status().message()
                << "\n";
      return kExitError;
    }
    tokenizer = *std::move(tok);
  }

  if (!grammar.ok()) {
    std::cout << ErrorLine(grammar.status()) << "\n";
    return 0;
  }
  if (opts.command == "compile") {
    std::cout << grammar->ToString();
    return 0;
  }

  auto compiled = std::make_shared<CompiledGrammar>(*std::move(grammar));
  TokenMaskCache masks(TokenTrie::Build(*tokenizer), kMaskCacheBytes);
  std::string line;
  bool warned = false;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<common::TokenId> tokens = tokenizer->Encode(line, /*parse_special=*/false);
    GrammarMatcher matcher(compiled);
    int64_t rejected_at = -1;
    for (size_t i = 0; i < tokens.size(); ++i) {
      // The mask decides, as in the sampler; the matcher then takes the token's bytes.
      if (!masks.Get(matcher).Has(tokens[i]) || !matcher.AcceptBytes(tokenizer->Piece(tokens[i]))) {
        rejected_at = static_cast<int64_t>(i);
        break;
      }
    }
    const bool accepted = rejected_at < 0;
    std::cout << ResultLine(accepted, rejected_at, accepted && matcher.IsAccepting()) << "\n";
    if (compiled->exhausted() && !warned) {
      warned = true;
      std::cerr << "deltaserve-grammar: the grammar's state table reached its limit; later "
                   "tokens may be refused for that reason\n";
    }
  }
  if (std::cin.bad()) {
    std::cerr << "deltaserve-grammar: error reading standard input\n";
    return kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) {
  deltaserve::worker::Options opts;
  const std::string problem = deltaserve::worker::ParseArgs(argc, argv, opts);
  if (!problem.empty()) return deltaserve::worker::Usage(problem);
  return deltaserve::worker::Run(opts);
}
