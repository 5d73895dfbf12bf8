// deltaserve-gguf: inspect GGUF files and their tokenizers.
//
//   deltaserve-gguf info FILE                      metadata, tensors, totals, layer plan
//   deltaserve-gguf tokenize FILE TEXT [--no-special] [--json] [--file PATH]
//   deltaserve-gguf detokenize FILE ID...
//
// Errors (unreadable or malformed file, bad arguments) print one message and exit non-zero.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "common/str_util.h"
#include "common/tokenizer.h"
#include "common/unicode.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common {
namespace {

constexpr int kExitError = 1;

// The usage on stdout for --help, else after what is wrong on stderr (common::UsageExit).
int Usage(const std::string& why) {
  return UsageExit("deltaserve-gguf", why,
                   "usage:\n"
                   "  deltaserve-gguf info FILE\n"
                   "  deltaserve-gguf tokenize FILE TEXT [--no-special] [--json]\n"
                   "  deltaserve-gguf tokenize FILE --file PATH [--no-special] [--json]\n"
                   "  deltaserve-gguf detokenize FILE ID...\n",
                   "info: metadata, tensors, totals by type and the layer plan.\n"
                   "tokenize: the ids and pieces of TEXT (or of the file's bytes) with the\n"
                   "  model's tokenizer; --json prints {\"ids\", \"pieces\"}; --no-special reads\n"
                   "  special-token text as plain text. A TEXT that starts with -- (or is -h)\n"
                   "  goes after --.\n"
                   "detokenize: the text of the ids (\"1 2 3\" or \"1,2,3\").\n");
}

// -h or --help anywhere before a `--`.
bool AsksForHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

int Fail(const absl::Status& status) {
  std::cerr << "deltaserve-gguf: " << status.message() << "\n";
  return kExitError;
}

// Thousands separators for byte counts: 23372768 -> "23,372,768".
std::string Grouped(uint64_t v) {
  std::string digits = absl::StrCat(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Ranges(const std::vector<int>& layers) {
  return layers.empty() ? "none" : absl::StrJoin(layers, ",");
}

void PrintModel(const GgufFile& file) {
  const GgufValue* arch = file.Find("general.architecture");
  if (arch == nullptr || !arch->AsString()) return;
  const std::string_view name = *arch->AsString();
  std::cout << "\nmodel: " << name << "\n";
  if (name != "qwen35" && name != "qwen35moe") {
    std::cout << "  (no layer plan: DeltaServe reads qwen35 and qwen35moe)\n";
    return;
  }
  if (file.tensors().empty()) {
    // A tokenizer file (llama.cpp's vocab-only GGUFs): its model keys are partial by design.
    std::cout << "  vocabulary only: no tensors, no layer plan (usable as a tokenizer)\n";
    return;
  }
  absl::StatusOr<Qwen35HParams> hp = ReadQwen35HParams(file);
  if (!hp.ok()) {
    std::cout << "  INVALID: " << hp.status().message() << "\n";
    return;
  }
  std::cout << absl::StreamFormat("  blocks: %d (%d layers in the forward pass, %d MTP)\n",
                                  hp->n_block, hp->n_layer, hp->n_nextn);
  std::cout << "  layer plan: DeltaNet " << Ranges(hp->LayersOf(LayerKind::kDeltaNet))
            << "; attention " << Ranges(hp->LayersOf(LayerKind::kFullAttention)) << "\n";
  std::cout << absl::StreamFormat("  embedding: %d, vocab rows: %d, context: %d\n", hp->n_embd,
                                  hp->n_vocab, hp->n_ctx_train);
  std::cout << absl::StreamFormat(
      "  attention: %d heads, %d kv heads, head dim %d, rotary dims %d, rope base %g, "
      "sections [%s]\n",
      hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_freq_base,
      absl::StrJoin(hp->rope_sections, ", "));
  std::cout << absl::StreamFormat(
      "  deltanet: %d k heads, %d v heads, head dim %d, conv kernel %d, conv channels %d\n",
      hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_head_dim, hp->ssm_conv_kernel,
      hp->ssm_conv_channels());
  if (hp->is_moe) {
    std::cout << absl::StreamFormat(
        "  experts: %d experts, %d used per token, expert ff %d, shared expert ff %d\n",
        hp->n_expert, hp->n_expert_used, hp->n_ff_expert, hp->n_ff_shared_expert);
  } else {
    std::cout << absl::StreamFormat("  feed-forward: %d\n", hp->n_ff);
  }
  std::cout << "  output: "
            << (hp->tied_output ? "tied (token_embd.weight)" : "separate (output.weight)")
            << "\n";
}

int Info(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return Fail(file.status());
  const GgufFile& f = **file;
  std::cout << absl::StreamFormat("file: %s\nGGUF v%d, %s bytes, alignment %d, data at %s\n",
                                  path, f.version(), Grouped(f.file_size()), f.alignment(),
                                  Grouped(f.data_offset()));
  std::cout << "\nmetadata: " << f.metadata().size() << " keys\n";
  for (const GgufKeyValue& kv : f.metadata()) {
    std::cout << absl::StreamFormat("  %-48s %-7s %s\n", Sv(kv.key),
                                    Sv(GgufValueTypeName(kv.value.type())),
                                    kv.value.DebugString(6));
  }
  std::cout << "\ntensors: " << f.tensors().size() << "\n";
  std::cout << absl::StreamFormat("  %-40s %-8s %-22s %14s\n", "name", "type", "shape", "bytes");
  struct Total {
    int count = 0;
    uint64_t bytes = 0;
    int64_t elements = 0;
  };
  std::map<std::string, Total> totals;
  uint64_t all_bytes = 0;
  bool unsupported = false;
  for (const GgufTensorInfo& t : f.tensors()) {
    const GgmlTypeTraits& traits = TraitsOf(t.type);
    std::cout << absl::StreamFormat("  %-40s %-8s %-22s %14s%s\n", Sv(t.name), Sv(traits.name),
                                    t.ShapeString(), Grouped(t.n_bytes),
                                    traits.supported ? "" : "  (unsupported type)");
    unsupported |= !traits.supported;
    Total& total = totals[std::string(traits.name)];
    ++total.count;
    total.bytes += t.n_bytes;
    total.elements += t.n_elements;
    all_bytes += t.n_bytes;
  }
  std::cout << "\ntotals by type:\n";
  std::cout << absl::StreamFormat("  %-8s %8s %16s %16s %8s\n", "type", "tensors", "elements",
                                  "bytes", "bits/w");
  for (const auto& [type, total] : totals) {
    std::cout << absl::StreamFormat(
        "  %-8s %8d %16s %16s %8.2f\n", type, total.count, Grouped(total.elements),
        Grouped(total.bytes),
        total.elements ? 8.0 * static_cast<double>(total.bytes) / total.elements : 0.0);
  }
  std::cout << absl::StreamFormat("  %-8s %8d %16s %16s\n", "all", f.tensors().size(), "",
                                  Grouped(all_bytes));
  if (unsupported) {
    std::cout << "  note: tensors marked (unsupported type) cannot be computed by DeltaServe\n";
  }
  PrintModel(f);
  return 0;
}

nlohmann::json PieceJson(std::string_view piece) {
  if (IsValidUtf8(piece)) return std::string(piece);
  std::string hex;
  for (unsigned char c : piece) absl::StrAppendFormat(&hex, "%02x", c);
  return nlohmann::json{{"hex", hex}};
}

// Control characters escaped, and every non-ASCII byte of a piece that is not valid UTF-8 on
// its own (a part of a character), for the one-token-per-line listing.
std::string Printable(std::string_view piece) {
  const bool valid = IsValidUtf8(piece);
  std::string out;
  for (unsigned char c : piece) {
    if (!valid && c >= 0x80) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

int Tokenize(const std::vector<std::string>& args) {
  std::string path;
  std::string text;
  bool have_text = false, json = false, parse_special = true, options_end = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool flag = !options_end && a.size() > 1 && a.rfind("--", 0) == 0;
    if (flag && a == "--") {
      options_end = true;
    } else if (flag && a == "--json") {
      json = true;
    } else if (flag && a == "--no-special") {
      parse_special = false;
    } else if (flag && a == "--file") {
      if (i + 1 >= args.size()) return Usage("--file needs a path");
      std::ifstream in(args[++i], std::ios::binary);
      if (!in) return Fail(absl::NotFoundError(absl::StrCat("cannot read ", args[i])));
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      have_text = true;
    } else if (flag) {
      return Usage(absl::StrCat("unknown argument '", a, "'"));
    } else if (path.empty()) {
      path = a;
    } else if (!have_text) {
      text = a;
      have_text = true;
    } else {
      return Usage(absl::StrCat("unexpected argument '", a, "'"));
    }
  }
  if (path.empty() || !have_text) return Usage("tokenize needs FILE and TEXT (or --file PATH)");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(path);
  if (!tok.ok()) return Fail(tok.status());
  const std::vector<TokenId> ids = (*tok)->Encode(text, parse_special);
  if (json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (TokenId id : ids) pieces.push_back(PieceJson((*tok)->Piece(id)));
    nlohmann::json out{{"ids", ids}, {"pieces", pieces}};
    std::cout << out.dump() << "\n";
    return 0;
  }
  for (TokenId id : ids) {
    std::cout << absl::StreamFormat("%8d  '%s'\n", id, Printable((*tok)->Piece(id)));
  }
  std::cout << ids.size() << " tokens, " << text.size() << " bytes\n";
  return 0;
}

int Detokenize(const std::vector<std::string>& args) {
  if (args.size() < 2) return Usage("detokenize needs FILE and at least one ID");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(args[0]);
  if (!tok.ok()) return Fail(tok.status());
  std::vector<TokenId> ids;
  for (size_t i = 1; i < args.size(); ++i) {
    // Accept "1 2 3" as well as "1,2,3".
    for (absl::string_view part : absl::StrSplit(args[i], ',', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id) || id < 0 || id >= (*tok)->vocab_size()) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            "'", part, "' is not a token id (0..", (*tok)->vocab_size() - 1, ")")));
      }
      ids.push_back(id);
    }
  }
  const std::string text = (*tok)->Decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace
}  // namespace deltaserve::common

int main(int argc, char** argv) {
  using namespace deltaserve::common;
  const std::vector<std::string> all(argv + 1, argv + argc);
  if (AsksForHelp(all)) return Usage(std::string(kHelpRequested));
  if (all.empty()) return Usage("no command");
  const std::string& command = all[0];
  const std::vector<std::string> args(all.begin() + 1, all.end());
  for (const std::string& a : args) {
    if (command != "tokenize" && a.rfind("--", 0) == 0) {
      return Usage(absl::StrCat("unknown argument '", a, "'"));
    }
  }
  if (command == "info") {
    if (args.size() != 1) return Usage("info needs exactly one FILE");
    return Info(args[0]);
  }
  if (command == "tokenize") return Tokenize(args);
  if (command == "detokenize") return Detokenize(args);
  if (command.rfind("-", 0) == 0) {
    return Usage(absl::StrCat("unknown argument '", command, "'"));
  }
  return Usage(absl::StrCat("unknown command '", command, "'"));
}
