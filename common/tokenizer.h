// Byte-level BPE tokenizer for GGUF vocabularies (`tokenizer.ggml.model = "gpt2"`), the
// tokenizer of Qwen2/Qwen3/Qwen3.5 models. It reproduces llama.cpp's tokenization: special
// tokens are cut out of the text first (control tokens only when `parse_special`, user-defined
// tokens always, longest first), each remaining fragment is split by the `qwen2`/`qwen35`
// pre-tokenizer (pre_tokenizer.h), and each piece is merged by BPE rank. EncodeMarked parses
// control tokens only outside the byte ranges a chat prompt's request text occupies
// (marked_text.h), so typed "<|im_start|>" stays text.
//
//   ASSIGN_OR_RETURN(auto tok, Tokenizer::FromGguf(file));
//   std::vector<TokenId> ids = tok->Encode("Hello world", /*parse_special=*/true);
//   std::string text = tok->Decode(ids);
//
// A Tokenizer is immutable after creation except for its word cache, which is internally
// synchronised: one instance may be shared by many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/marked_text.h"
#include "common/pre_tokenizer.h"

namespace deltaserve::common {

class GgufFile;

// Index of a token in the vocabulary.
using TokenId = int32_t;

// `tokenizer.ggml.token_type` values, as llama.cpp writes them.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a byte-level BPE tokenizer is built from; what the GGUF `tokenizer.ggml.*` keys hold.
struct TokenizerVocab {
  std::vector<std::string> tokens;  // byte-level encoded text of each token (GPT-2 alphabet)
  std::vector<TokenType> types;     // same size as `tokens`; empty means all kNormal
  std::vector<std::string> merges;  // "left right", in rank order (rank = index)
  std::string pre = "qwen35";       // pre-tokenizer name: "qwen2" or "qwen35"
  TokenId bos_id = -1;              // -1 when the file has none
  TokenId eos_id = -1;
  TokenId pad_id = -1;
  bool add_bos = false;
};

// Byte-level BPE tokenizer; see the file comment.
class Tokenizer {
 public:
  // Reads `tokenizer.ggml.*` from `file`. Fails, naming the key, when the model is not "gpt2",
  // the pre-tokenizer is unknown, or arrays are inconsistent.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  // Builds a tokenizer from explicit vocabulary data (tests, synthetic models).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerVocab vocab);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes; invalid UTF-8 is read as U+FFFD, as llama.cpp does). No BOS
  // is added. With `parse_special` false, control-token text is tokenized as ordinary text.
  std::vector<TokenId> Encode(std::string_view text, bool parse_special) const;

  // Encode(text, /*parse_special=*/true), except that a control token is matched only where its
  // text lies wholly outside `untrusted` (sorted, disjoint byte ranges of `text`, as MarkedText
  // keeps them). Bytes inside those ranges are tokenized exactly as Encode(..., false) would:
  // user-defined tokens (<think>, <tool_call>) still match there, as llama.cpp matches them in
  // any text. With no control-token text overlapping `untrusted` the ids equal Encode(text,
  // true), so prompts without injected markup tokenize as before.
  std::vector<TokenId> EncodeMarked(std::string_view text,
                                    absl::Span<const ByteRange> untrusted) const;

  // The bytes token `id` stands for (llama_token_to_piece with special=true): normal tokens are
  // byte-decoded, control and user-defined tokens are their text, unused ones are empty. Pieces
  // may be incomplete UTF-8. Out-of-range ids give an empty piece.
  std::string_view Piece(TokenId id) const;

  // Concatenated pieces of `ids` (special tokens rendered). May end in incomplete UTF-8.
  std::string Decode(absl::Span<const TokenId> ids) const;

  // Number of vocabulary entries (including padding rows).
  int32_t vocab_size() const { return static_cast<int32_t>(token_text_.size()); }
  // The byte-level encoded vocabulary text of `id`, e.g. "Ġworld" (empty when out of range).
  std::string_view TokenText(TokenId id) const;
  // The type of `id` (kUndefined when out of range).
  TokenType Type(TokenId id) const;
  // Id of the token whose vocabulary text is exactly `text`, or -1.
  TokenId Find(std::string_view text) const;
  // True for tokens that end generation: eos, and by text <|endoftext|>, <|im_end|>,
  // <|fim_pad|>, <|repo_name|>, <|file_sep|> (as llama.cpp marks them).
  bool IsEndOfGeneration(TokenId id) const;

  TokenId bos_id() const { return bos_id_; }
  TokenId eos_id() const { return eos_id_; }
  TokenId pad_id() const { return pad_id_; }
  PreTokenizerKind pre_tokenizer() const { return pre_; }

 private:
  Tokenizer() = default;

  // A merge of two adjacent tokens into `result`, with its priority (lower merges first).
  struct Merge {
    int32_t rank;
    TokenId result;
  };

  // Appends the BPE tokens of one pre-token (raw UTF-8 bytes) to `out`.
  void EncodeWord(std::string_view word, std::vector<TokenId>& out) const;
  // BPE over byte tokens without the cache.
  void MergeWord(std::string_view word, std::vector<TokenId>& out) const;
  // Encode and EncodeMarked: control tokens are matched when `parse_special`, except those
  // overlapping `untrusted`.
  std::vector<TokenId> EncodeImpl(std::string_view text, bool parse_special,
                                  absl::Span<const ByteRange> untrusted) const;
  // Tokenizes a fragment that contains no special tokens.
  void EncodeFragment(std::string_view fragment, std::vector<TokenId>& out) const;
  const Merge* FindMerge(TokenId left, TokenId right) const;

  std::vector<std::string> token_text_;  // byte-level encoded
  std::vector<std::string> piece_;       // decoded bytes per token (see Piece)
  std::vector<TokenType> type_;
  absl::flat_hash_map<std::string_view, TokenId> text_to_id_;  // views into token_text_
  absl::flat_hash_map<uint64_t, Merge> merges_;                // key: left << 32 | right
  TokenId byte_token_[256] = {};  // token of each single byte, -1 if the vocab lacks it
  std::vector<TokenId> specials_;  // control/user-defined/unknown tokens, longest text first
  std::vector<bool> end_of_generation_;
  PreTokenizerKind pre_ = PreTokenizerKind::kQwen35;
  TokenId bos_id_ = -1;
  TokenId eos_id_ = -1;
  TokenId pad_id_ = -1;

  // Cache of frequent words: raw pre-token bytes -> tokens. Cleared when full.
  static constexpr size_t kWordCacheCapacity = 1 << 16;
  static constexpr size_t kWordCacheMaxWordBytes = 64;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<TokenId>> word_cache_
      ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace deltaserve::common
