#include "common/tokenizer.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/byte_level.h"
#include "common/gguf_file.h"
#include "common/str_util.h"
#include "common/unicode.h"

namespace deltaserve::common {
namespace {

// Texts llama.cpp marks as end-of-generation for Qwen-style vocabularies.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};

uint64_t PairKey(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

// A run of the input: either raw text still to be tokenized, or a matched special token.
struct Fragment {
  std::string_view text;
  TokenId special = -1;
};

// Whether [begin, end) overlaps one of `ranges` (sorted, disjoint).
bool Overlaps(absl::Span<const ByteRange> ranges, size_t begin, size_t end) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                             [](size_t pos, const ByteRange& r) { return pos < r.end; });
  return it != ranges.end() && it->begin < end;
}

// SanitizeUtf8(text) into `out`, returning `ranges` moved onto the same bytes of `out` (a
// malformed byte becomes the three bytes of U+FFFD, so later offsets shift).
std::vector<ByteRange> SanitizeMarked(std::string_view text, absl::Span<const ByteRange> ranges,
                                      std::string& out) {
  std::vector<size_t> at(text.size() + 1);
  out.clear();
  out.reserve(text.size() + 8);
  size_t i = 0;
  while (i < text.size()) {
    const int len = Utf8SequenceLength(text, i);
    if (len > 0) {
      for (int k = 0; k < len; ++k)
        at[i + static_cast<size_t>(k)] = out.size() + static_cast<size_t>(k);
      out.append(text.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      at[i] = out.size();
      AppendUtf8(kReplacementChar, out);
      ++i;
    }
  }
  at[text.size()] = out.size();
  std::vector<ByteRange> moved;
  for (const ByteRange& r : ranges) {
    AddByteRange(moved, at[std::min(r.begin, text.size())], at[std::min(r.end, text.size())]);
  }
  return moved;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  absl::StatusOr<std::string_view> model = file.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "gpt2") {
    return absl::UnimplementedError(
        absl::StrCat(file.name(), ": key 'tokenizer.ggml.model' is '", Sv(*model),
                     "'; only byte-level BPE ('gpt2') is supported"));
  }
  TokenizerVocab vocab;
  absl::StatusOr<std::string_view> pre = file.GetString("tokenizer.ggml.pre");
  if (!pre.ok()) return pre.status();
  vocab.pre = std::string(*pre);

  absl::StatusOr<const GgufValue*> tokens = file.GetArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if ((*tokens)->array_type() != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), ": key 'tokenizer.ggml.tokens' is not an array of strings"));
  }
  const uint64_t n = (*tokens)->ArraySize();
  vocab.tokens.reserve(n);
  for (uint64_t i = 0; i < n; ++i) vocab.tokens.emplace_back(*(*tokens)->ArrayString(i));

  if (const GgufValue* types = file.Find("tokenizer.ggml.token_type")) {
    if (!types->is_array() || types->ArraySize() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.name(), ": key 'tokenizer.ggml.token_type' must be an integer array of ", n,
          " entries (one per token)"));
    }
    vocab.types.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      std::optional<int64_t> t = types->ArrayInt(i);
      if (!t || *t < 0 || *t > static_cast<int64_t>(TokenType::kByte)) {
        return absl::InvalidArgumentError(absl::StrCat(
            file.name(), ": key 'tokenizer.ggml.token_type': entry ", i, " is not a token type"));
      }
      vocab.types.push_back(static_cast<TokenType>(*t));
    }
  }

  absl::StatusOr<const GgufValue*> merges = file.GetArray("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  if ((*merges)->array_type() != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), ": key 'tokenizer.ggml.merges' is not an array of strings"));
  }
  vocab.merges.reserve((*merges)->ArraySize());
  for (uint64_t i = 0; i < (*merges)->ArraySize(); ++i) {
    vocab.merges.emplace_back(*(*merges)->ArrayString(i));
  }

  auto optional_id = [&](std::string_view key, TokenId& out) -> absl::Status {
    const GgufValue* v = file.Find(key);
    if (v == nullptr) return absl::OkStatus();
    std::optional<int64_t> id = v->AsInt();
    if (!id || *id < 0 || static_cast<uint64_t>(*id) >= n) {
      return absl::InvalidArgumentError(absl::StrCat(file.name(), ": key '", Sv(key),
                                                     "' is not a token id below ", n));
    }
    out = static_cast<TokenId>(*id);
    return absl::OkStatus();
  };
  if (auto s = optional_id("tokenizer.ggml.bos_token_id", vocab.bos_id); !s.ok()) return s;
  if (auto s = optional_id("tokenizer.ggml.eos_token_id", vocab.eos_id); !s.ok()) return s;
  if (auto s = optional_id("tokenizer.ggml.padding_token_id", vocab.pad_id); !s.ok()) return s;
  if (const GgufValue* v = file.Find("tokenizer.ggml.add_bos_token")) {
    vocab.add_bos = v->AsBool().value_or(false);
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Create(std::move(vocab));
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(file.name(), ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerVocab vocab) {
  std::optional<PreTokenizerKind> pre = PreTokenizerKindFromName(vocab.pre);
  if (!pre) {
    return absl::UnimplementedError(absl::StrCat("key 'tokenizer.ggml.pre': pre-tokenizer '",
                                                 vocab.pre, "' is not supported (qwen2, qwen35)"));
  }
  const size_t n = vocab.tokens.size();
  if (n == 0 || n > (1u << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key 'tokenizer.ggml.tokens': ", n, " tokens"));
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return absl::InvalidArgumentError("key 'tokenizer.ggml.token_type': size differs from tokens");
  }
  for (TokenId id : {vocab.bos_id, vocab.eos_id, vocab.pad_id}) {
    if (id < -1 || id >= static_cast<TokenId>(n)) {
      return absl::InvalidArgumentError(absl::StrCat("special token id ", id, " out of range"));
    }
  }
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->pre_ = *pre;
  tok->bos_id_ = vocab.bos_id;
  tok->eos_id_ = vocab.eos_id;
  tok->pad_id_ = vocab.pad_id;
  tok->token_text_ = std::move(vocab.tokens);
  tok->type_ = vocab.types.empty() ? std::vector<TokenType>(n, TokenType::kNormal)
                                   : std::move(vocab.types);
  tok->text_to_id_.reserve(n);
  tok->piece_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = tok->token_text_[i];
    // As in llama.cpp, a text that appears twice maps to its last id.
    tok->text_to_id_[text] = static_cast<TokenId>(i);
    switch (tok->type_[i]) {
      case TokenType::kNormal: tok->piece_[i] = ByteLevelDecode(text); break;
      case TokenType::kControl:
      case TokenType::kUserDefined:
      case TokenType::kUnknown: tok->piece_[i] = text; break;
      default: break;  // unused, byte and undefined tokens render as nothing
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(b)), text);
    tok->byte_token_[b] = tok->Find(text);
  }
  tok->merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("key 'tokenizer.ggml.merges': entry ", rank,
                                                     " has no space separator"));
    }
    const std::string_view left(m.data(), space);
    const std::string_view right(m.data() + space + 1, m.size() - space - 1);
    const TokenId l = tok->Find(left), r = tok->Find(right);
    const TokenId result = tok->Find(absl::StrCat(Sv(left), Sv(right)));
    // A merge whose parts or result are not tokens can never fire on byte-level input.
    if (l < 0 || r < 0 || result < 0) continue;
    tok->merges_.try_emplace(PairKey(l, r), Merge{static_cast<int32_t>(rank), result});
  }
  for (size_t i = 0; i < n; ++i) {
    if (IsSpecialType(tok->type_[i]) && !tok->token_text_[i].empty()) {
      tok->specials_.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(tok->specials_.begin(), tok->specials_.end(), [&](TokenId a, TokenId b) {
    return tok->token_text_[a].size() > tok->token_text_[b].size();
  });
  tok->end_of_generation_.assign(n, false);
  if (tok->eos_id_ >= 0) tok->end_of_generation_[tok->eos_id_] = true;
  for (std::string_view text : kEndOfGenerationTexts) {
    if (TokenId id = tok->Find(text); id >= 0) tok->end_of_generation_[id] = true;
  }
  return tok;
}

std::string_view Tokenizer::TokenText(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_text_[id];
}

TokenType Tokenizer::Type(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
  return type_[id];
}

TokenId Tokenizer::Find(std::string_view text) const {
  auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::IsEndOfGeneration(TokenId id) const {
  return id >= 0 && id < vocab_size() && end_of_generation_[id];
}

std::string_view Tokenizer::Piece(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return piece_[id];
}

std::string Tokenizer::Decode(absl::Span<const TokenId> ids) const {
  std::string out;
  for (TokenId id : ids) out.append(Piece(id));
  return out;
}

const Tokenizer::Merge* Tokenizer::FindMerge(TokenId left, TokenId right) const {
  if (left < 0 || right < 0) return nullptr;
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<TokenId> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  return EncodeImpl(text, parse_special, {});
}

std::vector<TokenId> Tokenizer::EncodeMarked(std::string_view text,
                                             absl::Span<const ByteRange> untrusted) const {
  return EncodeImpl(text, /*parse_special=*/true, untrusted);
}

std::vector<TokenId> Tokenizer::EncodeImpl(std::string_view text, bool parse_special,
                                           absl::Span<const ByteRange> untrusted) const {
  std::vector<TokenId> out;
  std::string sanitized;
  std::vector<ByteRange> moved;
  if (!IsValidUtf8(text)) {
    if (untrusted.empty()) {
      sanitized = SanitizeUtf8(text);
    } else {
      moved = SanitizeMarked(text, untrusted, sanitized);
      untrusted = moved;
    }
    text = sanitized;
  }
  // Cut special tokens out longest first, each over every raw fragment left, as llama.cpp's
  // tokenizer_st_partition does (so a longer token wins where two overlap).
  std::vector<Fragment> fragments{{text, -1}};
  std::vector<Fragment> next;
  for (TokenId id : specials_) {
    const bool control = type_[id] != TokenType::kUserDefined;
    if (!parse_special && control) continue;
    const bool check_origin = control && !untrusted.empty();
    const std::string_view needle = token_text_[id];
    next.clear();
    bool found = false;
    for (const Fragment& f : fragments) {
      if (f.special >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t base = static_cast<size_t>(f.text.data() - text.data());
      size_t from = 0;  // start of the fragment's text not yet cut
      size_t search = 0;
      for (size_t at; (at = f.text.find(needle, search)) != std::string_view::npos;) {
        // Request text stays text: an occurrence overlapping it is skipped, and a later one that
        // overlaps it may still be the template's own.
        if (check_origin && Overlaps(untrusted, base + at, base + at + needle.size())) {
          search = at + 1;
          continue;
        }
        found = true;
        if (at > from) next.push_back({f.text.substr(from, at - from), -1});
        next.push_back({{}, id});
        from = search = at + needle.size();
      }
      if (from < f.text.size()) next.push_back({f.text.substr(from), -1});
    }
    if (found) fragments.swap(next);
  }
  for (const Fragment& f : fragments) {
    if (f.special >= 0) {
      out.push_back(f.special);
    } else {
      EncodeFragment(f.text, out);
    }
  }
  return out;
}

void Tokenizer::EncodeFragment(std::string_view fragment, std::vector<TokenId>& out) const {
  thread_local std::vector<std::string_view> words;
  words.clear();
  PreTokenize(pre_, fragment, words);
  for (std::string_view w : words) EncodeWord(w, out);
}

void Tokenizer::EncodeWord(std::string_view word, std::vector<TokenId>& out) const {
  if (word.size() > kWordCacheMaxWordBytes) {
    MergeWord(word, out);
    return;
  }
  {
    absl::MutexLock lock(&cache_mu_);
    auto it = word_cache_.find(absl::string_view(word.data(), word.size()));
    if (it != word_cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  MergeWord(word, out);
  absl::MutexLock lock(&cache_mu_);
  if (word_cache_.size() >= kWordCacheCapacity) word_cache_.clear();
  word_cache_.try_emplace(std::string(word), out.begin() + first, out.end());
}

void Tokenizer::MergeWord(std::string_view word, std::vector<TokenId>& out) const {
  // Symbols form a doubly linked list over the word's bytes; a min-heap holds candidate merges
  // ordered by (rank, position), so the lowest-rank pair merges first and ties go to the left,
  // as in llama.cpp's llm_tokenizer_bpe_session. Stale heap entries are skipped on pop.
  struct Symbol {
    TokenId id;
    int prev;
    int next;
  };
  struct Candidate {
    int32_t rank;
    int left;
    TokenId left_id;
    TokenId right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const int n = static_cast<int>(word.size());
  if (n == 0) return;
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap_storage;
  symbols.resize(n);
  for (int i = 0; i < n; ++i) {
    symbols[i] = Symbol{byte_token_[static_cast<uint8_t>(word[i])], i - 1, i + 1};
  }
  symbols[n - 1].next = -1;
  heap_storage.clear();
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
      std::greater<Candidate>(), std::move(heap_storage));
  auto consider = [&](int left) {
    const int right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* m = FindMerge(symbols[left].id, symbols[right].id)) {
      heap.push(Candidate{m->rank, left, symbols[left].id, symbols[right].id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0) continue;  // left changed since queued
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = FindMerge(c.left_id, c.right_id)->result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -2;  // removed
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    // A byte with no token in the vocabulary is dropped, as llama.cpp drops it.
    if (symbols[i].id >= 0) out.push_back(symbols[i].id);
  }
}

}  // namespace deltaserve::common
