#include "common/grammar/internal/code_points.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/unicode.h"

namespace deltaserve::common::grammar::internal {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// The hex digits of value lo..hi (each in 0..15), both cases.
ByteClass HexDigits(uint32_t lo, uint32_t hi) {
  ByteClass c;
  for (uint32_t v = lo; v <= hi; ++v) {
    if (v < 10) {
      c.Add(static_cast<uint8_t>('0' + v));
    } else {
      c.Add(static_cast<uint8_t>('a' + v - 10));
      c.Add(static_cast<uint8_t>('A' + v - 10));
    }
  }
  return c;
}

// Appends to `out` the sequences of `width` hex digits spelling every value of lo..hi, each
// prefixed with `prefix`.
void HexRange(uint32_t lo, uint32_t hi, int width, ByteSequence prefix,
              std::vector<ByteSequence>& out) {
  if (width == 0) {
    out.push_back(std::move(prefix));
    return;
  }
  const int shift = 4 * (width - 1);
  const uint32_t rest_mask = (uint32_t{1} << shift) - 1;
  const uint32_t lo_d = lo >> shift, hi_d = hi >> shift;
  const uint32_t lo_rest = lo & rest_mask, hi_rest = hi & rest_mask;
  auto with = [&](ByteClass digit) {
    ByteSequence s = prefix;
    s.push_back(digit);
    return s;
  };
  if (lo_d == hi_d) {
    HexRange(lo_rest, hi_rest, width - 1, with(HexDigits(lo_d, lo_d)), out);
    return;
  }
  uint32_t full_lo = lo_d, full_hi = hi_d;
  if (lo_rest != 0) {
    HexRange(lo_rest, rest_mask, width - 1, with(HexDigits(lo_d, lo_d)), out);
    ++full_lo;
  }
  const bool hi_partial = hi_rest != rest_mask;
  if (hi_partial) --full_hi;
  if (full_lo <= full_hi) HexRange(0, rest_mask, width - 1, with(HexDigits(full_lo, full_hi)), out);
  if (hi_partial) HexRange(0, hi_rest, width - 1, with(HexDigits(hi_d, hi_d)), out);
}

ByteSequence Prefix(std::string_view bytes) {
  ByteSequence s;
  for (char c : bytes) s.push_back(ByteClass::Of(static_cast<uint8_t>(c)));
  return s;
}

// `\uXXXX` spellings of the code points of lo..hi (no surrogates inside; above U+FFFF as pairs).
void EscapeSequences(uint32_t lo, uint32_t hi, std::vector<ByteSequence>& out) {
  if (lo <= 0xFFFF) {
    HexRange(lo, std::min<uint32_t>(hi, 0xFFFF), 4, Prefix("\\u"), out);
    if (hi <= 0xFFFF) return;
    lo = 0x10000;
  }
  // Above U+FFFF: v = cp - 0x10000, high surrogate D800 + v>>10, low DC00 + (v & 0x3FF).
  const uint32_t vlo = lo - 0x10000, vhi = hi - 0x10000;
  const uint32_t hlo = vlo >> 10, hhi = vhi >> 10;
  auto pair = [&](uint32_t h0, uint32_t h1, uint32_t l0, uint32_t l1) {
    std::vector<ByteSequence> highs;
    HexRange(0xD800 + h0, 0xD800 + h1, 4, Prefix("\\u"), highs);
    for (ByteSequence& h : highs) {
      for (const ByteClass& c : Prefix("\\u")) h.push_back(c);
      HexRange(0xDC00 + l0, 0xDC00 + l1, 4, h, out);
    }
  };
  if (hlo == hhi) {
    pair(hlo, hlo, vlo & 0x3FF, vhi & 0x3FF);
    return;
  }
  uint32_t mid_lo = hlo, mid_hi = hhi;
  if ((vlo & 0x3FF) != 0) {
    pair(hlo, hlo, vlo & 0x3FF, 0x3FF);
    ++mid_lo;
  }
  const bool hi_partial = (vhi & 0x3FF) != 0x3FF;
  if (hi_partial) --mid_hi;
  if (mid_lo <= mid_hi) pair(mid_lo, mid_hi, 0, 0x3FF);
  if (hi_partial) pair(hhi, hhi, 0, vhi & 0x3FF);
}

// Merges sequences that differ in one position only (their classes are united there), which
// turns the per-value escapes of a set like [\x00-\x1f"\\] into a few sequences.
void MergeSequences(std::vector<ByteSequence>& seqs) {
  // Quadratic per pass: sets with hundreds of separate ranges (a long class) stay unmerged.
  if (seqs.size() > 128) return;
  bool merged = true;
  while (merged) {
    merged = false;
    for (size_t i = 0; i < seqs.size() && !merged; ++i) {
      for (size_t j = i + 1; j < seqs.size() && !merged; ++j) {
        if (seqs[i].size() != seqs[j].size()) continue;
        int diff = -1, count = 0;
        for (size_t k = 0; k < seqs[i].size() && count < 2; ++k) {
          if (!(seqs[i][k] == seqs[j][k])) {
            diff = static_cast<int>(k);
            ++count;
          }
        }
        if (count > 1) continue;
        if (count == 1) seqs[i][diff].AddClass(seqs[j][diff]);
        seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(j));
        merged = true;
      }
    }
  }
}

}  // namespace

CodePointRanges NormalizeRanges(CodePointRanges ranges) {
  for (auto& r : ranges) {
    if (r.first > r.second) std::swap(r.first, r.second);
  }
  std::sort(ranges.begin(), ranges.end());
  CodePointRanges out;
  for (auto [lo, hi] : ranges) {
    if (lo > kMaxCodePoint) break;
    hi = std::min(hi, kMaxCodePoint);
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodePointRanges ComplementRanges(const CodePointRanges& ranges) {
  CodePointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : NormalizeRanges(ranges)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

CodePointRanges IntersectRanges(const CodePointRanges& a, const CodePointRanges& b) {
  CodePointRanges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t lo = std::max(a[i].first, b[j].first);
    const uint32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

CodePointRanges WithoutSurrogates(const CodePointRanges& ranges) {
  return IntersectRanges(ranges, {{0, kSurrogateLo - 1}, {kSurrogateHi + 1, kMaxCodePoint}});
}

std::vector<ByteSequence> Utf8Sequences(const CodePointRanges& ranges) {
  std::vector<ByteSequence> out;
  // The splitting of Rust's regex-syntax utf8 module: cut a range at the encoded-length
  // boundaries, then until every continuation position spans whole 64-value blocks.
  std::vector<std::pair<uint32_t, uint32_t>> work;
  for (auto r : WithoutSurrogates(NormalizeRanges(ranges))) work.push_back(r);
  std::reverse(work.begin(), work.end());
  while (!work.empty()) {
    auto [s, e] = work.back();
    work.pop_back();
    bool split = false;
    for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (s <= max && max < e) {
        work.emplace_back(max + 1, e);
        work.emplace_back(s, max);
        split = true;
        break;
      }
    }
    if (split) continue;
    if (e <= 0x7F) {
      out.push_back({ByteClass::Range(static_cast<uint8_t>(s), static_cast<uint8_t>(e))});
      continue;
    }
    for (int i = 1; i < 4 && !split; ++i) {
      const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
      if ((s & ~m) != (e & ~m)) {
        if ((s & m) != 0) {
          work.emplace_back((s | m) + 1, e);
          work.emplace_back(s, s | m);
          split = true;
        } else if ((e & m) != m) {
          work.emplace_back(e & ~m, e);
          work.emplace_back(s, (e & ~m) - 1);
          split = true;
        }
      }
    }
    if (split) continue;
    std::string a, b;
    AppendUtf8(s, a);
    AppendUtf8(e, b);
    ByteSequence seq;
    for (size_t k = 0; k < a.size(); ++k) {
      seq.push_back(ByteClass::Range(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])));
    }
    out.push_back(std::move(seq));
  }
  MergeSequences(out);
  return out;
}

std::vector<ByteSequence> JsonStringSequences(const CodePointRanges& ranges) {
  const CodePointRanges set = WithoutSurrogates(NormalizeRanges(ranges));
  std::vector<ByteSequence> out;
  ByteClass plain;
  for (auto [lo, hi] : IntersectRanges(set, {{0x20, 0x7E}})) {
    plain.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
  }
  plain.Remove('"');
  plain.Remove('\\');
  if (!plain.Empty()) out.push_back({plain});
  // Short escapes: \" \\ \/ \b \f \n \r \t.
  ByteClass short_escapes;
  auto in_set = [&](uint32_t cp) { return !IntersectRanges(set, {{cp, cp}}).empty(); };
  const std::pair<uint32_t, char> kShort[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {0x08, 'b'},
                                              {0x0C, 'f'}, {0x0A, 'n'},  {0x0D, 'r'}, {0x09, 't'}};
  for (auto [cp, letter] : kShort) {
    if (in_set(cp)) short_escapes.Add(static_cast<uint8_t>(letter));
  }
  if (!short_escapes.Empty()) out.push_back({ByteClass::Of('\\'), short_escapes});
  // \uXXXX for what must be escaped and for everything beyond printable ASCII.
  const CodePointRanges escapable =
      IntersectRanges(set, {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, kMaxCodePoint}});
  for (auto [lo, hi] : escapable) EscapeSequences(lo, hi, out);
  // Raw UTF-8 for U+007F and above.
  for (ByteSequence& s : Utf8Sequences(IntersectRanges(set, {{0x7F, kMaxCodePoint}}))) {
    out.push_back(std::move(s));
  }
  MergeSequences(out);
  return out;
}

bool IsPlainByte(uint32_t cp, CodePointSpelling spelling) {
  if (spelling == CodePointSpelling::kUtf8) return cp < 0x80;
  return cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\' && cp != '/';
}

Symbol CodePointSetRules::Set(const CodePointRanges& ranges) {
  CodePointRanges set = WithoutSurrogates(NormalizeRanges(ranges));
  auto it = cache_.find(set);
  if (it != cache_.end()) return it->second;
  std::vector<ByteSequence> seqs =
      spelling_ == CodePointSpelling::kUtf8 ? Utf8Sequences(set) : JsonStringSequences(set);
  Symbol sym;
  if (seqs.empty()) {
    sym = builder_.Bytes(ByteClass());  // matches nothing
  } else if (seqs.size() == 1 && seqs[0].size() == 1) {
    sym = builder_.Bytes(seqs[0][0]);
  } else {
    RuleId rule = builder_.AddRule(absl::StrCat(prefix_, "char_", next_name_++));
    for (const ByteSequence& seq : seqs) {
      Alternative alt;
      for (const ByteClass& c : seq) alt.push_back(builder_.Bytes(c));
      builder_.AddAlternative(rule, std::move(alt));
    }
    sym = Symbol::Rule(rule);
  }
  cache_.emplace(std::move(set), sym);
  return sym;
}

Alternative CodePointSetRules::Literal(std::string_view text) {
  Alternative alt;
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = DecodeUtf8(text, pos);
    if (IsPlainByte(cp, spelling_)) {
      alt.push_back(builder_.Bytes(ByteClass::Of(static_cast<uint8_t>(cp))));
    } else if (spelling_ == CodePointSpelling::kUtf8) {
      std::string bytes;
      AppendUtf8(cp, bytes);
      for (char c : bytes) alt.push_back(builder_.Bytes(ByteClass::Of(static_cast<uint8_t>(c))));
    } else {
      alt.push_back(Set({{cp, cp}}));
    }
  }
  return alt;
}

}  // namespace deltaserve::common::grammar::internal
