// Pre-tokenizer of Qwen vocabularies: splits text into the pieces that BPE then merges
// separately. Implements, without a regex engine, exactly what these patterns match:
//
//   qwen2:  (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+
//           |\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen35: the same with [\p{L}\p{M}]+ for \p{L}+ and [^\s\p{L}\p{M}\p{N}] in the punctuation
//           run, so combining marks stay inside words.
//
// (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2` / `_QWEN35`; text is split left to right, the first
// alternative that matches wins, and a code point that matches none becomes its own piece.)
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace deltaserve::common {

// Which split pattern a vocabulary uses (`tokenizer.ggml.pre`).
enum class PreTokenizerKind {
  kQwen2,   // "qwen2" (also used by Qwen3 files)
  kQwen35,  // "qwen35"
};

// The kind named by a `tokenizer.ggml.pre` value, or nullopt when unsupported.
std::optional<PreTokenizerKind> PreTokenizerKindFromName(std::string_view name);

// Appends to `pieces` the pre-tokens of `text`, which must be valid UTF-8 (see SanitizeUtf8).
// Pieces are views into `text`; their concatenation is `text`.
void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<std::string_view>& pieces);

}  // namespace deltaserve::common
